//! Profiles of `accord sync`: `accord sync NAME [OPTIONS]` reads the roots
//! and options of `$XDG_CONFIG_HOME/accord/NAME.toml` (or
//! `~/.config/accord/NAME.toml`), as Unison's profiles do:
//!
//! ```toml
//! roots = ["/home/me/notes", "laptop:notes"]
//! prefer = "newer"
//! times = true
//! max-delete = "20%"
//! rsh = "ssh -p 2222"
//! exclude = ["*.o", "cache/"]
//! ```
//!
//! Each key is a long option of `accord sync` (`max-delete` or
//! `max_delete`); `true` gives a flag, `false` leaves it out (for an
//! option whose value is true or false, such as `ignorecase`, either is
//! its value), a string or a number gives its value, a list of strings the option once per string
//! (`--exclude=*.o --exclude=cache/`). The profile's options come first on the command
//! line that is then parsed, so an option given by hand overrides the
//! profile's.

use crate::cmd_sync::SyncArgs;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

mod unison;

/// The largest profile read (a profile is a few lines).
const MAX_PROFILE: u64 = 64 << 10;

/// `args` (the whole command line, `accord sync …`) with a profile's name
/// replaced by its roots and its options put first; unchanged when the
/// command is not a sync with one root. `Err`: what is wrong, for a usage
/// error.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    expand_from(args, config_dir())
}

fn expand_from(args: Vec<OsString>, dir: Option<PathBuf>) -> Result<Vec<OsString>, String> {
    if args.get(1).is_none_or(|c| c != "sync") {
        return Ok(args);
    }
    let args = unison_words_as_ours(args)?;
    // Parsed once, B optional, to find the positionals (errors are left to
    // the real parse, which reports them as for any command line).
    let rest = &args[2..];
    let Ok(m) = parse_loosely(rest) else {
        return Ok(args);
    };
    // One root written: the name of a profile.
    let [name] = positionals(&m)[..] else {
        return Ok(args);
    };
    // The word that is the name: the one whose removal leaves no root (a
    // word equal to it may also be an option's value).
    let at = (0..rest.len())
        .filter(|&i| Path::new(&rest[i]) == name)
        .find(|&i| {
            let without: Vec<OsString> = [&rest[..i], &rest[i + 1..]].concat();
            parse_loosely(&without).is_ok_and(|m| positionals(&m).is_empty())
        })
        .ok_or("cannot tell the profile's name from the other arguments")?;
    let name = name
        .to_str()
        .filter(|n| is_profile_name(n))
        .ok_or_else(|| {
            format!(
                "one root given ({}); a second root is needed, or the name of a profile",
                name.display()
            )
        })?;
    let dir = dir.ok_or("no profile directory: neither XDG_CONFIG_HOME nor HOME is set")?;
    let path = dir.join(format!("{name}.toml"));
    let (roots, options) = read(&path)?;
    let mut out: Vec<OsString> = args[..2].to_vec();
    out.extend(options);
    out.extend(rest[..at].iter().cloned());
    out.extend(roots);
    out.extend(rest[at + 1..].iter().cloned());
    Ok(out)
}

/// `accord sync …` with Unison's single-dash options (`-batch`, `-path P`)
/// rewritten as ours.
fn unison_words_as_ours(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let cmd = sync_command();
    let shorts = |valued: bool| -> String {
        cmd.get_arguments()
            .filter(|a| a.get_action().takes_values() == valued)
            .filter_map(clap::Arg::get_short)
            .collect()
    };
    let (switches, valued) = (shorts(false), shorts(true));
    let long = |name: &str| {
        cmd.get_arguments()
            .any(|a| a.get_long() == Some(name) && !a.is_hide_set())
    };
    let ours = unison::Ours {
        switches: &switches,
        valued: &valued,
        long: &long,
        takes_value: &takes_value,
    };
    let rest = unison::translate(&args[2..], &ours)?;
    Ok(args[..2].iter().cloned().chain(rest).collect())
}

/// The roots a loose parse found (clap may place a lone one in any of the
/// three positionals once the first two are optional).
fn positionals(m: &clap::ArgMatches) -> Vec<&PathBuf> {
    let one = |id: &str| m.get_one::<PathBuf>(id).into_iter();
    let more = m.get_many::<PathBuf>("more").into_iter().flatten();
    one("a").chain(one("b")).chain(more).collect()
}

/// `accord sync`'s arguments parsed with both roots optional.
fn parse_loosely(rest: &[OsString]) -> Result<clap::ArgMatches, clap::Error> {
    sync_command()
        .mut_arg("a", |a| a.required(false))
        .mut_arg("b", |b| b.required(false))
        .no_binary_name(true)
        .try_get_matches_from(rest)
}

fn sync_command() -> clap::Command {
    <SyncArgs as clap::Args>::augment_args(clap::Command::new("sync"))
}

/// A profile's name: letters, digits, `.`, `_`, `-`, not starting with a
/// dot (so never a path).
fn is_profile_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 100
        && !n.starts_with('.')
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Where profiles are: `$XDG_CONFIG_HOME/accord` or `~/.config/accord`.
fn config_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(dir.join("accord"))
}

/// The roots and the options (as command-line words) of the profile at
/// `path`.
fn read(path: &Path) -> Result<(Vec<OsString>, Vec<OsString>), String> {
    let shown = path.display();
    let text = read_bounded(path).map_err(|e| format!("profile {shown}: {e}"))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("profile {shown}: {}", e.message()))?;
    let mut roots = None;
    let mut options = Vec::new();
    for (key, value) in &table {
        if key == "roots" {
            roots = Some(parse_roots(value).map_err(|e| format!("profile {shown}: {e}"))?);
            continue;
        }
        let long = option_of(key).map_err(|e| format!("profile {shown}: {e}"))?;
        words(&long, value, &mut options).map_err(|e| format!("profile {shown}: {key}: {e}"))?;
    }
    let roots = roots.ok_or_else(|| format!("profile {shown}: no roots = [\"A\", \"B\"]"))?;
    Ok((roots, options))
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_PROFILE + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_PROFILE {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_PROFILE} bytes"
        )));
    }
    Ok(text)
}

fn parse_roots(value: &toml::Value) -> Result<Vec<OsString>, String> {
    let roots: Option<Vec<&str>> = value
        .as_array()
        .map(|a| a.iter().map(toml::Value::as_str).collect())
        .unwrap_or(None);
    match roots {
        // Two, or more for a sync of a set (`cmd_sync_set.rs`).
        Some(r) if (2..=32).contains(&r.len()) && r.iter().all(|s| !s.is_empty()) => {
            Ok(r.into_iter().map(OsString::from).collect())
        }
        _ => {
            Err("roots must be two (or up to 32) non-empty strings: roots = [\"A\", \"B\"]".into())
        }
    }
}

/// The long option a profile's key names; hidden options, help and
/// version are not options a profile can hold.
fn option_of(key: &str) -> Result<String, String> {
    let long = key.replace('_', "-");
    let cmd = sync_command();
    let known = cmd
        .get_arguments()
        .any(|a| a.get_long() == Some(long.as_str()) && !a.is_hide_set() && !a.is_positional());
    if known && long != "help" && long != "version" {
        Ok(long)
    } else {
        Err(format!("{key} is not an option of accord sync"))
    }
}

/// Does the option `--long` take a value (rather than being a switch)?
fn takes_value(long: &str) -> bool {
    sync_command()
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .is_some_and(|a| a.get_action().takes_values())
}

/// The command-line words of `--long` set to `value`.
fn words(long: &str, value: &toml::Value, out: &mut Vec<OsString>) -> Result<(), String> {
    let flag = OsString::from(format!("--{long}"));
    match value {
        // An option whose value is true or false itself (`ignorecase`).
        toml::Value::Boolean(b) if takes_value(long) => out.push(format!("--{long}={b}").into()),
        toml::Value::Boolean(true) => out.push(flag),
        toml::Value::Boolean(false) => {}
        toml::Value::String(s) => out.extend([flag, s.into()]),
        toml::Value::Integer(n) => out.extend([flag, n.to_string().into()]),
        toml::Value::Array(values) => {
            for value in values {
                // One word: a value starting with '-' stays a value.
                let text = value.as_str().ok_or("a list must hold strings only")?;
                out.push(format!("--{long}={text}").into());
            }
        }
        _ => {
            return Err(
                "a value must be true, false, a string, a number or a list of strings".into(),
            )
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn with_profile(text: &str) -> (tempfile::TempDir, Option<PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("home.toml"), text).unwrap();
        let p = Some(dir.path().to_path_buf());
        (dir, p)
    }

    #[test]
    fn a_profile_may_name_more_than_two_roots() {
        let (_d, dir) = with_profile("roots = [\"/a\", \"/b\", \"/c\"]\n");
        let got = expand_from(words(&["accord", "sync", "home", "--batch"]), dir).unwrap();
        assert_eq!(got, words(&["accord", "sync", "/a", "/b", "/c", "--batch"]));
        let (_d, dir) = with_profile("roots = [\"/a\"]\n");
        let err = expand_from(words(&["accord", "sync", "home"]), dir).unwrap_err();
        assert!(err.contains("roots must be two"), "{err}");
    }

    #[test]
    fn a_profile_gives_roots_and_options_first() {
        let (_d, dir) = with_profile(
            "roots = [\"/a\", \"host:b\"]\nprefer = \"newer\"\ntimes = true\n\
             checksum = false\nmax_delete = \"20%\"\nwatch-interval = 7\n",
        );
        let got = expand_from(words(&["accord", "sync", "--batch", "home", "-q"]), dir).unwrap();
        let want = [
            "accord",
            "sync",
            "--max-delete",
            "20%",
            "--prefer",
            "newer",
            "--times",
            "--watch-interval",
            "7",
            "--batch",
            "/a",
            "host:b",
            "-q",
        ];
        assert_eq!(got, words(&want));
        let (_d, dir) = with_profile("roots = [\"/a\", \"/b\"]\n");
        for (args, want) in [
            (
                &["accord", "sync", "--prefer", "A", "home"][..],
                &["accord", "sync", "--prefer", "A", "/a", "/b"][..],
            ),
            (
                &["accord", "sync", "--prefer=B", "home", "--json"],
                &["accord", "sync", "--prefer=B", "/a", "/b", "--json"],
            ),
            (
                &["accord", "sync", "-cq", "home"],
                &["accord", "sync", "-cq", "/a", "/b"],
            ),
        ] {
            assert_eq!(expand_from(words(args), dir.clone()).unwrap(), words(want));
        }
    }

    #[test]
    fn ignorecase_takes_true_and_false_as_its_value() {
        for (value, word) in [
            ("true", "--ignorecase=true"),
            ("false", "--ignorecase=false"),
        ] {
            let (_tmp, dir) =
                with_profile(&format!("roots = [\"/a\", \"/b\"]\nignorecase = {value}\n"));
            let out = expand_from(words(&["accord", "sync", "home"]), dir).unwrap();
            assert!(out.contains(&OsString::from(word)), "{out:?}");
        }
        let (_tmp, dir) = with_profile("roots = [\"/a\", \"/b\"]\nignorecase = \"auto\"\n");
        let out = expand_from(words(&["accord", "sync", "home"]), dir).unwrap();
        assert!(out.contains(&OsString::from("auto")), "{out:?}");
    }

    #[test]
    fn a_list_gives_the_option_once_per_value() {
        let (_d, dir) =
            with_profile("roots = [\"/a\", \"/b\"]\nexclude = [\"*.o\", \"-x\", \"cache/\"]\n");
        let got = expand_from(words(&["accord", "sync", "home", "--exclude", "y"]), dir).unwrap();
        let want = [
            "accord",
            "sync",
            "--exclude=*.o",
            "--exclude=-x",
            "--exclude=cache/",
            "/a",
            "/b",
            "--exclude",
            "y",
        ];
        assert_eq!(got, words(&want));
        let (_d, dir) = with_profile("roots = [\"/a\", \"/b\"]\nexclude = [1]\n");
        let e = expand_from(words(&["accord", "sync", "home"]), dir).unwrap_err();
        assert!(e.contains("strings only"), "{e}");
    }

    #[test]
    fn two_roots_or_another_command_are_left_alone() {
        for args in [
            &["accord", "sync", "a", "b"][..],
            &["accord", "mirror", "home"],
            &["accord", "sync"],
        ] {
            assert_eq!(expand_from(words(args), None).unwrap(), words(args));
        }
    }

    #[test]
    fn bad_profiles_are_refused_with_their_path() {
        let cases = [
            ("roots = [\"/a\"]", "roots must be two"),
            ("prefer = \"A\"", "no roots"),
            (
                "roots = [\"/a\", \"/b\"]\nnope = 1",
                "nope is not an option",
            ),
            (
                "roots = [\"/a\", \"/b\"]\nstate-dir = \"/x\"",
                "not an option",
            ),
            (
                "roots = [\"/a\", \"/b\"]\nprefer = { a = 1 }",
                "a value must be",
            ),
            ("roots = [\"/a\", \"/b\"]\nprefer = [1]", "strings only"),
            ("roots = [", "profile"),
        ];
        for (text, why) in cases {
            let (_d, dir) = with_profile(text);
            let e = expand_from(words(&["accord", "sync", "home"]), dir).unwrap_err();
            assert!(e.contains(why) && e.contains("home.toml"), "{text}: {e}");
        }
        let e = expand_from(
            words(&["accord", "sync", "elsewhere"]),
            Some("/nonexistent".into()),
        )
        .unwrap_err();
        assert!(e.contains("/nonexistent/elsewhere.toml"), "{e}");
        let e = expand_from(words(&["accord", "sync", "/one/root"]), None).unwrap_err();
        assert!(e.contains("a second root is needed"), "{e}");
    }
}
