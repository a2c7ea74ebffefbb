//! Two-way sync planning (update detection, then reconciliation) against a
//! model of two replicas and their archives, checked after every sync:
//!
//! - no change is lost: each update is propagated, or its path is a
//!   conflict (or under one);
//! - outside conflicts the replicas are equal;
//! - conflicts are left exactly as they were on both sides;
//! - a second sync, with the archives updated as the plan says, has
//!   nothing left to do but the same conflicts.
//!
//! Exhaustively over every (archive, side A, side B) triple of a small
//! alphabet of states of one path, and over random sequences of operations
//! on both replicas with syncs in between.

use accord_model::{Entry, Kind, Observed, Props, RelPath, Time};
use accord_plan::detect::SYNCED_MODE_BITS;
use accord_plan::reconcile::{contents_updated, props_updated};
use accord_plan::{
    detect, reconcile_tree, Action, Choice, ConflictReason, DetectOptions, Detection, PathUpdate,
    PlanEdit, Policy, Preference, ReconcileOptions, Side, SideState, SyncItem, Update,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Body {
    /// A file with contents number n.
    File(u8),
    /// A symlink to target number n.
    Link(u8),
    Dir,
    Fifo,
    /// A character device with device number n.
    Device(u8),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    body: Body,
    mode: u32,
    /// Moves with a write or a touch, not with a chmod; a copy keeps it
    /// only under `--times`.
    mtime: i64,
    /// Stands for what is each host's own and moves with every change:
    /// inode and ctime.
    stamp: i64,
}

impl Node {
    /// What a sync keeps equal on both sides: contents, permissions, and a
    /// file's mtime under `--times`.
    fn synced(&self, times: bool) -> (Body, u32, i64) {
        let mode = match self.body {
            Body::Link(_) => 0,
            _ => self.mode & SYNCED_MODE_BITS,
        };
        let mtime = match self.body {
            Body::File(_) if times => self.mtime,
            _ => 0,
        };
        (self.body.clone(), mode, mtime)
    }
}

type Tree = BTreeMap<RelPath, Node>;
type Archive = BTreeMap<RelPath, Observed>;

#[derive(Clone, Debug, Default)]
struct World {
    a: Tree,
    b: Tree,
    archive_a: Archive,
    archive_b: Archive,
    last_stamp: i64,
    /// Where the last sync's `--keep-both` kept each loser.
    kept: BTreeMap<RelPath, RelPath>,
}

impl World {
    fn tree(&self, side: Side) -> &Tree {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }

    fn tree_mut(&mut self, side: Side) -> &mut Tree {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    fn archive(&self, side: Side) -> &Archive {
        match side {
            Side::A => &self.archive_a,
            Side::B => &self.archive_b,
        }
    }

    fn archive_mut(&mut self, side: Side) -> &mut Archive {
        match side {
            Side::A => &mut self.archive_a,
            Side::B => &mut self.archive_b,
        }
    }

    fn fresh_stamp(&mut self) -> i64 {
        self.last_stamp += 1;
        self.last_stamp
    }
}

fn path(text: &str) -> RelPath {
    RelPath::new(text.as_bytes()).unwrap()
}

fn kind_of_special(body: &Body) -> Kind {
    match body {
        Body::Fifo => Kind::Fifo,
        Body::Device(_) => Kind::CharDev,
        _ => Kind::Dir,
    }
}

/// A node as a scan sees it; a file's fingerprint only when asked for.
fn observe(at: &RelPath, node: &Node, with_fingerprint: bool) -> Observed {
    let (kind, size, link_target, hash) = match node.body {
        // Sizes differ between some contents and not others, so that fast
        // detection meets both cases.
        Body::File(n) => (Kind::File, 10 + u64::from(n % 2), None, Some([n; 32])),
        Body::Link(n) => (Kind::Symlink, 2, Some(vec![b't', b'0' + n]), None),
        Body::Dir | Body::Fifo | Body::Device(_) => (kind_of_special(&node.body), 0, None, None),
    };
    let rdev = match node.body {
        Body::Device(n) => u64::from(n),
        _ => 0,
    };
    let time = |sec| Time { sec, nsec: 0 };
    Observed {
        entry: Entry {
            path: at.clone(),
            kind,
            size,
            props: Props {
                mode: node.mode,
                uid: 0,
                gid: 0,
                mtime: time(node.mtime),
                xattrs: None,
            },
            dev: 1,
            ino: node.stamp as u64,
            nlink: 1,
            rdev,
            blocks: 0,
            link_target,
            hash: hash.filter(|_| with_fingerprint),
        },
        ctime: time(node.stamp),
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct SyncOptions {
    detect: DetectOptions,
    reconcile: ReconcileOptions,
}

/// Detection on one side, fingerprinting when asked, as the engine will.
fn detect_side(world: &World, side: Side, at: &RelPath, options: &DetectOptions) -> SideState {
    let archived = world.archive(side).get(at);
    let node = world.tree(side).get(at);
    let fast = node.map(|node| observe(at, node, false));
    let (update, current) = match detect(archived, fast.as_ref(), options) {
        Detection::Decided(update) => (update, fast),
        Detection::NeedsFingerprint => {
            let full = node.map(|node| observe(at, node, true));
            match detect(archived, full.as_ref(), options) {
                Detection::Decided(update) => (update, full),
                Detection::NeedsFingerprint => panic!("{at}: asked for a fingerprint it had"),
            }
        }
    };
    SideState::new(update, archived, current.map(|c| c.entry))
}

struct Outcome {
    updates: Vec<PathUpdate>,
    items: Vec<SyncItem>,
}

fn plan(world: &World, options: &SyncOptions) -> Outcome {
    let paths: BTreeSet<RelPath> = [&world.a, &world.b]
        .into_iter()
        .flat_map(|tree| tree.keys())
        .chain(world.archive_a.keys())
        .chain(world.archive_b.keys())
        .cloned()
        .collect();
    let updates: Vec<PathUpdate> = paths
        .into_iter()
        .filter_map(|at| {
            let a = detect_side(world, Side::A, &at, &options.detect);
            let b = detect_side(world, Side::B, &at, &options.detect);
            let listed = a.update != Update::Unchanged || b.update != Update::Unchanged;
            listed.then_some(PathUpdate { path: at, a, b })
        })
        .collect();
    let items = reconcile_tree(&updates, &options.reconcile).unwrap();
    Outcome { updates, items }
}

/// Carry out a plan the way the engine's phases will: deletions deepest
/// first, then everything else parents first. A copied node is new on the
/// receiving host (a fresh stamp), with its mtime under `--times` and a
/// new one otherwise.
fn apply(world: &mut World, items: &[SyncItem], times: bool) {
    for item in items.iter().rev() {
        if let Action::Delete { on } = item.action {
            world.tree_mut(on).remove(&item.path);
        }
    }
    for item in items {
        apply_one(world, item, times);
    }
}

fn apply_one(world: &mut World, item: &SyncItem, times: bool) {
    let at = &item.path;
    let stamp = world.fresh_stamp();
    let carried = |source: &Node| if times { source.mtime } else { stamp };
    match item.action {
        Action::Copy { from, to } => {
            let source = &world.tree(from)[at];
            let node = Node {
                mtime: carried(source),
                stamp,
                ..source.clone()
            };
            world.tree_mut(to).insert(at.clone(), node);
        }
        Action::CopyProps { from, to } => {
            let source = &world.tree(from)[at];
            let (mode, mtime) = (source.mode, source.mtime);
            let node = world.tree_mut(to).get_mut(at).unwrap();
            (node.mode, node.stamp) = (mode, stamp);
            if times {
                node.mtime = mtime;
            }
        }
        Action::CopyContentsAndPropsBack { from, to } => {
            let source = &world.tree(from)[at];
            let (body, mtime) = (source.body.clone(), carried(source));
            let mode = world.tree(to)[at].mode;
            let node = world.tree_mut(to).get_mut(at).unwrap();
            (node.body, node.mtime, node.stamp) = (body, mtime, stamp);
            let stamp = world.fresh_stamp();
            let node = world.tree_mut(from).get_mut(at).unwrap();
            (node.mode, node.stamp) = (mode, stamp);
        }
        Action::Rename { on } => {
            let from = &item.moved.as_ref().expect("a rename has a source").from;
            move_tree(world.tree_mut(on), from, at);
        }
        Action::KeepBoth { winner } => {
            let mtimes = [winner, winner.other()].map(|side| carried(&world.tree(side)[at]));
            keep_both(world, at, winner, mtimes, stamp);
        }
        // Moved by its directory's rename.
        Action::MovedWith { .. }
        | Action::Delete { .. }
        | Action::Agree
        | Action::Nothing
        | Action::Conflict(_) => {}
    }
}

/// Where the model keeps a loser of `--keep-both`: the first of
/// `NAME.keptN` that neither side nor archive holds (the engine names it
/// `NAME.conflict-HOST-DATE`, then `-2`, `-3`…).
fn kept_path(world: &World, at: &RelPath) -> RelPath {
    (1..)
        .map(|n| path(&format!("{at}.kept{n}")))
        .find(|kept| {
            !world.a.contains_key(kept)
                && !world.b.contains_key(kept)
                && !world.archive_a.contains_key(kept)
                && !world.archive_b.contains_key(kept)
        })
        .expect("a free name")
}

/// `--keep-both`: the loser's side links its version to the kept name
/// (same node) and takes the winner's; the winner's side gets a copy of
/// the loser's version under the kept name.
/// `mtimes`: what the winner's and the loser's copies get.
fn keep_both(world: &mut World, at: &RelPath, winner: Side, mtimes: [i64; 2], stamp: i64) {
    let loser = winner.other();
    let kept = world.tree(loser)[at].clone();
    let kept_at = kept_path(world, at);
    world.kept.insert(at.clone(), kept_at.clone());
    let won = Node {
        mtime: mtimes[0],
        stamp,
        ..world.tree(winner)[at].clone()
    };
    world.tree_mut(loser).insert(kept_at.clone(), kept.clone());
    world.tree_mut(loser).insert(at.clone(), won);
    let copy_stamp = world.fresh_stamp();
    let copy = Node {
        stamp: copy_stamp,
        mtime: mtimes[1],
        ..kept
    };
    world.tree_mut(winner).insert(kept_at, copy);
}

/// Rename `from` (with its subtree) to `to`, keeping every node as it is.
fn move_tree(tree: &mut Tree, from: &RelPath, to: &RelPath) {
    let moved: Vec<RelPath> = tree
        .keys()
        .filter(|p| p.starts_with(from))
        .cloned()
        .collect();
    for old in moved {
        let node = tree.remove(&old).unwrap();
        let rest = &old.as_bytes()[from.as_bytes().len()..];
        let new = RelPath::new(&[to.as_bytes(), rest].concat()).unwrap();
        tree.insert(new, node);
    }
}

/// After propagation, each side's archive records what it now holds at
/// every path the plan settled (conflicts keep their old entries).
fn record(world: &mut World, items: &[SyncItem]) {
    for item in items.iter().filter(|item| item.conflict().is_none()) {
        if matches!(item.action, Action::KeepBoth { .. }) {
            let kept = world.kept[&item.path].clone();
            record_path(world, &kept);
        }
        for side in [Side::A, Side::B] {
            let now = world.tree(side).get(&item.path);
            let observed = now.map(|node| observe(&item.path, node, true));
            let archive = world.archive_mut(side);
            if let Some(moved) = &item.moved {
                archive.remove(&moved.from);
            }
            match observed {
                Some(observed) => archive.insert(item.path.clone(), observed),
                None => archive.remove(&item.path),
            };
        }
    }
}

/// Both archives record what their side holds at `at`.
fn record_path(world: &mut World, at: &RelPath) {
    for side in [Side::A, Side::B] {
        let observed = world.tree(side).get(at).map(|node| observe(at, node, true));
        match observed {
            Some(observed) => world.archive_mut(side).insert(at.clone(), observed),
            None => world.archive_mut(side).remove(at),
        };
    }
}

fn sync(world: &mut World, options: &SyncOptions) -> Outcome {
    world.kept.clear();
    let outcome = plan(world, options);
    apply(world, &outcome.items, options.detect.props.times);
    record(world, &outcome.items);
    outcome
}

/// A path a conflict leaves alone: the path, and its subtree unless both
/// sides hold a directory there.
struct Zone {
    path: RelPath,
    subtree: bool,
}

/// The conflicts of a plan: those left to the user, and with
/// `with_resolved` those a policy resolved too.
fn zones(items: &[SyncItem], with_resolved: bool) -> Vec<Zone> {
    let found_conflict = |item: &SyncItem| matches!(item.overridden, Some(o) if matches!(o.found, Action::Conflict(_)));
    items
        .iter()
        .filter(|item| item.conflict().is_some() || (with_resolved && found_conflict(item)))
        .map(|item| {
            let is_dir = |entry: Option<&Entry>| entry.is_some_and(|e| e.kind == Kind::Dir);
            Zone {
                path: item.path.clone(),
                subtree: !(is_dir(item.a.as_deref()) && is_dir(item.b.as_deref())),
            }
        })
        .collect()
}

fn in_zone(zones: &[Zone], at: &RelPath) -> bool {
    zones
        .iter()
        .any(|zone| zone.path == *at || (zone.subtree && at.starts_with(&zone.path)))
}

fn all_paths(worlds: &[&World]) -> BTreeSet<RelPath> {
    worlds
        .iter()
        .flat_map(|world| world.a.keys().chain(world.b.keys()))
        .cloned()
        .collect()
}

fn well_formed(tree: &Tree, side: Side) -> Result<(), String> {
    for at in tree.keys() {
        let parent = at.parent().unwrap();
        let parent_is_dir = parent.is_root()
            || matches!(
                tree.get(&parent),
                Some(Node {
                    body: Body::Dir,
                    ..
                })
            );
        if !parent_is_dir {
            return Err(format!("{side:?}: {at} is left without its directory"));
        }
    }
    Ok(())
}

/// Everything checked after one sync (see the file's comment).
fn check_sync(
    before: &World,
    after: &World,
    outcome: &Outcome,
    options: &SyncOptions,
) -> Result<(), String> {
    well_formed(&after.a, Side::A)?;
    well_formed(&after.b, Side::B)?;
    let left = zones(&outcome.items, false);
    for at in all_paths(&[before, after]) {
        if in_zone(&left, &at) {
            for side in [Side::A, Side::B] {
                if before.tree(side).get(&at) != after.tree(side).get(&at) {
                    return Err(format!("{side:?}: conflict {at} was changed"));
                }
            }
        } else {
            let times = options.detect.props.times;
            let (x, y) = (
                after.a.get(&at).map(|node| node.synced(times)),
                after.b.get(&at).map(|node| node.synced(times)),
            );
            if x != y {
                return Err(format!("{at} differs after sync: {x:?} / {y:?}"));
            }
        }
    }
    if options.reconcile.force.is_none() {
        no_change_lost(before, after, outcome)?;
    }
    Ok(())
}

/// Each update outside a conflict (resolved or not) is what both sides now
/// hold: its contents, its permissions when it changed them, and a file's
/// new mtime (under `--times`) unless the other side's new contents came
/// with their own.
fn no_change_lost(before: &World, after: &World, outcome: &Outcome) -> Result<(), String> {
    let excused = zones(&outcome.items, true);
    let checked = outcome
        .updates
        .iter()
        .filter(|u| !in_zone(&excused, &u.path));
    for update in checked {
        for side in [Side::A, Side::B] {
            let mine = before.tree(side).get(&update.path);
            for holder in [Side::A, Side::B] {
                let there = after.tree(holder).get(&update.path);
                if let Some(what) = lost_part(update, side, mine, there) {
                    return Err(format!(
                        "{side:?}'s new {what} at {} is not on {holder:?}",
                        update.path
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Which part of `side`'s update at this path (`mine` before the sync) is
/// missing from what a side holds after it (`there`).
fn lost_part(
    update: &PathUpdate,
    side: Side,
    mine: Option<&Node>,
    there: Option<&Node>,
) -> Option<&'static str> {
    let state = &update.side(side).update;
    let other = &update.side(side.other()).update;
    let body = |node: Option<&Node>| node.map(|n| n.body.clone());
    let mode = |node: Option<&Node>| node.map(|n| n.synced(false).1);
    let mtime = |node: Option<&Node>| node.map(|n| n.mtime);
    let mtime_changed = matches!(state, Update::Changed(c) if c.mtime);
    if contents_updated(state) && body(there) != body(mine) {
        Some("contents")
    } else if props_updated(state) && mode(there) != mode(mine) {
        Some("permissions")
    } else if mtime_changed && !contents_updated(other) && mtime(there) != mtime(mine) {
        Some("mtime")
    } else {
        None
    }
}

/// A second sync right after the first finds only the same conflicts.
fn check_second_sync(after: &World, first: &Outcome, options: &SyncOptions) -> Result<(), String> {
    let again = plan(after, options);
    if let Some(item) = again.items.iter().find(|item| item.conflict().is_none()) {
        return Err(format!("second sync still has {item:?}"));
    }
    let conflicts = |outcome: &Outcome| -> BTreeSet<RelPath> {
        outcome
            .items
            .iter()
            .filter(|item| item.conflict().is_some())
            .map(|item| item.path.clone())
            .collect()
    };
    if conflicts(&again) != conflicts(first) {
        return Err(format!(
            "conflicts changed: {:?} then {:?}",
            conflicts(first),
            conflicts(&again)
        ));
    }
    Ok(())
}

/// Sync, check, and check the sync after it.
fn sync_and_check(world: &mut World, options: &SyncOptions) -> Result<Outcome, String> {
    let before = world.clone();
    let outcome = sync(world, options);
    check_sync(&before, world, &outcome, options)
        .and_then(|()| check_second_sync(world, &outcome, options))
        .map_err(|error| format!("{error}\nbefore: {before:#?}\nplan: {:#?}", outcome.items))?;
    Ok(outcome)
}

// ---- The exhaustive test over one path's states ------------------------

fn file(n: u8, mode: u32, stamp: i64) -> Node {
    Node {
        body: Body::File(n),
        mode,
        mtime: stamp,
        stamp,
    }
}

fn link(n: u8, stamp: i64) -> Node {
    Node {
        body: Body::Link(n),
        mode: 0o777,
        mtime: stamp,
        stamp,
    }
}

fn special(body: Body, stamp: i64) -> Node {
    Node {
        body,
        mode: 0o644,
        mtime: stamp,
        stamp,
    }
}

fn dir(mode: u32, stamp: i64) -> Node {
    Node {
        body: Body::Dir,
        mode,
        mtime: stamp,
        stamp,
    }
}

/// The alphabet of states of path `p` (and of `p/c` beneath a directory).
/// A node keeps its stamp across states where it is unchanged, so the same
/// state in the archive and on a side reads as unchanged.
fn state(index: usize) -> Vec<(&'static str, Node)> {
    let child = |node: Node| vec![("p", dir(0o755, 18)), ("p/c", node)];
    match index {
        0 => vec![],
        1 => vec![("p", file(1, 0o644, 11))],
        2 => vec![("p", file(2, 0o644, 12))],
        3 => vec![("p", file(3, 0o644, 13))],
        // State 1 with other permissions (a chmod keeps the mtime).
        4 => vec![(
            "p",
            Node {
                mtime: 11,
                ..file(1, 0o600, 14)
            },
        )],
        // State 1 touched: same contents and mode, new metadata.
        5 => vec![("p", file(1, 0o644, 15))],
        6 => vec![("p", link(1, 16))],
        7 => vec![("p", link(2, 17))],
        8 => vec![("p", dir(0o755, 18))],
        9 => child(file(1, 0o644, 19)),
        10 => child(file(2, 0o644, 20)),
        11 => vec![("p", dir(0o700, 21)), ("p/c", file(1, 0o644, 19))],
        12 => child(file(1, 0o600, 22)),
        13 => vec![("p", special(Body::Fifo, 23))],
        14 => vec![("p", special(Body::Device(1), 24))],
        15 => vec![("p", special(Body::Device(2), 25))],
        _ => unreachable!(),
    }
}

const STATES: usize = 16;

fn tree_of(index: usize) -> Tree {
    state(index)
        .into_iter()
        .map(|(at, node)| (path(at), node))
        .collect()
}

fn archive_of(tree: &Tree) -> Archive {
    tree.iter()
        .map(|(at, node)| (at.clone(), observe(at, node, true)))
        .collect()
}

fn world_of(archived: usize, a: usize, b: usize) -> World {
    let agreed = archive_of(&tree_of(archived));
    World {
        a: tree_of(a),
        b: tree_of(b),
        archive_a: agreed.clone(),
        archive_b: agreed,
        last_stamp: 1000,
        kept: BTreeMap::new(),
    }
}

fn option_sets() -> Vec<SyncOptions> {
    let reconcile = |prefer, force| ReconcileOptions {
        prefer,
        force,
        ..ReconcileOptions::default()
    };
    let checksum = DetectOptions {
        checksum: true,
        ..DetectOptions::default()
    };
    vec![
        SyncOptions::default(),
        SyncOptions {
            detect: checksum,
            ..SyncOptions::default()
        },
        with_times(SyncOptions::default()),
        with_times(SyncOptions {
            reconcile: reconcile(Some(Preference::Older), None),
            ..SyncOptions::default()
        }),
        SyncOptions {
            reconcile: reconcile(Some(Preference::Side(Side::A)), None),
            ..SyncOptions::default()
        },
        SyncOptions {
            reconcile: reconcile(Some(Preference::Newer), None),
            ..SyncOptions::default()
        },
        SyncOptions {
            reconcile: reconcile(None, Some(Side::B)),
            ..SyncOptions::default()
        },
        SyncOptions {
            reconcile: keep_both_options(None),
            ..SyncOptions::default()
        },
        with_times(SyncOptions {
            reconcile: keep_both_options(Some(Preference::Older)),
            ..SyncOptions::default()
        }),
        SyncOptions {
            reconcile: ReconcileOptions {
                force: Some(Side::A),
                ..keep_both_options(None)
            },
            ..SyncOptions::default()
        },
    ]
}

fn keep_both_options(prefer: Option<Preference>) -> ReconcileOptions {
    ReconcileOptions {
        prefer,
        keep_both: true,
        ..ReconcileOptions::default()
    }
}

#[test]
fn every_triple_of_archive_and_side_states_syncs_safely() {
    for options in option_sets() {
        for archived in 0..STATES {
            for a in 0..STATES {
                for b in 0..STATES {
                    let mut world = world_of(archived, a, b);
                    if let Err(error) = sync_and_check(&mut world, &options) {
                        panic!("archive {archived}, A {a}, B {b}, {options:?}: {error}");
                    }
                }
            }
        }
    }
}

/// The winner `--keep-both` must pick at a path: the `--prefer` rule's
/// when it decides, else the newer mtime, A on a tie.
fn expected_keep_both_winner(before: &World, at: &RelPath, prefer: Option<Preference>) -> Side {
    let (a, b) = (before.a[at].mtime, before.b[at].mtime);
    let newer = if b > a { Side::B } else { Side::A };
    match prefer {
        Some(Preference::Side(side)) => side,
        Some(Preference::Newer) if a != b => newer,
        Some(Preference::Older) if a != b => newer.other(),
        _ => newer,
    }
}

/// Every conflict between two changed non-directories is kept both ways
/// (the winner at the path on both sides, the loser beside it on both),
/// and nothing else is.
fn check_kept_both(
    before: &World,
    after: &World,
    outcome: &Outcome,
    prefer: Option<Preference>,
) -> Result<(), String> {
    let non_dir = |tree: &Tree, at: &RelPath| tree.get(at).is_some_and(|n| n.body != Body::Dir);
    for item in &outcome.items {
        let at = &item.path;
        if item.conflict() == Some(ConflictReason::BothChanged)
            && non_dir(&before.a, at)
            && non_dir(&before.b, at)
        {
            return Err(format!("{at}: a conflict of two non-directories was left"));
        }
        let Action::KeepBoth { winner } = item.action else {
            continue;
        };
        if winner != expected_keep_both_winner(before, at, prefer) {
            return Err(format!("{at}: {winner:?} won against the rule"));
        }
        let (won, lost) = (&before.tree(winner)[at], &before.tree(winner.other())[at]);
        if won.body == lost.body || !non_dir(&before.a, at) || !non_dir(&before.b, at) {
            return Err(format!("{at}: kept both where there was no such conflict"));
        }
        for side in [Side::A, Side::B] {
            let tree = after.tree(side);
            if tree[at].body != won.body || tree[&after.kept[at]].body != lost.body {
                return Err(format!("{side:?}: {at} does not hold both versions"));
            }
        }
    }
    Ok(())
}

#[test]
fn keep_both_keeps_both_versions_of_a_conflict_on_both_sides() {
    let prefers = [
        None,
        Some(Preference::Side(Side::B)),
        Some(Preference::Newer),
        Some(Preference::Older),
    ];
    let mut kept = 0;
    for prefer in prefers {
        let options = SyncOptions {
            reconcile: keep_both_options(prefer),
            ..SyncOptions::default()
        };
        for archived in 0..STATES {
            for a in 0..STATES {
                for b in 0..STATES {
                    let mut world = world_of(archived, a, b);
                    let before = world.clone();
                    let outcome = sync_and_check(&mut world, &options)
                        .unwrap_or_else(|e| panic!("{archived}/{a}/{b} {prefer:?}: {e}"));
                    if let Err(e) = check_kept_both(&before, &world, &outcome, prefer) {
                        panic!("archive {archived}, A {a}, B {b}, {prefer:?}: {e}");
                    }
                    kept += outcome
                        .items
                        .iter()
                        .filter(|i| matches!(i.action, Action::KeepBoth { .. }))
                        .count();
                }
            }
        }
    }
    // Files against files, links and specials, both ways, for each rule.
    assert!(kept > 100, "only {kept} paths were kept both");
}

#[test]
fn keep_both_gives_way_to_force_and_leaves_other_conflicts() {
    let options = |force| SyncOptions {
        reconcile: ReconcileOptions {
            force,
            ..keep_both_options(None)
        },
        ..SyncOptions::default()
    };
    // A file edited on both sides: kept both, unless --force decides.
    let edited = world_of(1, 2, 3);
    let outcome = plan(&edited, &options(None));
    assert_eq!(outcome.items.len(), 1);
    // Equal-stamp states: B's file 3 (mtime 13) is newer than A's 2 (12).
    assert_eq!(
        outcome.items[0].action,
        Action::KeepBoth { winner: Side::B }
    );
    assert_eq!(
        outcome.items[0].overridden.map(|o| o.by),
        Some(Policy::KeepBoth(Side::B))
    );
    let forced = plan(&edited, &options(Some(Side::A)));
    assert!(matches!(
        forced.items[0].action,
        Action::Copy { from: Side::A, .. }
    ));
    // Deleted on A, edited on B; a directory against a file: left alone.
    for (archived, a, b) in [(1, 0, 2), (9, 8, 10), (1, 8, 2)] {
        let outcome = plan(&world_of(archived, a, b), &options(None));
        assert!(
            outcome
                .items
                .iter()
                .all(|i| !matches!(i.action, Action::KeepBoth { .. })),
            "{archived}/{a}/{b}: {:?}",
            outcome.items
        );
        assert!(outcome.items.iter().any(|i| i.conflict().is_some()));
    }
}

#[test]
fn policies_leave_no_conflict_where_they_can_decide() {
    let force = SyncOptions {
        reconcile: ReconcileOptions {
            force: Some(Side::B),
            ..ReconcileOptions::default()
        },
        ..SyncOptions::default()
    };
    let prefer = SyncOptions {
        reconcile: ReconcileOptions {
            prefer: Some(Preference::Side(Side::A)),
            ..ReconcileOptions::default()
        },
        ..SyncOptions::default()
    };
    for archived in 0..STATES {
        for a in 0..STATES {
            for b in 0..STATES {
                let mut forced = world_of(archived, a, b);
                let before = forced.b.clone();
                sync(&mut forced, &force);
                let synced = |tree: &Tree| -> Vec<_> {
                    tree.iter()
                        .map(|(at, node)| (at.clone(), node.synced(false)))
                        .collect()
                };
                assert_eq!(synced(&forced.a), synced(&before), "{archived} {a} {b}");
                assert_eq!(forced.b, before, "--force B changed B: {archived} {a} {b}");
                let mut preferred = world_of(archived, a, b);
                let outcome = sync(&mut preferred, &prefer);
                assert!(outcome.items.iter().all(|i| i.conflict().is_none()));
                assert_eq!(
                    synced(&preferred.a),
                    synced(&preferred.b),
                    "{archived} {a} {b}"
                );
            }
        }
    }
}

// ---- Named scenarios: the paper's rules one at a time -------------------

fn only_item(world: &World, options: &SyncOptions) -> SyncItem {
    let outcome = plan(world, options);
    assert_eq!(outcome.items.len(), 1, "{:#?}", outcome.items);
    outcome.items[0].clone()
}

#[test]
fn a_touch_on_one_side_and_an_edit_on_the_other_propagates_the_edit() {
    let world = world_of(1, 5, 2);
    let item = only_item(&world, &SyncOptions::default());
    assert_eq!(
        item.action,
        Action::Copy {
            from: Side::B,
            to: Side::A
        }
    );
}

#[test]
fn equal_edits_on_both_sides_agree_silently() {
    assert_eq!(
        only_item(&world_of(1, 2, 2), &SyncOptions::default()).action,
        Action::Agree
    );
}

#[test]
fn different_edits_on_both_sides_are_a_conflict() {
    let item = only_item(&world_of(1, 2, 3), &SyncOptions::default());
    assert_eq!(item.conflict(), Some(ConflictReason::BothChanged));
}

#[test]
fn a_deleted_directory_against_an_edit_beneath_it_is_one_conflict() {
    let world = world_of(9, 0, 10);
    let item = only_item(&world, &SyncOptions::default());
    assert_eq!(item.path, path("p"));
    assert_eq!(
        item.conflict(),
        Some(ConflictReason::ChangedBeneathRemovedDirectory {
            removed_on: Side::A
        })
    );
}

#[test]
fn a_deleted_directory_with_nothing_changed_beneath_is_deleted() {
    let outcome = plan(&world_of(9, 0, 9), &SyncOptions::default());
    let actions: Vec<(String, Action)> = outcome
        .items
        .iter()
        .map(|i| (i.path.display(), i.action))
        .collect();
    let delete_b = Action::Delete { on: Side::B };
    assert_eq!(actions, [("p".into(), delete_b), ("p/c".into(), delete_b)]);
}

#[test]
fn a_lost_archive_agrees_equal_files_and_conflicts_different_ones() {
    // Archive state 0: nothing agreed, both sides' files are new.
    assert_eq!(
        only_item(&world_of(0, 1, 1), &SyncOptions::default()).action,
        Action::Agree
    );
    assert_eq!(
        only_item(&world_of(0, 1, 2), &SyncOptions::default()).conflict(),
        Some(ConflictReason::BothChanged)
    );
    assert_eq!(
        only_item(&world_of(0, 1, 4), &SyncOptions::default()).conflict(),
        Some(ConflictReason::BothChangedProps)
    );
}

#[test]
fn contents_one_way_and_permissions_the_other_both_survive() {
    // A edits the file; B only changes its permissions.
    let mut world = world_of(1, 2, 4);
    let item = only_item(&world, &SyncOptions::default());
    assert_eq!(
        item.action,
        Action::CopyContentsAndPropsBack {
            from: Side::A,
            to: Side::B
        }
    );
    sync(&mut world, &SyncOptions::default());
    assert_eq!(world.a[&path("p")].synced(false), (Body::File(2), 0o600, 0));
    assert_eq!(world.b[&path("p")].synced(false), (Body::File(2), 0o600, 0));
}

#[test]
fn a_resolved_conflict_says_which_policy_resolved_it() {
    let options = SyncOptions {
        reconcile: ReconcileOptions {
            prefer: Some(Preference::Side(Side::B)),
            ..ReconcileOptions::default()
        },
        ..SyncOptions::default()
    };
    let item = only_item(&world_of(1, 2, 3), &options);
    assert_eq!(
        item.action,
        Action::Copy {
            from: Side::B,
            to: Side::A
        }
    );
    let overridden = item.overridden.unwrap();
    assert_eq!(
        overridden.found,
        Action::Conflict(ConflictReason::BothChanged)
    );
    assert_eq!(overridden.by, Policy::Prefer(Preference::Side(Side::B)));
}

#[test]
fn force_reverses_a_propagation_and_says_so() {
    let options = SyncOptions {
        reconcile: ReconcileOptions {
            force: Some(Side::A),
            ..ReconcileOptions::default()
        },
        ..SyncOptions::default()
    };
    // B edited, A did not: normally B to A; forced, A to B.
    let item = only_item(&world_of(1, 1, 2), &options);
    assert_eq!(
        item.action,
        Action::Copy {
            from: Side::A,
            to: Side::B
        }
    );
    assert_eq!(item.overridden.unwrap().by, Policy::Force(Side::A));
}

#[test]
fn a_path_listed_without_updates_gets_no_item() {
    let unchanged = SideState {
        update: Update::Unchanged,
        now: None,
    };
    let listed = PathUpdate {
        path: path("quiet"),
        a: unchanged.clone(),
        b: unchanged,
    };
    let items = reconcile_tree(&[listed], &ReconcileOptions::default()).unwrap();
    assert!(items.is_empty(), "{items:?}");
}

#[test]
fn paths_out_of_order_are_refused() {
    let state = |update| SideState { update, now: None };
    let at = |text| PathUpdate {
        path: path(text),
        a: state(Update::Touched),
        b: state(Update::Unchanged),
    };
    let error = reconcile_tree(
        &[at("a/b"), at("a-b"), at("a")],
        &ReconcileOptions::default(),
    )
    .unwrap_err();
    assert_eq!(error.path, path("a"));
    // `a/b` before `a-b` is the right order: '/' sorts below every name byte.
    assert!(reconcile_tree(
        &[at("a"), at("a/b"), at("a-b")],
        &ReconcileOptions::default()
    )
    .is_ok());
}

// ---- Random operations on both replicas, with syncs in between ----------

/// The paths operations pick from: nested, so that directories are
/// deleted, replaced and emptied under their children.
const PATHS: [&str; 6] = ["a", "b", "a/x", "a/y", "b/x", "a/x/z"];

#[derive(Clone, Debug)]
enum Op {
    Write {
        at: usize,
        contents: u8,
    },
    Chmod {
        at: usize,
        mode: u32,
    },
    Touch {
        at: usize,
    },
    Remove {
        at: usize,
    },
    Mkdir {
        at: usize,
    },
    Symlink {
        at: usize,
        target: u8,
    },
    /// A rename of the node at `from` (with its subtree) to `to`, where
    /// nothing is and whose directory exists.
    Move {
        from: usize,
        to: usize,
    },
    /// Both archives lost (a run that cannot read one side's archive must
    /// drop the other's too: see the report of this plan's tests).
    LoseArchives,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let at = 0..PATHS.len();
    prop_oneof![
        4 => (at.clone(), 1u8..4).prop_map(|(at, contents)| Op::Write { at, contents }),
        2 => (at.clone(), prop::sample::select(vec![0o644u32, 0o600, 0o755, 0o4755]))
            .prop_map(|(at, mode)| Op::Chmod { at, mode }),
        2 => at.clone().prop_map(|at| Op::Touch { at }),
        2 => at.clone().prop_map(|at| Op::Remove { at }),
        2 => at.clone().prop_map(|at| Op::Mkdir { at }),
        1 => (at.clone(), 1u8..3).prop_map(|(at, target)| Op::Symlink { at, target }),
        3 => (at.clone(), at).prop_map(|(from, to)| Op::Move { from, to }),
        1 => Just(Op::LoseArchives),
    ]
}

fn side_strategy() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::A), Just(Side::B)]
}

/// The same options with files' mtimes synced (`--times`), for detection and
/// reconciliation alike.
fn with_times(mut options: SyncOptions) -> SyncOptions {
    options.detect.props.times = true;
    options.reconcile.props.times = true;
    options
}

fn options_strategy() -> impl Strategy<Value = SyncOptions> {
    let prefer = prop_oneof![
        4 => Just(None),
        1 => Just(Some(Preference::Side(Side::A))),
        1 => Just(Some(Preference::Side(Side::B))),
        1 => Just(Some(Preference::Newer)),
        1 => Just(Some(Preference::Older)),
    ];
    let force = prop_oneof![6 => Just(None), 1 => Just(Some(Side::A)), 1 => Just(Some(Side::B))];
    let flags = (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>());
    (flags, prefer, force).prop_map(|((checksum, times, renames, keep_both), prefer, force)| {
        let options = SyncOptions {
            detect: DetectOptions {
                checksum,
                ..DetectOptions::default()
            },
            reconcile: ReconcileOptions {
                prefer,
                force,
                renames,
                keep_both,
                ..ReconcileOptions::default()
            },
        };
        if times {
            with_times(options)
        } else {
            options
        }
    })
}

/// Make the directories above `at`; false when something else is in the way.
fn make_parents(world: &mut World, side: Side, at: &RelPath) -> bool {
    let mut ancestors: Vec<RelPath> = std::iter::successors(at.parent(), RelPath::parent)
        .filter(|p| !p.is_root())
        .collect();
    ancestors.reverse();
    for ancestor in ancestors {
        match world.tree(side).get(&ancestor).map(|n| &n.body) {
            Some(Body::Dir) => {}
            Some(_) => return false,
            None => {
                let stamp = world.fresh_stamp();
                world.tree_mut(side).insert(ancestor, dir(0o755, stamp));
            }
        }
    }
    true
}

fn remove_tree(tree: &mut Tree, at: &RelPath) {
    tree.retain(|p, _| !p.starts_with(at));
}

/// Put `body` at `at`, replacing whatever is there (a directory with its
/// subtree), keeping the mode of a node of the same kind.
fn put(world: &mut World, side: Side, at: &RelPath, body: Body, default_mode: u32) {
    if !make_parents(world, side, at) {
        return;
    }
    let stamp = world.fresh_stamp();
    let tree = world.tree_mut(side);
    let mode = match tree.get(at) {
        Some(old) if std::mem::discriminant(&old.body) == std::mem::discriminant(&body) => old.mode,
        _ => default_mode,
    };
    if body != Body::Dir || tree.get(at).is_some_and(|n| n.body != Body::Dir) {
        remove_tree(tree, at);
    }
    tree.insert(
        at.clone(),
        Node {
            body,
            mode,
            mtime: stamp,
            stamp,
        },
    );
}

fn run_op(world: &mut World, side: Side, op: &Op) {
    let at = |index: usize| path(PATHS[index]);
    match *op {
        Op::Write { at: i, contents } => put(world, side, &at(i), Body::File(contents), 0o644),
        Op::Symlink { at: i, target } => put(world, side, &at(i), Body::Link(target), 0o777),
        Op::Mkdir { at: i } => {
            if world.tree(side).get(&at(i)).map(|n| &n.body) != Some(&Body::Dir) {
                put(world, side, &at(i), Body::Dir, 0o755);
            }
        }
        Op::Chmod { at: i, mode } => restamp(world, side, &at(i), Some(mode)),
        Op::Touch { at: i } => restamp(world, side, &at(i), None),
        Op::Remove { at: i } => remove_tree(world.tree_mut(side), &at(i)),
        Op::Move { from, to } => rename(world.tree_mut(side), &at(from), &at(to)),
        Op::LoseArchives => {
            world.archive_a.clear();
            world.archive_b.clear();
        }
    }
}

/// `mv from to` as a file system does it: refused when `from` is missing,
/// `to` exists or lies inside `from`, or `to`'s directory is missing.
fn rename(tree: &mut Tree, from: &RelPath, to: &RelPath) {
    let parent = to.parent().unwrap();
    let parent_is_dir =
        parent.is_root() || tree.get(&parent).is_some_and(|node| node.body == Body::Dir);
    if tree.contains_key(from) && !tree.contains_key(to) && !to.starts_with(from) && parent_is_dir {
        move_tree(tree, from, to);
    }
}

/// A chmod (`Some(mode)`) or a touch (`None`: a new mtime).
fn restamp(world: &mut World, side: Side, at: &RelPath, mode: Option<u32>) {
    let stamp = world.fresh_stamp();
    if let Some(node) = world.tree_mut(side).get_mut(at) {
        node.stamp = stamp;
        match mode {
            Some(mode) => node.mode = mode,
            None => node.mtime = stamp,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn random_edits_on_both_replicas_sync_safely(
        rounds in prop::collection::vec(
            prop::collection::vec((side_strategy(), op_strategy()), 0..7),
            1..5,
        ),
        options in options_strategy(),
    ) {
        let mut world = World::default();
        for (round, ops) in rounds.iter().enumerate() {
            for (side, op) in ops {
                run_op(&mut world, *side, op);
            }
            well_formed(&world.a, Side::A).map_err(TestCaseError::fail)?;
            well_formed(&world.b, Side::B).map_err(TestCaseError::fail)?;
            sync_and_check(&mut world, &options)
                .map_err(|error| TestCaseError::fail(format!("round {round}: {error}")))?;
        }
    }
}

/// The interactive mode's edits (`PlanEdit`): from every triple of states,
/// each item taken toward A, toward B, or skipped leaves both trees whole
/// (no entry without its directory) once carried out; a side taken makes
/// both sides equal at that path; a skip leaves the path as it was on both.
#[test]
fn every_choice_on_every_item_keeps_the_trees_whole() {
    let options = SyncOptions::default();
    let choices = [Choice::Take(Side::A), Choice::Take(Side::B), Choice::Skip];
    for archived in 0..STATES {
        for a in 0..STATES {
            for b in 0..STATES {
                let world = world_of(archived, a, b);
                let outcome = plan(&world, &options);
                for item in &outcome.items {
                    for choice in choices {
                        let context =
                            format!("archive {archived}, A {a}, B {b}, {} {choice:?}", item.path);
                        check_choice(&world, &outcome, &item.path, choice, &options)
                            .unwrap_or_else(|error| panic!("{context}: {error}"));
                    }
                }
            }
        }
    }
}

fn check_choice(
    world: &World,
    outcome: &Outcome,
    at: &RelPath,
    choice: Choice,
    options: &SyncOptions,
) -> Result<(), String> {
    let mut edit = PlanEdit::new(&outcome.updates, options.reconcile, outcome.items.clone());
    if edit.choose(at, Some(choice)).is_err() {
        // Beneath a path whose choice decides it: nothing to check.
        return Ok(());
    }
    let mut after = world.clone();
    apply(&mut after, edit.items(), options.detect.props.times);
    well_formed(&after.a, Side::A)?;
    well_formed(&after.b, Side::B)?;
    let synced = |tree: &Tree| tree.get(at).map(|node| node.synced(false));
    match choice {
        Choice::Take(side) if synced(&after.a) != synced(&after.b) => Err(format!(
            "not equal after taking {side:?}: {:?} / {:?}",
            after.a.get(at),
            after.b.get(at)
        )),
        Choice::Skip
            if after.a.get(at) != world.a.get(at) || after.b.get(at) != world.b.get(at) =>
        {
            Err("a skipped path changed".into())
        }
        _ => Ok(()),
    }
}

// ---- Renames -------------------------------------------------------------

/// What each side holds, as far as a sync keeps it equal.
fn synced_tree(tree: &Tree, times: bool) -> Vec<(RelPath, (Body, u32, i64))> {
    tree.iter()
        .map(|(at, node)| (at.clone(), node.synced(times)))
        .collect()
}

fn with_renames(mut options: SyncOptions, renames: bool) -> SyncOptions {
    options.reconcile.renames = renames;
    options
}

/// Random edits and moves on both sides, played before a sync.
fn played(rounds: &[Vec<(Side, Op)>], options: &SyncOptions) -> Vec<World> {
    let mut world = World::default();
    let mut before_each = Vec::new();
    for ops in rounds {
        for (side, op) in ops {
            run_op(&mut world, *side, op);
        }
        before_each.push(world.clone());
        sync(&mut world, options);
    }
    before_each
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A plan with renames ends with the replicas a plan without them would
    /// leave, and deletes no more on either side.
    #[test]
    fn renames_end_where_deletions_and_copies_end(
        rounds in prop::collection::vec(
            prop::collection::vec((side_strategy(), op_strategy()), 0..7),
            1..4,
        ),
        options in options_strategy(),
    ) {
        let times = options.detect.props.times;
        for world in played(&rounds, &with_renames(options, true)) {
            let mut renamed = world.clone();
            let mut copied = world.clone();
            let with = plan(&renamed, &with_renames(options, true));
            let without = plan(&copied, &with_renames(options, false));
            apply(&mut renamed, &with.items, times);
            apply(&mut copied, &without.items, times);
            for side in [Side::A, Side::B] {
                prop_assert_eq!(
                    synced_tree(renamed.tree(side), times),
                    synced_tree(copied.tree(side), times),
                    "{:?} differs; plan {:#?}", side, with.items
                );
                let deletes = |items: &[SyncItem]| {
                    accord_plan::sync_guard::deletions_on(items, side)
                };
                prop_assert!(deletes(&with.items) <= deletes(&without.items));
            }
        }
    }

    /// A person's choice on a rename is made at both of its paths: the
    /// trees stay whole, a side taken is held at both paths on both sides,
    /// a skip leaves both paths as they were.
    #[test]
    fn every_choice_on_a_rename_keeps_both_paths(
        rounds in prop::collection::vec(
            prop::collection::vec((side_strategy(), op_strategy()), 0..7),
            1..4,
        ),
    ) {
        let options = with_renames(SyncOptions::default(), true);
        for world in played(&rounds, &options) {
            let outcome = plan(&world, &options);
            let renames = outcome.items.iter().filter(|i| matches!(i.action, Action::Rename { .. }));
            for item in renames {
                let from = item.moved.as_ref().unwrap().from.clone();
                for choice in [Choice::Take(Side::A), Choice::Take(Side::B), Choice::Skip] {
                    check_rename_choice(&world, &outcome, (&from, &item.path), choice, &options)
                        .map_err(|e| TestCaseError::fail(format!("{choice:?} {}: {e}", item.path)))?;
                }
            }
        }
    }
}

#[test]
fn a_moved_file_is_renamed_and_recorded_at_its_new_path() {
    let options = with_renames(SyncOptions::default(), true);
    let mut world = World::default();
    run_op(&mut world, Side::A, &Op::Mkdir { at: 1 });
    run_op(&mut world, Side::A, &Op::Write { at: 2, contents: 1 });
    sync_and_check(&mut world, &options).unwrap();
    let stamp = world.b[&path("a/x")].stamp;
    // A moves a/x to b/x; B renames its own copy (same stamp: not copied).
    run_op(&mut world, Side::A, &Op::Move { from: 2, to: 4 });
    let outcome = sync_and_check(&mut world, &options).unwrap();
    let actions: Vec<_> = outcome
        .items
        .iter()
        .map(|i| (i.path.display(), i.action))
        .collect();
    assert_eq!(actions, [("b/x".into(), Action::Rename { on: Side::B })]);
    assert_eq!(world.b[&path("b/x")].stamp, stamp);
    assert!(!world.b.contains_key(&path("a/x")));
    assert!(!world.archive_b.contains_key(&path("a/x")));
}

fn check_rename_choice(
    world: &World,
    outcome: &Outcome,
    (from, to): (&RelPath, &RelPath),
    choice: Choice,
    options: &SyncOptions,
) -> Result<(), String> {
    let mut edit = PlanEdit::new(&outcome.updates, options.reconcile, outcome.items.clone());
    if let Err(refused) = edit.choose(to, Some(choice)) {
        // Only a source beneath a deleted directory is chosen there.
        return match refused {
            accord_plan::EditRefused::FollowsDirectory(_) => Ok(()),
            other => Err(format!("refused: {other}")),
        };
    }
    let mut after = world.clone();
    apply(&mut after, edit.items(), options.detect.props.times);
    well_formed(&after.a, Side::A)?;
    well_formed(&after.b, Side::B)?;
    for at in [from, to] {
        let synced = |tree: &Tree| tree.get(at).map(|node| node.synced(false));
        let unchanged = after.a.get(at) == world.a.get(at) && after.b.get(at) == world.b.get(at);
        match choice {
            Choice::Take(_) if synced(&after.a) != synced(&after.b) => {
                return Err(format!("{at} not equal: {:?}", edit.items()))
            }
            Choice::Skip if !unchanged => return Err(format!("{at} changed though skipped")),
            _ => {}
        }
    }
    Ok(())
}
