//! Links between the pages: a link to a file of the repository must reach
//! it, and one to a heading (`page.md#heading`) a heading of that page
//! (GitHub's anchors: lower case, punctuation dropped, spaces as dashes).

use super::top;
use std::path::Path;

/// `file:line: target` of each link of `page` that leads nowhere.
pub fn broken(page: &str) -> Vec<String> {
    let text = std::fs::read_to_string(top().join(page)).unwrap();
    let dir = Path::new(page).parent().unwrap_or(Path::new(""));
    let mut out = Vec::new();
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if in_code {
            continue;
        }
        for target in targets(line) {
            if let Err(why) = check(page, dir, target) {
                out.push(format!("{page}:{}: ({target}) {why}", n + 1));
            }
        }
    }
    out
}

/// The targets of the inline links `[text](target)` on a line.
fn targets(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &line[i + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .filter(|t| !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

fn check(page: &str, dir: &Path, target: &str) -> Result<(), String> {
    let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
    let path = if file.is_empty() {
        Path::new(page).to_path_buf()
    } else {
        dir.join(file)
    };
    let full = top().join(&path);
    if !full.exists() {
        return Err(format!("{} does not exist", path.display()));
    }
    if anchor.is_empty() {
        return Ok(());
    }
    let text = std::fs::read_to_string(&full).map_err(|e| e.to_string())?;
    let found = text
        .lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .any(|h| slug(h) == anchor);
    if found {
        Ok(())
    } else {
        Err(format!("{} has no heading #{anchor}", path.display()))
    }
}

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}
