//! Tests of a set's reconciliation: cases by hand, then a model test that
//! runs random edits, runs of random subsets and killed runs on three and
//! four replicas, held against a pure model of the semantics in which a
//! version's history is the set of changes it includes (no counters).

use super::*;
use crate::replica_set_fixtures::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn settled(outcome: &Outcome) -> &Settled {
    match outcome {
        Outcome::Settled(settled) => settled,
        other => panic!("not settled: {other:?}"),
    }
}

#[test]
fn a_change_on_one_replica_goes_to_all_others() {
    let base = vector(&[(0, 1)]);
    let offers = [
        offer(0, Some(file("f", 1)), base.clone(), Some(file("f", 1))),
        offer(1, Some(file("f", 1)), base.clone(), Some(file("f", 2))),
        offer(2, Some(file("f", 1)), base.clone(), Some(file("f", 1))),
    ];
    let outcome = settle_path(&offers, &SYNCED);
    let settled = settled(&outcome);
    assert_eq!(settled.entry.as_ref().unwrap().hash, Some([2; 32]));
    assert_eq!(settled.holders, [1]);
    assert_eq!(
        settled.receivers,
        [(0, Receive::Whole), (2, Receive::Whole)]
    );
    assert_eq!(settled.vector, vector(&[(0, 1), (1, 100)]));
}

#[test]
fn the_same_change_on_two_replicas_agrees_silently() {
    let base = vector(&[(2, 3)]);
    let offers = [
        offer(0, Some(file("f", 1)), base.clone(), Some(file("f", 5))),
        offer(1, Some(file("f", 1)), base.clone(), Some(file("f", 5))),
        offer(2, Some(file("f", 1)), base.clone(), Some(file("f", 1))),
    ];
    let outcome = settle_path(&offers, &SYNCED);
    let settled = settled(&outcome);
    assert_eq!(settled.holders, [0, 1]);
    assert_eq!(settled.receivers, [(2, Receive::Whole)]);
    assert_eq!(settled.vector, vector(&[(0, 100), (1, 100), (2, 3)]));
}

#[test]
fn different_changes_are_one_conflict_listing_every_version() {
    let base = vector(&[(0, 1)]);
    let offers = [
        offer(0, Some(file("f", 1)), base.clone(), Some(file("f", 2))),
        offer(1, Some(file("f", 1)), base.clone(), None),
        offer(2, Some(file("f", 1)), base.clone(), Some(file("f", 1))),
        offer(3, Some(file("f", 1)), base.clone(), Some(file("f", 3))),
    ];
    let Outcome::Conflict { reason, versions } = settle_path(&offers, &SYNCED) else {
        panic!("not a conflict");
    };
    assert_eq!(reason, SetConflict::ChangedApart);
    let listed: Vec<(Vec<usize>, bool)> = versions
        .iter()
        .map(|v| (v.holders.clone(), v.latest))
        .collect();
    assert_eq!(
        listed,
        [
            (vec![0], true),
            (vec![1], true),
            (vec![2], false),
            (vec![3], true)
        ]
    );
}

#[test]
fn a_replica_that_missed_runs_catches_up_without_a_conflict() {
    // Replica 2 was away for two runs in which 0 and then 1 changed f.
    let old = vector(&[(0, 1)]);
    let newer = vector(&[(0, 2), (1, 1)]);
    let offers = [
        offer(0, Some(file("f", 3)), newer.clone(), Some(file("f", 3))),
        offer(1, Some(file("f", 3)), newer.clone(), Some(file("f", 3))),
        offer(2, Some(file("f", 1)), old, Some(file("f", 1))),
    ];
    let outcome = settle_path(&offers, &SYNCED);
    let settled = settled(&outcome);
    assert_eq!(settled.receivers, [(2, Receive::Whole)]);
    assert_eq!(settled.vector, newer);
}

#[test]
fn a_change_made_while_away_wins_over_no_change_and_conflicts_with_a_change() {
    let old = vector(&[(0, 1)]);
    let away = offer(2, Some(file("f", 1)), old.clone(), Some(file("f", 9)));
    // The others only agreed again meanwhile: the change made away wins.
    let quiet = [
        offer(0, Some(file("f", 1)), old.clone(), Some(file("f", 1))),
        offer(1, Some(file("f", 1)), old.clone(), Some(file("f", 1))),
        away.clone(),
    ];
    let outcome = settle_path(&quiet, &SYNCED);
    assert_eq!(settled(&outcome).holders, [2]);
    // The others changed it meanwhile: a conflict, though replica 2 looks
    // as changed as they do.
    let changed = vector(&[(0, 2)]);
    let busy = [
        offer(0, Some(file("f", 4)), changed.clone(), Some(file("f", 4))),
        offer(1, Some(file("f", 4)), changed, Some(file("f", 4))),
        away,
    ];
    assert!(matches!(
        settle_path(&busy, &SYNCED),
        Outcome::Conflict { .. }
    ));
}

#[test]
fn a_change_to_a_version_already_agreed_elsewhere_is_no_change_of_its_own() {
    // B changed f to v2 while A was away, and C took it; A then made the
    // same edit, and C edited again on top of v2.
    let old = vector(&[(0, 1)]);
    let newer = vector(&[(0, 1), (1, 1)]);
    let offers = [
        offer(0, Some(file("f", 1)), old, Some(file("f", 2))),
        offer(1, Some(file("f", 2)), newer.clone(), Some(file("f", 2))),
        offer(2, Some(file("f", 2)), newer.clone(), Some(file("f", 3))),
    ];
    let outcome = settle_path(&offers, &SYNCED);
    let settled = settled(&outcome);
    assert_eq!(settled.holders, [2], "C's later edit wins: {outcome:?}");
    // Without C's edit, A and B agree on B's version, with B's vector.
    let outcome = settle_path(&offers[..2], &SYNCED);
    assert_eq!(settled_vector(&outcome), &newer);
}

#[test]
fn a_change_made_from_what_another_holds_now_comes_after_it() {
    // B made n and deleted it again (C took B's n meanwhile); A, which never
    // had it, made its own n. A's change was made from what B holds now.
    let bs = vector(&[(1, 1)]);
    let offers = [
        offer(0, None, VersionVector::default(), Some(file("n", 7))),
        offer(1, Some(file("n", 5)), bs.clone(), None),
    ];
    let outcome = settle_path(&offers, &SYNCED);
    assert_eq!(settled(&outcome).holders, [0], "{outcome:?}");
    // C, with B's old n, takes A's later.
    let c = offer(2, Some(file("n", 5)), bs, Some(file("n", 5)));
    let outcome = settle_path(&[offers[0].clone(), offers[1].clone(), c], &SYNCED);
    assert_eq!(settled(&outcome).holders, [0], "{outcome:?}");
}

fn settled_vector(outcome: &Outcome) -> &VersionVector {
    &settled(outcome).vector
}

#[test]
fn a_deletion_is_kept_for_a_replica_that_was_away() {
    let base = vector(&[(1, 1)]);
    let deleted = [
        offer(0, Some(file("f", 1)), base.clone(), None),
        offer(1, Some(file("f", 1)), base.clone(), Some(file("f", 1))),
    ];
    let outcome = settle_path(&deleted, &SYNCED);
    let gone = settled(&outcome);
    assert!(gone.entry.is_none());
    assert_eq!(gone.receivers, [(1, Receive::Delete)]);
    // Replica 2, away, comes back with the old file: the deletion's record
    // is newer, and the file goes.
    let back = [
        offer(0, None, gone.vector.clone(), None),
        offer(2, Some(file("f", 1)), base.clone(), Some(file("f", 1))),
    ];
    let outcome = settle_path(&back, &SYNCED);
    assert_eq!(settled(&outcome).receivers, [(2, Receive::Delete)]);
}

#[test]
fn equal_contents_with_other_permissions_take_the_permissions() {
    let base = vector(&[(0, 1)]);
    let mut chmodded = (*file("f", 1)).clone();
    chmodded.props.mode = 0o600;
    let offers = [
        offer(
            0,
            Some(file("f", 1)),
            base.clone(),
            Some(Arc::new(chmodded)),
        ),
        offer(1, Some(file("f", 1)), base.clone(), Some(file("f", 1))),
    ];
    let outcome = settle_path(&offers, &SYNCED);
    assert_eq!(settled(&outcome).receivers, [(1, Receive::Props)]);
}

/// The offers of three replicas at `at`, all recorded as `recorded` with
/// one vector, each holding its entry of `now`.
fn three(at: &str, recorded: Option<Arc<Entry>>, now: [Option<Arc<Entry>>; 3]) -> PathOffers {
    let base = vector(&[(0, 1)]);
    PathOffers {
        path: path(at),
        offers: now
            .into_iter()
            .enumerate()
            .map(|(replica, now)| offer(replica, recorded.clone(), base.clone(), now))
            .collect(),
    }
}

fn removed_dir_with_edit_beneath() -> Vec<PathOffers> {
    vec![
        three("d", Some(dir("d")), [None, Some(dir("d")), Some(dir("d"))]),
        three(
            "d/f",
            Some(file("d/f", 1)),
            [None, Some(file("d/f", 2)), Some(file("d/f", 1))],
        ),
        three(
            "d/g",
            Some(file("d/g", 1)),
            [None, Some(file("d/g", 1)), Some(file("d/g", 1))],
        ),
    ]
}

#[test]
fn a_directory_removed_while_a_path_beneath_changed_is_one_conflict() {
    let items = reconcile_set(&removed_dir_with_edit_beneath(), &options(3)).unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].path, path("d"));
    assert!(matches!(
        items[0].outcome,
        Outcome::Conflict {
            reason: SetConflict::ChangedBeneathRemovedDirectory,
            ..
        }
    ));
}

#[test]
fn a_directory_removed_with_only_deletions_beneath_is_removed_everywhere() {
    let paths = vec![
        three("d", Some(dir("d")), [None, Some(dir("d")), Some(dir("d"))]),
        three(
            "d/f",
            Some(file("d/f", 1)),
            [None, None, Some(file("d/f", 1))],
        ),
    ];
    let items = reconcile_set(&paths, &options(3)).unwrap();
    assert_eq!(items.len(), 2);
    for item in &items {
        assert!(settled(&item.outcome).entry.is_none(), "{item:?}");
    }
}

#[test]
fn prefer_a_replica_decides_a_whole_directory() {
    let mut opts = options(3);
    opts.prefer = Some(SetPreference::Replica(0));
    let items = reconcile_set(&removed_dir_with_edit_beneath(), &opts).unwrap();
    assert_eq!(items.len(), 3);
    for item in &items {
        assert!(settled(&item.outcome).entry.is_none());
    }
    assert_eq!(
        items[0].decided_by,
        Some(SetPolicy::Prefer(SetPreference::Replica(0)))
    );
    // Newer cannot compare a directory's versions with what changed
    // beneath it: the conflict stays.
    opts.prefer = Some(SetPreference::Newer);
    let items = reconcile_set(&removed_dir_with_edit_beneath(), &opts).unwrap();
    assert!(matches!(items[0].outcome, Outcome::Conflict { .. }));
}

#[test]
fn prefer_newer_takes_the_latest_mtime_and_ties_stay() {
    let base = vector(&[(0, 1)]);
    let paths = vec![PathOffers {
        path: path("f"),
        offers: vec![
            offer(0, Some(file("f", 1)), base.clone(), Some(file("f", 7))),
            offer(1, Some(file("f", 1)), base.clone(), Some(file("f", 3))),
            offer(2, Some(file("f", 1)), base.clone(), None),
        ],
    }];
    let mut opts = options(3);
    opts.prefer = Some(SetPreference::Newer);
    let items = reconcile_set(&paths, &opts).unwrap();
    let won = settled(&items[0].outcome);
    assert_eq!(won.holders, [0]);
    // A version decided by a policy comes after every one it replaced.
    for offer in &paths[0].offers {
        assert!(won.vector.strictly_includes(&offer.vector()));
    }
    opts.prefer = Some(SetPreference::Older);
    let items = reconcile_set(&paths, &opts).unwrap();
    assert!(matches!(items[0].outcome, Outcome::Conflict { .. }));
}

#[test]
fn force_makes_every_path_equal_to_one_replica() {
    let paths = removed_dir_with_edit_beneath();
    let mut opts = options(3);
    opts.force = Some(1);
    let items = reconcile_set(&paths, &opts).unwrap();
    assert_eq!(items.len(), 3);
    for item in &items {
        assert!(settled(&item.outcome).holders.contains(&1), "{item:?}");
    }
    opts.force = Some(3);
    assert_eq!(
        reconcile_set(&paths, &opts),
        Err(SetInputError::ForcedAbsent(3))
    );
}

#[test]
fn keep_both_settles_to_the_newest_and_keeps_each_other_latest_version_once() {
    let f = |value| Some(file("f", value));
    // A and C made the same edit (older), B another (newer).
    let paths = vec![three("f", f(1), [f(5), f(7), f(5)])];
    let mut opts = options(3);
    opts.keep_both = true;
    let items = reconcile_set(&paths, &opts).unwrap();
    assert_eq!(items[0].decided_by, Some(SetPolicy::KeepBoth));
    let won = settled(&items[0].outcome);
    assert_eq!(won.holders, [1]);
    assert_eq!(won.kept.len(), 1, "one copy per losing version");
    assert_eq!(won.kept[0].holders, [0, 2]);
    assert_eq!(won.kept[0].entry, f(5));
    for offer in &paths[0].offers {
        assert!(won.vector.strictly_includes(&offer.vector()));
    }
    // --prefer names the winner when it holds a latest version.
    opts.prefer = Some(SetPreference::Replica(2));
    let items = reconcile_set(&paths, &opts).unwrap();
    let won = settled(&items[0].outcome);
    assert_eq!(
        (won.holders.as_slice(), won.kept[0].holders.as_slice()),
        (&[0, 2][..], &[1][..])
    );
    // --force wins over it: nothing kept.
    opts.force = Some(1);
    let items = reconcile_set(&paths, &opts).unwrap();
    assert!(settled(&items[0].outcome).kept.is_empty());
    assert_eq!(items[0].decided_by, Some(SetPolicy::Force(1)));
}

#[test]
fn keep_both_leaves_deletions_directories_and_equal_contents_a_conflict() {
    let f = |value| Some(file("f", value));
    let mut opts = options(3);
    opts.keep_both = true;
    let deleted = three("f", f(1), [f(5), f(7), None]);
    let with_dir = three("f", f(1), [f(5), f(7), Some(dir("f"))]);
    let mut props_only = three("f", f(1), [f(5), f(1), f(1)]);
    let mut other_mode = (*file("f", 5)).clone();
    other_mode.props.mode = 0o600;
    props_only.offers[1] = offer(1, f(1), vector(&[(0, 1)]), Some(Arc::new(other_mode)));
    for paths in [vec![deleted], vec![with_dir], vec![props_only]] {
        let items = reconcile_set(&paths, &opts).unwrap();
        assert!(
            matches!(items[0].outcome, Outcome::Conflict { .. }),
            "{items:?}"
        );
    }
}

#[test]
fn broken_input_is_refused() {
    let mut paths = removed_dir_with_edit_beneath();
    paths[2].offers[0].change_count = 1;
    assert_eq!(
        reconcile_set(&paths, &options(3)),
        Err(SetInputError::StaleCount(path("d/g")))
    );
    let mut paths = removed_dir_with_edit_beneath();
    paths.swap(1, 2);
    assert!(matches!(
        reconcile_set(&paths, &options(3)),
        Err(SetInputError::OutOfOrder(_))
    ));
    let mut paths = removed_dir_with_edit_beneath();
    paths[1].offers.pop();
    assert_eq!(
        reconcile_set(&paths, &options(3)),
        Err(SetInputError::Offers(path("d/f")))
    );
    assert_eq!(
        reconcile_set(&removed_dir_with_edit_beneath(), &options(2)),
        Err(SetInputError::Offers(path("d")))
    );
    assert_eq!(
        reconcile_set(&[], &options(1)),
        Err(SetInputError::SetSize(1))
    );
}

// ---- The model test ----

/// Paths of the model: flat files, by number.
const PATHS: u8 = 4;

/// One step of a history.
#[derive(Clone, Debug)]
enum Step {
    /// A person changes a path on one replica (None: deletes it). Values
    /// come from a small pool, so that two replicas sometimes make the same
    /// change, and a change sometimes puts back the agreed contents.
    Edit {
        replica: usize,
        at: u8,
        value: Option<u8>,
    },
    /// A run of the replicas in `took_part` (at least two). `kill`: the
    /// run dies while applying its plan, each replica having done at some
    /// paths, by the seed, all, part or none of its work.
    Run {
        took_part: Vec<usize>,
        kill: Option<u64>,
    },
}

/// The implementation's side: files, archives with vectors, and the count
/// of runs each replica took part in.
#[derive(Clone, Debug, Default)]
struct Replica {
    files: BTreeMap<u8, u8>,
    archive: BTreeMap<u8, (Option<u8>, VersionVector)>,
    runs: u64,
}

/// The model's side: the same files, and per path the agreed value with
/// the set of changes its history includes.
#[derive(Clone, Debug, Default)]
struct ModelReplica {
    files: BTreeMap<u8, u8>,
    agreed: BTreeMap<u8, (Option<u8>, BTreeSet<u32>)>,
    /// Every change this replica made at each path: a replica's change
    /// comes after its own earlier ones, recorded or not.
    own: BTreeMap<u8, BTreeSet<u32>>,
}

/// What a run decides at one path, in values.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decided {
    Value(Option<u8>),
    Conflict,
}

fn name(at: u8) -> String {
    format!("p{at}")
}

fn value_of(entry: Option<&Arc<Entry>>) -> Option<u8> {
    entry.map(|entry| entry.hash.expect("model files have fingerprints")[0])
}

/// The implementation's plan for a run of `took_part`.
fn plan(replicas: &[Replica], took_part: &[usize]) -> Vec<SetItem> {
    let paths: Vec<PathOffers> = (0..PATHS)
        .map(|at| PathOffers {
            path: path(&name(at)),
            offers: took_part
                .iter()
                .map(|&r| {
                    let (recorded, vector) =
                        replicas[r].archive.get(&at).cloned().unwrap_or_default();
                    let now = replicas[r].files.get(&at).map(|&v| file(&name(at), v));
                    let mut offer = offer(r, recorded.map(|v| file(&name(at), v)), vector, now);
                    offer.change_count = replicas[r].runs;
                    offer
                })
                .collect(),
        })
        .collect();
    reconcile_set(&paths, &options(replicas.len())).expect("the model's input is well formed")
}

fn decided(item: &SetItem) -> Decided {
    match &item.outcome {
        Outcome::Settled(settled) => Decided::Value(value_of(settled.entry.as_ref())),
        Outcome::Conflict { .. } => Decided::Conflict,
    }
}

/// What the model decides at `at` for a run of `took_part`, with each
/// history it offered.
fn model_decides(
    model: &mut [ModelReplica],
    took_part: &[usize],
    at: u8,
    next_change: &mut u32,
) -> (Decided, BTreeSet<u32>) {
    // What each holds now, its agreed history, and whether it changed.
    let states: Vec<(Option<u8>, BTreeSet<u32>, bool)> = took_part
        .iter()
        .map(|&r| {
            let now = model[r].files.get(&at).copied();
            let (agreed, history) = model[r].agreed.get(&at).cloned().unwrap_or_default();
            (now, history, now != agreed)
        })
        .collect();
    let mut offers: Vec<(Option<u8>, BTreeSet<u32>)> = Vec::new();
    let mut made_from: Vec<Option<Option<u8>>> = Vec::new();
    for (&r, (now, history, changed)) in took_part.iter().zip(&states) {
        let mut history = history.clone();
        let mut base = None;
        if *changed {
            // A change to a version another replica holds unchanged, with
            // history this one lacks, takes that version's history.
            let taken: BTreeSet<u32> = states
                .iter()
                .filter(|(other, _, other_changed)| !other_changed && other == now)
                .flat_map(|(_, h, _)| h.iter().copied())
                .chain(history.iter().copied())
                .collect();
            if taken.len() > history.len() {
                history = taken;
            } else {
                *next_change += 1;
                let own = model[r].own.entry(at).or_default();
                own.insert(*next_change);
                history.extend(own.iter().copied());
                base = Some(model[r].agreed.get(&at).and_then(|(value, _)| *value));
            }
        }
        offers.push((*now, history));
        made_from.push(base);
    }
    // A change made from what another replica holds now comes after it.
    let first = offers.clone();
    for (i, base) in made_from.iter().enumerate() {
        let Some(base) = base else { continue };
        for (j, (value, history)) in first.iter().enumerate() {
            if j != i && value == base {
                offers[i].1.extend(history.iter().copied());
            }
        }
    }
    let latest: Vec<&(Option<u8>, BTreeSet<u32>)> = offers
        .iter()
        .filter(|(_, h)| {
            !offers
                .iter()
                .any(|(_, other)| other != h && other.is_superset(h))
        })
        .collect();
    let merged: BTreeSet<u32> = offers.iter().flat_map(|(_, h)| h.iter().copied()).collect();
    if latest.iter().all(|(value, _)| *value == latest[0].0) {
        (Decided::Value(latest[0].0), merged)
    } else {
        (Decided::Conflict, merged)
    }
}

/// How far one replica got with one path when a run was killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Done {
    Nothing,
    /// The new version is in place; its record was not written.
    Placed,
    Recorded,
}

/// A small deterministic generator for the kill's choices.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn done_by(kill: &mut Option<u64>) -> Done {
    match kill {
        None => Done::Recorded,
        Some(state) => match next_random(state) % 3 {
            0 => Done::Nothing,
            1 => Done::Placed,
            _ => Done::Recorded,
        },
    }
}

fn run(
    replicas: &mut [Replica],
    model: &mut [ModelReplica],
    took_part: &[usize],
    mut kill: Option<u64>,
    next_change: &mut u32,
) -> Result<(), TestCaseError> {
    // Each replica counts the run before it records anything.
    for &r in took_part {
        replicas[r].runs += 1;
    }
    let items = plan(replicas, took_part);
    prop_assert_eq!(items.len(), usize::from(PATHS));
    for (at, item) in (0..PATHS).zip(&items) {
        let (expected, history) = model_decides(model, took_part, at, next_change);
        prop_assert_eq!(&decided(item), &expected, "at {}", name(at));
        let Outcome::Settled(settled) = &item.outcome else {
            continue;
        };
        let value = value_of(settled.entry.as_ref());
        for &r in took_part {
            let done = done_by(&mut kill);
            if done == Done::Nothing {
                continue;
            }
            for files in [&mut replicas[r].files, &mut model[r].files] {
                match value {
                    Some(v) => files.insert(at, v),
                    None => files.remove(&at),
                };
            }
            if done == Done::Recorded {
                replicas[r]
                    .archive
                    .insert(at, (value, settled.vector.clone()));
                model[r].agreed.insert(at, (value, history.clone()));
            }
        }
    }
    Ok(())
}

fn edit(
    replicas: &mut [Replica],
    model: &mut [ModelReplica],
    replica: usize,
    at: u8,
    value: Option<u8>,
) {
    for files in [&mut replicas[replica].files, &mut model[replica].files] {
        match value {
            Some(v) => files.insert(at, v),
            None => files.remove(&at),
        };
    }
}

fn steps(set_size: usize) -> impl Strategy<Value = Vec<Step>> {
    let edit = (
        0..set_size,
        0..PATHS,
        proptest::option::weighted(0.8, 1u8..6),
    )
        .prop_map(|(replica, at, value)| Step::Edit { replica, at, value });
    let run = (
        proptest::sample::subsequence((0..set_size).collect::<Vec<_>>(), 2..=set_size),
        proptest::option::weighted(0.3, any::<u64>()),
    )
        .prop_map(|(took_part, kill)| Step::Run { took_part, kill });
    proptest::collection::vec(prop_oneof![3 => edit, 2 => run], 1..60)
}

fn history_agrees_with_the_model(set_size: usize, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let mut replicas = vec![Replica::default(); set_size];
    let mut model = vec![ModelReplica::default(); set_size];
    let mut next_change = 0;
    for step in steps {
        match step {
            Step::Edit { replica, at, value } => {
                edit(&mut replicas, &mut model, replica, at, value)
            }
            Step::Run { took_part, kill } => run(
                &mut replicas,
                &mut model,
                &took_part,
                kill,
                &mut next_change,
            )?,
        }
    }
    // Two whole runs: the first settles what can be settled; after it the
    // second has nothing to do, and every replica holds the same files
    // except at the paths in conflict.
    let everyone: Vec<usize> = (0..set_size).collect();
    run(&mut replicas, &mut model, &everyone, None, &mut next_change)?;
    for &r in &everyone {
        replicas[r].runs += 1;
    }
    let items = plan(&replicas, &everyone);
    for (at, item) in (0..PATHS).zip(&items) {
        match &item.outcome {
            Outcome::Settled(settled) => prop_assert!(
                settled.receivers.is_empty(),
                "{} not converged: {:?}",
                name(at),
                settled
            ),
            Outcome::Conflict { .. } => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn three_replicas_agree_with_the_model(steps in steps(3)) {
        history_agrees_with_the_model(3, steps)?;
    }

    #[test]
    fn four_replicas_agree_with_the_model(steps in steps(4)) {
        history_agrees_with_the_model(4, steps)?;
    }
}
