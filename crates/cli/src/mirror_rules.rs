//! `--exclude`, `--include`, `--filter` and `--exclude-from` of a mirror,
//! in the order given, as the gitignore lines the engine applies.
//!
//! rsync decides by the first rule that matches a name, in command-line
//! order; gitignore by the last line that matches. So the rules are
//! written out in reverse, an include as a negated line (`!PATTERN`). An
//! `--exclude-from` file is gitignore text of its own (its `!` lines
//! included): it is kept whole, in its own order, at its place in the
//! list. With excludes alone the order never mattered and is kept as it
//! was given.
//!
//! Patterns are gitignore's: one without a slash matches a name at any
//! depth, as rsync's does; one with a slash in the middle is anchored at
//! the root, where rsync matches it at any depth (write `**/a/b`).

use std::path::{Path, PathBuf};

/// One rule of the command line, where it stood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    Exclude(String),
    Include(String),
    /// The lines of an `--exclude-from` file (or a filter's `merge`).
    Lines(Vec<String>),
}

/// Rules from the matches of `accord mirror`, by their place on the line.
pub fn from_matches(m: &clap::ArgMatches) -> Result<Vec<Rule>, String> {
    let mut placed: Vec<(usize, Rule)> = Vec::new();
    for (id, make) in [
        ("exclude", Rule::Exclude as fn(String) -> Rule),
        ("include", Rule::Include),
    ] {
        for (i, v) in values(m, id) {
            placed.push((i, make(v)));
        }
    }
    for (i, v) in values(m, "filter") {
        for rule in filter_rule(&v)? {
            placed.push((i, rule));
        }
    }
    for (i, v) in values(m, "exclude_from") {
        placed.push((i, Rule::Lines(read_lines(Path::new(&v), "--exclude-from")?)));
    }
    placed.sort_by_key(|(i, _)| *i);
    let mut rules: Vec<Rule> = placed.into_iter().map(|(_, r)| r).collect();
    for (_, v) in values(m, "files_from") {
        rules.extend(files_from(&read_lines(Path::new(&v), "--files-from")?));
    }
    Ok(rules)
}

/// `--files-from FILE`: only the paths it lists (relative to SRC), each
/// with the directories above it, and a listed directory with everything
/// in it; after the other rules, so that they still leave names out.
/// Every other name is excluded, so DST's other entries are left alone.
fn files_from(lines: &[String]) -> Vec<Rule> {
    let mut dirs = std::collections::BTreeSet::new();
    let mut rules = Vec::new();
    for line in lines {
        let path = line.trim_end_matches('\r').trim_start_matches("./");
        let path = path.trim_matches('/');
        if path.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let names: Vec<&str> = path
            .split('/')
            .filter(|n| !n.is_empty() && *n != ".")
            .collect();
        for depth in 1..names.len() {
            dirs.insert(names[..depth].join("/"));
        }
        let anchored = format!("/{}", literal(&names.join("/")));
        rules.push(Rule::Include(format!("{anchored}/**")));
        rules.push(Rule::Include(anchored));
    }
    rules.extend(
        dirs.iter()
            .map(|d| Rule::Include(format!("/{}/", literal(d)))),
    );
    rules.push(Rule::Exclude("*".into()));
    rules
}

/// A path as a gitignore pattern that matches only itself.
pub fn literal(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | '#' | ' ') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An argument's values with their indices on the command line.
fn values(m: &clap::ArgMatches, id: &str) -> Vec<(usize, String)> {
    let (Ok(Some(vals)), Some(idx)) = (m.try_get_raw(id), m.indices_of(id)) else {
        return Vec::new();
    };
    idx.zip(vals.map(|v| v.to_string_lossy().into_owned()))
        .collect()
}

fn read_lines(file: &Path, flag: &str) -> Result<Vec<String>, String> {
    let bytes = std::fs::read(file).map_err(|e| {
        format!(
            "cannot read {flag} {}: {}",
            file.display(),
            accord_fsys::io_words(&e)
        )
    })?;
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::to_string)
        .collect())
}

/// rsync's filter rules that mean the same here: `- PATTERN`,
/// `+ PATTERN`, `exclude PATTERN`, `include PATTERN`, `merge FILE` or
/// `. FILE` (a file of such rules), and `!` or `clear` (forget the rules
/// before it; given as an empty list that `to_gitignore` acts on).
fn filter_rule(text: &str) -> Result<Vec<Rule>, String> {
    let t = text.trim_start();
    if t == "!" || t == "clear" {
        return Ok(vec![Rule::Lines(vec![CLEAR.to_string()])]);
    }
    let (word, rest) = t.split_once([' ', '_']).unwrap_or((t, ""));
    let pattern = rest.to_string();
    match word {
        "-" | "exclude" if !pattern.is_empty() => Ok(vec![Rule::Exclude(pattern)]),
        "+" | "include" if !pattern.is_empty() => Ok(vec![Rule::Include(pattern)]),
        "." | "merge" if !pattern.is_empty() => {
            let file = PathBuf::from(&pattern);
            let mut rules = Vec::new();
            for line in read_lines(&file, "--filter merge")? {
                let line = line.trim_end();
                if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                    continue;
                }
                rules.extend(filter_rule(line)?);
            }
            Ok(rules)
        }
        "dir-merge" | ":" => Err(format!(
            "--filter {text:?}: per-directory rule files are .accordignore files here \
             (gitignore syntax, read in every source directory)"
        )),
        _ => Err(format!(
            "--filter {text:?}: use \"- PATTERN\", \"+ PATTERN\", \"merge FILE\" or \"clear\" \
             (rsync's other filter rules are not built)"
        )),
    }
}

/// Marks a `clear` rule inside `Rule::Lines` (a NUL cannot be in a pattern
/// read from a command line or a file's line).
const CLEAR: &str = "\0clear";

/// The gitignore lines that decide as the rules do (see the module).
pub fn to_gitignore(rules: Vec<Rule>) -> Result<Vec<String>, String> {
    let after_clear = match rules.iter().rposition(is_clear) {
        Some(i) => rules[i + 1..].to_vec(),
        None => rules,
    };
    let ordered = after_clear.iter().any(|r| matches!(r, Rule::Include(_)));
    let mut units: Vec<Vec<String>> = Vec::with_capacity(after_clear.len());
    for rule in after_clear {
        units.push(match rule {
            Rule::Exclude(p) => vec![p],
            Rule::Include(p) if p.starts_with('!') => {
                return Err(format!(
                "--include {p:?}: a pattern cannot start with '!' (write \\! for a name that does)"
            ))
            }
            Rule::Include(p) => vec![format!("!{p}")],
            Rule::Lines(lines) => lines,
        });
    }
    if ordered {
        units.reverse();
    }
    Ok(units.into_iter().flatten().collect())
}

fn is_clear(r: &Rule) -> bool {
    matches!(r, Rule::Lines(l) if l.len() == 1 && l[0] == CLEAR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(p: &str) -> Rule {
        Rule::Exclude(p.into())
    }
    fn inc(p: &str) -> Rule {
        Rule::Include(p.into())
    }

    #[test]
    fn excludes_alone_keep_their_order() {
        let lines = to_gitignore(vec![ex("*.o"), Rule::Lines(vec!["a".into(), "!b".into()])]);
        assert_eq!(lines.unwrap(), ["*.o", "a", "!b"]);
    }

    #[test]
    fn the_first_rule_that_matches_is_the_last_line() {
        // rsync's "only .c files" idiom.
        let lines = to_gitignore(vec![inc("*/"), inc("*.c"), ex("*")]).unwrap();
        assert_eq!(lines, ["*", "!*.c", "!*/"]);
    }

    #[test]
    fn a_file_of_lines_stays_whole_in_its_place() {
        let file = Rule::Lines(vec!["*.log".into(), "!keep.log".into()]);
        let lines = to_gitignore(vec![inc("x.log"), file, ex("tmp")]).unwrap();
        assert_eq!(lines, ["tmp", "*.log", "!keep.log", "!x.log"]);
    }

    #[test]
    fn filter_rules_in_rsync_words() {
        assert_eq!(filter_rule("- *.o").unwrap(), [ex("*.o")]);
        assert_eq!(filter_rule("+ /src/").unwrap(), [inc("/src/")]);
        assert_eq!(filter_rule("exclude tmp").unwrap(), [ex("tmp")]);
        assert_eq!(filter_rule("-_x y").unwrap(), [ex("x y")]);
        assert!(filter_rule("P keep").unwrap_err().contains("not built"));
        assert!(filter_rule(": .rsync-filter")
            .unwrap_err()
            .contains(".accordignore"));
        assert!(filter_rule("-").is_err());
    }

    #[test]
    fn clear_forgets_what_came_before() {
        let lines = to_gitignore(vec![
            ex("a"),
            filter_rule("clear").unwrap().remove(0),
            ex("b"),
        ]);
        assert_eq!(lines.unwrap(), ["b"]);
    }

    #[test]
    fn files_from_lists_paths_their_directories_and_nothing_else() {
        let lines = ["./a/b.txt", "docs/", "# a comment", "", "x y"].map(String::from);
        let gi = to_gitignore(files_from(&lines)).unwrap();
        assert_eq!(
            gi,
            [
                "*",
                "!/a/",
                "!/x\\ y",
                "!/x\\ y/**",
                "!/docs",
                "!/docs/**",
                "!/a/b.txt",
                "!/a/b.txt/**"
            ]
        );
    }

    #[test]
    fn an_include_cannot_be_a_negation() {
        assert!(to_gitignore(vec![inc("!x")]).is_err());
    }
}
