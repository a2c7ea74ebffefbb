//! `sync()`: a two-way sync of two replicas with the Unison paper's
//! semantics, over the same `Replica` seam as the mirror. The steps, each a
//! function returning a value or a typed reason to stop: lock both
//! replicas and open both sides' archives (`open_archives`), walk both
//! trees against them and detect each side's updates (`sync/scan.rs`),
//! reconcile (`accord_plan::reconcile_tree`), check the deletion guard,
//! then propagate, recording each path in both archives only after it
//! succeeded on both sides (`sync/propagate/`).
//!
//! Each side's archive lives on that side's host (the replica crate's side/): a
//! remote replica's is kept by its `accord server`.

pub(crate) mod case;
pub(crate) mod dry_run;
mod errors;
pub(crate) mod ignore;
pub(crate) mod merge_program;
pub(crate) mod propagate;
pub(crate) mod scan;

use crate::sync::propagate::propagate;
use crate::sync::scan::{scan_pair, ScanStop, Scanned};
use accord_model::RelPath;
use accord_plan::{
    check_deletions, reconcile_tree, ConflictReason, DetectOptions, MaxDelete, PlanEdit,
    Preference, ReconcileOptions, Side, SyncItem, SyncRefusal, SyncedProps,
};
use accord_replica::LocalReplica;
use accord_replica::Replica;
use accord_replica::{SideCause, SideFailure, SideOptions, SideSession};
pub(crate) use errors::io_words;
#[cfg(test)]
use errors::words_only;
pub use errors::{SyncError, SyncFailure, SyncFatal};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Everything a sync run is told (user choices only).
#[derive(Clone, Debug)]
pub struct SyncConfig {
    /// `--checksum`: fingerprint every file instead of trusting metadata.
    pub checksum: bool,
    /// `--times`: keep regular files' mtimes in agreement.
    pub times: bool,
    /// `--prefer`: how conflicts are resolved (None: left alone).
    pub prefer: Option<Preference>,
    /// `--force`: this side wins everywhere this run.
    pub force: Option<Side>,
    pub max_delete: MaxDelete,
    /// Propagate a path deleted on one side and an equal one created there
    /// as a rename on the other side (`--no-renames`: as a deletion and a
    /// copy, as Unison does).
    pub renames: bool,
    /// Keep hard-link groups groups: a copied name of a group is made on
    /// the other side as a link to another name of it (`--no-hard-links`:
    /// every name copied as a separate file, as Unison does).
    pub hard_links: bool,
    /// Flush new contents to disk before they are renamed into place.
    pub fsync: bool,
    /// `--keep-both`: a conflict between two changed non-directories keeps
    /// both versions, the loser's as `NAME.conflict-HOST-DATE`.
    pub keep_both: bool,
    /// `--owner`: keep owners and groups in agreement (by number; giving
    /// a file to another user needs root).
    pub owner: bool,
    /// Keep the user.* extended attributes in agreement (`--no-xattrs`:
    /// not compared, not copied).
    pub xattrs: bool,
    /// Keep POSIX ACLs in agreement (`--no-acls`).
    pub acls: bool,
    /// `--backup`: the newest this many versions a sync overwrote or
    /// deleted at a path are kept in `.accord-backup/` on that side
    /// (`--max-backups`); `None`: no backups.
    pub backups: Option<u32>,
    /// What is left out of the sync on both sides (`sync/ignore.rs and the replica crate's side/rules.rs`).
    pub rules: crate::SyncRules,
    /// `--merge CMD`: conflicts between two regular files are given to
    /// this program, run on this host (`sync/merge_program.rs`).
    pub merge: Option<crate::MergeProgram>,
    /// `--ignorecase`: match names by their case-folded form (`Some(true)`),
    /// exactly (`Some(false)`), or as detected: folded when either root is
    /// case-insensitive (`None`; `sync/case/mod.rs`).
    pub ignorecase: Option<bool>,
    /// Where this host keeps the archives (a remote replica's host
    /// chooses its own).
    pub state_dir: PathBuf,
    /// `--dry-run`: make the plan (and let the interactive mode edit it),
    /// report what would change, change nothing, archives included
    /// (`sync/dry_run.rs`). A remote replica must be connected to inspect
    /// its root (its host then reads a scratch copy of its archive).
    pub dry_run: bool,
}

impl SyncConfig {
    pub fn new(state_dir: PathBuf) -> SyncConfig {
        SyncConfig {
            checksum: false,
            times: false,
            prefer: None,
            force: None,
            max_delete: MaxDelete::Fraction(0.5),
            renames: true,
            hard_links: true,
            fsync: true,
            keep_both: false,
            owner: false,
            xattrs: true,
            acls: true,
            backups: None,
            rules: crate::SyncRules::default(),
            merge: None,
            ignorecase: None,
            state_dir,
            dry_run: false,
        }
    }

    /// The properties kept in agreement: permissions (never setuid or
    /// setgid), user.* extended attributes and ACLs unless switched off,
    /// owners under `--owner` and mtimes under `--times`.
    pub(crate) fn synced_props(&self) -> SyncedProps {
        SyncedProps {
            perms: true,
            owner: self.owner,
            xattrs: self.xattrs,
            acls: self.acls,
            times: self.times,
        }
    }

    pub(crate) fn detect_options(&self) -> DetectOptions {
        DetectOptions {
            checksum: self.checksum,
            props: self.synced_props(),
        }
    }

    /// `can_rename`: both replicas can carry out renames.
    fn reconcile_options(&self, can_rename: bool) -> ReconcileOptions {
        ReconcileOptions {
            props: self.synced_props(),
            prefer: self.prefer,
            force: self.force,
            renames: self.renames && can_rename,
            hard_links: self.hard_links,
            keep_both: self.keep_both,
        }
    }
}

/// The interactive mode's edit of a plan, with the merge program at hand.
pub type EditPlanMerging<'a> = dyn Fn(&mut PlanEdit, &dyn crate::MergeNow) + Sync + 'a;

/// Calls the caller may want between the steps of a run.
#[derive(Clone, Copy, Default)]
pub struct SyncHooks<'a> {
    /// Called once the plan is made and checked, before any change. Tests
    /// use it to change a file between detection and propagation.
    pub before_propagating: Option<&'a (dyn Fn() + Sync)>,
    /// Called with the plan once it is made and has passed the deletion
    /// guard, before `before_propagating` and any change: a person may
    /// resolve conflicts, turn propagations around or skip paths (the
    /// interactive mode). The guard checks the edited plan again.
    pub edit_plan: Option<&'a (dyn Fn(&mut PlanEdit) + Sync)>,
    /// `edit_plan` with a way to run the merge program on a conflict at
    /// once (`--merge`; without it every merge says so), its result kept
    /// for propagation: the interactive mode's 'm'.
    pub edit_plan_merging: Option<&'a EditPlanMerging<'a>>,
    /// Called once every file is in place, before the copies planned as
    /// hard links are made (only when there are some). Tests use it to stop
    /// a run between a group's leader and its links.
    pub before_links: Option<&'a (dyn Fn() + Sync)>,
    /// Counters for a progress display: the files to copy and their bytes
    /// once the plan is final, then those that arrived.
    pub progress: Option<&'a crate::Progress>,
    /// With `SyncConfig::merge`: the conflicts to give to the program
    /// (the interactive mode's choices); `None`: every one it can merge.
    pub merge_chosen: Option<&'a (dyn Fn(&RelPath) -> bool + Sync)>,
}

/// One change made to a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Propagated {
    pub path: RelPath,
    /// What was done (`Copy`, `Delete`, `CopyProps`, `Rename`, ...), with
    /// its sides.
    pub action: accord_plan::Action,
    /// For a rename: the path it was renamed from.
    pub from: Option<RelPath>,
    /// For a copy made as a hard link: the name it was linked to (on the
    /// receiving side), which holds the same contents.
    pub linked_to: Option<RelPath>,
    /// For `KeepBoth`: where the losing version is kept (on both sides).
    pub kept_as: Option<RelPath>,
    /// A conflict resolved by `--merge`'s program: both sides now hold
    /// its result (`action` is the conflict it was).
    pub merged: bool,
}

/// What a sync run did.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Changes made, in path order.
    pub propagated: Vec<Propagated>,
    /// Conflicts left alone, in path order.
    pub conflicts: Vec<(RelPath, ConflictReason)>,
    /// Conflicts `--merge` was to merge and did not, with why (the
    /// program's exit status and first lines of output, ...).
    pub not_merged: Vec<(RelPath, String)>,
    /// Paths that failed; the run went on without them.
    pub errors: Vec<SyncFailure>,
    /// Paths where both sides already agreed and only the archives learnt it.
    pub agreed: u64,
    /// The archives were new, lost or damaged: the run was reconciled as if
    /// both replicas had been empty at the last sync.
    pub archives_lost: bool,
    pub refusal: Option<SyncRefusal>,
    pub fatal: Option<SyncFatal>,
    pub elapsed_s: f64,
    /// Names were matched by their case-folded form.
    pub ignore_case: bool,
    /// Each root (A, B) was found case-insensitive by its probe.
    pub case_insensitive: [bool; 2],
    /// A dry run: `propagated` is what a real run would have changed;
    /// nothing was.
    pub dry_run: bool,
}

impl SyncReport {
    /// Everything agreed: no conflicts, no failures, nothing stopped.
    pub fn all_agreed(&self) -> bool {
        self.conflicts.is_empty()
            && self.errors.is_empty()
            && self.fatal.is_none()
            && self.refusal.is_none()
    }
}

/// Sync two local directories.
pub fn sync_local(a: &Path, b: &Path, cfg: &SyncConfig, hooks: &SyncHooks) -> SyncReport {
    let start = Instant::now();
    // One root inside the other would copy itself into itself, one level
    // deeper on every run.
    let opened = match nested(a, b) {
        Some(why) => Err(SyncFatal::Nested(why)),
        None => open_local(a).and_then(|ra| Ok((ra, open_local(b)?))),
    };
    let mut report = match opened {
        Ok((ra, rb)) => sync(&ra, &rb, cfg, hooks),
        Err(fatal) => SyncReport {
            fatal: Some(fatal),
            ..SyncReport::default()
        },
    };
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

/// Sync a local directory with another replica (a remote one): `local_is_a`
/// says which side the local one is.
pub fn sync_with_local(
    local: &Path,
    other: &dyn Replica,
    local_is_a: bool,
    cfg: &SyncConfig,
    hooks: &SyncHooks,
) -> SyncReport {
    let start = Instant::now();
    let mut report = match open_local(local) {
        Ok(local) if local_is_a => sync(&local, other, cfg, hooks),
        Ok(local) => sync(other, &local, cfg, hooks),
        Err(fatal) => SyncReport {
            fatal: Some(fatal),
            ..SyncReport::default()
        },
    };
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

/// Is one root inside the other, by canonical path? (Through a bind
/// mount it is not seen here.)
fn nested(a: &Path, b: &Path) -> Option<String> {
    let (a, b) = (accord_fsys::canonical(a), accord_fsys::canonical(b));
    let inside = |inner: &Path, outer: &Path| inner != outer && inner.starts_with(outer);
    (inside(&a, &b) || inside(&b, &a)).then(|| {
        format!(
            "{} and {} lie one inside the other; nothing was changed",
            a.display(),
            b.display()
        )
    })
}

/// A root must exist: a missing one is never "everything was deleted".
fn open_local(path: &Path) -> Result<LocalReplica, SyncFatal> {
    LocalReplica::open(path).map_err(|source| SyncFatal::OpenRoot {
        path: path.to_path_buf(),
        source,
    })
}

/// Sync two replicas.
pub fn sync(a: &dyn Replica, b: &dyn Replica, cfg: &SyncConfig, hooks: &SyncHooks) -> SyncReport {
    let start = Instant::now();
    let mut report = SyncReport {
        dry_run: cfg.dry_run,
        ..SyncReport::default()
    };
    if let Err(fatal) = run(a, b, cfg, hooks, &mut report) {
        report.fatal = Some(fatal);
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

fn run(
    a: &dyn Replica,
    b: &dyn Replica,
    cfg: &SyncConfig,
    hooks: &SyncHooks,
    report: &mut SyncReport,
) -> Result<(), SyncFatal> {
    let replicas = [a, b];
    let names = [a.describe(), b.describe()];
    let identities = identities_opening_ahead(replicas, cfg)?;
    let same_inode =
        a.local_root().is_some() && b.local_root().is_some() && a.identity() == b.identity();
    if identities[0] == identities[1] || same_inode {
        return Err(SyncFatal::SameRoot);
    }
    lock_both(replicas, &identities)?;
    // Copied under both locks: no other run writes them meanwhile.
    let [a_id, b_id] = [identities[0].as_slice(), identities[1].as_slice()];
    let scratch = dry_run_scratch([(a, a_id, b_id), (b, b_id, a_id)], cfg)?;
    let archive_dir = scratch
        .as_ref()
        .map_or(cfg.state_dir.as_path(), |s| s.dir());
    // Each root's case is probed while the archives open: over a link,
    // their round trips overlap.
    let (case, sides) = std::thread::scope(|scope| {
        let probe = scope.spawn(|| crate::sync::case::settle(replicas, cfg.ignorecase));
        let sides = open_sides(replicas, &identities, archive_dir).and_then(|mut sides| {
            crate::sync::ignore::set_rules_of_both(&mut sides, &cfg.rules, &names)?;
            prefetch_scans(&mut sides, replicas, cfg);
            Ok(sides)
        });
        (probe.join().expect("the probe does not panic"), sides)
    });
    let case = settle_case(case, report)?;
    let mut sides = sides?;
    let lost = sides.iter().any(|side| side.created());
    if lost {
        forget_both(&mut sides, &names)?;
    }
    let mut scanned = scan_with_archives(&mut sides, replicas, case, &names, cfg, lost)?;
    // Never part of the tree, even where a side (an older server) says so.
    scanned
        .updates
        .retain(|update| !crate::sync::propagate::in_backup_dir(&update.path));
    report.archives_lost = scanned.archives_lost;
    let mut options = cfg.reconcile_options(a.can_rename() && b.can_rename());
    let mut items =
        reconcile_tree(&scanned.updates, &options).expect("the scan lists paths in RelPath order");
    if options.renames && moves_unread_paths(&items, &scanned.failures) {
        // A tree with a path this run could not read is not known whole:
        // moving it could carry that path along where the plan never saw it.
        options.renames = false;
        items = reconcile_tree(&scanned.updates, &options).expect("as above");
    }
    if options.renames && scanned.case.as_ref().is_some_and(|c| c.any_difference) {
        // A rename's records move a subtree by path: not where a side
        // spells a path otherwise.
        options.renames = false;
        items = reconcile_tree(&scanned.updates, &options).expect("as above");
    }
    if let Err(refusal) = guard(&items, &scanned, cfg) {
        report.refusal = Some(refusal);
        return Ok(());
    }
    let premerger = crate::sync::propagate::Premerger::new(replicas, cfg);
    if hooks.edit_plan.is_some() || hooks.edit_plan_merging.is_some() {
        let mut edit = PlanEdit::new(&scanned.updates, options, items);
        if let Some(edit_plan) = hooks.edit_plan {
            edit_plan(&mut edit);
        }
        if let Some(edit_plan) = hooks.edit_plan_merging {
            edit_plan(&mut edit, &premerger);
        }
        items = edit.into_items();
        // A propagation turned around may delete what the plan did not.
        if let Err(refusal) = guard(&items, &scanned, cfg) {
            report.refusal = Some(refusal);
            return Ok(());
        }
    }
    report.conflicts = conflicts_of(&items);
    report.errors.append(&mut scanned.failures);
    if cfg.dry_run {
        report.propagated = crate::sync::dry_run::would_propagate(&items);
        return Ok(());
    }
    if let Some(hook) = hooks.before_propagating {
        hook();
    }
    scanned.forget_updates();
    follow_changes_of_case(&mut sides, &mut scanned, &names)?;
    // Ignoring case, each side is written under its own spellings.
    let spelled = scanned.case.as_ref().map(|case| {
        let [sa, sb] = case.spellings.clone();
        [
            crate::sync::case::replica::Spelled::new(a, sa),
            crate::sync::case::replica::Spelled::new(b, sb),
        ]
    });
    let replicas: [&dyn Replica; 2] = match &spelled {
        Some([sa, sb]) => [sa, sb],
        None => replicas,
    };
    let kept = crate::sync::propagate::keep_name::name_kept_copies(replicas, &mut items);
    let plan = crate::sync::propagate::Plan {
        items: &items,
        kept: &kept,
        premerged: &premerger,
        sibling: None,
    };
    propagate(replicas, &mut sides, &scanned, plan, cfg, hooks, report);
    finish_sides(&mut sides, report);
    Ok(())
}

/// The run is over on both sides: what a side sent and has not had
/// answered yet (a remote side's records) is checked, while its server
/// closes. A record that failed is the run's error: the paths were
/// propagated, and the next run compares them again.
fn finish_sides(sides: &mut [Box<dyn SideSession + '_>; 2], report: &mut SyncReport) {
    for side in sides.iter_mut() {
        if let Err(failure) = side.finish() {
            // The root's path comes first, as the sorted errors keep it.
            report.errors.insert(
                0,
                SyncFailure {
                    path: RelPath::root(),
                    error: SyncError::Archive(failure),
                },
            );
        }
    }
}

/// Ignoring case, move each side's records to the spellings it holds now
/// (a change of case only is no update: the record follows the name).
/// Before propagation, which records its paths under those spellings; a
/// side that cannot record stops the run with nothing changed.
fn follow_changes_of_case(
    sides: &mut [Box<dyn SideSession + '_>; 2],
    scanned: &mut Scanned,
    names: &[String; 2],
) -> Result<(), SyncFatal> {
    let Some(case) = scanned.case.as_mut() else {
        return Ok(());
    };
    for (side, session) in sides.iter_mut().enumerate() {
        let records = case.take_rekey(side);
        if records.is_empty() {
            continue;
        }
        session
            .record(&records)
            .map_err(|failure| SyncFatal::Side {
                replica: names[side].clone(),
                failure,
            })?;
    }
    Ok(())
}

/// A dry run's scratch copies of the local replicas' archives (None: a
/// real run); a remote replica's host copies its own. `archives`: each
/// replica, with the bytes that name it and those that name the other
/// root of its pair (or its set).
pub(crate) fn dry_run_scratch<'i>(
    archives: impl IntoIterator<Item = (&'i dyn Replica, &'i [u8], &'i [u8])>,
    cfg: &SyncConfig,
) -> Result<Option<accord_replica::side::scratch::Scratch>, SyncFatal> {
    if !cfg.dry_run {
        return Ok(None);
    }
    let scratch =
        accord_replica::side::scratch::Scratch::new().map_err(SyncFatal::DryRunScratch)?;
    for (replica, this, other) in archives {
        if replica.local_root().is_some() {
            scratch
                .copy_archive(&cfg.state_dir, this, other)
                .map_err(SyncFatal::DryRunScratch)?;
        }
    }
    Ok(Some(scratch))
}

/// How names are matched this run (`sync/case/mod.rs`): forced, or probed.
fn settle_case(
    probed: Result<crate::sync::case::CaseMode, crate::sync::case::ProbeFailure>,
    report: &mut SyncReport,
) -> Result<crate::sync::case::CaseMode, SyncFatal> {
    let mode = probed.map_err(|failure| SyncFatal::Side {
        replica: failure.replica,
        failure: SideFailure::said(format!(
            "cannot tell whether it ignores case ({}); nothing was changed \
             (--ignorecase true or false settles it without the probe's answer)",
            failure.why
        )),
    })?;
    report.ignore_case = mode.ignore;
    report.case_insensitive = mode.insensitive;
    Ok(mode)
}

/// Does a planned directory rename move or land on a path whose update
/// could not be detected (left out of the plan)?
fn moves_unread_paths(items: &[SyncItem], failures: &[SyncFailure]) -> bool {
    let directory_renames = items.iter().filter_map(|item| match &item.moved {
        Some(moved) if moved.entry.kind == accord_model::Kind::Dir => {
            Some([&moved.from, &item.path])
        }
        _ => None,
    });
    directory_renames
        .flatten()
        .any(|top| failures.iter().any(|failure| failure.path.starts_with(top)))
}

/// The deletion guard over a plan (`accord_plan::check_deletions`).
fn guard(items: &[SyncItem], scanned: &Scanned, cfg: &SyncConfig) -> Result<(), SyncRefusal> {
    check_deletions(items, scanned.counts[0], scanned.counts[1], cfg.max_delete)
}

fn conflicts_of(items: &[SyncItem]) -> Vec<(RelPath, ConflictReason)> {
    items
        .iter()
        .filter_map(|item| item.conflict().map(|reason| (item.path.clone(), reason)))
        .collect()
}

fn side_fatal(replica: &dyn Replica, failure: SideFailure) -> SyncFatal {
    SyncFatal::Side {
        replica: replica.describe(),
        failure,
    }
}

/// The bytes that name a root in the archives' keys: its host's name and
/// its canonical path there (`sync_side::local_identity`).
/// Both roots' identities. A remote root whose partner's identity is
/// known on this host is asked at once to open its archive of the pair,
/// take the rules and scan (`Replica::prefetch_sync_side`: behind its
/// lock, which its server requires): all share the lock's round trip.
fn identities_opening_ahead(
    replicas: [&dyn Replica; 2],
    cfg: &SyncConfig,
) -> Result<[Vec<u8>; 2], SyncFatal> {
    let local = |index: usize| replicas[index].local_root().is_some();
    let mut known: [Option<Vec<u8>>; 2] = [None, None];
    for index in (0..2).filter(|&index| local(index)) {
        known[index] = Some(root_identity(replicas[index])?);
    }
    for index in (0..2).filter(|&index| !local(index)) {
        if let Some(other) = &known[1 - index] {
            replicas[index].prefetch_sync_side(other, &cfg.rules, &scan_options(cfg));
        }
    }
    let [a, b] = known;
    Ok([
        a.map_or_else(|| root_identity(replicas[0]), Ok)?,
        b.map_or_else(|| root_identity(replicas[1]), Ok)?,
    ])
}

fn root_identity(replica: &dyn Replica) -> Result<Vec<u8>, SyncFatal> {
    replica
        .sync_identity()
        .map_err(|e| side_fatal(replica, SideFailure::Failed(SideCause::Identity(e))))
}

/// Take both replicas' write locks in the order of their identities, so
/// that of two runs over overlapping roots one gets both.
fn lock_both(replicas: [&dyn Replica; 2], identities: &[Vec<u8>; 2]) -> Result<(), SyncFatal> {
    let [first, second] = identity_order(identities);
    lock_in_order(&[replicas[first], replicas[second]])
}

/// Take every replica's write lock, in the order given (every run takes
/// them in the order of the roots' identities, so two runs that share
/// roots never each wait for the other).
pub(crate) fn lock_in_order(replicas: &[&dyn Replica]) -> Result<(), SyncFatal> {
    for replica in replicas {
        match replica.try_lock() {
            Ok(true) => {}
            Ok(false) => return Err(SyncFatal::Busy(replica.describe())),
            Err(source) => {
                return Err(SyncFatal::Lock {
                    replica: replica.describe(),
                    source,
                })
            }
        }
    }
    Ok(())
}

fn identity_order(identities: &[Vec<u8>; 2]) -> [usize; 2] {
    if identities[0] <= identities[1] {
        [0, 1]
    } else {
        [1, 0]
    }
}

/// Both sides, each with its archive open and locked on its own host (in
/// the order of the identities).
fn open_sides<'r>(
    replicas: [&'r dyn Replica; 2],
    identities: &[Vec<u8>; 2],
    archive_dir: &Path,
) -> Result<[Box<dyn SideSession + 'r>; 2], SyncFatal> {
    let mut opened: [Option<Box<dyn SideSession + 'r>>; 2] = [None, None];
    for index in identity_order(identities) {
        let replica = replicas[index];
        let side = replica
            .open_sync_side(&identities[1 - index], archive_dir)
            .map_err(|failure| side_fatal(replica, failure))?;
        opened[index] = Some(side);
    }
    let [Some(a), Some(b)] = opened else {
        unreachable!("both sides were opened")
    };
    Ok([a, b])
}

/// Ask a side across a wire for its scan now, behind its archive's opening
/// and rules, so that the three take one round trip; not where an archive
/// opened on this host is new (the pair is then scanned without its
/// archives, `scan_with_archives`, and a scan asked for ahead would be
/// wasted).
fn prefetch_scans(
    sides: &mut [Box<dyn SideSession + '_>; 2],
    replicas: [&dyn Replica; 2],
    cfg: &SyncConfig,
) {
    let new_here = sides
        .iter()
        .zip(&replicas)
        .any(|(side, replica)| replica.local_root().is_some() && side.created());
    if new_here {
        return;
    }
    let opts = scan_options(cfg);
    for (side, replica) in sides.iter_mut().zip(replicas) {
        if replica.local_root().is_none() {
            side.prefetch_scan(&opts);
        }
    }
}

/// The options of a run's scans where its archives are kept.
fn scan_options(cfg: &SyncConfig) -> SideOptions {
    SideOptions {
        detect: cfg.detect_options(),
        use_archive: true,
    }
}

/// Empty both archives: when one side's is new, the other's entries no
/// longer describe an agreement (a path deleted on the side that forgot
/// would look unchanged there and never reach the other side). Emptied,
/// the next run also sees "both were empty" should this one stop.
fn forget_both(
    sides: &mut [Box<dyn SideSession + '_>; 2],
    names: &[String; 2],
) -> Result<(), SyncFatal> {
    for (side, name) in sides.iter_mut().zip(names) {
        side.forget().map_err(|failure| SyncFatal::Side {
            replica: name.clone(),
            failure,
        })?;
    }
    Ok(())
}

/// Walk both replicas against their archives. An archive found damaged
/// during the walk is treated as lost: both are emptied and the walk runs
/// again without them (an archive too damaged to be emptied stops the run;
/// opening it again moves it aside).
fn scan_with_archives(
    sides: &mut [Box<dyn SideSession + '_>; 2],
    replicas: [&dyn Replica; 2],
    case: crate::sync::case::CaseMode,
    names: &[String; 2],
    cfg: &SyncConfig,
    lost: bool,
) -> Result<Scanned, SyncFatal> {
    let scan_pair = |sides: &mut [Box<dyn SideSession + '_>; 2], opts: &SideOptions| {
        if case.ignore {
            crate::sync::case::scan::scan_pair_folded(sides, replicas, case, names, opts)
        } else {
            scan_pair(sides, names, opts)
        }
    };
    let mut opts = SideOptions {
        use_archive: !lost,
        ..scan_options(cfg)
    };
    if !lost {
        match scan_pair(sides, &opts) {
            Err(ScanStop::ArchiveDamaged) => {}
            Err(ScanStop::Fatal(fatal)) => return Err(fatal),
            Ok(scanned) => return Ok(scanned),
        }
        forget_both(sides, names)?;
        opts.use_archive = false;
    }
    match scan_pair(sides, &opts) {
        Ok(mut scanned) => {
            scanned.archives_lost = true;
            Ok(scanned)
        }
        Err(ScanStop::Fatal(fatal)) => Err(fatal),
        Err(ScanStop::ArchiveDamaged) => Err(SyncFatal::Side {
            replica: names.join(" and "),
            failure: SideFailure::Damaged(SideCause::Said("found damaged while unused".into())),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_tails_are_left_out() {
        assert_eq!(
            words_only(
                "a: No such file or directory (os error 2); b: Permission denied (os error 13)"
            ),
            "a: No such file or directory; b: Permission denied"
        );
        assert_eq!(
            words_only("kept (os error x) as is"),
            "kept (os error x) as is"
        );
        assert_eq!(words_only("plain"), "plain");
    }

    #[test]
    fn a_directory_rename_over_an_unread_path_is_not_planned() {
        use accord_model::{Entry, Kind, Props};
        let path = |text: &str| RelPath::new(text.as_bytes()).unwrap();
        let dir = Entry {
            path: path("old"),
            kind: Kind::Dir,
            size: 0,
            props: Props::default(),
            dev: 1,
            ino: 2,
            nlink: 2,
            rdev: 0,
            blocks: 0,
            link_target: None,
            hash: None,
        };
        let renamed = SyncItem {
            path: path("new"),
            action: accord_plan::Action::Rename { on: Side::B },
            overridden: None,
            a: Some(std::sync::Arc::new(Entry {
                path: path("new"),
                ..dir.clone()
            })),
            b: None,
            moved: Some(Box::new(accord_plan::Moved {
                from: path("old"),
                entry: dir,
            })),
            link: None,
        };
        let failed = |at: &str| SyncFailure {
            path: path(at),
            error: SyncError::Detect("unreadable".into()),
        };
        let items = [renamed];
        assert!(moves_unread_paths(&items, &[failed("old/deep/f")]));
        assert!(moves_unread_paths(&items, &[failed("new/f")]));
        assert!(!moves_unread_paths(&items, &[failed("older/f")]));
        assert!(!moves_unread_paths(&items, &[]));
    }
}
