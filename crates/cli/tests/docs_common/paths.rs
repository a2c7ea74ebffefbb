//! The docs speak of a machine's paths (`/home/me`, `/mnt/backup`,
//! `/srv/www`, `/etc/accord`); the suite runs them inside a sandbox
//! directory. Before a block runs, each absolute path under one of these
//! tops is prefixed with the sandbox: `/mnt/backup/home` becomes
//! `SANDBOX/mnt/backup/home`, also after `server:` and in `ssh://server/…`
//! (the "server" is this machine). `~` is the sandbox's HOME,
//! `SANDBOX/root`. Any other path is left as written.

use std::path::Path;

pub const TOPS: [&str; 6] = ["/home", "/root", "/mnt", "/srv", "/media", "/etc/accord"];

/// `text` with every path under `TOPS` moved into `sandbox`.
pub fn into_sandbox(text: &str, sandbox: &Path) -> String {
    let prefix = sandbox.to_str().expect("a UTF-8 sandbox path");
    let mut out = String::with_capacity(text.len() + 64);
    let mut i = 0;
    while i < text.len() {
        if let Some(top) = TOPS.iter().find(|t| starts_path(text, i, t)) {
            out.push_str(prefix);
            out.push_str(top);
            i += top.len();
            continue;
        }
        let c = text[i..].chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Does a path `top` (or one below it) start at byte `i` of `text`?
fn starts_path(text: &str, i: usize, top: &str) -> bool {
    if !text[i..].starts_with(top) {
        return false;
    }
    let after = text[i + top.len()..].chars().next();
    let ends = after.is_none_or(|c| c == '/' || !(c.is_alphanumeric() || "._-".contains(c)));
    ends && starts_word(text, i)
}

/// Is byte `i` the start of a path: at a word's start, after `host:` or
/// `=`, or the path of an `ssh://host` URL?
fn starts_word(text: &str, i: usize) -> bool {
    let before = &text[..i];
    match before.chars().last() {
        None => true,
        Some(c) if c.is_whitespace() || "\"'=:([,".contains(c) => true,
        Some(_) => {
            let word_start = before
                .rfind(|c: char| c.is_whitespace() || "\"'".contains(c))
                .map_or(0, |p| p + 1);
            let word = &before[word_start..];
            word.strip_prefix("ssh://")
                .is_some_and(|host| !host.contains('/'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_tops_move_into_the_sandbox() {
        let s = Path::new("/tmp/sb");
        let cases = [
            (
                "accord mirror /home /mnt/backup/home",
                "accord mirror /tmp/sb/home /tmp/sb/mnt/backup/home",
            ),
            ("server:/srv/www ./www", "server:/tmp/sb/srv/www ./www"),
            (
                "ssh://server/srv/www/site",
                "ssh://server/tmp/sb/srv/www/site",
            ),
            (
                "roots = [\"/home/me/notes\"]",
                "roots = [\"/tmp/sb/home/me/notes\"]",
            ),
            (
                "--module photos=/srv/photos:ro",
                "--module photos=/tmp/sb/srv/photos:ro",
            ),
            ("cat /etc/accord/key.pub", "cat /tmp/sb/etc/accord/key.pub"),
            (
                "/etc/passwd /srvx ~/mnt a/srv",
                "/etc/passwd /srvx ~/mnt a/srv",
            ),
            (
                "accord://localhost:8730/backups/me",
                "accord://localhost:8730/backups/me",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(into_sandbox(text, s), want, "for {text}");
        }
    }
}
