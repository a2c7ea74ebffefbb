//! The `edit_plan` hook of `sync()`: a caller's edits are carried out as
//! made, a skipped conflict is still reported, and the deletion guard
//! judges the edited plan, not only the reconciled one.

use accord_engine::sync_plan::Side;
use accord_engine::{sync_local, PlanEdit, SyncConfig, SyncHooks, SyncRefusal};
use accord_model::RelPath;
use std::path::Path;

fn write(root: &Path, name: &str, contents: &str) {
    std::fs::write(root.join(name), contents).unwrap();
}

fn read(root: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(root.join(name)).ok()
}

struct Roots {
    _tmp: tempfile::TempDir,
    a: std::path::PathBuf,
    b: std::path::PathBuf,
    cfg: SyncConfig,
}

fn roots() -> Roots {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let mut cfg = SyncConfig::new(tmp.path().join("state"));
    cfg.fsync = false;
    Roots {
        _tmp: tmp,
        a,
        b,
        cfg,
    }
}

/// Every path whose item has a direction turned around.
fn flip_all(edit: &mut PlanEdit) {
    let paths: Vec<_> = edit.items().iter().map(|item| item.path.clone()).collect();
    for path in paths {
        let _ = edit.flip(&path);
    }
}

#[test]
fn a_plan_turned_into_deletions_meets_the_guard() {
    let roots = roots();
    for n in 0..10 {
        write(&roots.a, &format!("f{n}"), "new on A");
    }
    let hooks = SyncHooks {
        edit_plan: Some(&flip_all),
        ..SyncHooks::default()
    };
    let report = sync_local(&roots.a, &roots.b, &roots.cfg, &hooks);
    assert!(
        matches!(
            report.refusal,
            Some(SyncRefusal::TooManyDeletes { side: Side::A, .. })
        ),
        "{report:?}"
    );
    assert_eq!(read(&roots.a, "f0").as_deref(), Some("new on A"));
    assert!(report.propagated.is_empty());
}

#[test]
fn edits_are_carried_out_and_a_skipped_conflict_stays_one() {
    let roots = roots();
    write(&roots.a, "both", "base");
    write(&roots.a, "one", "base");
    let report = sync_local(&roots.a, &roots.b, &roots.cfg, &SyncHooks::default());
    assert!(report.all_agreed(), "{report:?}");
    write(&roots.a, "both", "from a");
    write(&roots.b, "both", "from b");
    write(&roots.a, "one", "from a");
    let skip_conflict_and_flip = |edit: &mut PlanEdit| {
        let both = RelPath::new(b"both").unwrap();
        let one = RelPath::new(b"one").unwrap();
        edit.toggle_skip(&both).unwrap();
        edit.flip(&one).unwrap();
    };
    let hooks = SyncHooks {
        edit_plan: Some(&skip_conflict_and_flip),
        ..SyncHooks::default()
    };
    let report = sync_local(&roots.a, &roots.b, &roots.cfg, &hooks);
    assert_eq!(report.conflicts.len(), 1, "{report:?}");
    assert_eq!(report.propagated.len(), 1, "{report:?}");
    // `one` went from B to A: A's change was undone by choice.
    assert_eq!(read(&roots.a, "one").as_deref(), Some("base"));
    assert_eq!(read(&roots.a, "both").as_deref(), Some("from a"));
    assert_eq!(read(&roots.b, "both").as_deref(), Some("from b"));
}
