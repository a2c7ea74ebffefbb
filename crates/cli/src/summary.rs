//! What a run says when it ends, in human units and the same words for
//! every executor: the summary line on a terminal (or with `-v`), and
//! `--stats`, a block of `Name: value` lines on stdout for scripts that do
//! not read `--json`.

use std::fmt::Write as _;

/// `1234567` → `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes in binary units as rsync's `-h` and `du -h` show them: `812 B`,
/// `1.3 KiB`, `45.0 MiB`, `2.1 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A duration as people read it: `0.42 s`, `12.3 s`, `4 min 05 s`,
/// `2 h 03 min`.
pub fn duration(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs < 10.0 {
        return format!("{secs:.2} s");
    }
    if secs < 60.0 {
        return format!("{secs:.1} s");
    }
    let whole = secs.round() as u64;
    if whole < 3600 {
        return format!("{} min {:02} s", whole / 60, whole % 60);
    }
    format!("{} h {:02} min", whole / 3600, (whole % 3600) / 60)
}

/// `n` and the word for it: `1 conflict`, `1,200 conflicts`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    let n = count(n);
    format!("{n} {}", if n == "1" { one } else { many })
}

/// The figures of a sync's last line, of two roots or more.
pub struct SyncFigures<'a> {
    pub dry_run: bool,
    pub changes: u64,
    /// Files written and their bytes (left out when none).
    pub written: (u64, u64),
    /// Changes of a kind worth its own count (`deleted`, `renamed` …),
    /// left out when 0.
    pub kinds: &'a [(u64, &'a str)],
    pub agreed: u64,
    pub conflicts: u64,
    pub errors: u64,
    /// Roots not reached, for a sync of more than two.
    pub unreached: Option<u64>,
    pub elapsed_s: f64,
}

/// A sync's last line: what was changed (what would be, in a dry run), in
/// the words of a mirror's summary: `12 changes made: 9 files written
/// (3.1 MiB), 2 deleted, 1 renamed; 230 agreed, 1 conflict, 0 errors, in
/// 0.42 s`.
pub fn sync_line(f: &SyncFigures<'_>) -> String {
    let changes = counted(f.changes, "change", "changes");
    let mut detail = Vec::new();
    let (files, bytes_written) = f.written;
    if files > 0 {
        let files = counted(files, "file", "files");
        detail.push(format!("{files} written ({})", bytes(bytes_written)));
    }
    for &(n, what) in f.kinds.iter().filter(|(n, _)| *n > 0) {
        detail.push(format!("{} {what}", count(n)));
    }
    let detail = match detail.is_empty() {
        true => String::new(),
        false => format!(": {}", detail.join(", ")),
    };
    let mut rest = format!(
        "{} agreed, {}, {}",
        count(f.agreed),
        counted(f.conflicts, "conflict", "conflicts"),
        counted(f.errors, "error", "errors"),
    );
    if let Some(unreached) = f.unreached {
        let roots = counted(unreached, "root not reached", "roots not reached");
        write!(rest, ", {roots}").expect("a String takes it");
    }
    write!(rest, ", in {}", duration(f.elapsed_s)).expect("a String takes it");
    if f.dry_run {
        format!("dry run, nothing was changed: {changes} would be made{detail}; {rest}")
    } else {
        format!("{changes} made{detail}; {rest}")
    }
}

/// The figures every mirror run has, whichever executor made it.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Regular files in the source.
    pub files_total: u64,
    /// Files whose contents were written, and the bytes written.
    pub files_written: u64,
    pub bytes_written: u64,
    /// Destination entries deleted (directories included).
    pub deleted: u64,
    pub elapsed_s: f64,
}

/// `4 of 7 files written (196.3 KiB), 5 deleted, in 0.02 s`.
pub fn line(f: &Figures) -> String {
    let files = if f.files_total == 1 { "file" } else { "files" };
    let mut s = format!(
        "{} of {} {files} written",
        count(f.files_written),
        count(f.files_total)
    );
    if f.files_written > 0 {
        let _ = write!(s, " ({})", bytes(f.bytes_written));
    }
    let _ = write!(
        s,
        ", {} deleted, in {}",
        count(f.deleted),
        duration(f.elapsed_s)
    );
    s
}

/// One `--stats` line: `Name: 1,234` or `Name: 201,015 (196.3 KiB)`.
pub fn stat_count(out: &mut String, name: &str, n: u64) {
    let _ = writeln!(out, "{name}: {}", count(n));
}

pub fn stat_bytes(out: &mut String, name: &str, n: u64) {
    let _ = writeln!(out, "{name}: {} ({})", count(n), bytes(n));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
    }

    #[test]
    fn bytes_are_in_binary_units() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(201_015), "196.3 KiB");
        assert_eq!(bytes(45 << 20), "45.0 MiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(0.421), "0.42 s");
        assert_eq!(duration(12.34), "12.3 s");
        assert_eq!(duration(245.0), "4 min 05 s");
        assert_eq!(duration(7380.0), "2 h 03 min");
    }

    #[test]
    fn the_line_says_what_was_written_and_deleted() {
        let f = Figures {
            files_total: 7,
            files_written: 4,
            bytes_written: 201_015,
            deleted: 5,
            elapsed_s: 0.02,
        };
        assert_eq!(
            line(&f),
            "4 of 7 files written (196.3 KiB), 5 deleted, in 0.02 s"
        );
    }
}
