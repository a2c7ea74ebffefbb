//! `--dry-run`: the run goes as far as the plan (with the interactive
//! mode's edits) and changes nothing. Each side reads a scratch copy of its
//! archive (`accord_replica::side::scratch`), so that even what a real run
//! writes before propagating (an archive made for a first sync, emptied
//! when the other side's is lost) touches no archive of the user's. A
//! remote replica's host makes its own scratch copy: its session is opened
//! to inspect the root, not to write it.

use accord_plan::{Action, SyncItem};

/// What the plan would change: every item but agreements, conflicts and
/// paths left alone, as the changes a real run would report.
pub(crate) fn would_propagate(items: &[SyncItem]) -> Vec<crate::Propagated> {
    items
        .iter()
        .filter(|item| {
            !matches!(
                item.action,
                Action::Agree | Action::Nothing | Action::Conflict(_) | Action::MovedWith { .. }
            )
        })
        .map(|item| crate::Propagated {
            path: item.path.clone(),
            action: item.action,
            from: match (&item.moved, item.action) {
                (Some(moved), Action::Rename { .. }) => Some(moved.from.clone()),
                _ => None,
            },
            linked_to: None,
            kept_as: None,
            merged: false,
        })
        .collect()
}
