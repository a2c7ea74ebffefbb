//! Update detection for one path on one side of a two-way sync: what the
//! side holds now against what its archive says it agreed on last time.
//!
//! The Unison paper's rule: a file is updated when its *contents* changed,
//! not when its metadata moved. A file touched, or copied over with the
//! same bytes, is no update (so a touch on one side and an edit on the
//! other propagates the edit instead of raising a conflict). Metadata can
//! only prove a file unchanged, never changed: when size, mtime, ctime,
//! inode and device all match the archive, the contents are taken as
//! unchanged (fast mode); otherwise [`detect`] answers
//! [`Detection::NeedsFingerprint`], the caller fingerprints the file and
//! asks again. Under `--checksum` every file is fingerprinted.
//!
//! Every file detection reports as created or changed therefore carries its
//! fingerprint, which reconciliation needs to see that two sides changed a
//! file the same way, and propagation to check what it transferred.

use accord_model::{Entry, Kind, Observed};

/// Permission bits a sync carries: all but setuid and setgid, which are
/// never synced (an owner on one host may be another person on the other).
pub const SYNCED_MODE_BITS: u32 = 0o1777;

/// The owner (and group) an archive records for an entry a sync made
/// without `--owner`: whoever made it owns it, which says nothing of the
/// other side's. Compared with nothing (no real owner has this id: it is
/// `(uid_t)-1`, which `chown` takes as "unchanged").
pub const UNKNOWN_OWNER: u32 = u32::MAX;

/// Which properties a sync keeps in agreement; the others are each host's
/// own and never compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncedProps {
    /// Permission bits ([`SYNCED_MODE_BITS`]), symlinks' excepted.
    pub perms: bool,
    /// Owner and group (`--owner`).
    pub owner: bool,
    /// Extended attributes of the user.* namespace, where both entries had
    /// them read.
    pub xattrs: bool,
    /// POSIX ACLs, where both entries had them read. With `xattrs`, what
    /// is compared is the list the scan read (it reads what these select).
    pub acls: bool,
    /// Regular files' modification times (`--times`). A directory's mtime
    /// is never compared: every change inside it moves it.
    pub times: bool,
}

impl Default for SyncedProps {
    fn default() -> Self {
        SyncedProps {
            perms: true,
            owner: false,
            xattrs: true,
            acls: true,
            times: false,
        }
    }
}

/// Options of update detection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetectOptions {
    /// `--checksum`: compare every file's fingerprint, whatever its
    /// metadata says.
    pub checksum: bool,
    pub props: SyncedProps,
}

/// What happened to one path on one side since the last agreement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// As archived (or absent from both).
    Unchanged,
    /// Contents and synced properties as archived, but the metadata the
    /// archive keeps moved (a touch, a file copied over with equal bytes).
    /// Not an update; the archive's entry is refreshed so that the next
    /// run need not fingerprint the file again.
    Touched,
    /// Not in the archive, there now.
    Created,
    /// In the archive, gone now.
    Deleted {
        was: Kind,
    },
    Changed(Changes),
}

/// What changed of an entry that is there before and after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Changes {
    /// The kind the archive recorded.
    pub was: Kind,
    /// Another kind now (a file became a directory, ...): the new entry
    /// replaces the old whole, so `contents` is set too, and `props` and
    /// `mtime` (which compare like with like) are not.
    pub kind: bool,
    /// Same kind, other contents: a file's bytes, a symlink's target, a
    /// device node's number.
    pub contents: bool,
    /// Permissions, owner or extended attributes, as [`SyncedProps`] selects.
    pub props: bool,
    /// A regular file's modification time, under [`SyncedProps::times`].
    pub mtime: bool,
}

/// The answer of [`detect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detection {
    Decided(Update),
    /// The current entry is a file whose metadata cannot decide: fingerprint
    /// it (set `entry.hash`) and ask again.
    NeedsFingerprint,
}

/// Compare this side's archived entry with what its scan found now.
pub fn detect(
    archived: Option<&Observed>,
    current: Option<&Observed>,
    options: &DetectOptions,
) -> Detection {
    match (archived, current) {
        (None, None) => Detection::Decided(Update::Unchanged),
        (None, Some(now)) if lacks_fingerprint(&now.entry) => Detection::NeedsFingerprint,
        (None, Some(_)) => Detection::Decided(Update::Created),
        (Some(was), None) => Detection::Decided(Update::Deleted {
            was: was.entry.kind,
        }),
        (Some(was), Some(now)) if was.entry.kind != now.entry.kind => kind_changed(was, now),
        (Some(was), Some(now)) => same_kind(was, now, options),
    }
}

fn lacks_fingerprint(entry: &Entry) -> bool {
    entry.kind == Kind::File && entry.hash.is_none()
}

fn kind_changed(was: &Observed, now: &Observed) -> Detection {
    if lacks_fingerprint(&now.entry) {
        return Detection::NeedsFingerprint;
    }
    Detection::Decided(Update::Changed(Changes {
        was: was.entry.kind,
        kind: true,
        contents: true,
        props: false,
        mtime: false,
    }))
}

fn same_kind(was: &Observed, now: &Observed, options: &DetectOptions) -> Detection {
    let Some(contents) = contents_changed(was, now, options.checksum) else {
        return Detection::NeedsFingerprint;
    };
    let changes = Changes {
        was: was.entry.kind,
        kind: false,
        contents,
        props: props_differ(&was.entry, &now.entry, &options.props)
            || xattrs_first_read(&was.entry, &now.entry, &options.props),
        mtime: mtime_differs(&was.entry, &now.entry, &options.props),
    };
    let update = if changes.contents || changes.props || changes.mtime {
        Update::Changed(changes)
    } else if recorded_metadata_moved(was, now) || xattrs_newly_read(&was.entry, &now.entry) {
        Update::Touched
    } else {
        Update::Unchanged
    };
    Detection::Decided(update)
}

/// Did the contents change? `None`: only a fingerprint can say.
fn contents_changed(was: &Observed, now: &Observed, checksum: bool) -> Option<bool> {
    let (old, new) = (&was.entry, &now.entry);
    match new.kind {
        Kind::File => file_contents_changed(was, now, checksum),
        Kind::Symlink => Some(old.link_target != new.link_target),
        Kind::CharDev | Kind::BlockDev => Some(old.rdev != new.rdev),
        Kind::Dir | Kind::Fifo | Kind::Socket => Some(false),
    }
}

fn file_contents_changed(was: &Observed, now: &Observed, checksum: bool) -> Option<bool> {
    if !checksum && metadata_vouches_for_contents(was, now) {
        return Some(false);
    }
    let fingerprint = now.entry.hash?;
    // An archived file without a fingerprint (no archive of ours holds one)
    // cannot be proved equal: counted as changed, which at worst makes a
    // conflict, never a lost change.
    Some(was.entry.hash != Some(fingerprint))
}

/// Every write moves the mtime or the size, and a write that sets the mtime
/// back still moves the ctime, which nobody can set; a file replaced by
/// another (a rename over it) has another inode. Only when all agree are
/// the contents taken as unchanged without reading them.
fn metadata_vouches_for_contents(was: &Observed, now: &Observed) -> bool {
    let (old, new) = (&was.entry, &now.entry);
    old.size == new.size
        && old.props.mtime == new.props.mtime
        && was.ctime == now.ctime
        && old.ino == new.ino
        && old.dev == new.dev
}

/// The metadata fast detection relies on moved: the archive's entry is
/// stale even though nothing the sync keeps changed.
fn recorded_metadata_moved(was: &Observed, now: &Observed) -> bool {
    !metadata_vouches_for_contents(was, now)
}

/// Extended attributes read now where the archive has none recorded (a
/// pair synced without them, or by an older version): a non-empty list
/// counts as changed, so it is carried over, agreed when the other side
/// holds the same, or a conflict, rather than recorded as agreed unseen.
fn xattrs_first_read(was: &Entry, now: &Entry, synced: &SyncedProps) -> bool {
    (synced.xattrs || synced.acls)
        && now.kind != Kind::Symlink
        && was.props.xattrs.is_none()
        && now
            .props
            .xattrs
            .as_ref()
            .is_some_and(|list| !list.is_empty())
}

/// A list of extended attributes read where the archive has none (an
/// empty one, else `xattrs_first_read` counts it as a change): recorded,
/// so that later runs need not read it again.
fn xattrs_newly_read(was: &Entry, now: &Entry) -> bool {
    was.props.xattrs.is_none() && now.props.xattrs.is_some()
}

/// Do two entries of one kind differ in the synced properties other than
/// the mtime (permissions, owner, extended attributes)?
pub fn props_differ(x: &Entry, y: &Entry, synced: &SyncedProps) -> bool {
    let (p, q) = (&x.props, &y.props);
    let has_mode = x.kind != Kind::Symlink;
    (synced.perms && has_mode && p.mode & SYNCED_MODE_BITS != q.mode & SYNCED_MODE_BITS)
        || (synced.owner
            && p.uid != UNKNOWN_OWNER
            && q.uid != UNKNOWN_OWNER
            && (p.uid != q.uid || p.gid != q.gid))
        || ((synced.xattrs || synced.acls)
            && has_mode
            && p.xattrs.is_some()
            && q.xattrs.is_some()
            && p.xattrs != q.xattrs)
}

/// Do two regular files differ in mtime, when mtimes are synced?
pub fn mtime_differs(x: &Entry, y: &Entry, synced: &SyncedProps) -> bool {
    synced.times && x.kind == Kind::File && y.kind == Kind::File && x.props.mtime != y.props.mtime
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_model::{Props, RelPath, Time};

    fn file(content: u8, stamp: i64) -> Observed {
        Observed {
            entry: Entry {
                path: RelPath::new(b"f").unwrap(),
                kind: Kind::File,
                size: 10,
                props: Props {
                    mode: 0o644,
                    uid: 1,
                    gid: 1,
                    mtime: Time {
                        sec: stamp,
                        nsec: 0,
                    },
                    xattrs: Some(vec![]),
                },
                dev: 1,
                ino: 7,
                nlink: 1,
                rdev: 0,
                blocks: 0,
                link_target: None,
                hash: Some([content; 32]),
            },
            ctime: Time {
                sec: stamp,
                nsec: 0,
            },
        }
    }

    fn without_fingerprint(mut observed: Observed) -> Observed {
        observed.entry.hash = None;
        observed
    }

    fn fast() -> DetectOptions {
        DetectOptions::default()
    }

    #[test]
    fn identical_metadata_is_unchanged_without_a_fingerprint() {
        let was = file(1, 100);
        let now = without_fingerprint(file(1, 100));
        assert_eq!(
            detect(Some(&was), Some(&now), &fast()),
            Detection::Decided(Update::Unchanged)
        );
    }

    #[test]
    fn a_touched_file_needs_its_fingerprint_and_then_is_no_update() {
        let was = file(1, 100);
        let touched = without_fingerprint(file(1, 200));
        assert_eq!(
            detect(Some(&was), Some(&touched), &fast()),
            Detection::NeedsFingerprint
        );
        assert_eq!(
            detect(Some(&was), Some(&file(1, 200)), &fast()),
            Detection::Decided(Update::Touched)
        );
    }

    #[test]
    fn a_list_of_attributes_read_where_none_was_recorded_is_recorded() {
        let mut was = file(1, 100);
        was.entry.props.xattrs = None;
        // None read: a change; an empty list: recorded, no change.
        let mut with = file(1, 100);
        with.entry.props.xattrs = Some(vec![(b"user.k".to_vec(), b"1".to_vec())]);
        let Detection::Decided(Update::Changed(changes)) = detect(Some(&was), Some(&with), &fast())
        else {
            panic!("a list read for the first time is a change")
        };
        assert!(changes.props && !changes.contents);
        assert_eq!(
            detect(Some(&was), Some(&file(1, 100)), &fast()),
            Detection::Decided(Update::Touched)
        );
        // Not read now either: nothing to record.
        assert_eq!(
            detect(Some(&was), Some(&was.clone()), &fast()),
            Detection::Decided(Update::Unchanged)
        );
    }

    #[test]
    fn a_touch_is_an_update_of_the_mtime_only_when_times_are_synced() {
        let options = DetectOptions {
            props: SyncedProps {
                times: true,
                ..SyncedProps::default()
            },
            ..fast()
        };
        let Detection::Decided(Update::Changed(changes)) =
            detect(Some(&file(1, 100)), Some(&file(1, 200)), &options)
        else {
            panic!("expected a change")
        };
        assert!(changes.mtime && !changes.contents && !changes.props);
    }

    #[test]
    fn an_edit_that_keeps_size_mtime_and_inode_is_caught_by_the_ctime() {
        let was = file(1, 100);
        let mut now = without_fingerprint(file(2, 100));
        now.ctime.sec = 101;
        assert_eq!(
            detect(Some(&was), Some(&now), &fast()),
            Detection::NeedsFingerprint
        );
        now.entry.hash = Some([2; 32]);
        let Detection::Decided(Update::Changed(changes)) = detect(Some(&was), Some(&now), &fast())
        else {
            panic!("expected a change")
        };
        assert!(changes.contents && !changes.kind);
    }

    #[test]
    fn checksum_mode_reads_even_identical_metadata() {
        let options = DetectOptions {
            checksum: true,
            ..fast()
        };
        let was = file(1, 100);
        let now = without_fingerprint(file(1, 100));
        assert_eq!(
            detect(Some(&was), Some(&now), &options),
            Detection::NeedsFingerprint
        );
        // Same metadata, other bytes (a clock set back, say): caught.
        assert!(matches!(
            detect(Some(&was), Some(&file(2, 100)), &options),
            Detection::Decided(Update::Changed(Changes { contents: true, .. }))
        ));
    }

    #[test]
    fn a_chmod_is_a_property_change_and_setuid_is_not_synced() {
        let was = file(1, 100);
        let mut now = file(1, 101);
        now.entry.props.mode = 0o600;
        assert!(matches!(
            detect(Some(&was), Some(&now), &fast()),
            Detection::Decided(Update::Changed(Changes {
                props: true,
                contents: false,
                ..
            }))
        ));
        now.entry.props.mode = 0o4644;
        assert_eq!(
            detect(Some(&was), Some(&now), &fast()),
            Detection::Decided(Update::Touched)
        );
    }

    #[test]
    fn creations_deletions_and_kind_changes() {
        let was = file(1, 100);
        assert_eq!(
            detect(None, Some(&without_fingerprint(file(1, 1))), &fast()),
            Detection::NeedsFingerprint
        );
        assert_eq!(
            detect(None, Some(&file(1, 1)), &fast()),
            Detection::Decided(Update::Created)
        );
        assert_eq!(
            detect(Some(&was), None, &fast()),
            Detection::Decided(Update::Deleted { was: Kind::File })
        );
        let mut dir = file(0, 100);
        dir.entry.kind = Kind::Dir;
        dir.entry.hash = None;
        assert_eq!(
            detect(Some(&was), Some(&dir), &fast()),
            Detection::Decided(Update::Changed(Changes {
                was: Kind::File,
                kind: true,
                contents: true,
                props: false,
                mtime: false,
            }))
        );
        assert_eq!(
            detect(None, None, &fast()),
            Detection::Decided(Update::Unchanged)
        );
    }
}
