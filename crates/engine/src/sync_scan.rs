//! The scan of a sync. Each side walks its own tree against its own
//! archive, on its own host, both at once (`SideSession::scan`); then each
//! side is asked for its state at the paths only the other reported
//! (`SideSession::lookup`, both at once), and the two are merged into what
//! reconciliation takes: in `RelPath` order, every path where either side
//! has an update or a touch, with the ctimes to record.
//!
//! What a side reports is checked before use (a remote side is another
//! host's word): paths in strictly increasing order, each entry at its own
//! path, every update decided, an answer for every path asked.

use crate::sync::{SyncError, SyncFailure, SyncFatal, UNKNOWN_CTIME};
use crate::sync_side::{SideChange, SideFailure, SideOptions, SideScan, SideSession};
use accord_model::{PathFailure, RelPath, Time};
use accord_plan::{PathUpdate, SideCounts, SideState, Update};
use std::collections::{BTreeMap, BTreeSet};

/// Why a scan stopped.
pub(crate) enum ScanStop {
    Fatal(SyncFatal),
    /// An archive turned out damaged while it was read.
    ArchiveDamaged,
}

/// What the scan found.
pub(crate) struct Scanned {
    /// Every path with an update (or a touch) on either side, in order.
    pub updates: Vec<PathUpdate>,
    /// The ctime to record for each update's side A and B (see
    /// `ctime_to_record`), by path, in order: kept when the updates are
    /// let go of (`forget_updates`).
    pub ctimes: Vec<(RelPath, [Time; 2])>,
    /// Entries each side's archive held and its scan found (roots excluded).
    pub counts: [SideCounts; 2],
    /// Paths left out of the plan (a file that could not be fingerprinted).
    pub failures: Vec<SyncFailure>,
    pub archives_lost: bool,
}

impl Scanned {
    /// The ctimes recorded with the update at `path`.
    pub fn ctimes_of(&self, path: &RelPath) -> [Time; 2] {
        match self.ctimes.binary_search_by(|(at, _)| at.cmp(path)) {
            Ok(index) => self.ctimes[index].1,
            Err(_) => [UNKNOWN_CTIME; 2],
        }
    }

    /// Let go of the updates once the plan is made: the plan's items hold
    /// what propagation needs, and a first sync has an update per path.
    pub fn forget_updates(&mut self) {
        self.updates = Vec::new();
    }
}

type Sides<'s, 'r> = &'s mut [Box<dyn SideSession + 'r>; 2];

/// Scan both sides, look up on each what only the other reported, and
/// merge.
pub(crate) fn scan_pair(
    sides: Sides<'_, '_>,
    names: &[String; 2],
    opts: &SideOptions,
) -> Result<Scanned, ScanStop> {
    let scans = both(sides, |_, side| side.scan(opts));
    let mut merge = Merge::default();
    for (side, scan) in scans.into_iter().enumerate() {
        let scan = side_result(scan, &names[side])?;
        check_changes(&scan.changes, &names[side])?;
        merge.counts[side] = scan.counts;
        merge.add(side, scan);
    }
    let asks = merge.asks();
    let answers = both(sides, |side, replica| {
        if asks[side].is_empty() {
            Ok(SideScan::default())
        } else {
            replica.lookup(&asks[side], opts)
        }
    });
    for (side, answer) in answers.into_iter().enumerate() {
        let answer = side_result(answer, &names[side])?;
        check_changes(&answer.changes, &names[side])?;
        merge.check_answered(&asks[side], &answer, &names[side])?;
        merge.add(side, answer);
    }
    merge.finish(&opts.detect, names)
}

/// Run `f` on both sides at once (side B on this thread).
fn both<T: Send>(
    sides: Sides<'_, '_>,
    f: impl Fn(usize, &mut dyn SideSession) -> T + Sync,
) -> [T; 2] {
    let [a, b] = sides;
    std::thread::scope(|s| {
        let first = s.spawn(|| f(0, a.as_mut()));
        let second = f(1, b.as_mut());
        match first.join() {
            Ok(first) => [first, second],
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

fn side_result<T>(result: Result<T, SideFailure>, name: &str) -> Result<T, ScanStop> {
    result.map_err(|failure| match failure {
        SideFailure::Damaged(_) => ScanStop::ArchiveDamaged,
        failure => ScanStop::Fatal(SyncFatal::Side {
            replica: name.to_string(),
            failure,
        }),
    })
}

fn misreported(name: &str, what: String) -> ScanStop {
    ScanStop::Fatal(SyncFatal::Side {
        replica: name.to_string(),
        failure: SideFailure::Failed(format!("its update detection misreported: {what}")),
    })
}

/// Paths in strictly increasing order, and each entry at its own path.
fn check_changes(changes: &[SideChange], name: &str) -> Result<(), ScanStop> {
    for pair in changes.windows(2) {
        if pair[0].path >= pair[1].path {
            return Err(misreported(
                name,
                format!("{} out of order", pair[1].path.display()),
            ));
        }
    }
    for change in changes {
        let elsewhere = [&change.archived, &change.current]
            .into_iter()
            .flatten()
            .any(|o| o.entry.path != change.path);
        if elsewhere {
            return Err(misreported(
                name,
                format!("an entry not at {}", change.path.display()),
            ));
        }
    }
    Ok(())
}

/// Both sides' reports, by path.
#[derive(Default)]
struct Merge {
    paths: BTreeMap<RelPath, [Option<SideChange>; 2]>,
    counts: [SideCounts; 2],
    /// Paths that could not be judged on a side: left out with their
    /// subtrees, on both sides.
    failed: BTreeSet<RelPath>,
    failures: Vec<PathFailure>,
}

impl Merge {
    fn add(&mut self, side: usize, scan: SideScan) {
        for change in scan.changes {
            let path = change.path.clone();
            self.paths.entry(path).or_default()[side] = Some(change);
        }
        for failure in scan.failures {
            self.failed.insert(failure.path.clone());
            self.failures.push(failure);
        }
    }

    fn is_left_out(&self, path: &RelPath) -> bool {
        let mut at = Some(path.clone());
        while let Some(p) = at {
            if self.failed.contains(&p) {
                return true;
            }
            at = p.parent();
        }
        false
    }

    /// For each side, the paths only the other side reported.
    fn asks(&self) -> [Vec<RelPath>; 2] {
        let mut asks = [Vec::new(), Vec::new()];
        for (path, changes) in &self.paths {
            if self.is_left_out(path) {
                continue;
            }
            for side in 0..2 {
                if changes[side].is_none() {
                    asks[side].push(path.clone());
                }
            }
        }
        asks
    }

    /// A side answered every path it was asked for, or said why not.
    fn check_answered(
        &self,
        asked: &[RelPath],
        answer: &SideScan,
        name: &str,
    ) -> Result<(), ScanStop> {
        let answered: BTreeSet<&RelPath> = answer
            .changes
            .iter()
            .map(|c| &c.path)
            .chain(answer.failures.iter().map(|f| &f.path))
            .collect();
        let asked_set: BTreeSet<&RelPath> = asked.iter().collect();
        if answered != asked_set {
            return Err(misreported(
                name,
                "its answers are not the paths asked for".into(),
            ));
        }
        Ok(())
    }

    /// Every path where a side has an update or a touch, judged on both.
    fn finish(
        mut self,
        detect: &accord_plan::DetectOptions,
        names: &[String; 2],
    ) -> Result<Scanned, ScanStop> {
        let mut out = Scanned {
            updates: Vec::new(),
            ctimes: Vec::new(),
            counts: self.counts,
            failures: Vec::new(),
            archives_lost: false,
        };
        // Drained as the updates are made: both are one entry per path.
        for (path, changes) in std::mem::take(&mut self.paths) {
            if self.is_left_out(&path) {
                continue;
            }
            let [Some(a), Some(b)] = changes else {
                unreachable!("every path was looked up on the side that lacked it")
            };
            let mut updates = [Update::Unchanged; 2];
            for (side, change) in [&a, &b].into_iter().enumerate() {
                updates[side] = change.update(detect).ok_or_else(|| {
                    misreported(&names[side], format!("{} undecided", path.display()))
                })?;
            }
            if updates == [Update::Unchanged; 2] {
                continue;
            }
            out.ctimes
                .push((path.clone(), [a.record_ctime, b.record_ctime]));
            out.updates.push(PathUpdate {
                path,
                a: side_state(updates[0], a),
                b: side_state(updates[1], b),
            });
        }
        out.failures = self
            .failures
            .into_iter()
            .map(|f| SyncFailure {
                path: f.path,
                error: SyncError::Detect(f.message),
            })
            .collect();
        out.failures.sort_by(|x, y| x.path.cmp(&y.path));
        Ok(out)
    }
}

/// A side's state for reconciliation, its current entry moved out of the
/// side's report (a first sync has one per path: no copies).
fn side_state(update: Update, change: SideChange) -> SideState {
    let current = change.current.map(|observed| observed.entry);
    SideState::new(update, change.archived.as_deref(), current)
}

#[cfg(test)]
mod tests {
    //! A side is another host's word: these feed the merge with in-memory
    //! sides that report what a broken or hostile server might.
    use super::*;
    use crate::sync_side::ArchiveRecord;
    use accord_model::{Entry, Kind, Observed, Props};
    use accord_plan::DetectOptions;

    /// A side that answers from canned reports.
    #[derive(Default)]
    struct Canned {
        scan: Vec<SideChange>,
        failures: Vec<PathFailure>,
        /// Looked-up paths left unanswered.
        drop_lookups: bool,
        asked: std::sync::Arc<std::sync::Mutex<Vec<RelPath>>>,
    }

    impl SideSession for Canned {
        fn created(&self) -> bool {
            false
        }
        fn forget(&mut self) -> Result<(), SideFailure> {
            Ok(())
        }
        fn scan(&mut self, _: &SideOptions) -> Result<SideScan, SideFailure> {
            Ok(SideScan {
                changes: self.scan.clone(),
                counts: SideCounts::default(),
                failures: std::mem::take(&mut self.failures),
            })
        }
        fn lookup(&mut self, paths: &[RelPath], _: &SideOptions) -> Result<SideScan, SideFailure> {
            self.asked.lock().unwrap().extend_from_slice(paths);
            let changes = if self.drop_lookups {
                Vec::new()
            } else {
                paths.iter().map(absent).collect()
            };
            Ok(SideScan {
                changes,
                ..SideScan::default()
            })
        }
        fn record(&mut self, _: &[ArchiveRecord]) -> Result<(), SideFailure> {
            Ok(())
        }
    }

    fn path(p: &str) -> RelPath {
        RelPath::new(p.as_bytes()).unwrap()
    }

    fn absent(p: &RelPath) -> SideChange {
        SideChange {
            path: p.clone(),
            archived: None,
            current: None,
            record_ctime: UNKNOWN_CTIME,
        }
    }

    fn file_at(p: &str, hashed: bool) -> Observed {
        Observed {
            entry: Entry {
                path: path(p),
                kind: Kind::File,
                size: 3,
                props: Props {
                    mode: 0o644,
                    ..Props::default()
                },
                dev: 1,
                ino: 2,
                nlink: 1,
                rdev: 0,
                blocks: 1,
                link_target: None,
                hash: hashed.then_some([7; 32]),
            },
            ctime: Time { sec: 5, nsec: 0 },
        }
    }

    /// A file created at `p` (fingerprinted, as a side must).
    fn created(p: &str) -> SideChange {
        SideChange {
            current: Some(Box::new(file_at(p, true))),
            ..absent(&path(p))
        }
    }

    fn run(a: Canned, b: Canned) -> Result<Scanned, ScanStop> {
        let mut sides: [Box<dyn SideSession>; 2] = [Box::new(a), Box::new(b)];
        let names = ["A".to_string(), "B".to_string()];
        let opts = SideOptions {
            detect: DetectOptions::default(),
            use_archive: true,
        };
        scan_pair(&mut sides, &names, &opts)
    }

    fn misreport(result: Result<Scanned, ScanStop>) -> String {
        match result {
            Err(ScanStop::Fatal(fatal)) => fatal.to_string(),
            Err(ScanStop::ArchiveDamaged) => panic!("not a damaged archive"),
            Ok(_) => panic!("a misreport was taken"),
        }
    }

    #[test]
    fn what_one_side_reports_is_looked_up_on_the_other() {
        let b = Canned::default();
        let asked = b.asked.clone();
        let a = Canned {
            scan: vec![created("f"), created("g")],
            ..Canned::default()
        };
        let scanned = run(a, b).ok().unwrap();
        assert_eq!(*asked.lock().unwrap(), vec![path("f"), path("g")]);
        let paths: Vec<_> = scanned.updates.iter().map(|u| u.path.clone()).collect();
        assert_eq!(paths, vec![path("f"), path("g")]);
        assert_eq!(scanned.updates[0].a.update, accord_plan::Update::Created);
        assert_eq!(scanned.updates[0].b.update, accord_plan::Update::Unchanged);
    }

    #[test]
    fn changes_out_of_order_are_refused() {
        let a = Canned {
            scan: vec![created("g"), created("f")],
            ..Canned::default()
        };
        assert!(misreport(run(a, Canned::default())).contains("out of order"));
    }

    #[test]
    fn an_entry_at_another_path_is_refused() {
        let mut change = created("f");
        change.current = Some(Box::new(file_at("elsewhere", true)));
        let a = Canned {
            scan: vec![change],
            ..Canned::default()
        };
        assert!(misreport(run(a, Canned::default())).contains("not at f"));
    }

    #[test]
    fn a_file_left_unfingerprinted_is_refused() {
        let mut change = created("f");
        change.current = Some(Box::new(file_at("f", false)));
        let a = Canned {
            scan: vec![change],
            ..Canned::default()
        };
        assert!(misreport(run(a, Canned::default())).contains("undecided"));
    }

    #[test]
    fn a_lookup_that_leaves_paths_unanswered_is_refused() {
        let a = Canned {
            scan: vec![created("f")],
            ..Canned::default()
        };
        let b = Canned {
            drop_lookups: true,
            ..Canned::default()
        };
        assert!(misreport(run(a, b)).contains("not the paths asked for"));
    }

    #[test]
    fn a_path_that_failed_on_one_side_is_left_out_with_its_subtree() {
        let a = Canned {
            failures: vec![PathFailure {
                path: path("d"),
                message: "unreadable".into(),
            }],
            ..Canned::default()
        };
        let b = Canned {
            scan: vec![created("d/x"), created("e")],
            ..Canned::default()
        };
        let asked = a.asked.clone();
        let scanned = run(a, b).ok().unwrap();
        assert_eq!(*asked.lock().unwrap(), vec![path("e")]);
        let paths: Vec<_> = scanned.updates.iter().map(|u| u.path.clone()).collect();
        assert_eq!(paths, vec![path("e")]);
        assert_eq!(scanned.failures.len(), 1);
        assert_eq!(scanned.failures[0].path, path("d"));
    }
}
