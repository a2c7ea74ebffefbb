use super::*;
use crate::reconcile::{ConflictReason, Moved};
use accord_model::{Props, RelPath};
use proptest::prelude::*;

fn path(text: &str) -> RelPath {
    RelPath::new(text.as_bytes()).unwrap()
}

/// A file at `at` of inode `ino` (with `nlink` names) holding `contents`.
fn file(at: &str, ino: u64, nlink: u64, contents: u8) -> Entry {
    Entry {
        path: path(at),
        kind: Kind::File,
        size: 10,
        props: Props {
            mode: 0o644,
            ..Props::default()
        },
        dev: 1,
        ino,
        nlink,
        rdev: 0,
        blocks: 0,
        link_target: None,
        hash: Some([contents; 32]),
    }
}

fn item(at: &str, action: Action, a: Option<Entry>, b: Option<Entry>) -> SyncItem {
    SyncItem {
        path: path(at),
        action,
        overridden: None,
        a: a.map(std::sync::Arc::new),
        b: b.map(std::sync::Arc::new),
        moved: None,
        link: None,
    }
}

const A_TO_B: Action = Action::Copy {
    from: Side::A,
    to: Side::B,
};
const B_TO_A: Action = Action::Copy {
    from: Side::B,
    to: Side::A,
};

fn planned(mut items: Vec<SyncItem>) -> Vec<SyncItem> {
    link_groups(&mut items, &SyncedProps::default());
    items
}

/// `(path, leader, agreed?)` of every item, `None` for a plain one.
fn links(items: &[SyncItem]) -> Vec<(String, Option<(String, bool)>)> {
    items
        .iter()
        .map(|i| {
            let link = i
                .link
                .as_ref()
                .map(|l| (l.leader.display(), l.agreed.is_some()));
            (i.path.display(), link)
        })
        .collect()
}

fn owned(list: &[(&str, Option<(&str, bool)>)]) -> Vec<(String, Option<(String, bool)>)> {
    list.iter()
        .map(|(p, l)| (p.to_string(), l.map(|(x, y)| (x.to_string(), y))))
        .collect()
}

#[test]
fn a_new_group_is_one_copy_and_links_to_it() {
    let items = planned(vec![
        item("d1/x", A_TO_B, Some(file("d1/x", 9, 3, 1)), None),
        item("d2/y", A_TO_B, Some(file("d2/y", 9, 3, 1)), None),
        item("z", A_TO_B, Some(file("z", 9, 3, 1)), None),
    ]);
    assert_eq!(
        links(&items),
        owned(&[
            ("d1/x", None),
            ("d2/y", Some(("d1/x", false))),
            ("z", Some(("d1/x", false))),
        ])
    );
}

#[test]
fn a_name_added_to_an_agreed_group_links_to_the_agreed_name() {
    let items = planned(vec![
        item(
            "p",
            Action::Agree,
            Some(file("p", 9, 2, 1)),
            Some(file("p", 40, 1, 1)),
        ),
        item("q", A_TO_B, Some(file("q", 9, 2, 1)), None),
    ]);
    assert_eq!(
        links(&items),
        owned(&[("p", None), ("q", Some(("p", true)))])
    );
    assert_eq!(
        items[1].link.as_ref().unwrap().agreed.as_ref().unwrap().ino,
        40,
        "the link expects B's entry at the leader"
    );
}

#[test]
fn an_agreed_name_with_other_contents_or_permissions_does_not_lead() {
    let mut other_mode = file("p", 40, 1, 1);
    other_mode.props.mode = 0o600;
    for held in [file("p", 40, 1, 2), other_mode] {
        let items = planned(vec![
            item("p", Action::Agree, Some(file("p", 9, 3, 1)), Some(held)),
            item("q", A_TO_B, Some(file("q", 9, 3, 1)), None),
            item("r", A_TO_B, Some(file("r", 9, 3, 1)), None),
        ]);
        assert_eq!(
            links(&items),
            owned(&[("p", None), ("q", None), ("r", Some(("q", false)))])
        );
    }
}

#[test]
fn an_edit_through_one_name_is_one_copy_and_links() {
    // B edited its group {a, b/c, d}: every name changed at once.
    let old = |at: &str| Some(file(at, 5, 3, 1));
    let new = |at: &str| Some(file(at, 8, 3, 2));
    let items = planned(vec![
        item("a", B_TO_A, old("a"), new("a")),
        item("b/c", B_TO_A, old("b/c"), new("b/c")),
        item("d", B_TO_A, old("d"), new("d")),
    ]);
    assert_eq!(
        links(&items),
        owned(&[
            ("a", None),
            ("b/c", Some(("a", false))),
            ("d", Some(("a", false)))
        ])
    );
}

#[test]
fn conflicts_and_other_actions_stay_per_name() {
    let conflict = Action::Conflict(ConflictReason::BothChanged);
    let props_back = Action::CopyContentsAndPropsBack {
        from: Side::A,
        to: Side::B,
    };
    let items = planned(vec![
        item(
            "p",
            A_TO_B,
            Some(file("p", 9, 4, 2)),
            Some(file("p", 3, 1, 1)),
        ),
        item(
            "q",
            conflict,
            Some(file("q", 9, 4, 2)),
            Some(file("q", 4, 1, 3)),
        ),
        item(
            "r",
            props_back,
            Some(file("r", 9, 4, 2)),
            Some(file("r", 5, 1, 1)),
        ),
        item(
            "s",
            A_TO_B,
            Some(file("s", 9, 4, 2)),
            Some(file("s", 6, 1, 1)),
        ),
    ]);
    assert_eq!(
        links(&items),
        owned(&[
            ("p", None),
            ("q", None),
            ("r", None),
            ("s", Some(("p", false)))
        ])
    );
}

#[test]
fn what_is_not_one_group_is_copied_name_by_name() {
    // Other fingerprints within one inode (written while scanned), other
    // inodes, single links, and a copy replacing a directory.
    let mut dir = file("t", 2, 2, 0);
    dir.kind = Kind::Dir;
    dir.hash = None;
    let items = planned(vec![
        item("a", A_TO_B, Some(file("a", 9, 2, 1)), None),
        item("b", A_TO_B, Some(file("b", 9, 2, 2)), None),
        item("c", A_TO_B, Some(file("c", 10, 2, 1)), None),
        item("d", A_TO_B, Some(file("d", 11, 2, 1)), None),
        item("e", A_TO_B, Some(file("e", 12, 1, 1)), None),
        item("f", A_TO_B, Some(file("f", 12, 1, 1)), None),
        item("s", A_TO_B, Some(file("s", 13, 2, 1)), None),
        item("t", A_TO_B, Some(file("t", 13, 2, 1)), Some(dir)),
    ]);
    assert!(items.iter().all(|i| i.link.is_none()), "{items:?}");
}

#[test]
fn a_name_renamed_into_place_leads() {
    let mut renamed = item(
        "new",
        Action::Rename { on: Side::B },
        Some(file("new", 9, 2, 1)),
        None,
    );
    renamed.moved = Some(Box::new(Moved {
        from: path("old"),
        entry: file("old", 33, 1, 1),
    }));
    let items = planned(vec![
        renamed,
        item("other", A_TO_B, Some(file("other", 9, 2, 1)), None),
    ]);
    assert_eq!(
        links(&items),
        owned(&[("new", None), ("other", Some(("new", true)))])
    );
    let agreed = items[1].link.as_ref().unwrap().agreed.clone().unwrap();
    assert_eq!((agreed.ino, agreed.path.display()), (33, "new".into()));
}

// ---- property: links change how, never what ----

/// What the receiving side holds at each path once the plan is carried
/// out, following links to their leaders: `(fingerprint, mode)`.
fn end_state(items: &[SyncItem], to: Side) -> Vec<Option<([u8; 32], u32)>> {
    let from = to.other();
    let direct = |item: &SyncItem| -> Option<([u8; 32], u32)> {
        let held = match item.action {
            Action::Copy { to: t, .. } if t == to => item.entry(from),
            Action::Rename { on } if on == to => item.moved.as_ref().map(|m| &m.entry),
            _ => item.entry(to),
        }?;
        Some((held.hash?, held.props.mode))
    };
    items
        .iter()
        .map(|item| match &item.link {
            Some(link) if item.action == (Action::Copy { from, to }) => {
                let leader = items.iter().find(|i| i.path == link.leader)?;
                assert!(leader.link.is_none(), "a leader is no link");
                let state = direct(leader);
                if let Some(agreed) = &link.agreed {
                    // The link checks the leader is this entry first.
                    assert_eq!(state, Some((agreed.hash?, agreed.props.mode)));
                } else {
                    assert_eq!(leader.action, item.action, "a leader copied first");
                }
                state
            }
            _ => direct(item),
        })
        .collect()
}

fn arbitrary_item(index: usize) -> impl Strategy<Value = SyncItem> {
    let actions = prop_oneof![
        Just(A_TO_B),
        Just(B_TO_A),
        Just(Action::Agree),
        Just(Action::Conflict(ConflictReason::BothChanged)),
        Just(Action::Delete { on: Side::B }),
    ];
    let side = || {
        (0u64..3, 1u64..4, 0u8..3, prop::bool::ANY, prop::bool::ANY).prop_map(
            |(ino, nlink, contents, private, present)| (ino, nlink, contents, private, present),
        )
    };
    (actions, side(), side()).prop_map(move |(action, a, b)| {
        let at = format!("n{index:02}");
        let entry = |(ino, nlink, contents, private, present): (u64, u64, u8, bool, bool)| {
            let mut e = file(&at, ino, nlink, contents);
            if private {
                e.props.mode = 0o600;
            }
            present.then_some(e)
        };
        item(&at, action, entry(a), entry(b))
    })
}

proptest! {
    #[test]
    fn linking_never_changes_what_a_side_ends_with(
        items in (1usize..12).prop_flat_map(|n| {
            (0..n).map(arbitrary_item).collect::<Vec<_>>()
        })
    ) {
        // Copies need a source.
        let items: Vec<SyncItem> = items
            .into_iter()
            .filter(|i| match i.action {
                Action::Copy { from, .. } => i.entry(from).is_some(),
                _ => true,
            })
            .collect();
        let linked = planned(items.clone());
        for to in [Side::A, Side::B] {
            prop_assert_eq!(end_state(&linked, to), end_state(&items, to));
        }
        for (before, after) in items.iter().zip(&linked) {
            prop_assert_eq!(before.action, after.action);
        }
    }
}

// ---- property changes on shared inodes ----

fn with_mode(mut entry: Entry, mode: u32) -> Entry {
    entry.props.mode = mode;
    entry
}

fn kept_to_names(mut items: Vec<SyncItem>) -> Vec<Action> {
    keep_props_to_their_names(&mut items);
    items.into_iter().map(|i| i.action).collect()
}

#[test]
fn a_chmod_of_every_name_of_a_group_is_made_in_place() {
    let props = Action::CopyProps {
        from: Side::B,
        to: Side::A,
    };
    let actions = kept_to_names(vec![
        item(
            "p",
            props,
            Some(file("p", 9, 2, 1)),
            Some(with_mode(file("p", 4, 2, 1), 0o600)),
        ),
        item(
            "q",
            props,
            Some(file("q", 9, 2, 1)),
            Some(with_mode(file("q", 4, 2, 1), 0o600)),
        ),
    ]);
    assert_eq!(actions, [props, props]);
}

#[test]
fn a_chmod_of_one_name_of_a_group_replaces_that_name() {
    // A's q shares p's inode but is in conflict: a chmod in place of p
    // would change it too.
    let props = Action::CopyProps {
        from: Side::B,
        to: Side::A,
    };
    let conflict = Action::Conflict(ConflictReason::BothChanged);
    let actions = kept_to_names(vec![
        item(
            "p",
            props,
            Some(file("p", 9, 2, 1)),
            Some(with_mode(file("p", 4, 1, 1), 0o600)),
        ),
        item(
            "q",
            conflict,
            Some(file("q", 9, 2, 1)),
            Some(file("q", 5, 1, 2)),
        ),
    ]);
    assert_eq!(actions, [B_TO_A, conflict]);
    // Two names of three, or two names given other modes: the same.
    let other = Action::CopyProps {
        from: Side::B,
        to: Side::A,
    };
    let actions = kept_to_names(vec![
        item(
            "p",
            props,
            Some(file("p", 9, 3, 1)),
            Some(with_mode(file("p", 4, 1, 1), 0o600)),
        ),
        item(
            "q",
            props,
            Some(file("q", 9, 3, 1)),
            Some(with_mode(file("q", 5, 1, 1), 0o600)),
        ),
    ]);
    assert_eq!(actions, [B_TO_A, B_TO_A]);
    let actions = kept_to_names(vec![
        item(
            "p",
            props,
            Some(file("p", 9, 2, 1)),
            Some(with_mode(file("p", 4, 1, 1), 0o600)),
        ),
        item(
            "q",
            other,
            Some(file("q", 9, 2, 1)),
            Some(with_mode(file("q", 5, 1, 1), 0o640)),
        ),
    ]);
    assert_eq!(actions, [B_TO_A, B_TO_A]);
}

#[test]
fn permissions_set_back_on_a_shared_inode_are_a_conflict() {
    // A wrote p (a file with a second name outside the plan), B chmodded
    // it: B takes A's contents, and A would take B's mode in place.
    let back = Action::CopyContentsAndPropsBack {
        from: Side::A,
        to: Side::B,
    };
    let actions = kept_to_names(vec![item(
        "p",
        back,
        Some(file("p", 9, 2, 2)),
        Some(with_mode(file("p", 4, 1, 1), 0o600)),
    )]);
    assert_eq!(actions, [Action::Conflict(ConflictReason::BothChanged)]);
}
