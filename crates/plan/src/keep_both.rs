//! `--keep-both` (as Syncthing does it): a conflict between two
//! non-directories whose contents both changed, differently, is resolved by
//! keeping both versions on both sides. The winner keeps the name; the
//! loser is kept beside it as `NAME.conflict-HOST-DATE` (HOST: the host of
//! the side whose version lost; DATE: that version's mtime in UTC, so that
//! a run interrupted half way names it the same way the next time and can
//! tell its own copy from a clash).
//!
//! The winner is the `--prefer` rule's when one is given and decides, else
//! the newer mtime (Syncthing's rule), A on equal mtimes. Other conflicts
//! (a directory involved, a deletion against an edit, properties only) are
//! left to the other policies. Everything here is pure: naming the copy
//! needs the host names and, to avoid clashes, what each side holds, which
//! the engine brings (`conflict_name` gives the candidates in order).

use crate::reconcile::{
    preferred_side, Action, ConflictReason, PathUpdate, ReconcileOptions, Side,
};
use accord_model::{Kind, Time};

/// The longest file name the copy may have (Linux's `NAME_MAX`).
const NAME_MAX: usize = 255;

/// The longest host label put into a name.
const HOST_MAX: usize = 64;

/// The side whose version keeps the path, when `--keep-both` resolves the
/// conflict `found` at `update`; `None` when it does not apply (the option
/// is off, `--force` decides everything, or it is not a conflict between
/// two non-directories that both changed).
pub fn keep_both_winner(
    update: &PathUpdate,
    found: Action,
    options: &ReconcileOptions,
) -> Option<Side> {
    if !options.keep_both || options.force.is_some() {
        return None;
    }
    if found != Action::Conflict(ConflictReason::BothChanged) {
        return None;
    }
    let (a, b) = (update.a.now.as_ref()?, update.b.now.as_ref()?);
    if a.kind == Kind::Dir || b.kind == Kind::Dir {
        return None;
    }
    let by_preference = options
        .prefer
        .and_then(|preference| preferred_side(update, preference));
    Some(by_preference.unwrap_or(if b.props.mtime > a.props.mtime {
        Side::B
    } else {
        Side::A
    }))
}

/// A host's name as it may appear in a file name: letters, digits, `.`,
/// `-` and `_` only (anything else becomes `_`), at most 64 bytes, never
/// empty and never starting with a dot.
pub fn host_label(host: &[u8]) -> String {
    let mut label: String = host
        .iter()
        .take(HOST_MAX)
        .map(|&b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => b as char,
            _ => '_',
        })
        .collect();
    if label.is_empty() || label.starts_with('.') {
        label.insert(0, 'h');
    }
    label
}

/// `YYYYMMDD-HHMMSS` of a time, in UTC.
pub fn utc_stamp(time: Time) -> String {
    let days = time.sec.div_euclid(86_400);
    let secs = time.sec.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The proleptic Gregorian date of a count of days since 1970-01-01
/// (the well-known era-based conversion: 400-year eras of 146,097 days).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The `attempt`-th candidate name (1: the first) of the copy of `name`'s
/// losing version: `NAME.conflict-HOST-DATE`, then `…-2`, `…-3`. A name
/// too long for the file system is shortened (at a character boundary
/// when it is UTF-8) so the suffix always fits. `None` for attempt 0.
pub fn conflict_name(name: &[u8], host: &str, date: &str, attempt: u32) -> Option<Vec<u8>> {
    if attempt == 0 {
        return None;
    }
    let mut suffix = format!(".conflict-{}-{date}", host_label(host.as_bytes()));
    if attempt > 1 {
        suffix.push_str(&format!("-{attempt}"));
    }
    let room = NAME_MAX.checked_sub(suffix.len())?;
    let mut stem = &name[..name.len().min(room)];
    if let Err(e) = std::str::from_utf8(stem) {
        if std::str::from_utf8(name).is_ok() {
            stem = &stem[..e.valid_up_to()];
        }
    }
    let mut out = stem.to_vec();
    out.extend_from_slice(suffix.as_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_calendar_dates() {
        let at = |sec| utc_stamp(Time { sec, nsec: 0 });
        assert_eq!(at(0), "19700101-000000");
        // 2026-11-25 23:15:00 UTC.
        assert_eq!(at(1_795_648_500), "20261125-231500");
        // A leap day, and the last second of a century year that is one.
        assert_eq!(at(951_782_400), "20000229-000000");
        assert_eq!(at(978_307_199), "20001231-235959");
        // Before the epoch.
        assert_eq!(at(-1), "19691231-235959");
    }

    #[test]
    fn conflict_names_count_up_and_fit() {
        let name = |n, attempt| {
            String::from_utf8(conflict_name(n, "box", "20261125-231500", attempt).unwrap()).unwrap()
        };
        assert_eq!(name(b"a.txt", 1), "a.txt.conflict-box-20261125-231500");
        assert_eq!(name(b"a.txt", 3), "a.txt.conflict-box-20261125-231500-3");
        assert!(conflict_name(b"a", "box", "x", 0).is_none());
        let long = "é".repeat(200);
        let cut = conflict_name(long.as_bytes(), "box", "20261125-231500", 12).unwrap();
        assert!(cut.len() <= NAME_MAX);
        assert!(std::str::from_utf8(&cut).is_ok(), "cut inside a character");
    }

    #[test]
    fn host_labels_are_safe_in_a_name() {
        assert_eq!(host_label(b"laptop.home"), "laptop.home");
        assert_eq!(host_label(b"a/b\0c d"), "a_b_c_d");
        assert_eq!(host_label(b""), "h");
        assert_eq!(host_label(b".."), "h..");
        assert_eq!(host_label(&[b'x'; 300]).len(), HOST_MAX);
    }
}
