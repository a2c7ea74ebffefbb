//! Tests of a set's plan edited by a person: a version chosen from one
//! replica settles the path as `--force` would (and the next run finds
//! nothing to do, a replica that was away catching up without a
//! conflict), a skip leaves the path out, a directory's choice decides its
//! subtree, quitting leaves everything alone.

use super::*;
use crate::replica_set::{settle_path, Offer, Receive, SetConflict, Settled};
use crate::replica_set_fixtures::*;

fn at(name: &str, offers: Vec<Offer>) -> PathOffers {
    PathOffers {
        path: path(name),
        offers,
    }
}

fn settled<'i>(edit: &'i SetPlanEdit<'_>, name: &str) -> &'i Settled {
    let item = edit.items().iter().find(|i| i.path == path(name)).unwrap();
    match &item.outcome {
        Outcome::Settled(settled) => settled,
        other => panic!("{name} is not settled: {other:?}"),
    }
}

/// Replicas 0, 1 and 2 (A, B, C) held `f` as 1 (recorded {0: 1}); B
/// changed it to 2, C to 3: a conflict. `g` changed on B only.
fn conflict_between_b_and_c() -> Vec<PathOffers> {
    let base = vector(&[(0, 1)]);
    let f = |value| Some(file("f", value));
    let g = |value| Some(file("g", value));
    vec![
        at(
            "f",
            vec![
                offer(0, f(1), base.clone(), f(1)),
                offer(1, f(1), base.clone(), f(2)),
                offer(2, f(1), base.clone(), f(3)),
            ],
        ),
        at(
            "g",
            vec![
                offer(0, g(1), base.clone(), g(1)),
                offer(1, g(1), base.clone(), g(4)),
                offer(2, g(1), base.clone(), g(1)),
            ],
        ),
    ]
}

fn edit_of(paths: &[PathOffers], set_size: usize) -> SetPlanEdit<'_> {
    let items = reconcile_set(paths, &options(set_size)).unwrap();
    SetPlanEdit::new(paths, options(set_size), items)
}

#[test]
fn choosing_a_version_of_a_three_way_conflict_settles_it_as_force_does() {
    let paths = conflict_between_b_and_c();
    let mut edit = edit_of(&paths, 3);
    assert!(matches!(
        edit.items()[0].outcome,
        Outcome::Conflict {
            reason: SetConflict::ChangedApart,
            ..
        }
    ));
    edit.choose(&path("f"), Some(SetChoice::Take(2))).unwrap();
    let chosen = settled(&edit, "f").clone();
    assert_eq!(chosen.entry.as_ref().unwrap().hash, Some([3; 32]));
    assert_eq!(chosen.holders, [2]);
    assert_eq!(chosen.receivers, [(0, Receive::Whole), (1, Receive::Whole)]);
    assert_eq!(edit.items()[0].decided_by, Some(SetPolicy::Chosen(2)));
    // The same as `--force C` at that path.
    let forced = reconcile_set(
        &paths[..1],
        &SetOptions {
            force: Some(2),
            ..options(3)
        },
    )
    .unwrap();
    assert_eq!(forced[0].outcome, Outcome::Settled(chosen.clone()));
    // Above every version replaced: C's change over B's and the base.
    assert!(chosen
        .vector
        .strictly_includes(&vector(&[(0, 1), (1, 100)])));
    // The other path is as reconciled.
    assert_eq!(settled(&edit, "g").holders, [1]);
    let (items, skipped) = edit.into_items();
    assert_eq!(items.len(), 2);
    assert!(skipped.is_empty());
}

#[test]
fn after_a_choice_the_next_run_settles_with_no_conflict_and_one_away_catches_up() {
    // Four replicas; D (3) was away, holding f as 1 with the old record.
    let base = vector(&[(0, 1)]);
    let f = |value| Some(file("f", value));
    let paths = vec![at(
        "f",
        vec![
            offer(0, f(1), base.clone(), f(1)),
            offer(1, f(1), base.clone(), f(2)),
            offer(2, f(1), base.clone(), f(3)),
        ],
    )];
    let mut edit = edit_of(&paths, 4);
    edit.choose(&path("f"), Some(SetChoice::Take(1))).unwrap();
    let vector = settled(&edit, "f").vector.clone();
    // Every replica that took part holds B's version, recorded with it.
    let mut next: Vec<Offer> = (0..3)
        .map(|r| offer(r, f(2), vector.clone(), f(2)))
        .collect();
    match settle_path(&next, &SYNCED) {
        Outcome::Settled(settled) => assert!(settled.receivers.is_empty(), "{settled:?}"),
        conflict => panic!("a conflict again: {conflict:?}"),
    }
    // D comes back, unchanged since its old record: it receives B's.
    next.push(offer(3, f(1), base.clone(), f(1)));
    let Outcome::Settled(settled) = settle_path(&next, &SYNCED) else {
        panic!("the replica away is in conflict");
    };
    assert_eq!(settled.receivers, [(3, Receive::Whole)]);
    assert_eq!(settled.entry.as_ref().unwrap().hash, Some([2; 32]));
}

#[test]
fn a_skipped_path_is_left_out_and_neither_changed_nor_recorded() {
    let paths = conflict_between_b_and_c();
    let mut edit = edit_of(&paths, 3);
    edit.toggle_skip(&path("g")).unwrap();
    assert!(edit.is_skipped(&path("g")));
    assert!(!edit.is_skipped(&path("f")));
    // Skipping the conflict too: it is no longer reported as one.
    edit.toggle_skip(&path("f")).unwrap();
    let (items, skipped) = edit.into_items();
    assert!(items.is_empty(), "{items:?}");
    assert_eq!(skipped, [path("f"), path("g")]);

    // A skip taken back, and a choice taken back, leave the plan found.
    let mut edit = edit_of(&paths, 3);
    let found = edit.items().to_vec();
    edit.toggle_skip(&path("g")).unwrap();
    edit.toggle_skip(&path("g")).unwrap();
    edit.choose(&path("f"), Some(SetChoice::Take(0))).unwrap();
    edit.choose(&path("f"), None).unwrap();
    assert_eq!(edit.items(), found);
    assert_eq!(edit.into_items().0, found);
}

#[test]
fn quitting_leaves_everything_alone_and_the_conflicts_reported() {
    let paths = conflict_between_b_and_c();
    let mut edit = edit_of(&paths, 3);
    edit.choose(&path("f"), Some(SetChoice::Take(1))).unwrap();
    edit.leave_all_alone();
    let (items, skipped) = edit.into_items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].path, path("f"));
    assert!(matches!(items[0].outcome, Outcome::Conflict { .. }));
    assert_eq!(skipped, [path("g")]);
}

#[test]
fn a_replica_not_reached_or_a_path_not_planned_is_refused() {
    let paths = conflict_between_b_and_c();
    let mut edit = edit_of(&paths, 4);
    assert_eq!(
        edit.choose(&path("f"), Some(SetChoice::Take(3))),
        Err(SetEditRefused::NotReached)
    );
    assert_eq!(
        edit.choose(&path("h"), Some(SetChoice::Skip)),
        Err(SetEditRefused::NotInPlan)
    );
}

/// `d` (with `d/f`) was on every replica; A removed it while B changed
/// `d/f`: one conflict over the whole directory.
fn directory_removed_while_changed_beneath() -> Vec<PathOffers> {
    let base = vector(&[(0, 1)]);
    let d = || Some(dir("d"));
    let f = |value| Some(file("d/f", value));
    vec![
        at(
            "d",
            vec![
                offer(0, d(), base.clone(), None),
                offer(1, d(), base.clone(), d()),
                offer(2, d(), base.clone(), d()),
            ],
        ),
        at(
            "d/f",
            vec![
                offer(0, f(1), base.clone(), None),
                offer(1, f(1), base.clone(), f(2)),
                offer(2, f(1), base.clone(), f(1)),
            ],
        ),
    ]
}

#[test]
fn a_choice_at_a_directory_not_on_every_replica_decides_its_subtree() {
    let paths = directory_removed_while_changed_beneath();
    let mut edit = edit_of(&paths, 3);
    // One conflict over the directory; the path beneath follows it.
    assert_eq!(edit.items().len(), 1);
    assert_eq!(
        edit.choose(&path("d/f"), Some(SetChoice::Take(1))),
        Err(SetEditRefused::FollowsDirectory(path("d")))
    );
    // B's version: the directory and B's file come back on A.
    edit.choose(&path("d"), Some(SetChoice::Take(1))).unwrap();
    assert_eq!(settled(&edit, "d").receivers, [(0, Receive::Whole)]);
    let file = settled(&edit, "d/f");
    assert_eq!(file.receivers, [(0, Receive::Whole), (2, Receive::Whole)]);
    assert_eq!(file.entry.as_ref().unwrap().hash, Some([2; 32]));
    // A's version: removed everywhere, its file first.
    edit.choose(&path("d"), Some(SetChoice::Take(0))).unwrap();
    let deleted = |name| settled(&edit, name).receivers.clone();
    assert_eq!(deleted("d"), [(1, Receive::Delete), (2, Receive::Delete)]);
    assert_eq!(deleted("d/f"), [(1, Receive::Delete), (2, Receive::Delete)]);
    // Skipped: the directory and what is beneath it.
    edit.choose(&path("d"), Some(SetChoice::Skip)).unwrap();
    assert!(edit.is_skipped(&path("d/f")));
    let (items, skipped) = edit.into_items();
    assert!(items.is_empty(), "{items:?}");
    assert_eq!(skipped, [path("d")]);
}
