//! The deletion guard of a two-way sync (safety rule 6 of the design), on a
//! whole plan before anything changes: a side that looks emptied while its
//! archive says it held entries (a mount that failed, a wiped disk) must
//! not have its "deletions" carried to the other side, and no side loses
//! more of its entries than `--max-delete` allows. A refused run changes
//! nothing; the caller asks, or in batch mode stops.
//!
//! The facts about roots themselves (one missing, one whose identity
//! changed) are the engine's to check before it scans.

use crate::reconcile::{Action, Side, SyncItem};
use crate::MaxDelete;
use std::fmt;

/// How many entries one side held, as the run found (roots excluded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SideCounts {
    /// Entries its archive recorded at the last agreement.
    pub archived: usize,
    /// Entries its scan found now.
    pub scanned: usize,
}

/// Why the guard stopped a sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncRefusal {
    /// `side` is empty although its archive recorded `archived` entries,
    /// and the plan would delete them on the other side.
    SideEmptied { side: Side, archived: usize },
    /// The plan would delete `would_delete` of `side`'s `entries`, more
    /// than the `limit` of `--max-delete`.
    TooManyDeletes {
        side: Side,
        would_delete: usize,
        entries: usize,
        limit: usize,
    },
}

impl fmt::Display for SyncRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncRefusal::SideEmptied { side, archived } => write!(
                f,
                "replica {side:?} is empty but held {archived} entries at the last sync; \
                 nothing was changed (is it mounted?)"
            ),
            SyncRefusal::TooManyDeletes {
                side,
                would_delete,
                entries,
                limit,
            } => write!(
                f,
                "the sync would delete {would_delete} of replica {side:?}'s {entries} entries, \
                 more than the limit of {limit} (--max-delete); nothing was changed"
            ),
        }
    }
}

/// Check a plan's deletions against what each side held.
pub fn check_deletions(
    items: &[SyncItem],
    a: SideCounts,
    b: SideCounts,
    max_delete: MaxDelete,
) -> Result<(), SyncRefusal> {
    let sides = [(Side::A, a), (Side::B, b)];
    for (side, counts) in sides {
        if counts.scanned == 0 && counts.archived > 0 && deletions_on(items, side.other()) > 0 {
            return Err(SyncRefusal::SideEmptied {
                side,
                archived: counts.archived,
            });
        }
    }
    for (side, counts) in sides {
        let would_delete = deletions_on(items, side);
        let limit = deletion_limit(max_delete, counts.scanned);
        if would_delete > limit {
            return Err(SyncRefusal::TooManyDeletes {
                side,
                would_delete,
                entries: counts.scanned,
                limit,
            });
        }
    }
    Ok(())
}

/// Entries the plan deletes on `side` (a directory's subtree is one item
/// per entry).
pub fn deletions_on(items: &[SyncItem], side: Side) -> usize {
    items
        .iter()
        .filter(|item| item.action == Action::Delete { on: side })
        .count()
}

fn deletion_limit(max_delete: MaxDelete, entries: usize) -> usize {
    match max_delete {
        MaxDelete::Count(count) => count,
        MaxDelete::Fraction(fraction) => (entries as f64 * fraction).floor() as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_model::RelPath;

    fn deletions(on: Side, count: usize) -> Vec<SyncItem> {
        (0..count)
            .map(|i| SyncItem {
                path: RelPath::new(format!("f{i}").as_bytes()).unwrap(),
                action: Action::Delete { on },
                overridden: None,
                a: None,
                b: None,
                moved: None,
                link: None,
            })
            .collect()
    }

    fn counts(archived: usize, scanned: usize) -> SideCounts {
        SideCounts { archived, scanned }
    }

    const HALF: MaxDelete = MaxDelete::Fraction(0.5);

    #[test]
    fn an_emptied_side_does_not_empty_the_other() {
        let items = deletions(Side::B, 10);
        assert_eq!(
            check_deletions(&items, counts(10, 0), counts(10, 10), MaxDelete::Count(100)),
            Err(SyncRefusal::SideEmptied {
                side: Side::A,
                archived: 10
            })
        );
        // Both empty, nothing deleted: nothing to refuse.
        assert_eq!(
            check_deletions(&[], counts(10, 0), counts(10, 0), HALF),
            Ok(())
        );
    }

    #[test]
    fn deletions_are_weighed_per_side() {
        let items = deletions(Side::A, 5);
        assert_eq!(
            check_deletions(&items, counts(10, 10), counts(5, 5), HALF),
            Ok(())
        );
        assert_eq!(
            check_deletions(&items, counts(9, 9), counts(20, 20), HALF),
            Err(SyncRefusal::TooManyDeletes {
                side: Side::A,
                would_delete: 5,
                entries: 9,
                limit: 4
            })
        );
        assert!(check_deletions(&items, counts(9, 9), counts(0, 0), MaxDelete::Count(5)).is_ok());
        let message = check_deletions(&items, counts(9, 9), counts(0, 0), MaxDelete::Count(4))
            .unwrap_err()
            .to_string();
        assert!(message.contains("--max-delete"), "{message}");
    }
}
