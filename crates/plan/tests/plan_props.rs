//! Property tests of the mirror planner: applying a plan to a model of the
//! destination yields the source, a second plan is empty, and the deletion
//! guard holds.

use accord_model::{Entry, Kind, Props, RelPath, Time};
use accord_plan::{mirror_plan, Facts, MaxDelete, Method, MirrorOptions, MirrorPlan, Op, Refusal};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

type Tree = BTreeMap<RelPath, Entry>;

fn root_entry(ino: u64) -> Entry {
    Entry {
        path: RelPath::root(),
        kind: Kind::Dir,
        size: 0,
        props: Props {
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime: Time { sec: 1, nsec: 0 },
            xattrs: Some(vec![]),
        },
        dev: 1,
        ino,
        nlink: 1,
        rdev: 0,
        blocks: 0,
        link_target: None,
        hash: None,
    }
}

/// (path components, kind index, size, mtime, mode, link-to-earlier index)
type Raw = (Vec<u8>, u8, u64, i64, u32, Option<usize>);

fn build(raw: &[Raw], ino_base: u64) -> Vec<Entry> {
    let mut t: Tree = BTreeMap::new();
    t.insert(RelPath::root(), root_entry(ino_base));
    let mut files: Vec<RelPath> = Vec::new();
    let mut ino = ino_base + 1;
    for (comps, k, size, mtime, mode, link) in raw {
        // Components from a small alphabet, depth 1..=3.
        let mut p = RelPath::root();
        let mut ok = true;
        for (i, c) in comps.iter().enumerate() {
            let name = [b'a' + (c % 4)];
            p = p.join(&name).unwrap();
            let last = i + 1 == comps.len();
            if !last {
                match t.get(&p) {
                    Some(e) if e.kind != Kind::Dir => {
                        ok = false;
                        break;
                    }
                    Some(_) => {}
                    None => {
                        let mut e = root_entry(ino);
                        ino += 1;
                        e.path = p.clone();
                        t.insert(p.clone(), e);
                    }
                }
            }
        }
        if !ok || t.contains_key(&p) {
            continue;
        }
        let kind =
            [Kind::File, Kind::File, Kind::Dir, Kind::Symlink, Kind::Fifo][(*k % 5) as usize];
        if let (Kind::File, Some(l)) = (kind, link) {
            if !files.is_empty() {
                let target = files[l % files.len()].clone();
                let mut e = t[&target].clone();
                e.path = p.clone();
                t.insert(p.clone(), e);
                continue;
            }
        }
        let mut e = root_entry(ino);
        ino += 1;
        e.path = p.clone();
        e.kind = kind;
        e.props.mode = mode & 0o777;
        e.props.mtime = Time {
            sec: *mtime,
            nsec: 0,
        };
        if kind == Kind::File {
            e.size = *size;
            files.push(p.clone());
        }
        if kind == Kind::Symlink {
            e.link_target = Some(format!("t{size}").into_bytes());
            e.size = e.link_target.as_ref().unwrap().len() as u64;
        }
        t.insert(p, e);
    }
    fix_nlink(&mut t);
    t.into_values().collect()
}

fn fix_nlink(t: &mut Tree) {
    let mut count: HashMap<u64, u64> = HashMap::new();
    for e in t.values() {
        if e.kind == Kind::File {
            *count.entry(e.ino).or_default() += 1;
        }
    }
    for e in t.values_mut() {
        if e.kind == Kind::File {
            e.nlink = count[&e.ino];
        }
    }
}

/// Apply a plan to a model destination, checking each step is possible.
fn apply(dst: &[Entry], plan: &MirrorPlan) -> Result<Vec<Entry>, String> {
    let mut t: Tree = dst.iter().map(|e| (e.path.clone(), e.clone())).collect();
    let mut next_ino = 1_000_000u64;
    let parent_is_dir = |t: &Tree, p: &RelPath| {
        t.get(&p.parent().unwrap())
            .is_some_and(|e| e.kind == Kind::Dir)
    };
    for it in plan.items() {
        let p = &it.path;
        match &it.op {
            Op::Cleanup => {}
            Op::Delete => {
                let e = t.get(p).ok_or(format!("delete of missing {p}"))?;
                if e.kind == Kind::Dir && t.keys().any(|q| q != p && q.starts_with(p)) {
                    return Err(format!("rmdir of non-empty {p}"));
                }
                t.remove(p);
            }
            Op::Mkdir => {
                if !parent_is_dir(&t, p) || t.contains_key(p) {
                    return Err(format!("mkdir {p} impossible"));
                }
                let mut e = *it.src.clone().unwrap();
                e.ino = next_ino;
                next_ino += 1;
                e.props.mtime = Time { sec: 999, nsec: 0 };
                t.insert(p.clone(), e);
            }
            Op::Write(_) | Op::Create => {
                if !parent_is_dir(&t, p) || t.get(p).is_some_and(|e| e.kind == Kind::Dir) {
                    return Err(format!("write {p} impossible"));
                }
                let mut e = *it.src.clone().unwrap();
                e.ino = next_ino;
                next_ino += 1;
                t.insert(p.clone(), e);
            }
            Op::Meta => {
                let s = it.src.clone().unwrap();
                let ino = t.get(p).ok_or(format!("meta of missing {p}"))?.ino;
                for e in t.values_mut() {
                    if e.ino == ino {
                        e.props = s.props.clone();
                    }
                }
            }
            Op::Link { leader } => {
                if !parent_is_dir(&t, p) || t.get(p).is_some_and(|e| e.kind == Kind::Dir) {
                    return Err(format!("link {p} impossible"));
                }
                let mut e = t
                    .get(leader)
                    .filter(|e| e.kind == Kind::File)
                    .ok_or(format!("link to missing leader {leader}"))?
                    .clone();
                e.path = p.clone();
                t.insert(p.clone(), e);
            }
            Op::DirMeta => {
                let s = it.src.clone().unwrap();
                let e = t
                    .get_mut(p)
                    .filter(|e| e.kind == Kind::Dir)
                    .ok_or(format!("dir meta of missing {p}"))?;
                e.props = s.props;
            }
        }
        // Creating or removing an entry moves the parent's mtime.
        if matches!(
            it.op,
            Op::Delete | Op::Mkdir | Op::Write(_) | Op::Create | Op::Link { .. }
        ) {
            if let Some(e) = t.get_mut(&p.parent().unwrap()) {
                e.props.mtime = Time { sec: 777, nsec: 1 };
            }
        }
    }
    fix_nlink(&mut t);
    Ok(t.into_values().collect())
}

fn same(src: &[Entry], dst: &[Entry]) -> Result<(), String> {
    if src.len() != dst.len() {
        return Err(format!("{} entries vs {}", src.len(), dst.len()));
    }
    for (s, d) in src.iter().zip(dst) {
        if s.path != d.path
            || s.kind != d.kind
            || s.size != d.size
            || (s.kind != Kind::Symlink && s.props != d.props)
            || (s.props.mtime != d.props.mtime)
            || s.link_target != d.link_target
        {
            return Err(format!("{:?} vs {:?}", s, d));
        }
    }
    // Hard-link groups match.
    let group = |t: &[Entry]| {
        let mut by: BTreeMap<u64, Vec<RelPath>> = BTreeMap::new();
        for e in t.iter().filter(|e| e.kind == Kind::File) {
            by.entry(e.ino).or_default().push(e.path.clone());
        }
        let mut g: Vec<Vec<RelPath>> = by.into_values().collect();
        g.sort();
        g
    };
    if group(src) != group(dst) {
        return Err("hard-link groups differ".into());
    }
    Ok(())
}

fn raw_strategy() -> impl Strategy<Value = Vec<Raw>> {
    prop::collection::vec(
        (
            prop::collection::vec(0u8..4, 1..4),
            0u8..5,
            0u64..4,
            0i64..3,
            prop::sample::select(vec![0o644u32, 0o600, 0o755]),
            prop::option::weighted(0.2, 0usize..10),
        ),
        0..25,
    )
}

fn opts() -> MirrorOptions {
    MirrorOptions {
        max_delete: MaxDelete::Fraction(1.0),
        ..MirrorOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn plan_converges(s in raw_strategy(), d in raw_strategy()) {
        let src = build(&s, 100);
        let dst = build(&d, 5000);
        let o = MirrorOptions { force: true, ..opts() };
        let plan = mirror_plan(&src, &dst, &[], &o, &Facts::default()).unwrap();
        let out = apply(&dst, &plan).map_err(TestCaseError::fail)?;
        same(&src, &out).map_err(TestCaseError::fail)?;
        let again = mirror_plan(&src, &out, &[], &o, &Facts::default()).unwrap();
        prop_assert!(again.is_empty(), "second plan not empty: {:?}", again.items().collect::<Vec<_>>());
    }

    #[test]
    fn input_order_does_not_matter(s in raw_strategy(), d in raw_strategy(), turn in 0usize..64) {
        // Scans come sorted; other callers' lists are sorted by the planner.
        let src = build(&s, 100);
        let dst = build(&d, 5000);
        let o = MirrorOptions { force: true, ..opts() };
        let want = mirror_plan(&src, &dst, &[], &o, &Facts::default()).unwrap();
        let (mut s2, mut d2) = (src.clone(), dst.clone());
        s2.reverse();
        let n = d2.len();
        d2.rotate_left(turn % n);
        let got = mirror_plan(&s2, &d2, &[], &o, &Facts::default()).unwrap();
        let items = |p: &MirrorPlan| format!("{:?}", p.items().collect::<Vec<_>>());
        prop_assert_eq!(items(&got), items(&want));
    }

    /// Issue 11: a partial file (what arrived of an interrupted transfer)
    /// is the basis of its file when that file is written, and removed
    /// otherwise; other stale temps are always removed.
    #[test]
    fn partial_files_are_resumed_or_removed(
        s in raw_strategy(),
        d in raw_strategy(),
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let src = build(&s, 100);
        let dst = build(&d, 5000);
        let o = MirrorOptions { force: true, ..opts() };
        // Partials for some source paths, for a name nobody has, and a temp.
        let mut temps: Vec<RelPath> = picks
            .iter()
            .map(|i| &src[i.index(src.len())].path)
            .filter(|p| !p.is_root())
            .map(|p| {
                let name = accord_model::partial_name(p.file_name()).unwrap();
                p.parent().unwrap_or_default().join(&name).unwrap()
            })
            .collect();
        temps.push(RelPath::new(b".accord-partial-nobody").unwrap());
        temps.push(RelPath::new(b".accord-tmp-x.123").unwrap());
        temps.sort();
        temps.dedup();
        let plan = mirror_plan(&src, &dst, &temps, &o, &Facts::default()).unwrap();
        let with_partial = |p: &RelPath| {
            let name = accord_model::partial_name(p.file_name()).unwrap();
            temps.contains(&p.parent().unwrap_or_default().join(&name).unwrap())
        };
        let mut resumed = Vec::new();
        for it in &plan.files {
            if let Op::Write(m) = it.op {
                let want_resume = m != Method::InPlace && with_partial(&it.path);
                prop_assert_eq!(m == Method::Resume, want_resume, "{:?}", it);
                if want_resume {
                    resumed.push(it.path.clone());
                }
            }
        }
        for t in &temps {
            let cleaned = plan.cleanup.iter().any(|c| &c.path == t);
            let kept_for = accord_model::partial_target(t.file_name())
                .map(|n| t.parent().unwrap_or_default().join(n).unwrap())
                .filter(|p| resumed.contains(p));
            prop_assert_eq!(cleaned, kept_for.is_none(), "{:?}", t);
        }
    }

    #[test]
    fn keep_extra_never_deletes(s in raw_strategy(), d in raw_strategy()) {
        let src = build(&s, 100);
        let dst = build(&d, 5000);
        let suspended = Facts { source_incomplete: true, ..Facts::default() };
        for (o, facts) in [
            (MirrorOptions { delete: false, ..opts() }, Facts::default()),
            (opts(), suspended),
        ] {
            let plan = mirror_plan(&src, &dst, &[], &o, &facts).unwrap();
            let in_src: std::collections::HashSet<_> = src.iter().map(|e| &e.path).collect();
            for it in &plan.deletes {
                // Only kind changes of paths the source has.
                prop_assert!(in_src.contains(&it.path));
            }
        }
    }

    #[test]
    fn guard_holds(d in raw_strategy(), limit in 0usize..5) {
        let dst = build(&d, 5000);
        let empty = build(&[], 100);
        let n = dst.len() - 1;
        let r = mirror_plan(&empty, &dst, &[], &MirrorOptions::default(), &Facts::default());
        if n > 0 {
            prop_assert_eq!(r.unwrap_err(), Refusal::SourceEmpty { dst_entries: n });
        } else {
            prop_assert!(r.unwrap().deletes.is_empty());
        }
        let src = build(&[(vec![0], 0, 1, 1, 0o644, None)], 100);
        let r = mirror_plan(&src, &dst, &[], &MirrorOptions { max_delete: MaxDelete::Count(limit), ..MirrorOptions::default() }, &Facts::default());
        match r {
            Ok(p) => prop_assert!(p.summary.deletes <= limit),
            Err(Refusal::TooManyDeletes { would_delete, .. }) => prop_assert!(would_delete > limit),
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
        let r = mirror_plan(&src, &dst, &[], &MirrorOptions { max_delete: MaxDelete::Fraction(1.0), ..MirrorOptions::default() }, &Facts { source_root_changed: true, ..Facts::default() });
        if let Ok(p) = r {
            prop_assert_eq!(p.summary.deletes, 0);
        }
        let forced = mirror_plan(&empty, &dst, &[], &MirrorOptions { force: true, ..MirrorOptions::default() }, &Facts::default()).unwrap();
        prop_assert_eq!(forced.summary.deletes, n);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// `--ignore-existing`, `--min-size`, `--max-size`: a destination
    /// entry at the path of a source file left alone is exactly as it was;
    /// every other source file ends as in the source; a second plan is
    /// empty.
    #[test]
    fn selection_leaves_its_files_alone(
        s in raw_strategy(),
        d in raw_strategy(),
        ignore_existing in any::<bool>(),
        min in prop::option::of(0u64..3),
        max in prop::option::of(0u64..3),
    ) {
        let src = build(&s, 100);
        let dst = build(&d, 5000);
        let select = accord_plan::Selection { ignore_existing, min_size: min, max_size: max, size_only: false };
        let o = MirrorOptions { force: true, select, ..opts() };
        let plan = mirror_plan(&src, &dst, &[], &o, &Facts::default()).unwrap();
        let out = apply(&dst, &plan).map_err(TestCaseError::fail)?;
        let before: HashMap<&RelPath, &Entry> = dst.iter().map(|e| (&e.path, e)).collect();
        let after: HashMap<&RelPath, &Entry> = out.iter().map(|e| (&e.path, e)).collect();
        for e in src.iter().filter(|e| e.kind != Kind::Dir) {
            let skipped = e.kind == Kind::File && select.size_skipped(e.size);
            match before.get(&e.path) {
                // A directory left alone still loses its extra entries
                // (the mirror deletes what the source does not have), so
                // its mtime moves: its kind stays.
                Some(old) if (ignore_existing || skipped) && old.kind == Kind::Dir => {
                    prop_assert_eq!(after.get(&e.path).map(|e| e.kind), Some(Kind::Dir), "{} replaced", e.path);
                }
                Some(old) if ignore_existing || skipped => {
                    // Its link count may grow: another source name of its
                    // group can be linked to it.
                    let now = after.get(&e.path).map(|n| Entry { nlink: old.nlink, ..(*n).clone() });
                    prop_assert_eq!(now.as_ref(), Some(*old), "{} was touched", e.path);
                }
                None if skipped => prop_assert!(!after.contains_key(&e.path), "{} was written", e.path),
                _ => {
                    // Written, unless an ancestor was left alone as a non-directory.
                    if let Some(now) = after.get(&e.path) {
                        prop_assert_eq!(now.kind, e.kind, "{}", e.path);
                        prop_assert_eq!(now.size, e.size, "{}", e.path);
                    }
                }
            }
        }
        let again = mirror_plan(&src, &out, &[], &o, &Facts::default()).unwrap();
        prop_assert!(again.files.is_empty(), "second plan writes: {:?}", again.files);
    }

    /// `--size-only`: a file of the same size is not written again (its
    /// properties still are), one of another size is.
    #[test]
    fn size_only_writes_only_other_sizes(s in raw_strategy(), d in raw_strategy()) {
        let src = build(&s, 100);
        let dst = build(&d, 5000);
        let select = accord_plan::Selection { size_only: true, ..Default::default() };
        let o = MirrorOptions { force: true, select, ..opts() };
        let plan = mirror_plan(&src, &dst, &[], &o, &Facts::default()).unwrap();
        let before: HashMap<&RelPath, &Entry> = dst.iter().map(|e| (&e.path, e)).collect();
        for it in plan.files.iter().filter(|it| matches!(it.op, Op::Write(_))) {
            let s = it.src.as_deref().unwrap();
            if let Some(d) = before.get(&it.path).filter(|d| d.kind == Kind::File && d.nlink <= 1 && s.nlink <= 1) {
                prop_assert!(d.size != s.size, "{} of the same size written", it.path);
            }
        }
    }
}
