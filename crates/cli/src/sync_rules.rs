//! `accord sync`'s ignore rules from its arguments: `--exclude` patterns,
//! the lines of `--exclude-from` files and `--no-ignore-files`, checked
//! here (a bad pattern is a usage error before anything runs; patterns
//! travel to a remote root's server, which takes only so many and so
//! long).

use accord_engine::SyncRules;
use accord_fsys::{IgnoreRules, MAX_PATTERN, MAX_PATTERNS};
use std::io::Read;
use std::path::PathBuf;

/// The largest `--exclude-from` file read.
const MAX_EXCLUDE_FILE: u64 = 16 << 20;

/// The rules of a run, or what is wrong with them (for a usage error).
pub fn rules_of(
    excludes: &[String],
    exclude_from: &[PathBuf],
    no_ignore_files: bool,
) -> Result<SyncRules, String> {
    let mut patterns = excludes.to_vec();
    for file in exclude_from {
        let text = read_bounded(file)
            .map_err(|e| format!("cannot read --exclude-from {}: {e}", file.display()))?;
        patterns.extend(pattern_lines(&text));
    }
    check(&patterns, "exclude")?;
    Ok(SyncRules {
        excludes: patterns,
        ignore_files: !no_ignore_files,
        follow: Vec::new(),
    })
}

/// A file's lines that are patterns: blank lines and comments are not
/// (as in a `.gitignore`; `\#` starts a pattern).
fn pattern_lines(text: &str) -> impl Iterator<Item = String> + '_ {
    text.lines()
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(str::to_string)
}

fn read_bounded(file: &PathBuf) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    std::fs::File::open(file)?
        .take(MAX_EXCLUDE_FILE + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_EXCLUDE_FILE {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_EXCLUDE_FILE >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| std::io::Error::other("not UTF-8"))
}

/// `--follow` patterns, checked as `--exclude`'s (the same syntax and
/// matcher, and they travel to a server the same way).
pub fn follow_of(patterns: &[String]) -> Result<Vec<String>, String> {
    check(patterns, "follow")?;
    Ok(patterns.to_vec())
}

/// `--path` (Unison's `-path`): sync only these subtrees. Each becomes
/// exclude patterns, put before the others: everything at the top is
/// excluded, then each directory on the way down to a path is taken back
/// with its other entries excluded, then the path itself is taken back
/// whole. What lies outside every path is left alone on both sides, as
/// an excluded path is (never scanned, copied or deleted); the
/// directories on the way are synced themselves, not their other entries.
/// A path is relative to the roots; `..` is refused.
pub fn paths_of(paths: &[String]) -> Result<Vec<String>, String> {
    let mut targets: Vec<Vec<&str>> = Vec::new();
    for path in paths {
        let parts: Vec<&str> = path
            .split('/')
            .filter(|part| !part.is_empty() && *part != ".")
            .collect();
        if parts.contains(&"..") {
            return Err(format!(
                "--path {path:?}: a path inside the roots, without '..'"
            ));
        }
        if parts.is_empty() {
            // The whole tree.
            return Ok(Vec::new());
        }
        targets.push(parts);
    }
    targets.sort();
    targets.dedup();
    // A path inside another is synced with it.
    let inside = |t: &Vec<&str>, all: &[Vec<&str>]| {
        all.iter().any(|o| o.len() < t.len() && t.starts_with(o))
    };
    let all = targets.clone();
    targets.retain(|t| !inside(t, &all));
    let mut ways: Vec<Vec<&str>> = targets
        .iter()
        .flat_map(|t| (1..t.len()).map(move |n| t[..n].to_vec()))
        .collect();
    ways.sort();
    ways.dedup();
    let depth = targets.iter().map(Vec::len).max().unwrap_or(0);
    let mut patterns: Vec<String> = Vec::new();
    if depth > 0 {
        patterns.push("/*".into());
    }
    let anchored = |parts: &[&str]| {
        let escaped: Vec<String> = parts.iter().map(|p| escape_glob(p)).collect();
        format!("/{}", escaped.join("/"))
    };
    for level in 1..=depth {
        for way in ways.iter().filter(|w| w.len() == level) {
            patterns.push(format!("!{}/", anchored(way)));
            patterns.push(format!("{}/*", anchored(way)));
        }
        for target in targets.iter().filter(|t| t.len() == level) {
            patterns.push(format!("!{}", anchored(target)));
        }
    }
    check(&patterns, "--path")?;
    Ok(patterns)
}

/// A name matched as itself in gitignore syntax.
fn escape_glob(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | '#') {
            out.push('\\');
        }
        out.push(c);
    }
    if out.ends_with(' ') {
        out.insert(out.len() - 1, '\\');
    }
    out
}

fn check(patterns: &[String], what: &str) -> Result<(), String> {
    if patterns.len() as u64 > MAX_PATTERNS {
        return Err(format!("more than {MAX_PATTERNS} {what} patterns"));
    }
    if let Some(long) = patterns.iter().find(|p| p.len() > MAX_PATTERN) {
        let start: String = long.chars().take(40).collect();
        return Err(format!(
            "a{} {what} pattern longer than {MAX_PATTERN} bytes ({start}...)",
            if what.starts_with('e') { "n" } else { "" }
        ));
    }
    IgnoreRules::new(patterns)
        .map(|_| ())
        .map_err(|e| format!("bad {what} pattern: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_come_from_arguments_then_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ignore");
        std::fs::write(&file, "# comment\n\n*.log\r\n\\#hash\ncache/\n").unwrap();
        let rules = rules_of(&["*.o".into()], &[file], false).unwrap();
        assert_eq!(rules.excludes, ["*.o", "*.log", "\\#hash", "cache/"]);
        assert!(rules.ignore_files);
        assert!(!rules_of(&[], &[], true).unwrap().ignore_files);
    }

    #[test]
    fn paths_keep_their_subtrees_and_the_way_to_them() {
        let patterns = paths_of(&["docs/a/".into(), "src".into(), "docs/b".into()]).unwrap();
        let rules = IgnoreRules::new(&patterns).unwrap();
        let p = |s: &str| accord_model::RelPath::new(s.as_bytes()).unwrap();
        // What the walk reaches: a directory excluded is not entered.
        for (path, dir, excluded) in [
            ("src", true, false),
            ("docs", true, false),
            ("docs/a", true, false),
            ("docs/b", false, false),
            ("docs/c", false, true),
            ("other", true, true),
            ("top.txt", false, true),
        ] {
            assert_eq!(
                rules.is_excluded(&p(path), dir),
                excluded,
                "{path}: {patterns:?}"
            );
        }
        assert!(paths_of(&["a/../b".into()]).is_err());
        assert!(paths_of(&["a".into(), "/".into()]).unwrap().is_empty());
        assert_eq!(
            paths_of(&["a".into(), "a/b".into()]).unwrap(),
            ["/*", "!/a"]
        );
        assert_eq!(paths_of(&["x*".into()]).unwrap(), ["/*", "!/x\\*"]);
    }

    #[test]
    fn bad_rules_are_refused() {
        let e = rules_of(&["a{b,c".into()], &[], false).unwrap_err();
        assert!(e.contains("bad exclude pattern"), "{e}");
        let e = rules_of(&["x".repeat(MAX_PATTERN + 1)], &[], false).unwrap_err();
        assert!(e.contains("longer than"), "{e}");
        let e = rules_of(&[], &["/nonexistent/file".into()], false).unwrap_err();
        assert!(e.contains("/nonexistent/file"), "{e}");
        let many = vec!["x".to_string(); MAX_PATTERNS as usize + 1];
        assert!(rules_of(&many, &[], false)
            .unwrap_err()
            .contains("more than"));
    }
}
