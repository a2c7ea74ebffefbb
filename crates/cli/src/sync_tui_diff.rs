//! The diff of one path in the interactive `accord sync`: both sides'
//! entries as the plan saw them (kind, size, mtime, permissions, link
//! target), then, when both are regular files on local roots, `diff -u`
//! of the two. A remote side's file is not fetched for this: its entry is
//! all the plan has. The text is made safe to print (a file's bytes may
//! hold terminal escapes) and scrolls.

use crate::sync_tui_view::pane;
use accord_engine::sync_plan;
use accord_engine::SyncItem;
use accord_model::{escape_for_display, Entry, Kind, RelPath};
use ratatui::layout::Rect;
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Lines of `diff -u` read at most (the rest is cut, and says so).
const MAX_DIFF_LINES: usize = 20_000;

pub(crate) struct DiffView {
    title: String,
    lines: Vec<String>,
    top: usize,
}

impl DiffView {
    pub(crate) fn of(item: &SyncItem, roots: &[Option<PathBuf>; 2]) -> DiffView {
        let mut lines = vec![
            describe("A", item.entry(sync_plan::Side::A)),
            describe("B", item.entry(sync_plan::Side::B)),
        ];
        // A rename's side holds nothing here yet: what it moves here.
        if let Some(moved) = &item.moved {
            let from = format!("  from {}", moved.from.display());
            lines.push(describe(&from, Some(&moved.entry)));
        }
        lines.push(String::new());
        lines.extend(contents_diff(item, roots));
        DiffView {
            title: format!(" {} (q: back, up/down/space: scroll) ", item.path.display()),
            lines,
            top: 0,
        }
    }

    pub(crate) fn scroll(&mut self, by: isize) {
        let last = self.lines.len().saturating_sub(1) as isize;
        self.top = (self.top as isize + by).clamp(0, last) as usize;
    }

    pub(crate) fn draw(&self, frame: &mut Frame, area: Rect) {
        let inner = pane(frame, area, self.title.clone());
        let text: Vec<&str> = self
            .lines
            .iter()
            .skip(self.top)
            .take(inner.height as usize)
            .map(String::as_str)
            .collect();
        frame.render_widget(Paragraph::new(text.join("\n")), inner);
    }
}

/// One side's entry in a line.
fn describe(side: &str, entry: Option<&Entry>) -> String {
    let Some(entry) = entry else {
        return format!("{side}: absent");
    };
    let kind = match entry.kind {
        Kind::File => "file",
        Kind::Dir => "directory",
        Kind::Symlink => "symlink",
        _ => "special file",
    };
    let mut line = format!(
        "{side}: {kind}, {} bytes, mtime {}.{:09}, mode {:04o}",
        entry.size,
        entry.props.mtime.sec,
        entry.props.mtime.nsec,
        entry.props.mode & 0o7777
    );
    if let Some(target) = &entry.link_target {
        line.push_str(&format!(", -> {}", escape_for_display(target)));
    }
    line
}

/// The lines of `diff -u A B`, or why there are none.
fn contents_diff(item: &SyncItem, roots: &[Option<PathBuf>; 2]) -> Vec<String> {
    let both_files = [sync_plan::Side::A, sync_plan::Side::B]
        .iter()
        .all(|&side| item.entry(side).is_some_and(|e| e.kind == Kind::File));
    if !both_files {
        return vec!["(no contents to compare: not a regular file on both sides)".into()];
    }
    let [Some(a), Some(b)] = roots else {
        return vec!["(a remote side's contents are not fetched for a diff)".into()];
    };
    match run_diff(&host_path(a, &item.path), &host_path(b, &item.path)) {
        Ok(lines) => lines,
        Err(e) => vec![format!("(diff could not run: {e})")],
    }
}

fn host_path(root: &Path, path: &RelPath) -> PathBuf {
    root.join(std::ffi::OsStr::from_bytes(path.as_bytes()))
}

/// Run `diff -u`, keeping its first lines, made printable.
fn run_diff(a: &Path, b: &Path) -> std::io::Result<Vec<String>> {
    let mut child = Command::new("diff")
        .arg("-u")
        .arg("--")
        .arg(a)
        .arg(b)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut out = Vec::new();
    let stdout = child.stdout.take().expect("piped");
    // A cap on what is read, so a diff of two huge files cannot fill memory.
    stdout.take(16 << 20).read_to_end(&mut out)?;
    // What was not read is not needed: diff may stop on a broken pipe.
    let _ = child.kill();
    let _ = child.wait();
    let mut lines: Vec<String> = out
        .split(|&byte| byte == b'\n')
        .take(MAX_DIFF_LINES)
        .map(printable)
        .collect();
    if lines.len() == MAX_DIFF_LINES {
        lines.push(format!("(cut after {MAX_DIFF_LINES} lines)"));
    }
    if out.is_empty() {
        lines = vec!["(the contents are equal)".into()];
    }
    Ok(lines)
}

/// A line of a file as text that cannot move the cursor or change the
/// terminal: tabs become spaces, other control characters `\xNN`.
fn printable(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let mut shown = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\t' => shown.push_str("    "),
            ch if ch.is_control() => shown.push_str(&format!("\\x{:02x}", ch as u32)),
            ch => shown.push(ch),
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_cannot_reach_the_terminal() {
        assert_eq!(printable(b"a\x1b[2Jb\tc\r"), "a\\x1b[2Jb    c\\x0d");
    }
}
