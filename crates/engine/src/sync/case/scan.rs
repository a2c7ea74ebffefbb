//! The scan of a sync whose names are matched by their folded form
//! (`sync/case/mod.rs`). Each side walks its tree against its archive as in
//! any run (exact names, on its own host: no side needs to know the
//! mode); the folding is done here, on what the sides report:
//!
//! - the directories holding a reported path are listed on both sides
//!   through the seam (their spelling resolved there top-down), which shows
//!   each side's spelling of a name and the names that fold to one (a
//!   clash: refused with a message naming them, left out on both sides with
//!   its subtree, nothing of it propagated, deleted or archived);
//! - a path only one side reported is looked up on the other under the
//!   other's own spelling;
//! - everything reported under names that fold to one path is merged into
//!   one update, judged again against the archive entry whichever spelling
//!   it was recorded under (a change of case only is no update: the
//!   paper's rule, as Unison does), at one plan path: the spelling of a
//!   case-sensitive side that holds it (the paper: "use the target name"),
//!   under the plan path of its parent;
//! - propagation sees each side under the plan's spellings
//!   (`sync/case/replica.rs`): a plan path a side spells otherwise is
//!   turned into its own spelling there (`CaseFacts::spellings`), so a
//!   change reaches the name the side has, never a new one beside it;
//! - what each side's archive records is kept under that side's spelling,
//!   one record per folded path (`CaseFacts::respell`); a change of case
//!   only moves the records of the path and of what it holds to the new
//!   spelling before anything is propagated (`CaseFacts::take_rekey`), so
//!   a directory renamed by case keeps the agreed state beneath it.
//!
//! Memory: the reported paths are grouped in a map by folded path (a
//! first sync reports every path, as the plain merge's lists do), and the
//! listings of the directories holding them are kept for the merge.

use crate::sync::case::facts::{CaseFacts, Respelled};
use crate::sync::case::replica::Spellings;
use crate::sync::case::{fold_name, fold_path, CaseMode};
use crate::sync::scan::{
    both, check_answered, check_changes, misreported, side_result, side_state, ScanStop, Scanned,
    Sides,
};
use crate::sync::{SyncError, SyncFailure};
use accord_fsys::{IgnoreRules, ScanOptions, XattrFilter};
use accord_model::{Kind, Observed, RelPath};
use accord_plan::{PathUpdate, Update};
use accord_replica::side::UNKNOWN_CTIME;
use accord_replica::Replica;
use accord_replica::{ArchiveRecord, SideCause, SideChange, SideFailure, SideOptions, SideScan};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Scan both sides and merge what they report by folded path.
pub(crate) fn scan_pair_folded(
    sides: Sides<'_, '_>,
    replicas: [&dyn Replica; 2],
    mode: CaseMode,
    names: &[String; 2],
    opts: &SideOptions,
) -> Result<Scanned, ScanStop> {
    let scans = both(sides, |_, side| side.scan(opts));
    let mut merge = FoldedMerge::new(mode);
    for (side, scan) in scans.into_iter().enumerate() {
        let scan = side_result(scan, &names[side])?;
        check_changes(&scan.changes, &names[side])?;
        merge.counts[side] = scan.counts;
        merge.add(side, scan);
    }
    let mut tree = Listings::new(replicas, names);
    for folded in merge.reported_parents() {
        tree.ensure(&folded)?;
    }
    merge.refuse_clashes(&tree, names);
    let asks = merge.asks(&tree);
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
        merge.add(side, answer);
    }
    merge.finish(&tree, &opts.detect, names)
}

/// One side's listing of one directory: its spelling there and its
/// children's names by folded name.
struct Listed {
    spelling: RelPath,
    children: BTreeMap<Vec<u8>, Vec<(Vec<u8>, Kind)>>,
}

/// The listings of the directories holding reported paths, by folded
/// path, on each side (`None`: not one directory there).
struct Listings<'r> {
    replicas: [&'r dyn Replica; 2],
    names: [String; 2],
    dirs: BTreeMap<RelPath, [Option<Listed>; 2]>,
    rules: IgnoreRules,
}

impl<'r> Listings<'r> {
    fn new(replicas: [&'r dyn Replica; 2], names: &[String; 2]) -> Self {
        Listings {
            replicas,
            names: names.clone(),
            dirs: BTreeMap::new(),
            rules: IgnoreRules::default(),
        }
    }

    /// List `folded` (and its ancestors first) on both sides.
    fn ensure(&mut self, folded: &RelPath) -> Result<(), ScanStop> {
        if self.dirs.contains_key(folded) {
            return Ok(());
        }
        let spellings = match folded.parent() {
            None => [Some(RelPath::root()), Some(RelPath::root())],
            Some(parent) => {
                self.ensure(&parent)?;
                let leaf = folded.file_name();
                [0, 1].map(|side| self.child_dir(side, &parent, leaf))
            }
        };
        let mut listed = [None, None];
        for (side, spelling) in spellings.into_iter().enumerate() {
            if let Some(spelling) = spelling {
                listed[side] = self.list(side, spelling)?;
            }
        }
        self.dirs.insert(folded.clone(), listed);
        Ok(())
    }

    /// The spelling on `side` of the directory named `leaf` (folded) in
    /// the directory `parent` (folded): only when exactly one name there
    /// folds to it, and it is a directory.
    fn child_dir(&self, side: usize, parent: &RelPath, leaf: &[u8]) -> Option<RelPath> {
        let listed = self.dirs.get(parent)?[side].as_ref()?;
        match listed.children.get(leaf)?.as_slice() {
            [(name, Kind::Dir)] => listed.spelling.join(name).ok(),
            _ => None,
        }
    }

    fn list(&self, side: usize, spelling: RelPath) -> Result<Option<Listed>, ScanStop> {
        let opts = ScanOptions::plain(XattrFilter::NONE, false);
        let (listing, scan) = self.replicas[side].list_dir(&spelling, &self.rules, &opts);
        if !scan.errors.is_empty() || scan.incomplete {
            let why = scan
                .errors
                .first()
                .map(|e| format!("{}: {}", e.path.display(), e.message))
                .unwrap_or_else(|| format!("{} cannot be listed", spelling.display()));
            return Err(ScanStop::Fatal(crate::sync::SyncFatal::Side {
                replica: self.names[side].clone(),
                failure: SideFailure::Unreadable(SideCause::Said(format!("cannot read it: {why}"))),
            }));
        }
        let Some(listing) = listing else {
            return Ok(None);
        };
        let mut children: BTreeMap<Vec<u8>, Vec<(Vec<u8>, Kind)>> = BTreeMap::new();
        let entries = listing.entries.into_iter().skip(1).chain(listing.subdirs);
        for entry in entries {
            let name = entry.path.file_name().to_vec();
            children
                .entry(fold_name(&name))
                .or_default()
                .push((name, entry.kind));
        }
        Ok(Some(Listed { spelling, children }))
    }

    /// `side`'s spelling of the folded path `folded`, when its parent is
    /// listed there: the one name there that folds to it, else `fallback`'s
    /// name under the parent's spelling. None when the parent is not a
    /// directory there.
    fn spelling_on(&self, side: usize, folded: &RelPath, fallback: &[u8]) -> Option<RelPath> {
        let parent = folded.parent()?;
        let listed = self.dirs.get(&parent)?[side].as_ref()?;
        let name = match listed.children.get(folded.file_name()).map(Vec::as_slice) {
            Some([(name, _)]) => name.as_slice(),
            _ => fallback,
        };
        listed.spelling.join(name).ok()
    }

    /// Every name on `side` that folds to `folded`, under its parent's
    /// spelling there (none when the parent is not listed there).
    fn spellings_on(&self, side: usize, folded: &RelPath) -> Vec<RelPath> {
        let Some(parent) = folded.parent() else {
            return Vec::new();
        };
        let Some(Some(listed)) = self.dirs.get(&parent).map(|l| &l[side]) else {
            return Vec::new();
        };
        let names = listed.children.get(folded.file_name());
        names
            .into_iter()
            .flatten()
            .filter_map(|(name, _)| listed.spelling.join(name).ok())
            .collect()
    }

    /// The spelling on `side` of the folded directory `folded`.
    fn dir_spelling(&self, side: usize, folded: &RelPath) -> Option<&RelPath> {
        Some(&self.dirs.get(folded)?[side].as_ref()?.spelling)
    }
}

/// Both sides' reports, grouped by folded path.
struct FoldedMerge {
    mode: CaseMode,
    groups: BTreeMap<RelPath, [Vec<SideChange>; 2]>,
    counts: [accord_plan::SideCounts; 2],
    /// Folded paths left out with their subtrees: failed, excluded,
    /// refused as clashes.
    left_out: BTreeSet<RelPath>,
    failures: Vec<SyncFailure>,
}

impl FoldedMerge {
    fn new(mode: CaseMode) -> Self {
        FoldedMerge {
            mode,
            groups: BTreeMap::new(),
            counts: Default::default(),
            left_out: BTreeSet::new(),
            failures: Vec::new(),
        }
    }

    fn add(&mut self, side: usize, scan: SideScan) {
        for change in scan.changes {
            let folded = fold_path(&change.path);
            self.groups.entry(folded).or_default()[side].push(change);
        }
        for failure in scan.failures {
            self.left_out.insert(fold_path(&failure.path));
            self.failures.push(SyncFailure {
                path: failure.path,
                error: SyncError::Detect(failure.message),
            });
        }
        self.left_out.extend(scan.excluded.iter().map(fold_path));
    }

    fn is_left_out(&self, folded: &RelPath) -> bool {
        let mut at = Some(folded.clone());
        while let Some(p) = at {
            if self.left_out.contains(&p) {
                return true;
            }
            at = p.parent();
        }
        false
    }

    /// The folded parents of every reported path.
    fn reported_parents(&self) -> BTreeSet<RelPath> {
        self.groups.keys().filter_map(RelPath::parent).collect()
    }

    /// Names that fold to one in a listed directory: refused, on both
    /// sides, with their subtrees.
    fn refuse_clashes(&mut self, tree: &Listings, names: &[String; 2]) {
        for (folded_dir, listed) in &tree.dirs {
            for (side, listed) in listed.iter().enumerate() {
                let Some(listed) = listed else { continue };
                for (folded_name, spellings) in &listed.children {
                    if spellings.len() < 2 {
                        continue;
                    }
                    let folded = folded_dir
                        .join(folded_name)
                        .expect("a folded name of a listed name is a name");
                    if self.left_out.insert(folded) {
                        let paths: Vec<RelPath> = spellings
                            .iter()
                            .filter_map(|(name, _)| listed.spelling.join(name).ok())
                            .collect();
                        self.failures.push(clash(&paths, &names[side]));
                    }
                }
            }
        }
    }

    /// For each side, what it holds under a name of a reported path that
    /// it did not report itself: the other side's paths under this side's
    /// own spelling (or, where it has none, as reported), and any other
    /// name here that folds to a path this side reported (a path deleted
    /// under one spelling is not deleted while another is here), in
    /// `RelPath` order.
    fn asks(&self, tree: &Listings) -> [Vec<RelPath>; 2] {
        let mut asks = [Vec::new(), Vec::new()];
        for (folded, changes) in &self.groups {
            if self.is_left_out(folded) {
                continue;
            }
            for side in 0..2 {
                let reported: Vec<&RelPath> = changes[side].iter().map(|c| &c.path).collect();
                let here = tree.spellings_on(side, folded);
                let unreported = here.iter().filter(|p| !reported.contains(p));
                asks[side].extend(unreported.cloned());
                if reported.is_empty() && here.is_empty() {
                    let other = &changes[1 - side][0].path;
                    let spelling = tree
                        .spelling_on(side, folded, other.file_name())
                        .unwrap_or_else(|| other.clone());
                    asks[side].push(spelling);
                }
            }
        }
        for ask in &mut asks {
            ask.sort();
            ask.dedup();
        }
        asks
    }

    fn finish(
        mut self,
        tree: &Listings,
        detect: &accord_plan::DetectOptions,
        names: &[String; 2],
    ) -> Result<Scanned, ScanStop> {
        let mut facts = CaseFacts::default();
        let mut spellings = [Spellings::default(), Spellings::default()];
        let mut plan_dirs: HashMap<RelPath, RelPath> = HashMap::new();
        let mut merged: Vec<(PathUpdate, [accord_model::Time; 2])> = Vec::new();
        let groups = std::mem::take(&mut self.groups);
        for (folded, changes) in groups {
            if self.is_left_out(&folded) {
                continue;
            }
            let combined = match self.combine(&folded, changes, names)? {
                Some(combined) => combined,
                None => continue,
            };
            let parent = self.plan_parent(&folded, tree, &plan_dirs);
            let plan = plan_path(&parent, &combined, self.mode, &folded);
            if combined.iter().any(|c| is_dir(c.current.as_deref())) {
                plan_dirs.insert(folded.clone(), plan.clone());
            }
            self.note_spellings(&folded, &plan, &combined, tree, &mut facts, &mut spellings);
            if let Some(update) = self.judge(&plan, combined, detect, names)? {
                merged.push(update);
            }
        }
        self.note_dir_spellings(tree, &plan_dirs, &mut spellings);
        facts.any_difference |= spellings.iter().any(|s| !s.is_empty());
        facts.spellings = spellings.map(Arc::new);
        merged.sort_by(|x, y| x.0.path.cmp(&y.0.path));
        let mut failures = std::mem::take(&mut self.failures);
        failures.sort_by(|x, y| x.path.cmp(&y.path));
        let (updates, ctimes) = merged
            .into_iter()
            .map(|(update, ctimes)| {
                let path = update.path.clone();
                (update, (path, ctimes))
            })
            .unzip();
        Ok(Scanned {
            updates,
            ctimes,
            counts: self.counts,
            failures,
            archives_lost: false,
            case: Some(facts),
        })
    }

    /// One side's changes under names that fold to `folded` as one
    /// change: its present entry (two present: a clash, refused) and the
    /// archive entry, preferably the one at the present entry's name.
    fn combine(
        &mut self,
        folded: &RelPath,
        changes: [Vec<SideChange>; 2],
        names: &[String; 2],
    ) -> Result<Option<[SideChange; 2]>, ScanStop> {
        let mut out: [Option<SideChange>; 2] = [None, None];
        for (side, list) in changes.into_iter().enumerate() {
            if list.is_empty() {
                // Every side was asked what it holds of a reported path,
                // and its answers checked: only a side that broke that.
                let what = format!("nothing for {}", folded.display());
                return Err(misreported(&names[side], what));
            }
            let present: Vec<RelPath> = list
                .iter()
                .filter(|c| c.current.is_some())
                .map(|c| c.path.clone())
                .collect();
            if present.len() > 1 {
                self.left_out.insert(folded.clone());
                self.failures.push(clash(&present, &names[side]));
                return Ok(None);
            }
            out[side] = Some(combine_side(list));
        }
        let [Some(a), Some(b)] = out else {
            unreachable!("both sides combined")
        };
        Ok(Some([a, b]))
    }

    /// The plan path of `folded`'s parent: the plan path given to it as a
    /// group, else its spelling from the listings, a case-sensitive side's
    /// first.
    fn plan_parent(
        &self,
        folded: &RelPath,
        tree: &Listings,
        plan_dirs: &HashMap<RelPath, RelPath>,
    ) -> RelPath {
        let Some(parent) = folded.parent() else {
            return RelPath::root();
        };
        if let Some(plan) = plan_dirs.get(&parent) {
            return plan.clone();
        }
        let order = sides_in_order(self.mode);
        order
            .iter()
            .find_map(|&side| tree.dir_spelling(side, &parent).cloned())
            .unwrap_or(parent)
    }

    /// Note where the plan path is not a side's spelling: what propagation
    /// must call it there, and what that side's archive records it under.
    fn note_spellings(
        &self,
        folded: &RelPath,
        plan: &RelPath,
        combined: &[SideChange; 2],
        tree: &Listings,
        facts: &mut CaseFacts,
        spellings: &mut [Spellings; 2],
    ) {
        let mut keys: [Option<Respelled>; 2] = [None, None];
        let mut differs = false;
        for (side, change) in combined.iter().enumerate() {
            let current = change.current.as_ref().map(|o| o.entry.path.clone());
            // Absent here: made under its parent's spelling here.
            let here = current.or_else(|| tree.spelling_on(side, folded, plan.file_name()));
            if let Some(here) = &here {
                spellings[side].insert(plan.clone(), here.clone());
            }
            let key = here.unwrap_or_else(|| plan.clone());
            let archived = change
                .archived
                .as_ref()
                .map(|o| (o.entry.path.clone(), o.entry.kind));
            differs |= key != *plan || archived.as_ref().is_some_and(|(at, _)| *at != key);
            if let Some(record) = change.archived.as_deref().filter(|o| o.entry.path != key) {
                facts.rekey[side].push(ArchiveRecord::Remove(record.entry.path.clone()));
                let mut moved = record.clone();
                moved.entry.path = key.clone();
                facts.rekey[side].push(ArchiveRecord::Put(moved));
            }
            keys[side] = Some(Respelled { key, archived });
        }
        if differs {
            // Both sides: a record made from the other side's entry
            // carries the other side's spelling.
            facts.any_difference = true;
            for (side, key) in keys.into_iter().enumerate() {
                facts.respell[side].insert(folded.clone(), key.expect("both sides noted"));
            }
        }
    }

    /// Note the directories listed that a side spells otherwise than the
    /// plan (the parents of the paths planned).
    fn note_dir_spellings(
        &self,
        tree: &Listings,
        plan_dirs: &HashMap<RelPath, RelPath>,
        spellings: &mut [Spellings; 2],
    ) {
        let order = sides_in_order(self.mode);
        for (folded, listed) in &tree.dirs {
            if folded.is_root() {
                continue;
            }
            let plan = plan_dirs.get(folded).cloned().or_else(|| {
                order
                    .iter()
                    .find_map(|&side| listed[side].as_ref().map(|l| l.spelling.clone()))
            });
            let Some(plan) = plan else { continue };
            for (side, listed) in listed.iter().enumerate() {
                if let Some(listed) = listed {
                    spellings[side].insert(plan.clone(), listed.spelling.clone());
                }
            }
        }
    }

    /// Detect each side's update again on the merged change; None when
    /// neither side has one.
    fn judge(
        &mut self,
        plan: &RelPath,
        combined: [SideChange; 2],
        detect: &accord_plan::DetectOptions,
        names: &[String; 2],
    ) -> Result<Option<(PathUpdate, [accord_model::Time; 2])>, ScanStop> {
        let mut updates = [Update::Unchanged; 2];
        for (side, change) in combined.iter().enumerate() {
            updates[side] = change.update(detect).ok_or_else(|| {
                misreported(&names[side], format!("{} undecided", change.path.display()))
            })?;
        }
        if updates == [Update::Unchanged; 2] {
            return Ok(None);
        }
        let [a, b] = combined;
        let ctimes = [a.record_ctime, b.record_ctime];
        Ok(Some((
            PathUpdate {
                path: plan.clone(),
                a: side_state(updates[0], a),
                b: side_state(updates[1], b),
            },
            ctimes,
        )))
    }
}

/// A side's changes under names that fold to one, at most one of them
/// present: one change holding the present entry and the archive entry
/// (the one at the present entry's name when there are several).
fn combine_side(mut list: Vec<SideChange>) -> SideChange {
    if list.len() == 1 {
        return list.pop().expect("one change");
    }
    let present = list.iter().position(|c| c.current.is_some());
    let current_path = present.map(|i| list[i].path.clone());
    let archived_at = list
        .iter()
        .position(|c| c.archived.is_some() && Some(&c.path) == current_path.as_ref())
        .or_else(|| list.iter().position(|c| c.archived.is_some()));
    let archived = archived_at.and_then(|i| list[i].archived.take());
    match present {
        Some(i) => {
            let mut change = list.swap_remove(i);
            change.archived = archived;
            change
        }
        None => {
            let mut change = list.swap_remove(0);
            change.archived = archived;
            change.current = None;
            change.record_ctime = UNKNOWN_CTIME;
            change
        }
    }
}

fn is_dir(observed: Option<&Observed>) -> bool {
    observed.is_some_and(|o| o.entry.kind == Kind::Dir)
}

/// The sides in the order their spellings are preferred: case-sensitive
/// first (a name written there must be its own), then A before B.
fn sides_in_order(mode: CaseMode) -> [usize; 2] {
    if mode.insensitive[0] && !mode.insensitive[1] {
        [1, 0]
    } else {
        [0, 1]
    }
}

/// The plan path of a merged change: under its parent's plan path, the
/// name a side holds now (a case-sensitive side's first), else the name
/// it was archived under.
fn plan_path(
    parent: &RelPath,
    combined: &[SideChange; 2],
    mode: CaseMode,
    folded: &RelPath,
) -> RelPath {
    if folded.is_root() {
        return RelPath::root();
    }
    let order = sides_in_order(mode);
    let current = order
        .iter()
        .find_map(|&side| combined[side].current.as_ref().map(|o| &o.entry.path));
    let archived = || {
        order
            .iter()
            .find_map(|&side| combined[side].archived.as_ref().map(|o| &o.entry.path))
    };
    let name = current
        .or_else(archived)
        .map_or(folded.file_name(), RelPath::file_name);
    parent
        .join(name)
        .expect("a name under a parent that held it or its folded twin")
}

/// The failure of names that fold to one on one side.
fn clash(paths: &[RelPath], replica: &str) -> SyncFailure {
    SyncFailure {
        path: paths[0].clone(),
        error: SyncError::CaseClash {
            names: paths.to_vec(),
            replica: replica.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::case::facts::tests::{path, put};
    use accord_model::Time;

    #[test]
    fn a_side_with_one_change_at_most_present_is_combined() {
        let observed = |p: &str| {
            let ArchiveRecord::Put(o) = put(p, Kind::File) else {
                unreachable!()
            };
            Box::new(o)
        };
        let deleted = SideChange {
            path: path("foo"),
            archived: Some(observed("foo")),
            current: None,
            record_ctime: UNKNOWN_CTIME,
        };
        let created = SideChange {
            path: path("Foo"),
            archived: None,
            current: Some(observed("Foo")),
            record_ctime: Time { sec: 9, nsec: 0 },
        };
        let combined = combine_side(vec![created, deleted]);
        assert_eq!(combined.path, path("Foo"));
        assert_eq!(combined.archived.unwrap().entry.path, path("foo"));
        assert_eq!(combined.current.unwrap().entry.path, path("Foo"));
        assert_eq!(combined.record_ctime, Time { sec: 9, nsec: 0 });
    }
}
