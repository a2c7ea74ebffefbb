//! The mirror's rules a directory at a time.
//!
//! A [`MirrorPlanner`] is given one directory pair after another, in any
//! order and from any thread ([`MirrorPlanner::plan_dir`]); it keeps only
//! the items that change something, the counts the deletion guard needs,
//! and the few entries whose plan depends on other directories: regular
//! files with more than one link on either side (hard-link groups span
//! directories). [`MirrorPlanner::finish`] plans those, applies the guard
//! and orders the phases. So a walk that hands over each directory and then
//! drops its listing holds memory for what changes, not for the tree.

use crate::{
    contents_differ, item, join_sorted, method, multi_linked, props_differ, DirMetaList, Facts,
    Item, MaxDelete, Method, MirrorOptions, MirrorPlan, Op, Refusal,
};
use accord_model::{Entry, Kind, RelPath};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// One directory pair to plan.
#[derive(Clone, Copy, Debug)]
pub struct DirInput<'a> {
    pub path: &'a RelPath,
    /// The directory itself on each side (`None`: missing there, or not a
    /// directory there).
    pub src_me: Option<&'a Entry>,
    pub dst_me: Option<&'a Entry>,
    /// Its children on each side, directories included, sorted by path.
    pub src: &'a [&'a Entry],
    pub dst: &'a [&'a Entry],
    /// Temp files of an interrupted run found in the destination directory.
    pub stale_temps: &'a [RelPath],
    /// The whole directory, or one slice of it.
    pub part: DirPart,
}

/// What of its directory a [`DirInput`] holds. A large directory may be
/// given in slices of its children, one after the other (from one thread,
/// or in order), each with the directory's own entries: its properties
/// are decided with its last slice, from what all of its slices change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirPart {
    Whole,
    Slice { last: bool },
}

/// Accumulates the plan of a mirror from directory pairs (see the module).
pub struct MirrorPlanner {
    opts: MirrorOptions,
    acc: Mutex<Acc>,
}

/// A directory holding deferred files: its source entry, its destination
/// entry, and whether its properties item is already planned.
type HeldDir = (Entry, Option<Entry>, bool);

#[derive(Default)]
struct Acc {
    plan: MirrorPlan,
    /// Destination entries the source does not have.
    extras: usize,
    dst_entries: usize,
    /// Source regular files (and the destination's counterpart, if not a
    /// directory) whose plan waits for the whole tree: hard-link candidates.
    deferred: Vec<(Entry, Option<Entry>)>,
    /// Destination regular files with more than one link, with the source's
    /// entry at the same path.
    dst_linked: Vec<(Entry, Option<Entry>)>,
    /// Directories holding deferred files: (source entry, destination
    /// entry, properties item already planned).
    held_dirs: HashMap<RelPath, HeldDir>,
    /// Directories given in slices whose last slice is still to come:
    /// what their slices so far change (see `Carry`).
    sliced: HashMap<RelPath, Carry>,
}

/// What the slices of a directory given so far change: whether anything
/// in it does (its mtime moves), and whether it holds deferred files.
#[derive(Clone, Copy, Default)]
struct Carry {
    dirty: bool,
    holds_deferred: bool,
}

/// What one directory adds to the plan.
#[derive(Default)]
struct DirPlan {
    plan: MirrorPlan,
    extras: usize,
    dst_entries: usize,
    deferred: Vec<(Entry, Option<Entry>)>,
    dst_linked: Vec<(Entry, Option<Entry>)>,
    held: Option<(RelPath, HeldDir)>,
    /// A slice other than its directory's last: what it changes.
    carry: Option<(RelPath, Carry)>,
}

impl MirrorPlanner {
    pub fn new(opts: &MirrorOptions) -> MirrorPlanner {
        MirrorPlanner {
            opts: opts.clone(),
            acc: Mutex::new(Acc::default()),
        }
    }

    /// Plan one directory pair. Each directory is given once; children are
    /// planned by their parent, a directory's own properties by itself.
    pub fn plan_dir(&self, input: &DirInput) {
        let carried = match input.part {
            DirPart::Whole => Carry::default(),
            DirPart::Slice { .. } => {
                let mut acc = self.acc.lock().unwrap();
                acc.sliced.remove(input.path).unwrap_or_default()
            }
        };
        let part = plan_one_dir(&self.opts, input, carried);
        let mut acc = self.acc.lock().unwrap();
        acc.merge(part);
    }

    /// How many new directories and files wait in the plan so far.
    pub fn creations_waiting(&self) -> usize {
        let acc = self.acc.lock().unwrap();
        acc.plan.mkdirs.len() + acc.plan.files.len()
    }

    /// Take the new directories and the files planned so far, in the
    /// order `finish` gives them (a directory before what it holds), to
    /// carry them out while the walk goes on. Only for a destination that
    /// was empty when the walk began, with nothing listed there since:
    /// then nothing is to be deleted, no file has an old version, and the
    /// deletion guard cannot refuse the run, so nothing of what `finish`
    /// decides over the whole tree bears on them. What waits for the whole
    /// tree stays: directory properties (set after their subtree), files
    /// with several links (planned as groups), and the counts.
    /// At most `max_files` files are taken, the first planned (every new
    /// directory waiting is: a file taken later may be in any of them).
    pub fn take_creations(&self, max_files: usize) -> MirrorPlan {
        let mut acc = self.acc.lock().unwrap();
        let files = &mut acc.plan.files;
        let rest = files.split_off(max_files.min(files.len()));
        let mut part = MirrorPlan {
            mkdirs: std::mem::take(&mut acc.plan.mkdirs),
            files: std::mem::replace(&mut acc.plan.files, rest),
            ..MirrorPlan::default()
        };
        drop(acc);
        order(&mut part);
        part
    }

    /// For a run that stops after some creations were carried out (see
    /// `take_creations`): the properties of the directories planned so
    /// far, deepest first, which it still owes those it made, and the
    /// counts of what it walked.
    pub fn into_dir_meta(self) -> (DirMetaList, crate::Summary) {
        let mut plan = self.acc.into_inner().unwrap().plan;
        order(&mut plan);
        (plan.dir_meta, plan.summary)
    }

    /// The whole plan, or the deletion guard's refusal.
    pub fn finish(self, facts: &Facts) -> Result<MirrorPlan, Refusal> {
        let o = self.opts;
        let mut acc = self.acc.into_inner().unwrap();
        let deleting = o.delete && !facts.source_incomplete;
        guard(&acc, &o, facts, deleting)?;
        let extras: Vec<Item> = std::mem::take(&mut acc.plan.deletes);
        for it in extras {
            let is_extra = it.src.is_none();
            if is_extra && !deleting {
                acc.plan.summary.extras_kept += 1;
                continue;
            }
            if is_extra {
                acc.plan.summary.deletes += 1;
            }
            acc.plan.deletes.push(it);
        }
        plan_deferred(&mut acc, &o, facts.one_directory);
        let mut plan = acc.plan;
        resume_partials(&mut plan);
        order(&mut plan);
        Ok(plan)
    }
}

impl Acc {
    fn merge(&mut self, part: DirPlan) {
        let (p, q) = (&mut self.plan, part.plan);
        p.cleanup.extend(q.cleanup);
        p.deletes.extend(q.deletes);
        p.mkdirs.extend(q.mkdirs);
        p.files.extend(q.files);
        p.links.extend(q.links);
        p.dir_meta.append(q.dir_meta);
        let (s, t) = (&mut p.summary, q.summary);
        s.entries_total += t.entries_total;
        s.files_total += t.files_total;
        s.bytes_total += t.bytes_total;
        s.files_to_write += t.files_to_write;
        s.bytes_to_write += t.bytes_to_write;
        self.extras += part.extras;
        self.dst_entries += part.dst_entries;
        self.deferred.extend(part.deferred);
        self.dst_linked.extend(part.dst_linked);
        if let Some((path, held)) = part.held {
            self.held_dirs.insert(path, held);
        }
        if let Some((path, carry)) = part.carry {
            self.sliced.insert(path, carry);
        }
    }
}

/// A source non-directory that `--ignore-existing`, `--min-size` or
/// `--max-size` leaves alone when the destination has something at its
/// path: whatever is there stays, of whatever kind.
fn left_alone(s: &Entry, o: &MirrorOptions) -> bool {
    s.kind != Kind::Dir
        && (o.select.ignore_existing || (s.kind == Kind::File && o.select.size_skipped(s.size)))
}

/// Wait for the whole tree before planning this source file?
fn deferred(s: &Entry, d: Option<&Entry>, o: &MirrorOptions) -> bool {
    s.kind == Kind::File && ((o.hard_links && multi_linked(s)) || d.is_some_and(multi_linked))
}

/// The operation for a source entry that is not a directory, against the
/// destination's non-directory at the same path, if any.
fn entry_op(s: &Entry, d: Option<&Entry>, o: &MirrorOptions, wrongly_linked: bool) -> Option<Op> {
    if d.is_some() && o.select.ignore_existing {
        return None;
    }
    if s.kind == Kind::File && o.select.size_skipped(s.size) {
        return None;
    }
    match (s.kind, d) {
        (Kind::File, Some(d)) if d.kind == Kind::File => {
            if contents_differ(s, d, o) || wrongly_linked {
                Some(Op::Write(method(s, Some(d), &o.transfer)))
            } else if props_differ(s, d, o) {
                Some(Op::Meta)
            } else {
                None
            }
        }
        (Kind::File, _) => Some(Op::Write(Method::Whole)),
        (_, Some(d)) if d.kind == s.kind => {
            let same = match s.kind {
                Kind::Symlink => s.link_target == d.link_target,
                Kind::CharDev | Kind::BlockDev => s.rdev == d.rdev,
                _ => true,
            };
            if !same {
                Some(Op::Create)
            } else if props_differ(s, d, o) {
                Some(Op::Meta)
            } else {
                None
            }
        }
        _ => Some(Op::Create),
    }
}

/// Add a file item to `plan`, counting what it writes.
fn push_file(plan: &mut MirrorPlan, op: Op, s: &Entry, d: Option<&Entry>) {
    if matches!(op, Op::Write(_)) {
        plan.summary.files_to_write += 1;
        plan.summary.bytes_to_write += s.size;
    }
    plan.files.push(item(op, Some(s), d));
}

/// A file written by the plan whose interrupted transfer left a partial
/// file resumes from it (unless it is updated in place, which makes no
/// temp); that partial is kept, every other one removed with the stale
/// temps.
fn resume_partials(plan: &mut MirrorPlan) {
    let partial_of = |c: &Item| {
        let target = accord_model::partial_target(c.path.file_name())?;
        c.path.parent().unwrap_or_default().join(target).ok()
    };
    let partials: HashSet<RelPath> = plan.cleanup.iter().filter_map(partial_of).collect();
    if partials.is_empty() {
        return;
    }
    let mut resumed = HashSet::new();
    for f in plan.files.iter_mut() {
        if matches!(f.op, Op::Write(m) if m != Method::InPlace) && partials.contains(&f.path) {
            f.op = Op::Write(Method::Resume);
            resumed.insert(f.path.clone());
        }
    }
    plan.cleanup
        .retain(|c| partial_of(c).is_none_or(|p| !resumed.contains(&p)));
}

fn plan_one_dir(o: &MirrorOptions, input: &DirInput, carried: Carry) -> DirPlan {
    let mut out = DirPlan::default();
    let allowed = |e: &&&Entry| o.kinds.allows(e.kind);
    let src: Vec<&Entry> = input.src.iter().filter(allowed).copied().collect();
    let dst: Vec<&Entry> = input.dst.iter().filter(allowed).copied().collect();
    let pairs = join_sorted(&src, &dst).unwrap_or_else(|| {
        let (mut src, mut dst) = (src.clone(), dst.clone());
        for v in [&mut src, &mut dst] {
            v.sort_by(|a, b| a.path.cmp(&b.path));
            v.dedup_by(|b, a| a.path == b.path);
        }
        join_sorted(&src, &dst).expect("sorted and without repeats")
    });
    let plan = &mut out.plan;
    // Something in this directory changes: its mtime moves, so its
    // properties are set again after its subtree.
    let mut dirty = carried.dirty;
    for t in input.stale_temps {
        plan.cleanup.push(Item {
            op: Op::Cleanup,
            path: t.clone(),
            src: None,
            dst: None,
            props_differ: false,
        });
        dirty = true;
    }
    let mut holds_deferred = carried.holds_deferred;
    for &(s, d) in &pairs {
        if let Some(d) = d {
            out.dst_entries += 1;
            if multi_linked(d) {
                out.dst_linked.push((d.clone(), s.cloned()));
            }
            match s {
                None => {
                    out.extras += 1;
                    plan.deletes.push(item(Op::Delete, None, Some(d)));
                    dirty |= o.delete;
                }
                Some(s) if left_alone(s, o) => {}
                Some(s) if s.kind != d.kind && (s.kind == Kind::Dir || d.kind == Kind::Dir) => {
                    plan.deletes.push(item(Op::Delete, Some(s), Some(d)));
                    dirty = true;
                }
                _ => {}
            }
        }
        let Some(s) = s else { continue };
        plan.summary.entries_total += 1;
        if s.kind == Kind::File {
            plan.summary.files_total += 1;
            plan.summary.bytes_total += s.size;
        }
        if s.kind == Kind::Dir {
            if d.is_none_or(|d| d.kind != Kind::Dir) {
                plan.mkdirs.push(item(Op::Mkdir, Some(s), None));
                dirty = true;
            }
            continue;
        }
        // Kind changes between non-directories are replaced by rename; from
        // a directory the old one is deleted first.
        if d.is_some() && left_alone(s, o) {
            continue;
        }
        let d_usable = d.filter(|d| d.kind != Kind::Dir);
        if deferred(s, d_usable, o) {
            out.deferred.push((s.clone(), d_usable.cloned()));
            holds_deferred = true;
            continue;
        }
        if let Some(op) = entry_op(s, d_usable, o, false) {
            dirty |= op != Op::Meta;
            push_file(plan, op, s, d_usable);
        }
    }
    if input.part == (DirPart::Slice { last: false }) {
        let carry = Carry {
            dirty,
            holds_deferred,
        };
        out.carry = Some((input.path.clone(), carry));
        return out;
    }
    // This directory's own properties, after its subtree.
    if let Some(s_me) = input.src_me.filter(|e| e.kind == Kind::Dir) {
        let d_me = input.dst_me.filter(|e| e.kind == Kind::Dir);
        let differ = d_me.is_none_or(|d| props_differ(s_me, d, o));
        let planned = differ || dirty;
        if planned {
            let mut it = item(Op::DirMeta, Some(s_me), d_me);
            it.props_differ = differ;
            plan.dir_meta.push(&it);
        }
        if holds_deferred {
            let held = (s_me.clone(), d_me.cloned(), planned);
            out.held = Some((input.path.clone(), held));
        }
    }
    out
}

/// The deletion guard, on the whole tree's counts.
fn guard(acc: &Acc, o: &MirrorOptions, facts: &Facts, deleting: bool) -> Result<(), Refusal> {
    if !deleting || acc.extras == 0 || o.force {
        return Ok(());
    }
    if acc.plan.summary.entries_total == 0 {
        return Err(Refusal::SourceEmpty {
            dst_entries: acc.dst_entries,
        });
    }
    if facts.source_root_changed {
        return Err(Refusal::SourceRootChanged {
            would_delete: acc.extras,
        });
    }
    let limit = match o.max_delete {
        MaxDelete::Count(n) => n,
        MaxDelete::Fraction(f) => (acc.dst_entries as f64 * f).floor() as usize,
    };
    if acc.extras > limit {
        return Err(Refusal::TooManyDeletes {
            would_delete: acc.extras,
            dst_entries: acc.dst_entries,
            limit,
        });
    }
    Ok(())
}

/// Plan the files that waited for the whole tree: hard-link groups of the
/// source led by their first path (one the destination already has as a
/// file of the group, if any), and files whose destination inode is shared
/// with a name outside their source group (rewritten, not changed through
/// the other name). Seeing `one_directory`, a file whose destination inode
/// has names out of sight is rewritten unless the source links it too:
/// they may be names the source has as other files.
fn plan_deferred(acc: &mut Acc, o: &MirrorOptions, one_directory: bool) {
    let mut deferred = std::mem::take(&mut acc.deferred);
    deferred.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    let dst_linked = std::mem::take(&mut acc.dst_linked);
    // What the destination has at a deferred path, and what the source has
    // at a multi-linked destination path.
    let dst_at: HashMap<&RelPath, Option<&Entry>> = deferred
        .iter()
        .map(|(s, d)| (&s.path, d.as_ref()))
        .collect();
    let src_at: HashMap<&RelPath, Option<&Entry>> = dst_linked
        .iter()
        .map(|(d, s)| (&d.path, s.as_ref()))
        .collect();
    let mut group_of: HashMap<(u64, u64), Vec<&RelPath>> = HashMap::new();
    if o.hard_links {
        for (s, _) in deferred.iter().filter(|(s, _)| multi_linked(s)) {
            group_of.entry((s.dev, s.ino)).or_default().push(&s.path);
        }
    }
    let mut leader_of: HashMap<&RelPath, &RelPath> = HashMap::new();
    for paths in group_of.values_mut() {
        // Lead with a path the destination already has as a file, so an
        // existing copy is kept and only links are added.
        if let Some(i) = paths
            .iter()
            .position(|p| dst_at[p].is_some_and(|d| d.kind == Kind::File))
        {
            paths.swap(0, i);
        }
        for p in &paths[1..] {
            leader_of.insert(*p, paths[0]);
        }
    }
    let mut dst_sharing: HashMap<(u64, u64), Vec<&RelPath>> = HashMap::new();
    for (d, _) in &dst_linked {
        dst_sharing.entry((d.dev, d.ino)).or_default().push(&d.path);
    }
    // A destination file is wrongly linked if it shares its inode with another
    // path that the source has as a file outside its group.
    let wrongly_linked = |s: &Entry, d: &Entry| -> bool {
        if d.nlink <= 1 {
            return false;
        }
        let Some(others) = dst_sharing.get(&(d.dev, d.ino)) else {
            return false;
        };
        let grouped = o.hard_links && s.nlink > 1;
        if one_directory && !grouped && (others.len() as u64) < d.nlink {
            return true;
        }
        let group = grouped.then(|| group_of.get(&(s.dev, s.ino))).flatten();
        others.iter().any(|q| {
            **q != s.path
                && src_at
                    .get(q)
                    .copied()
                    .flatten()
                    .is_some_and(|qe| qe.kind == Kind::File)
                && !group.is_some_and(|g| g.contains(q))
        })
    };
    let mut dirtied: Vec<RelPath> = Vec::new();
    let mut rewritten: HashSet<&RelPath> = HashSet::new();
    let mut followers: Vec<(&Entry, Option<&Entry>, &RelPath)> = Vec::new();
    for (s, d) in &deferred {
        if let Some(leader) = leader_of.get(&s.path) {
            followers.push((s, d.as_ref(), leader));
            continue;
        }
        let d = d.as_ref();
        let wrong = d.is_some_and(|d| wrongly_linked(s, d));
        if let Some(op) = entry_op(s, d, o, wrong) {
            if matches!(op, Op::Write(_)) {
                rewritten.insert(&s.path);
            }
            if op != Op::Meta {
                dirtied.push(s.path.parent().unwrap_or_default());
            }
            push_file(&mut acc.plan, op, s, d);
        }
    }
    for (s, d, leader) in followers {
        // The names of a group share one size: when its leader is left
        // out by size, so are they.
        if (d.is_some() && left_alone(s, o)) || o.select.size_skipped(s.size) {
            continue;
        }
        let ok = match (d, dst_at.get(leader).copied().flatten()) {
            (Some(d), Some(l)) => {
                d.kind == Kind::File
                    && l.kind == Kind::File
                    && d.ino == l.ino
                    && d.dev == l.dev
                    && !rewritten.contains(leader)
                    && !wrongly_linked(s, d)
            }
            _ => false,
        };
        if !ok {
            dirtied.push(s.path.parent().unwrap_or_default());
            let op = Op::Link {
                leader: leader.clone(),
            };
            acc.plan.links.push(item(op, Some(s), d));
        }
    }
    // The directories whose entries these change have their properties set
    // again after their subtree.
    for dir in dirtied {
        if let Some((s_me, d_me, planned)) = acc.held_dirs.get_mut(&dir) {
            if !*planned {
                *planned = true;
                acc.plan
                    .dir_meta
                    .push(&item(Op::DirMeta, Some(s_me), d_me.as_ref()));
            }
        }
    }
}

/// Each phase in the order the engine runs it.
fn order(plan: &mut MirrorPlan) {
    // Unstable sorts: a phase holds each path at most once, so the order is
    // the same, and no buffer of half the items is allocated beside them
    // (an initial copy's files phase is as long as the tree).
    let by_path = |a: &Item, b: &Item| a.path.cmp(&b.path);
    plan.cleanup.sort_unstable_by(by_path);
    // Deepest first, so a directory comes after everything under it.
    plan.deletes.sort_unstable_by(|a, b| b.path.cmp(&a.path));
    plan.mkdirs.sort_unstable_by(by_path);
    plan.files.sort_unstable_by(by_path);
    plan.links.sort_unstable_by(by_path);
    plan.dir_meta.sort_deepest_first();
}

/// Plan a mirror of `src` onto `dst`, two whole scans (any order; the root
/// entry may be present in both): each directory pair in turn through a
/// [`MirrorPlanner`]. Returns the guard's refusal instead of a plan when
/// the run must stop before changing anything.
pub fn mirror_plan(
    src: &[Entry],
    dst: &[Entry],
    stale_temps: &[RelPath],
    o: &MirrorOptions,
    facts: &Facts,
) -> Result<MirrorPlan, Refusal> {
    let planner = MirrorPlanner::new(o);
    let (src_dirs, src_children) = by_directory(src);
    let (dst_dirs, dst_children) = by_directory(dst);
    let mut temps: HashMap<RelPath, Vec<RelPath>> = HashMap::new();
    for t in stale_temps {
        temps
            .entry(t.parent().unwrap_or_default())
            .or_default()
            .push(t.clone());
    }
    let mut dirs: Vec<RelPath> = src_dirs
        .keys()
        .chain(dst_dirs.keys())
        .map(|p| (*p).clone())
        .chain(temps.keys().cloned())
        .chain(std::iter::once(RelPath::root()))
        .collect();
    dirs.sort();
    dirs.dedup();
    let none: Vec<&Entry> = Vec::new();
    for path in &dirs {
        planner.plan_dir(&DirInput {
            path,
            src_me: src_dirs.get(path).copied(),
            dst_me: dst_dirs.get(path).copied(),
            src: src_children.get(path).unwrap_or(&none),
            dst: dst_children.get(path).unwrap_or(&none),
            stale_temps: temps.get(path).map_or(&[], Vec::as_slice),
            part: DirPart::Whole,
        });
    }
    planner.finish(facts)
}

type ByDir<'a> = HashMap<RelPath, Vec<&'a Entry>>;

/// The directories of a scan by path, and every entry under its parent's
/// path (children sorted by path; a repeated path keeps its first entry).
fn by_directory(entries: &[Entry]) -> (HashMap<&RelPath, &Entry>, ByDir<'_>) {
    let mut dirs: HashMap<&RelPath, &Entry> = HashMap::new();
    let mut children: ByDir = HashMap::new();
    let mut seen: HashSet<&RelPath> = HashSet::new();
    for e in entries {
        if !seen.insert(&e.path) {
            continue;
        }
        if e.kind == Kind::Dir {
            dirs.insert(&e.path, e);
        }
        if let Some(parent) = e.path.parent() {
            children.entry(parent).or_default().push(e);
        }
    }
    for v in children.values_mut() {
        v.sort_by(|a, b| a.path.cmp(&b.path));
    }
    (dirs, children)
}
