//! Pure planning: from a source scan, a destination scan and options to a
//! mirror plan; and for a two-way sync, update detection against an archive
//! ([`detect`]) and reconciliation of both sides' updates into a sync plan
//! ([`reconcile`]). No I/O, no clocks, no globals.
//!
//! A [`MirrorPlan`] is data, grouped in the phases the engine runs, each phase
//! a list of independent items:
//! 1. `cleanup`: stale temp files of an interrupted run;
//! 2. `deletes`: extra entries (deepest first) and entries whose kind changes
//!    from or to a directory;
//! 3. `mkdirs`: new directories (parents first);
//! 4. `files`: everything that is not a directory: new, changed contents,
//!    changed metadata only;
//! 5. `links`: hard links to a group's first path (after phase 4);
//! 6. `dir_meta`: directory properties, deepest first (after their subtree).

pub mod detect;
mod dirs;
pub mod keep_both;
mod links;
mod packed;
pub mod plan_edit;
pub mod reconcile;
mod renames;
pub mod replica_set;
pub mod replica_set_edit;
#[cfg(test)]
mod replica_set_fixtures;
pub mod sync_guard;
pub mod version_vector;

pub use detect::{detect, Changes, DetectOptions, Detection, SyncedProps, Update, UNKNOWN_OWNER};
pub use dirs::{mirror_plan, DirInput, DirPart, MirrorPlanner};
pub use keep_both::{conflict_name, host_label, keep_both_winner, utc_stamp};
pub use links::plan_links;
pub use packed::DirMetaList;
pub use plan_edit::{winner, PlanEdit, Refused as EditRefused};
pub use reconcile::{
    choice_covers_subtree, reconcile_path, reconcile_tree, Action, Choice, ConflictReason, LinkTo,
    Moved, OutOfOrder, Override, PathUpdate, Policy, Preference, ReconcileOptions, Side, SideState,
    SyncItem,
};
pub use renames::pair_renames;
pub use replica_set::{
    reconcile_set, settle_path, Offer, Outcome, PathOffers, Receive, SetConflict, SetInputError,
    SetItem, SetOptions, SetPolicy, SetPreference, Settled, Version,
};
pub use replica_set_edit::{SetChoice, SetEditRefused, SetPlanEdit};
pub use sync_guard::{check_deletions, SideCounts, SyncRefusal};
pub use version_vector::{VectorError, VersionVector, MAX_REPLICAS};

use accord_model::{Entry, Expect, Kind, RelPath};
use std::borrow::Cow;

/// How many deletions the guard allows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MaxDelete {
    /// At most this many entries.
    Count(usize),
    /// At most this fraction of the destination's entries (0.0..=1.0).
    Fraction(f64),
}

/// Which kinds a mirror handles (the others are ignored on both sides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds {
    pub symlinks: bool,
    pub specials: bool,
    pub devices: bool,
}

impl Default for Kinds {
    fn default() -> Self {
        Kinds {
            symlinks: true,
            specials: true,
            devices: true,
        }
    }
}

impl Kinds {
    pub fn allows(&self, k: Kind) -> bool {
        match k {
            Kind::File | Kind::Dir => true,
            Kind::Symlink => self.symlinks,
            Kind::Fifo | Kind::Socket => self.specials,
            Kind::CharDev | Kind::BlockDev => self.devices,
        }
    }
}

/// Options of a mirror plan.
#[derive(Clone, Debug)]
pub struct MirrorOptions {
    /// Delete extra entries in the destination (false: `--keep-extra`).
    pub delete: bool,
    pub max_delete: MaxDelete,
    /// Override the deletion guard.
    pub force: bool,
    /// Compare contents by fingerprint instead of size + mtime.
    pub checksum: bool,
    pub perms: bool,
    pub owner: bool,
    pub times: bool,
    /// Compare extended attributes / ACLs (as scanned).
    pub xattrs: bool,
    pub hard_links: bool,
    pub kinds: Kinds,
    /// How changed contents reach the destination.
    pub transfer: TransferOptions,
    /// Which source files are written at all (rsync's `--size-only`,
    /// `--ignore-existing`, `--min-size`, `--max-size`).
    pub select: Selection,
}

/// Which source files a mirror writes, beyond "those that differ". The
/// defaults write every file that differs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// A file of the same size is up to date whatever its mtime
    /// (`--size-only`); its properties are still brought over.
    pub size_only: bool,
    /// A destination entry that exists is left alone, contents and
    /// properties (`--ignore-existing`).
    pub ignore_existing: bool,
    /// Source files smaller than this are not written (`--min-size`).
    pub min_size: Option<u64>,
    /// Source files larger than this are not written (`--max-size`).
    pub max_size: Option<u64>,
}

impl Selection {
    /// A source file whose size is outside `--min-size`/`--max-size`:
    /// neither written nor deleted in the destination (as rsync does).
    pub fn size_skipped(&self, size: u64) -> bool {
        self.min_size.is_some_and(|m| size < m) || self.max_size.is_some_and(|m| size > m)
    }
}

/// `--delta auto|always|never`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaMode {
    /// A delta when the file is big enough to be worth it.
    Auto,
    Always,
    Never,
}

/// The user's choices of transfer method (the plan applies them per file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferOptions {
    pub delta: DeltaMode,
    /// `--inplace`: rebuild changed files in their own storage.
    pub inplace: bool,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            delta: DeltaMode::Auto,
            inplace: false,
        }
    }
}

/// Below this size `--delta auto` copies the whole file: the signature and
/// the matching cost more than the bytes they would save.
pub const DELTA_AUTO_MIN_SIZE: u64 = 64 * 1024;

/// Facts found during the run that the plan depends on (the user's choices
/// are in [`MirrorOptions`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Some source directory could not be read: deletions are suspended.
    pub source_incomplete: bool,
    /// The source root is not the one seen last time (device or inode).
    pub source_root_changed: bool,
    /// The plan sees one directory of the tree (a task run's): other names
    /// of a destination inode may lie outside it, unseen.
    pub one_directory: bool,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        MirrorOptions {
            delete: true,
            max_delete: MaxDelete::Fraction(0.5),
            force: false,
            checksum: false,
            perms: true,
            owner: true,
            times: true,
            xattrs: true,
            hard_links: true,
            kinds: Kinds::default(),
            transfer: TransferOptions::default(),
            select: Selection::default(),
        }
    }
}

/// What happens to one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create a directory (its properties follow in `dir_meta`).
    Mkdir,
    /// Write a regular file's contents (new or changed), by this method.
    Write(Method),
    /// Create a symlink, fifo, socket or device node (new or changed).
    Create,
    /// Make this path a hard link to `leader` (already in place).
    Link { leader: RelPath },
    /// Only the properties differ.
    Meta,
    /// Remove from the destination.
    Delete,
    /// Remove a stale temp file of an interrupted run.
    Cleanup,
    /// Set a directory's properties after its subtree.
    DirMeta,
}

/// How a file's new contents reach the destination, decided by the plan so
/// that a dry run shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The whole file is copied into a temp file that replaces the target.
    Whole,
    /// The old version is the basis of a delta written into a temp file that
    /// replaces the target (the engine falls back to `Whole` when the delta
    /// turns out to save nothing, under `--delta auto`).
    Delta,
    /// The old version is rebuilt in its own storage (`--inplace`).
    InPlace,
    /// What arrived of this file in an interrupted transfer (its partial
    /// file, see `accord_model::PARTIAL_PREFIX`) is the basis of a delta
    /// written into a temp file that replaces the target.
    Resume,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Whole => "whole",
            Method::Delta => "delta",
            Method::InPlace => "inplace",
            Method::Resume => "resume",
        }
    }
}

/// What a person is told happened (or would happen) to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Created,
    Updated,
    Linked,
    Relinked,
    Metadata,
    Deleted,
}

impl Change {
    pub fn name(self) -> &'static str {
        match self {
            Change::Created => "created",
            Change::Updated => "updated",
            Change::Linked => "linked",
            Change::Relinked => "relinked",
            Change::Metadata => "metadata",
            Change::Deleted => "deleted",
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One planned change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub op: Op,
    pub path: RelPath,
    /// The source entry (absent for deletions). Boxed, as the other: a
    /// plan holds an item per change, and an initial copy's items have no
    /// destination entry, which inline would still take its full size.
    pub src: Option<Box<Entry>>,
    /// The destination entry as scanned (absent for new paths).
    pub dst: Option<Box<Entry>>,
    /// For `DirMeta`: the properties differ (not just a moved mtime).
    pub props_differ: bool,
}

impl Item {
    /// What a person is told about this item (`-i`), or `None` for items
    /// that are bookkeeping only.
    pub fn change(&self) -> Option<Change> {
        match self.op {
            Op::Mkdir => Some(Change::Created),
            Op::Write(_) | Op::Create => Some(if self.dst.is_some() {
                Change::Updated
            } else {
                Change::Created
            }),
            Op::Link { .. } => Some(if self.dst.is_some() {
                Change::Relinked
            } else {
                Change::Linked
            }),
            Op::Meta => Some(Change::Metadata),
            Op::Delete => Some(Change::Deleted),
            Op::Cleanup => None,
            Op::DirMeta => {
                if self.dst.is_some() && self.props_differ {
                    Some(Change::Metadata)
                } else {
                    None
                }
            }
        }
    }

    /// What the destination must still hold at this path when the item is
    /// carried out (safety rule 3).
    pub fn expect_dst(&self) -> Expect {
        match (&self.dst, &self.op) {
            (Some(d), _) => Expect::entry(d),
            // A directory made earlier in this run.
            (None, Op::DirMeta) => Expect::Made(Kind::Dir),
            (None, _) => Expect::Absent,
        }
    }

    /// What the source must still hold at this path (safety rule 3).
    pub fn expect_src(&self) -> Expect {
        Expect::of(self.src.as_deref())
    }
}

/// Why the deletion guard stopped the run.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// The source is empty but the destination is not.
    SourceEmpty { dst_entries: usize },
    /// More deletions than allowed.
    TooManyDeletes {
        would_delete: usize,
        dst_entries: usize,
        limit: usize,
    },
    /// The source root is a different file system root than last time.
    SourceRootChanged { would_delete: usize },
}

impl std::error::Error for Refusal {}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::SourceEmpty { dst_entries } => write!(
                f,
                "the source is empty but the destination has {dst_entries} entries; \
                 refusing to delete them all (use --force to do it anyway, or --keep-extra)"
            ),
            Refusal::TooManyDeletes {
                would_delete,
                dst_entries,
                limit,
            } => write!(
                f,
                "the mirror would delete {would_delete} of the destination's {dst_entries} \
                 entries, more than the limit of {limit} (--max-delete); nothing was changed \
                 (use --force or a higher --max-delete)"
            ),
            Refusal::SourceRootChanged { would_delete } => write!(
                f,
                "the source is a different file system root than last time and the mirror \
                 would delete {would_delete} entries; nothing was changed (use --force)"
            ),
        }
    }
}

/// Counts of a plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Source entries (the root excluded).
    pub entries_total: usize,
    /// Source regular files.
    pub files_total: usize,
    /// Bytes in source regular files.
    pub bytes_total: u64,
    /// Regular files whose contents are written.
    pub files_to_write: usize,
    /// Bytes of the files whose contents are written.
    pub bytes_to_write: u64,
    pub deletes: usize,
    /// Set when extra entries are kept because deletions are off or suspended.
    pub extras_kept: usize,
}

/// A mirror plan: independent items in phases (see the crate docs).
#[derive(Clone, Debug, Default)]
pub struct MirrorPlan {
    pub cleanup: Vec<Item>,
    pub deletes: Vec<Item>,
    pub mkdirs: Vec<Item>,
    pub files: Vec<Item>,
    pub links: Vec<Item>,
    pub dir_meta: DirMetaList,
    pub summary: Summary,
}

impl MirrorPlan {
    /// All items in execution order (the directories' properties unpacked
    /// as they are reached).
    pub fn items(&self) -> impl Iterator<Item = Cow<'_, Item>> {
        self.cleanup
            .iter()
            .chain(&self.deletes)
            .chain(&self.mkdirs)
            .chain(&self.files)
            .chain(&self.links)
            .map(Cow::Borrowed)
            .chain(self.dir_meta.iter().map(Cow::Owned))
    }

    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        self.items().next().is_none()
    }
}

pub(crate) fn props_differ(s: &Entry, d: &Entry, o: &MirrorOptions) -> bool {
    let (sp, dp) = (&s.props, &d.props);
    (o.perms && s.kind != Kind::Symlink && sp.mode != dp.mode)
        || (o.owner && (sp.uid != dp.uid || sp.gid != dp.gid))
        || (o.times && sp.mtime != dp.mtime)
        || (o.xattrs
            && s.kind != Kind::Symlink
            && sp.xattrs.is_some()
            && dp.xattrs.is_some()
            && sp.xattrs != dp.xattrs)
}

pub(crate) fn contents_differ(s: &Entry, d: &Entry, o: &MirrorOptions) -> bool {
    if s.size != d.size {
        return true;
    }
    if o.select.size_only {
        return false;
    }
    if o.checksum {
        match (s.hash, d.hash) {
            (Some(a), Some(b)) => a != b,
            _ => true,
        }
    } else {
        s.props.mtime != d.props.mtime
    }
}

/// How a file's new contents are written over `old` (the destination's
/// entry at the same path, if any).
pub(crate) fn method(new: &Entry, old: Option<&Entry>, t: &TransferOptions) -> Method {
    let Some(old) = old.filter(|d| d.kind == Kind::File && d.size > 0) else {
        return Method::Whole;
    };
    // Never rewrite in place an inode with other names: they may be outside
    // the source's group (even excluded), or be left half-updated where no
    // recovery rename can reach them. Those go temp + rename.
    if t.inplace && old.nlink <= 1 {
        return Method::InPlace;
    }
    match t.delta {
        DeltaMode::Never => Method::Whole,
        DeltaMode::Auto if new.size < DELTA_AUTO_MIN_SIZE => Method::Whole,
        _ => Method::Delta,
    }
}

pub(crate) type Pair<'a> = (Option<&'a Entry>, Option<&'a Entry>);

/// Both lists merged into pairs of entries with equal paths; `None` if
/// either list is not strictly sorted by path. The order is checked here,
/// where the paths are read anyway: a separate pass over 400,000 paths
/// (each its own allocation) cost half the planning time.
pub(crate) fn join_sorted<'a>(src: &[&'a Entry], dst: &[&'a Entry]) -> Option<Vec<Pair<'a>>> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let mut out = Vec::with_capacity(src.len().max(dst.len()));
    let (mut i, mut j) = (0, 0);
    while i < src.len() || j < dst.len() {
        let ord = match (src.get(i), dst.get(j)) {
            (Some(s), Some(d)) => s.path.cmp(&d.path),
            (Some(_), None) => Less,
            _ => Greater,
        };
        let (take_s, take_d) = match ord {
            Less => (true, false),
            Greater => (false, true),
            Equal => (true, true),
        };
        if take_s && i > 0 && src[i - 1].path >= src[i].path {
            return None;
        }
        if take_d && j > 0 && dst[j - 1].path >= dst[j].path {
            return None;
        }
        out.push((take_s.then(|| src[i]), take_d.then(|| dst[j])));
        i += take_s as usize;
        j += take_d as usize;
    }
    Some(out)
}

pub(crate) fn multi_linked(e: &Entry) -> bool {
    e.kind == Kind::File && e.nlink > 1
}

pub(crate) fn item(op: Op, s: Option<&Entry>, d: Option<&Entry>) -> Item {
    let path = s.or(d).map(|e| e.path.clone()).unwrap_or_default();
    Item {
        op,
        path,
        src: s.map(|e| Box::new(e.clone())),
        dst: d.map(|e| Box::new(e.clone())),
        props_differ: false,
    }
}
