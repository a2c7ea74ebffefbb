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

use crate::sync::{SyncError, SyncFailure, SyncFatal};
use accord_model::{PathFailure, RelPath, Time};
use accord_plan::{PathUpdate, SideCounts, SideState, Update};
use accord_replica::side::UNKNOWN_CTIME;
use accord_replica::{SideChange, SideFailure, SideOptions, SideScan, SideSession};
use std::cmp::Ordering;
use std::collections::BTreeSet;

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
    /// What a run that ignores case learnt of spellings
    /// (`sync/case/scan.rs`); None when names are matched exactly.
    pub case: Option<crate::sync::case::facts::CaseFacts>,
}

impl Scanned {
    /// The ctimes recorded with the update at `path`.
    pub fn ctimes_of(&self, path: &RelPath) -> [Time; 2] {
        match self.ctimes.binary_search_by(|(at, _)| at.cmp(path)) {
            Ok(index) => self.ctimes[index].1,
            Err(_) => [UNKNOWN_CTIME; 2],
        }
    }

    /// What a propagation of items made by another plan than a pair's
    /// (a set's) needs: the ctimes to record, nothing else.
    pub fn of_ctimes(ctimes: Vec<(RelPath, [Time; 2])>) -> Scanned {
        Scanned {
            updates: Vec::new(),
            ctimes,
            counts: [SideCounts::default(); 2],
            failures: Vec::new(),
            archives_lost: false,
            case: None,
        }
    }

    /// Let go of the updates once the plan is made: the plan's items hold
    /// what propagation needs, and a first sync has an update per path.
    pub fn forget_updates(&mut self) {
        self.updates = Vec::new();
    }
}

pub(crate) type Sides<'s, 'r> = &'s mut [Box<dyn SideSession + 'r>; 2];

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
        merge.add_scan(side, scan);
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
        check_answered(&asks[side], &answer, &names[side])?;
        merge.add_answer(side, answer);
    }
    drop(asks);
    merge.finish(&opts.detect, names)
}

/// Run `f` on both sides at once (side B on this thread).
pub(crate) fn both<T: Send>(
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

pub(crate) fn side_result<T>(result: Result<T, SideFailure>, name: &str) -> Result<T, ScanStop> {
    result.map_err(|failure| match failure {
        SideFailure::Damaged(_) => ScanStop::ArchiveDamaged,
        failure => ScanStop::Fatal(SyncFatal::Side {
            replica: name.to_string(),
            failure,
        }),
    })
}

pub(crate) fn misreported(name: &str, what: String) -> ScanStop {
    ScanStop::Fatal(SyncFatal::Side {
        replica: name.to_string(),
        failure: SideFailure::said(format!("its update detection misreported: {what}")),
    })
}

/// Paths in strictly increasing order, and each entry at its own path.
pub(crate) fn check_changes(changes: &[SideChange], name: &str) -> Result<(), ScanStop> {
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

/// Both sides' reports. Each side's scan and its answers are two lists in
/// strictly increasing path order (checked) with no path in both (a side is
/// asked only what its scan left out), so the merge is a linear join of
/// sorted lists: no map of every path, which a first sync would fill with
/// the whole tree.
#[derive(Default)]
struct Merge {
    scans: [Vec<SideChange>; 2],
    answers: [Vec<SideChange>; 2],
    counts: [SideCounts; 2],
    /// Paths that could not be judged on a side: left out with their
    /// subtrees, on both sides.
    failed: BTreeSet<RelPath>,
    failures: Vec<PathFailure>,
    /// Paths a side's ignore rules exclude: left out with their subtrees,
    /// on both sides (`sync/ignore.rs and the replica crate's side/rules.rs`).
    excluded: BTreeSet<RelPath>,
}

impl Merge {
    fn add_scan(&mut self, side: usize, scan: SideScan) {
        self.scans[side] = scan.changes;
        self.add_failures(scan.failures);
    }

    fn add_answer(&mut self, side: usize, answer: SideScan) {
        self.answers[side] = answer.changes;
        self.add_failures(answer.failures);
        self.excluded.extend(answer.excluded);
    }

    fn add_failures(&mut self, failures: Vec<PathFailure>) {
        for failure in failures {
            self.failed.insert(failure.path.clone());
            self.failures.push(failure);
        }
    }

    fn is_left_out(&self, path: &RelPath) -> bool {
        if self.failed.is_empty() && self.excluded.is_empty() {
            return false;
        }
        let mut at = Some(path.clone());
        while let Some(p) = at {
            if self.failed.contains(&p) || self.excluded.contains(&p) {
                return true;
            }
            at = p.parent();
        }
        false
    }

    /// For each side, the paths only the other side's scan reported.
    fn asks(&self) -> [Vec<RelPath>; 2] {
        let mut asks = [Vec::new(), Vec::new()];
        let [a, b] = &self.scans;
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let order = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) => x.path.cmp(&y.path),
                (Some(_), None) => Ordering::Less,
                _ => Ordering::Greater,
            };
            let (only_on, path) = match order {
                Ordering::Less => (0, &a[i].path),
                Ordering::Greater => (1, &b[j].path),
                Ordering::Equal => {
                    (i, j) = (i + 1, j + 1);
                    continue;
                }
            };
            if only_on == 0 {
                i += 1;
            } else {
                j += 1;
            }
            if !self.is_left_out(path) {
                asks[1 - only_on].push(path.clone());
            }
        }
        asks
    }

    /// Every path where a side has an update or a touch, judged on both.
    fn finish(
        mut self,
        detect: &accord_plan::DetectOptions,
        names: &[String; 2],
    ) -> Result<Scanned, ScanStop> {
        // At most one update per reported path: reserved whole, so that a
        // first sync does not grow (and copy) its largest vectors.
        let most = self.scans[0].len() + self.answers[0].len();
        let mut out = Scanned {
            updates: Vec::with_capacity(most),
            ctimes: Vec::with_capacity(most),
            counts: self.counts,
            failures: Vec::new(),
            archives_lost: false,
            case: None,
        };
        let [scan_a, scan_b] = std::mem::take(&mut self.scans);
        let [answers_a, answers_b] = std::mem::take(&mut self.answers);
        let mut sides = [
            SideStream::new(scan_a, answers_a),
            SideStream::new(scan_b, answers_b),
        ];
        while let Some(path) = next_path(&mut sides) {
            let [a, b] = [0, 1].map(|side| sides[side].take_at(&path));
            if self.is_left_out(&path) {
                continue;
            }
            // Every path one side reported was asked of the other, and
            // every answer checked: only a side that broke that is missing.
            let (a, b) = match (a, b) {
                (Some(a), Some(b)) => (a, b),
                (a, _) => {
                    let silent = usize::from(a.is_some());
                    let what = format!("nothing for {}", path.display());
                    return Err(misreported(&names[silent], what));
                }
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
        out.updates.shrink_to_fit();
        out.ctimes.shrink_to_fit();
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

/// A side answered every path it was asked for, or said why not.
pub(crate) fn check_answered(
    asked: &[RelPath],
    answer: &SideScan,
    name: &str,
) -> Result<(), ScanStop> {
    let mut answered: Vec<&RelPath> = answer.changes.iter().map(|c| &c.path).collect();
    answered.extend(answer.failures.iter().map(|f| &f.path));
    answered.extend(&answer.excluded);
    answered.sort_unstable();
    if !answered.iter().copied().eq(asked.iter()) {
        return Err(misreported(
            name,
            "its answers are not the paths asked for".into(),
        ));
    }
    Ok(())
}

/// One side's changes in path order, from its scan's list and its
/// answers' list (each sorted, no path in both).
struct SideStream {
    scan: std::iter::Peekable<std::vec::IntoIter<SideChange>>,
    answers: std::iter::Peekable<std::vec::IntoIter<SideChange>>,
}

impl SideStream {
    fn new(scan: Vec<SideChange>, answers: Vec<SideChange>) -> SideStream {
        SideStream {
            scan: scan.into_iter().peekable(),
            answers: answers.into_iter().peekable(),
        }
    }

    fn next_path(&mut self) -> Option<&RelPath> {
        match (self.scan.peek(), self.answers.peek()) {
            (Some(x), Some(y)) => Some(if x.path <= y.path { &x.path } else { &y.path }),
            (x, y) => x.or(y).map(|change| &change.path),
        }
    }

    /// This side's change at `path` when it is the next one.
    fn take_at(&mut self, path: &RelPath) -> Option<SideChange> {
        let at = |change: &SideChange| change.path == *path;
        self.scan.next_if(at).or_else(|| self.answers.next_if(at))
    }
}

/// The first path either side has yet to merge.
fn next_path(sides: &mut [SideStream; 2]) -> Option<RelPath> {
    let [a, b] = sides;
    match (a.next_path(), b.next_path()) {
        (Some(x), Some(y)) => Some(x.min(y).clone()),
        (x, y) => x.or(y).cloned(),
    }
}

/// A side's state for reconciliation, its current entry moved out of the
/// side's report (a first sync has one per path: no copies).
pub(crate) fn side_state(update: Update, change: SideChange) -> SideState {
    let current = change.current.map(|observed| observed.entry);
    SideState::new(update, change.archived.as_deref(), current)
}

#[cfg(test)]
mod tests {
    //! A side is another host's word: these feed the merge with in-memory
    //! sides that report what a broken or hostile server might.
    use super::*;
    use accord_model::{Entry, Kind, Observed, Props};
    use accord_plan::DetectOptions;
    use accord_replica::ArchiveRecord;

    /// A side that answers from canned reports.
    #[derive(Default)]
    struct Canned {
        scan: Vec<SideChange>,
        failures: Vec<PathFailure>,
        /// Looked-up paths left unanswered.
        drop_lookups: bool,
        /// Looked-up paths answered as excluded by this side's rules.
        excludes: Vec<RelPath>,
        asked: std::sync::Arc<std::sync::Mutex<Vec<RelPath>>>,
    }

    impl SideSession for Canned {
        fn created(&self) -> bool {
            false
        }
        fn forget(&mut self) -> Result<(), SideFailure> {
            Ok(())
        }
        fn set_rules(&mut self, _: &crate::SyncRules) -> Result<(), SideFailure> {
            Ok(())
        }
        fn scan(&mut self, _: &SideOptions) -> Result<SideScan, SideFailure> {
            Ok(SideScan {
                changes: self.scan.clone(),
                counts: SideCounts::default(),
                failures: std::mem::take(&mut self.failures),
                excluded: Vec::new(),
            })
        }
        fn lookup(&mut self, paths: &[RelPath], _: &SideOptions) -> Result<SideScan, SideFailure> {
            self.asked.lock().unwrap().extend_from_slice(paths);
            let (excluded, asked): (Vec<RelPath>, Vec<RelPath>) = paths
                .iter()
                .cloned()
                .partition(|p| self.excludes.contains(p));
            let changes = if self.drop_lookups {
                Vec::new()
            } else {
                asked.iter().map(absent).collect()
            };
            Ok(SideScan {
                changes,
                excluded,
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

    #[test]
    fn a_path_excluded_on_one_side_is_left_out_with_its_subtree() {
        let a = Canned {
            scan: vec![created("d"), created("d/x"), created("e")],
            ..Canned::default()
        };
        let b = Canned {
            excludes: vec![path("d")],
            ..Canned::default()
        };
        let scanned = run(a, b).ok().unwrap();
        let paths: Vec<_> = scanned.updates.iter().map(|u| u.path.clone()).collect();
        assert_eq!(paths, vec![path("e")]);
        assert!(scanned.failures.is_empty());
    }
}
