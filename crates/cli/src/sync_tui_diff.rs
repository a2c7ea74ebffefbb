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

    /// The keys of the list, in a pane over it ('?').
    pub(crate) fn keys() -> DiffView {
        DiffView::keys_of(crate::sync_tui_view::KEYS, Vec::new())
    }

    /// `keys` with what each does, then `more` lines, in a pane.
    pub(crate) fn keys_of(keys: &[(&str, &str)], more: Vec<String>) -> DiffView {
        let mut lines: Vec<String> = keys
            .iter()
            .map(|(keys, what)| format!("{keys:<16} {what}"))
            .collect();
        lines.extend(more);
        DiffView::of_lines(" keys (q: back) ".into(), lines)
    }

    /// A pane of `lines` under `title`.
    pub(crate) fn of_lines(title: String, lines: Vec<String>) -> DiffView {
        DiffView {
            title,
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
pub(crate) fn describe(side: &str, entry: Option<&Entry>) -> String {
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
        "{side}: {kind}, {}, modified {}, mode {:04o}",
        size_words(entry.size),
        local_time(entry.props.mtime.sec),
        entry.props.mode & 0o7777
    );
    if let Some(target) = &entry.link_target {
        line.push_str(&format!(", -> {}", escape_for_display(target)));
    }
    line
}

/// A size in bytes, with binary units from a KiB: `812 bytes`,
/// `1,234,567 bytes (1.2 MiB)`.
fn size_words(size: u64) -> String {
    let digits = size.to_string();
    let mut grouped = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if size < 1024 {
        format!("{grouped} bytes")
    } else {
        format!("{grouped} bytes ({})", crate::summary::bytes(size))
    }
}

/// Seconds since the epoch as this host's local time, as Unison shows a
/// modification time: `2026-11-28 17:32:19 CET`.
pub(crate) fn local_time(secs: i64) -> String {
    // SAFETY: `tm` is plain data that localtime_r fills in; the time is a
    // valid pointer for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t: libc::time_t = secs as libc::time_t;
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return format!("{secs} s after 1970 (UTC)");
    }
    let zone = if tm.tm_zone.is_null() {
        String::new()
    } else {
        // SAFETY: tm_zone, when set, points at a NUL-terminated name
        // that lives as long as the process's time zone data.
        let name = unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) };
        format!(" {}", name.to_string_lossy())
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}{zone}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
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
    file_diff(&host_path(a, &item.path), &host_path(b, &item.path))
}

/// The lines of `diff -u a b`, or why it could not run.
pub(crate) fn file_diff(a: &Path, b: &Path) -> Vec<String> {
    match run_diff(a, b) {
        Ok(lines) => lines,
        Err(e) => vec![format!("(diff could not run: {e})")],
    }
}

pub(crate) fn host_path(root: &Path, path: &RelPath) -> PathBuf {
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
    fn times_and_sizes_read_as_a_person_reads_them() {
        // The zone is this host's: the date and clock are checked by shape.
        let shown = local_time(1_795_847_978);
        let digits: Vec<bool> = shown.chars().take(19).map(|c| c.is_ascii_digit()).collect();
        let shape: String = digits.iter().map(|&d| if d { '9' } else { '-' }).collect();
        assert_eq!(shape, "9999-99-99-99-99-99", "{shown}");
        assert!(
            shown.starts_with("2026-") || shown.starts_with("2027-"),
            "{shown}"
        );
        assert_eq!(size_words(812), "812 bytes");
        assert_eq!(size_words(1_258_291), "1,258,291 bytes (1.2 MiB)");
    }

    #[test]
    fn escapes_cannot_reach_the_terminal() {
        assert_eq!(printable(b"a\x1b[2Jb\tc\r"), "a\\x1b[2Jb    c\\x0d");
    }
}
