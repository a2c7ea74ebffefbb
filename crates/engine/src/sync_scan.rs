//! The scan of a sync: both replicas and both archives walked together, a
//! directory at a time, and each path's update detected on each side
//! (`accord_plan::detect`, fingerprinting where it asks). What comes out is
//! the list reconciliation takes: in `RelPath` order, every path where
//! either side has an update or a touch, with the ctimes to record.
//!
//! Memory holds one directory's children per level of depth, and the
//! updates found (not the tree). The walk is sequential for now.

use crate::replica::Replica;
use crate::sync::{ctime_to_record, Archives, SyncConfig, SyncError, SyncFailure, SyncFatal};
use crate::sync::{UNKNOWN_CTIME, UNSEEN_CTIME};
use accord_archive::{Archive, ArchiveError};
use accord_fsys::{IgnoreRules, ScanOptions, XattrFilter};
use accord_model::{Entry, Expect, Kind, Observed, RelPath, Time};
use accord_plan::{detect, DetectOptions, Detection, PathUpdate, SideCounts, SideState, Update};
use std::collections::BTreeMap;

/// Why a scan stopped.
pub(crate) enum ScanStop {
    Fatal(SyncFatal),
    /// An archive turned out damaged while it was read.
    ArchiveDamaged(ArchiveError),
}

impl From<ArchiveError> for ScanStop {
    fn from(e: ArchiveError) -> ScanStop {
        if e.is_damaged() {
            ScanStop::ArchiveDamaged(e)
        } else {
            ScanStop::Fatal(SyncFatal::Archive(e))
        }
    }
}

/// What the scan found.
pub(crate) struct Scanned {
    /// Every path with an update (or a touch) on either side, in order.
    pub updates: Vec<PathUpdate>,
    /// The ctime to record for each update's side A and B (see
    /// `ctime_to_record`), aligned with `updates`.
    pub ctimes: Vec<[Time; 2]>,
    /// Entries each side's archive held and its scan found (roots excluded).
    pub counts: [SideCounts; 2],
    /// Paths left out of the plan (a file that could not be fingerprinted).
    pub failures: Vec<SyncFailure>,
    pub archives_lost: bool,
}

impl Scanned {
    /// The ctimes recorded with the update at `path`.
    pub fn ctimes_of(&self, path: &RelPath) -> [Time; 2] {
        match self
            .updates
            .binary_search_by(|update| update.path.cmp(path))
        {
            Ok(index) => self.ctimes[index],
            Err(_) => [UNKNOWN_CTIME; 2],
        }
    }
}

/// One path's four states: what each side holds now and what each side's
/// archive recorded.
#[derive(Default)]
struct Quad {
    current: [Option<Observed>; 2],
    archived: [Option<Observed>; 2],
}

struct Walker<'a> {
    replicas: [&'a dyn Replica; 2],
    /// None when the archives are lost: every path is new on both sides.
    archives: Option<[&'a Archive; 2]>,
    detect: DetectOptions,
    rules: IgnoreRules,
    scan_start_s: i64,
    out: Scanned,
}

/// Walk both replicas from their roots.
pub(crate) fn scan_pair(
    replicas: [&dyn Replica; 2],
    archives: &Archives,
    cfg: &SyncConfig,
) -> Result<Scanned, ScanStop> {
    let [archive_a, archive_b] = &archives.sides;
    let mut walker = Walker {
        replicas,
        archives: (!archives.lost).then_some([archive_a, archive_b]),
        detect: cfg.detect_options(),
        rules: IgnoreRules::new(&[]).expect("no patterns"),
        scan_start_s: now_s(),
        out: Scanned {
            updates: Vec::new(),
            ctimes: Vec::new(),
            counts: [SideCounts::default(); 2],
            failures: Vec::new(),
            archives_lost: archives.lost,
        },
    };
    let root = RelPath::root();
    let mut quad = Quad::default();
    for side in 0..2 {
        quad.current[side] = Some(walker.root_entry(side)?);
        if let Some(archives) = walker.archives {
            quad.archived[side] = archives[side].get(&root)?;
        }
    }
    walker.visit(&root, quad)?;
    Ok(walker.out)
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn unreadable(replica: &dyn Replica, detail: String) -> ScanStop {
    ScanStop::Fatal(SyncFatal::Unreadable {
        replica: replica.describe(),
        detail,
    })
}

fn is_dir(observed: &Option<Observed>) -> bool {
    observed.as_ref().is_some_and(|o| o.entry.kind == Kind::Dir)
}

impl Walker<'_> {
    fn scan_options(&self) -> ScanOptions<'static> {
        ScanOptions {
            xattrs: XattrFilter {
                xattrs: false,
                acls: false,
            },
            xattr_memo: None,
            listing_memo: None,
            read_ignore_files: false,
            // Our temp names are listed as stale temps, not as entries.
            source: false,
        }
    }

    /// The root of one side, which must be a readable directory.
    fn root_entry(&self, side: usize) -> Result<Observed, ScanStop> {
        let replica = self.replicas[side];
        let (listing, scan) = replica.list_dir(&RelPath::root(), &self.rules, &self.scan_options());
        let own = listing.and_then(|l| l.entries.into_iter().next());
        match own {
            Some(entry) if scan.errors.is_empty() => {
                let ctime = ctime_of(self.local_dir(side, &RelPath::root()).as_ref(), &entry);
                Ok(Observed { entry, ctime })
            }
            _ => Err(unreadable(replica, scan_detail(&scan))),
        }
    }

    /// Detect both sides' updates at `path`, list it when it needs
    /// reconciling, and go down into it when it is a directory anywhere.
    fn visit(&mut self, path: &RelPath, mut quad: Quad) -> Result<(), ScanStop> {
        self.count(path, &quad);
        let updates = match self.detect_both(path, &mut quad) {
            Ok(updates) => updates,
            Err(error) => {
                // Left out of this run whole (its subtree too): nothing
                // there is planned on a state we could not read.
                self.out.failures.push(SyncFailure {
                    path: path.clone(),
                    error,
                });
                return Ok(());
            }
        };
        if updates.iter().any(|u| *u != Update::Unchanged) {
            self.record_update(path, &quad, updates);
        }
        let any_dir = quad.current.iter().chain(&quad.archived).any(is_dir);
        if any_dir {
            self.descend(path, &quad)?;
        }
        Ok(())
    }

    fn count(&mut self, path: &RelPath, quad: &Quad) {
        if path.is_root() {
            return;
        }
        for side in 0..2 {
            let counts = &mut self.out.counts[side];
            counts.scanned += quad.current[side].is_some() as usize;
            counts.archived += quad.archived[side].is_some() as usize;
        }
    }

    fn detect_both(&self, path: &RelPath, quad: &mut Quad) -> Result<[Update; 2], SyncError> {
        let mut updates = [Update::Unchanged; 2];
        for (side, update) in updates.iter_mut().enumerate() {
            *update = self.detect_side(side, path, quad)?;
        }
        Ok(updates)
    }

    /// One side's update, fingerprinting the file when detection asks.
    fn detect_side(
        &self,
        side: usize,
        path: &RelPath,
        quad: &mut Quad,
    ) -> Result<Update, SyncError> {
        let archived = quad.archived[side].as_ref();
        loop {
            match detect(archived, quad.current[side].as_ref(), &self.detect) {
                Detection::Decided(update) => return Ok(update),
                Detection::NeedsFingerprint => {
                    let fingerprint = self.replicas[side].fingerprint(path)?;
                    let current = quad.current[side]
                        .as_mut()
                        .expect("only a present file needs a fingerprint");
                    current.entry.hash = Some(fingerprint);
                }
            }
        }
    }

    fn record_update(&mut self, path: &RelPath, quad: &Quad, updates: [Update; 2]) {
        let state = |side: usize| {
            SideState::new(
                updates[side],
                quad.archived[side].as_ref(),
                quad.current[side].as_ref(),
            )
        };
        let ctime = |side: usize| {
            quad.current[side].as_ref().map_or(UNKNOWN_CTIME, |o| {
                ctime_to_record(o.ctime, self.scan_start_s)
            })
        };
        self.out.updates.push(PathUpdate {
            path: path.clone(),
            a: state(0),
            b: state(1),
        });
        self.out.ctimes.push([ctime(0), ctime(1)]);
    }

    /// Visit the children of `path`: the union of both sides' listings and
    /// both archives' children, in name order (which is `RelPath` order).
    fn descend(&mut self, path: &RelPath, quad: &Quad) -> Result<(), ScanStop> {
        let mut children: BTreeMap<Vec<u8>, Quad> = BTreeMap::new();
        for side in 0..2 {
            if is_dir(&quad.current[side]) {
                for observed in self.list_children(side, path)? {
                    let name = observed.entry.path.file_name().to_vec();
                    children.entry(name).or_default().current[side] = Some(observed);
                }
            }
            if let (Some(archives), true) = (self.archives, is_dir(&quad.archived[side])) {
                for observed in archives[side].children(path)? {
                    let name = observed.entry.path.file_name().to_vec();
                    children.entry(name).or_default().archived[side] = Some(observed);
                }
            }
        }
        for (name, child) in children {
            let child_path = path
                .join(&name)
                .expect("names come from listings and archives, both validated");
            self.visit(&child_path, child)?;
        }
        Ok(())
    }

    /// One side's entries directly in `path`, with their ctimes; stale
    /// temps of an interrupted run there are removed (we hold the lock).
    fn list_children(&self, side: usize, path: &RelPath) -> Result<Vec<Observed>, ScanStop> {
        let replica = self.replicas[side];
        let (listing, scan) = replica.list_dir(path, &self.rules, &self.scan_options());
        if !scan.errors.is_empty() || scan.incomplete {
            return Err(unreadable(replica, scan_detail(&scan)));
        }
        let Some(listing) = listing else {
            // Listed by its parent a moment ago: something is moving the
            // tree under us, and its entries must not look deleted.
            return Err(unreadable(
                replica,
                format!("{} vanished during the scan", path.display()),
            ));
        };
        if !listing.stale_temps.is_empty() {
            if let Ok(dir) = replica.open_dir(path) {
                for temp in &listing.stale_temps {
                    dir.remove_stale_temp(temp.file_name());
                }
            }
        }
        let handle = self.local_dir(side, path);
        let entries = listing
            .entries
            .into_iter()
            .skip(1)
            .chain(listing.subdirs)
            .map(|entry| {
                let ctime = ctime_of(handle.as_ref(), &entry);
                Observed { entry, ctime }
            });
        let mut observed: Vec<Observed> = entries.collect();
        observed.sort_by(|x, y| x.entry.path.cmp(&y.entry.path));
        Ok(observed)
    }

    /// A handle on `dir` of a local replica, to stat its entries for
    /// their ctimes (None: not local, or it cannot be opened).
    fn local_dir(&self, side: usize, dir: &RelPath) -> Option<accord_fsys::Dir> {
        let local = self.replicas[side].local()?;
        local.root().open_dir(dir).ok()
    }
}

/// The ctime of a listed entry (`dir`: a handle on its parent, or on
/// itself for the root). Listings do not carry it, so a local replica's
/// entry is stat'ed once more; when that stat no longer matches the
/// listing (the entry moved meanwhile), or the replica is not local, the
/// ctime is unseen and the file is fingerprinted.
fn ctime_of(dir: Option<&accord_fsys::Dir>, entry: &Entry) -> Time {
    let Some(dir) = dir else {
        return UNSEEN_CTIME;
    };
    let stat = if entry.path.is_root() {
        dir.stat_self()
    } else {
        dir.stat(entry.path.file_name())
    };
    match stat {
        Ok(st) if Expect::entry(entry) == Expect::Entry(st.found()) => st.ctime,
        _ => UNSEEN_CTIME,
    }
}

fn scan_detail(scan: &accord_fsys::Scan) -> String {
    scan.errors
        .first()
        .map(|e| format!("{}: {}", e.path.display(), e.message))
        .unwrap_or_else(|| "cannot be listed".into())
}
