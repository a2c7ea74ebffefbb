//! What the tests of a set's reconciliation (`replica_set_tests.rs`) and
//! of its plan edited by a person (`replica_set_edit_tests.rs`) build
//! their cases from: entries, vectors and offers as a replica's scan and
//! archive give them.

use crate::detect::{Changes, SyncedProps, Update};
use crate::reconcile::{same_contents, same_props};
use crate::replica_set::{same_version, Offer, SetOptions};
use crate::version_vector::VersionVector;
use accord_model::{Entry, Kind, Props, RelPath, Time};
use std::sync::Arc;

pub(crate) const SYNCED: SyncedProps = SyncedProps {
    perms: true,
    owner: false,
    xattrs: true,
    acls: true,
    times: false,
};

pub(crate) fn path(name: &str) -> RelPath {
    RelPath::new(name.as_bytes()).unwrap()
}

/// A file whose contents (and mtime) are `value`.
pub(crate) fn file(at: &str, value: u8) -> Arc<Entry> {
    Arc::new(Entry {
        path: path(at),
        kind: Kind::File,
        size: 1,
        props: Props {
            mode: 0o644,
            mtime: Time {
                sec: i64::from(value),
                nsec: 0,
            },
            ..Props::default()
        },
        dev: 0,
        ino: u64::from(value),
        nlink: 1,
        rdev: 0,
        blocks: 0,
        link_target: None,
        hash: Some([value; 32]),
    })
}

pub(crate) fn dir(at: &str) -> Arc<Entry> {
    let mut entry = (*file(at, 0)).clone();
    entry.kind = Kind::Dir;
    entry.hash = None;
    entry.props.mode = 0o755;
    Arc::new(entry)
}

pub(crate) fn vector(counts: &[(u8, u64)]) -> VersionVector {
    VersionVector::from_counts(counts.to_vec()).unwrap()
}

/// Update detection as a replica's scan answers it, for the cases here.
pub(crate) fn update_of(recorded: Option<&Entry>, now: Option<&Entry>) -> Update {
    match (recorded, now) {
        (None, None) => Update::Unchanged,
        (None, Some(_)) => Update::Created,
        (Some(was), None) => Update::Deleted { was: was.kind },
        (Some(was), Some(now)) if same_version(Some(was), Some(now), &SYNCED) => Update::Unchanged,
        (Some(was), Some(now)) => Update::Changed(Changes {
            was: was.kind,
            kind: was.kind != now.kind,
            contents: !same_contents(Some(was), Some(now)),
            props: !same_props(was, now, &SYNCED),
            mtime: false,
        }),
    }
}

/// An offer of `replica`, whose archive recorded `recorded` with `vector`.
pub(crate) fn offer(
    replica: usize,
    recorded: Option<Arc<Entry>>,
    vector: VersionVector,
    now: Option<Arc<Entry>>,
) -> Offer {
    Offer {
        replica,
        update: update_of(recorded.as_deref(), now.as_deref()),
        now,
        recorded: vector,
        base: recorded,
        change_count: 100,
    }
}

pub(crate) fn options(set_size: usize) -> SetOptions {
    SetOptions {
        set_size,
        props: SYNCED,
        prefer: None,
        force: None,
        keep_both: false,
    }
}
