//! Unison's single-dash options on `accord sync`'s command line: those
//! that mean what one of ours means are rewritten into ours before the
//! arguments are parsed (`-batch` → `--batch`, `-ignore 'Name *.o'` →
//! `--exclude=*.o`); those we do not do the same for are refused with what
//! to use instead, rather than being read as a cluster of short options
//! ("unexpected argument '-b'").

use std::ffi::OsString;

/// What one Unison option becomes.
enum Unison {
    /// Our switch.
    Switch(&'static str),
    /// Our option taking the same value.
    Valued(&'static str),
    /// Unison's `-ignore`/`-follow` pattern (`Name P`, `Path P`,
    /// `BelowPath P`), as our option with a gitignore pattern.
    Pattern(&'static str),
    /// `-root R`: a root, as a positional word.
    Root,
    /// `-ignorecase true|false|default`.
    IgnoreCase,
    /// `-fastcheck true|false|default`: `false` fingerprints every file.
    FastCheck,
    /// `-repeat watch` (a number of seconds is not ours).
    Repeat,
    /// Not ours: what to use instead.
    Refused(&'static str),
}

/// Unison 2.52's options that `accord sync` knows, and what they become.
fn unison(name: &str) -> Option<Unison> {
    use Unison::*;
    Some(match name {
        "batch" => Switch("--batch"),
        "auto" => Switch("--auto"),
        "times" => Switch("--times"),
        "path" => Valued("--path"),
        "prefer" => Valued("--prefer"),
        "force" => Valued("--force"),
        "maxbackups" => Valued("--max-backups"),
        "servercmd" => Valued("--remote-accord"),
        "sshcmd" => Valued("--rsh"),
        "ignore" => Pattern("--exclude"),
        "follow" => Pattern("--follow"),
        "root" => Root,
        "ignorecase" => IgnoreCase,
        "fastcheck" => FastCheck,
        "repeat" => Repeat,
        "silent" | "terse" => Refused(
            "-q prints only conflicts and errors (a conflict is not an error to Unison's -silent)",
        ),
        "ui" => Refused(
            "on a terminal accord sync shows the plan as a list to edit; --batch asks nothing",
        ),
        "owner" | "group" => {
            Refused("--owner keeps owners and groups in agreement together, by number")
        }
        "perms" => Refused("permissions are always kept in agreement (never setuid or setgid)"),
        "merge" => Refused(
            "--merge CMD gives every conflict between two files to CMD (no pattern: \
             CURRENT1, CURRENT2, NEW and PATH as Unison's)",
        ),
        "backup" | "backups" => Refused(
            "--backup keeps every overwritten or deleted version in .accord-backup/ \
             (--max-backups N of each)",
        ),
        "copyonconflict" => {
            Refused("--keep-both keeps the losing version of a conflict beside the winner")
        }
        "confirmbigdel" => {
            Refused("--max-delete N|P% stops a run that would delete more (50% by default)")
        }
        "ignorenot" => Refused("write the exception as a '!' pattern of --exclude (gitignore)"),
        "sshargs" => Refused("give ssh's arguments with the command: --rsh 'ssh ARGS'"),
        "logfile" | "log" | "debug" => {
            Refused("accord sync prints its changes; --json gives them to a script")
        }
        "links" => Refused("symlinks are always synced as links (--follow PATTERN follows some)"),
        "retry"
        | "height"
        | "contactquietly"
        | "testserver"
        | "sortnewfirst"
        | "nocreation"
        | "nodeletion"
        | "noupdate"
        | "rsync"
        | "xferbycopying"
        | "addversionno"
        | "killserver"
        | "dumbtty"
        | "rootalias"
        | "atomic"
        | "immutable"
        | "fat"
        | "someHostIsRunningWindows"
        | "prefer-partial"
        | "force-partial"
        | "sortbysize"
        | "sortfirst"
        | "sortlast"
        | "addprefsto"
        | "label"
        | "key"
        | "numericids"
        | "diff"
        | "stream"
        | "watch"
        | "selftest"
        | "showarchive"
        | "clientHostName"
        | "ignorearchives"
        | "ignoreinodenumbers"
        | "backuploc"
        | "backupdir"
        | "backupprefix"
        | "backupsuffix"
        | "backupcurr"
        | "backupcurrnot"
        | "backupnot"
        | "maxerrors"
        | "maxthreads"
        | "maxsizethreshold"
        | "copyprog"
        | "copyprogrest"
        | "copythreshold"
        | "copyquoterem"
        | "mountpoint"
        | "xattrs"
        | "acl"
        | "xattrignore"
        | "xattrignorenot"
        | "doc"
        | "version"
        | "socket"
        | "source"
        | "include"
        | "terse-partial"
        | "auto-partial"
        | "confirmmerge" => {
            Refused("accord sync has no such option; accord sync --help lists what it has")
        }
        _ => return None,
    })
}

/// Our options, as `translate` needs to know them.
pub(crate) struct Ours<'a> {
    /// Short options that are switches (`-cq`).
    pub switches: &'a str,
    /// Short options that take a value (`-e CMD`, `-essh`).
    pub valued: &'a str,
    /// Is `NAME` one of our long options?
    pub long: &'a dyn Fn(&str) -> bool,
    /// Does the long option `--NAME` take a value (so the next word is
    /// that value, not an option)?
    pub takes_value: &'a dyn Fn(&str) -> bool,
}

impl Ours<'_> {
    /// Is `-name` a word of our short options (switches, then perhaps
    /// one that takes the rest of the word or the next as its value)?
    fn is_short_cluster(&self, name: &str) -> bool {
        for c in name.chars() {
            if self.valued.contains(c) {
                return true;
            }
            if !self.switches.contains(c) {
                return false;
            }
        }
        true
    }
}

/// `rest` (the words after `accord sync`) with Unison's options rewritten
/// into ours. `Err`: a Unison option we do not take, with what to use
/// instead, or a single-dash word that is neither Unison's nor ours.
pub(crate) fn translate(rest: &[OsString], ours: &Ours) -> Result<Vec<OsString>, String> {
    let mut out = Vec::with_capacity(rest.len());
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        let Some(text) = word.to_str() else {
            out.push(word.clone());
            continue;
        };
        if text == "--" {
            out.push(word.clone());
            out.extend(words.by_ref().cloned());
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            out.push(word.clone());
            if !long.contains('=') && (ours.takes_value)(long) {
                out.extend(words.next().cloned());
            }
            continue;
        }
        let Some(name) = text.strip_prefix('-').filter(|n| n.len() > 1) else {
            out.push(word.clone());
            continue;
        };
        let (unison_name, inline) = match name.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (name, None),
        };
        let Some(option) = unison(unison_name) else {
            if ours.is_short_cluster(name) {
                out.push(word.clone());
                continue;
            }
            return Err(neither(name, ours));
        };
        let name = unison_name;
        let mut value = || -> Result<String, String> {
            match inline.clone() {
                Some(value) => Ok(value),
                None => words
                    .next()
                    .and_then(|w| w.to_str())
                    .map(str::to_string)
                    .ok_or_else(|| format!("Unison's -{name} needs a value")),
            }
        };
        out.extend(rewrite(name, option, &mut value)?);
    }
    Ok(out)
}

/// What to say of `-name`, neither a Unison option we know nor a word of
/// our short options.
fn neither(name: &str, ours: &Ours) -> String {
    if (ours.long)(name) {
        format!(
            "-{name} is not an option of accord sync: its long options take two dashes (--{name})"
        )
    } else {
        format!(
            "-{name} is not an option of accord sync, nor one of Unison's it takes: \
             accord sync --help lists its options"
        )
    }
}

/// The words that Unison's `-name` (with its value, asked of `value` when
/// it takes one) becomes.
fn rewrite(
    name: &str,
    option: Unison,
    value: &mut dyn FnMut() -> Result<String, String>,
) -> Result<Vec<OsString>, String> {
    let words: Vec<String> = match option {
        Unison::Switch(ours) => vec![ours.into()],
        Unison::Valued(ours) => vec![format!("{ours}={}", value()?)],
        Unison::Pattern(ours) => vec![format!("{ours}={}", pattern(name, &value()?)?)],
        Unison::Root => vec![value()?],
        Unison::IgnoreCase => match value()?.as_str() {
            "default" => vec!["--ignorecase=auto".into()],
            v @ ("true" | "false") => vec![format!("--ignorecase={v}")],
            v => {
                return Err(format!(
                    "Unison's -ignorecase takes true, false or default, not {v:?}"
                ))
            }
        },
        Unison::FastCheck => match value()?.as_str() {
            "true" | "yes" | "default" => Vec::new(),
            "false" | "no" => vec!["--checksum".into()],
            v => {
                return Err(format!(
                    "Unison's -fastcheck takes true, false or default, not {v:?}"
                ))
            }
        },
        Unison::Repeat => match value()?.as_str() {
            "watch" => vec!["--watch".into()],
            v => {
                return Err(format!(
                    "Unison's -repeat {v} is not taken: --watch syncs again whenever either \
                     root changes (run accord sync from cron or a systemd timer for a fixed \
                     interval)"
                ))
            }
        },
        Unison::Refused(instead) => {
            return Err(format!(
                "Unison's -{name} is not an option of accord sync: {instead}"
            ))
        }
    };
    Ok(words.into_iter().map(OsString::from).collect())
}

/// Unison's `Name P`, `Path P` or `BelowPath P` as a gitignore pattern:
/// a name matches at any depth, a path from the root (and what is below
/// it, as Unison's ignored directory hides its contents).
fn pattern(option: &str, unison: &str) -> Result<String, String> {
    let (kind, pattern) = unison.trim().split_once(' ').unwrap_or(("", unison));
    let pattern = pattern.trim();
    match kind {
        "Name" if !pattern.contains('/') => Ok(pattern.to_string()),
        "Path" | "BelowPath" => Ok(format!("/{}", pattern.trim_start_matches('/'))),
        "Regex" => Err(format!(
            "Unison's -{option} 'Regex …' has no equivalent: write it as gitignore patterns \
             (--{} PATTERN)",
            if option == "follow" {
                "follow"
            } else {
                "exclude"
            }
        )),
        _ => Err(format!(
            "Unison's -{option} takes 'Name NAME', 'Path PATH' or 'BelowPath PATH', not {unison:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(words: &[&str]) -> Result<Vec<String>, String> {
        let words: Vec<OsString> = words.iter().map(OsString::from).collect();
        let valued = |long: &str| matches!(long, "exclude" | "prefer" | "path");
        let long = |long: &str| matches!(long, "exclude" | "prefer" | "path" | "checksum");
        let ours = Ours {
            switches: "cqn",
            valued: "e",
            long: &long,
            takes_value: &valued,
        };
        translate(&words, &ours)
            .map(|out| out.into_iter().map(|w| w.into_string().unwrap()).collect())
    }

    #[test]
    fn unisons_options_become_ours() {
        let got = run(&[
            "-batch",
            "-auto",
            "-times",
            "-path",
            "a/b",
            "-prefer=newer",
            "a",
            "b",
        ])
        .unwrap();
        let want = [
            "--batch",
            "--auto",
            "--times",
            "--path=a/b",
            "--prefer=newer",
            "a",
            "b",
        ];
        assert_eq!(got, want);
        let got = run(&[
            "-ignore",
            "Name *.o",
            "-ignore",
            "Path build/out",
            "-root",
            "x",
            "-root",
            "y",
            "-fastcheck",
            "false",
            "-repeat",
            "watch",
        ])
        .unwrap();
        let want = [
            "--exclude=*.o",
            "--exclude=/build/out",
            "x",
            "y",
            "--checksum",
            "--watch",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn our_own_words_are_left_alone() {
        let words = [
            "-cq",
            "-n",
            "--exclude",
            "-batch",
            "--prefer=A",
            "--",
            "-batch",
        ];
        assert_eq!(run(&words).unwrap(), words);
        assert_eq!(
            run(&["-essh -p 22", "-ce", "ssh"]).unwrap(),
            ["-essh -p 22", "-ce", "ssh"]
        );
        // Neither Unison's nor ours.
        let e = run(&["-xyz"]).unwrap_err();
        assert!(
            e.contains("-xyz is not an option") && e.contains("--help"),
            "{e}"
        );
        let e = run(&["-checksum"]).unwrap_err();
        assert!(e.contains("(--checksum)"), "{e}");
    }

    #[test]
    fn what_is_not_ours_says_what_to_use() {
        for (words, says) in [
            (&["-silent"][..], "-q"),
            (&["-ui", "text"], "--batch"),
            (&["-owner"], "--owner"),
            (&["-ignore", "Regex .*"], "gitignore"),
            (&["-ignore", "Name a/b"], "'Name NAME'"),
            (&["-repeat", "60"], "--watch"),
            (&["-retry", "3"], "--help"),
            (&["-path"], "needs a value"),
        ] {
            let e = run(words).unwrap_err();
            assert!(e.contains(says), "{words:?}: {e}");
            assert!(e.contains("Unison's -"), "{words:?}: {e}");
        }
    }
}
