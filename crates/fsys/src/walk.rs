//! The paired walk: a source and a destination read together, directory
//! by directory, each directory pair handed to a visitor as soon as both
//! sides are read and then dropped, so memory holds the directories in
//! flight, not the tree. A directory of more names than the walk's slice
//! is handed over in slices of its names, both sides cut at the same
//! names, so memory holds a slice of it, not all of its entries.

use crate::scan::{
    listing_of_names, open_subdir, read_head, read_own, whole_listing, Ctx, Head, Listing, Names,
    Scan, ScanOptions,
};
use crate::{is_reserved_name, Dir, IgnoreRules, Root};
use accord_model::{Entry, RelPath};
use rayon::prelude::*;
use std::cmp::Ordering;
use std::ops::Range;

/// One directory of a paired walk: each side's listing (`None`: missing on
/// that side, or unreadable: then the walk's scan says so).
#[derive(Clone, Copy, Debug)]
pub struct DirVisit<'a> {
    pub path: &'a RelPath,
    pub src: Option<&'a Listing>,
    pub dst: Option<&'a Listing>,
    /// `Some` when the directory is handed over in slices, this being one
    /// of them (see `Slice`).
    pub slice: Option<Slice>,
}

/// One slice of a large directory. Its listings hold the directory's own
/// entry first, as a whole listing does, then the slice's names alone;
/// the slices of a directory come one after the other, in name order,
/// before any of its subdirectories. A directory that holds any name
/// reserved for our temp or recovery files (a stale temp, an in-place
/// marker, whose meaning is another name's) is never sliced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub last: bool,
    /// The names the directory holds in all, on each side.
    pub names: (usize, usize),
}

/// Walk a source and a destination together, directory by directory, as
/// `scan_pair` does, but hand each directory pair to `visit` as soon as both
/// sides are read, and keep nothing of it. A parent is visited before its
/// subdirectories. A directory of more than `slice` names (both sides
/// together) is visited in slices of at most that many (see `Slice`).
/// Returns both scans without entries (errors, completeness, memo digests);
/// stale temps and markers are only in the listings.
pub fn walk_pair(
    src: (&Root, &IgnoreRules, &ScanOptions),
    dst: (&Root, &IgnoreRules, &ScanOptions),
    slice: Option<usize>,
    visit: &(dyn Fn(DirVisit) + Sync),
) -> (Scan, Scan) {
    walk_pair_at(src, dst, crate::scan::now_s(), slice, visit)
}

/// `walk_pair` as if it began at `start_s` seconds since the epoch.
pub(crate) fn walk_pair_at(
    (s_root, s_rules, s_opts): (&Root, &IgnoreRules, &ScanOptions),
    (d_root, d_rules, d_opts): (&Root, &IgnoreRules, &ScanOptions),
    start_s: i64,
    slice: Option<usize>,
    visit: &(dyn Fn(DirVisit) + Sync),
) -> (Scan, Scan) {
    let (sc, dc) = (
        Ctx::new(s_rules, s_opts, start_s),
        Ctx::new(d_rules, d_opts, start_s),
    );
    let side = |dir: Option<Dir>| dir.map_or(WalkSide::Missing, WalkSide::Open);
    let walk = PairWalk {
        sc: &sc,
        dc: &dc,
        slice: slice.map(|n| n.max(1)),
        visit,
    };
    walk.dir(
        side(sc.open_root(s_root)),
        side(dc.open_root(d_root)),
        RelPath::root(),
    );
    (sc.finish(None), dc.finish(None))
}

/// What every directory of one paired walk shares.
struct PairWalk<'w, 'a> {
    sc: &'w Ctx<'a>,
    dc: &'w Ctx<'a>,
    slice: Option<usize>,
    visit: &'w (dyn Fn(DirVisit) + Sync),
}

/// One side of a directory in a paired walk.
enum WalkSide {
    Open(Dir),
    /// It exists (its parent listed it) but cannot be opened: reported, and
    /// visited with its own entry alone, so it is neither mistaken for
    /// something to delete nor left without its properties.
    Unreadable(Entry),
    /// A source directory on another file system (`-x`): visited with its
    /// own entry alone, nothing below it walked.
    MountPoint(Dir),
    Missing,
}

/// One side of a directory read as far as its names (`Head`), or as far
/// as it goes (a listing of its own entry alone, or nothing).
enum SideRead<'p> {
    Head(Head<'p>),
    Done(Option<Listing>),
}

impl<'p> SideRead<'p> {
    fn names(&self) -> Option<&Names> {
        match self {
            SideRead::Head(h) => h.names.as_ref().map(|l| l.names()),
            SideRead::Done(_) => None,
        }
    }
}

fn read_side<'p>(
    side: &mut WalkSide,
    rel: &RelPath,
    ctx: &Ctx,
    peer: Option<&'p Names>,
) -> SideRead<'p> {
    match side {
        WalkSide::Open(dir) => match read_head(dir, rel, ctx, peer) {
            Some(h) => SideRead::Head(h),
            None => SideRead::Done(None),
        },
        WalkSide::Unreadable(me) => SideRead::Done(Some(Listing {
            entries: vec![me.clone()],
            ..Listing::default()
        })),
        WalkSide::MountPoint(dir) => {
            let head = read_own(dir, rel, ctx);
            SideRead::Done(head.map(|(me, st)| Listing {
                entries: vec![me],
                ctimes: vec![st.ctime],
                ..Listing::default()
            }))
        }
        WalkSide::Missing => SideRead::Done(None),
    }
}

/// The whole listing of a side read as far as `read`.
fn whole(side: &WalkSide, rel: &RelPath, ctx: &Ctx, read: SideRead) -> Option<Listing> {
    match (side, read) {
        (WalkSide::Open(dir), SideRead::Head(h)) => Some(whole_listing(dir, rel, ctx, h)),
        (_, SideRead::Head(_)) => None,
        (_, SideRead::Done(l)) => l,
    }
}

impl PairWalk<'_, '_> {
    fn dir(&self, s: WalkSide, d: WalkSide, rel: RelPath) {
        let (sc, dc) = (self.sc, self.dc);
        let (mut s, mut d) = (s, d);
        let s_read = read_side(&mut s, &rel, sc, None);
        // The destination may take the source's names (see `Ctx::names_of`).
        let peer = s_read.names().filter(|_| dc.opts.listing_memo.is_some());
        let d_read = read_side(&mut d, &rel, dc, peer);
        let (s_subs, d_subs, d_mount) = match self.slices(&s_read, &d_read) {
            Some(slices) => self.visit_slices(&rel, (&s, &d), (&s_read, &d_read), slices),
            None => {
                // The destination's first: it may hold the source's names.
                let d_part = whole(&d, &rel, dc, d_read);
                let s_part = whole(&s, &rel, sc, s_read);
                (self.visit)(DirVisit {
                    path: &rel,
                    src: s_part.as_ref(),
                    dst: d_part.as_ref(),
                    slice: None,
                });
                let d_mount = d_part
                    .as_ref()
                    .is_some_and(|l| dc.across_mount(&l.entries[0]));
                let subdirs = |part: Option<Listing>| part.map_or(Vec::new(), |l| l.subdirs);
                (subdirs(s_part), subdirs(d_part), d_mount)
            }
        };
        if matches!(s, WalkSide::MountPoint(_)) {
            return;
        }
        self.subdirs((&s, &d), (s_subs, d_subs), d_mount);
    }

    /// The slices of a directory read as far as its names on both sides,
    /// when it is to be visited in slices: each a range of each side's
    /// names in name order (see `cut_slices`).
    fn slices(&self, s: &SideRead, d: &SideRead) -> Option<Slices> {
        let n = self.slice?;
        let sliceable = |r: &SideRead| match r {
            SideRead::Head(h) => h.names.is_some(),
            SideRead::Done(l) => l.is_none(),
        };
        if !sliceable(s) || !sliceable(d) {
            return None;
        }
        let empty = Names::new();
        let (sn, dn) = (s.names().unwrap_or(&empty), d.names().unwrap_or(&empty));
        if sn.len() + dn.len() <= n {
            return None;
        }
        let reserved = |names: &Names| names.iter().any(|(n, _, _)| is_reserved_name(n));
        if reserved(sn) || reserved(dn) {
            return None;
        }
        let (s_order, d_order) = (name_order(sn), name_order(dn));
        let cuts = cut_slices(
            |i| sn.name(s_order[i] as usize),
            s_order.len(),
            |j| dn.name(d_order[j] as usize),
            d_order.len(),
            n,
        );
        (cuts.len() >= 2).then_some(Slices {
            order: (s_order, d_order),
            cuts,
        })
    }

    /// Visit a directory slice by slice; returns its subdirectories on
    /// each side, sorted by name, and whether the destination's is across
    /// a mount point.
    fn visit_slices(
        &self,
        rel: &RelPath,
        (s, d): (&WalkSide, &WalkSide),
        (s_read, d_read): (&SideRead, &SideRead),
        slices: Slices,
    ) -> (Vec<Entry>, Vec<Entry>, bool) {
        let totals = (
            s_read.names().map_or(0, Names::len),
            d_read.names().map_or(0, Names::len),
        );
        let mut subs = (Vec::new(), Vec::new());
        let d_mount = match d_read {
            SideRead::Head(h) => self.dc.across_mount(&h.me),
            SideRead::Done(_) => false,
        };
        let Slices {
            order: (mut s_order, mut d_order),
            cuts,
        } = slices;
        for (k, (a, b)) in cuts.iter().enumerate() {
            let mut s_part = slice_listing(s, rel, self.sc, s_read, &mut s_order[a.clone()]);
            let mut d_part = slice_listing(d, rel, self.dc, d_read, &mut d_order[b.clone()]);
            (self.visit)(DirVisit {
                path: rel,
                src: s_part.as_ref(),
                dst: d_part.as_ref(),
                slice: Some(Slice {
                    last: k + 1 == cuts.len(),
                    names: totals,
                }),
            });
            if let Some(l) = &mut s_part {
                subs.0.append(&mut l.subdirs);
            }
            if let Some(l) = &mut d_part {
                subs.1.append(&mut l.subdirs);
            }
        }
        (subs.0, subs.1, d_mount)
    }

    /// Walk the subdirectories of a directory (each side's sorted by name),
    /// in parallel.
    fn subdirs(
        &self,
        (s, d): (&WalkSide, &WalkSide),
        subs: (Vec<Entry>, Vec<Entry>),
        d_mount: bool,
    ) {
        let (sc, dc) = (self.sc, self.dc);
        let (s_subs, d_subs) = subs;
        let mut pairs = pair_subdirs(&s_subs, &d_subs);
        if dc.opts.same_fs.is_some() {
            // `-x`: what only the destination holds across a mount point is
            // kept (see `SameFs`), so it is not walked.
            pairs.retain(|p| {
                p.in_s.is_some()
                    || !(d_mount || p.in_d.is_some_and(|i| dc.across_mount(&d_subs[i])))
            });
        }
        // A subdirectory that cannot be opened is reported (its side of the
        // scan is incomplete).
        let open = |side: &WalkSide, me: Option<&Entry>, ctx: &Ctx| {
            let (WalkSide::Open(dir), Some(me)) = (side, me) else {
                return WalkSide::Missing;
            };
            let across = ctx.opts.source && ctx.across_mount(me);
            match open_subdir(dir, me.path.file_name(), &me.path, ctx) {
                Ok(sub) if across => WalkSide::MountPoint(sub),
                Ok(sub) => WalkSide::Open(sub),
                Err(_) => WalkSide::Unreadable(me.clone()),
            }
        };
        pairs.into_par_iter().for_each(|p| {
            let s_me = p.in_s.map(|i| &s_subs[i]);
            let d_me = p.in_d.map(|i| &d_subs[i]);
            let child = s_me.or(d_me).map(|e| e.path.clone()).unwrap_or_default();
            self.dir(open(s, s_me, sc), open(d, d_me, dc), child);
        });
    }
}

/// How a directory is cut: each side's names in name order (indices
/// into its names), and each slice's range of both orders.
struct Slices {
    order: (Vec<u32>, Vec<u32>),
    cuts: Vec<(Range<usize>, Range<usize>)>,
}

/// The listing of one slice of a side read as far as `read`.
fn slice_listing(
    side: &WalkSide,
    rel: &RelPath,
    ctx: &Ctx,
    read: &SideRead,
    pick: &mut [u32],
) -> Option<Listing> {
    let (WalkSide::Open(dir), SideRead::Head(h)) = (side, read) else {
        return None;
    };
    let names = h.names.as_ref()?.names();
    // (`pick` is left in inode order: each slice has a range of its own.)
    Some(listing_of_names(
        dir,
        rel,
        ctx,
        (h.me.clone(), h.ctime),
        names,
        pick,
    ))
}

/// Indices of `names` in name order.
fn name_order(names: &Names) -> Vec<u32> {
    let mut order: Vec<u32> = (0..names.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| names.name(a as usize).cmp(names.name(b as usize)));
    order
}

/// Cut two sorted name sequences (of lengths `m` and `n`, read through
/// `a` and `b`) into slices of at most `max` names of their union, each
/// slice a range of each sequence cut at the same name: a name on both
/// sides is in the same slice on both.
fn cut_slices<'n>(
    a: impl Fn(usize) -> &'n [u8],
    m: usize,
    b: impl Fn(usize) -> &'n [u8],
    n: usize,
    max: usize,
) -> Vec<(Range<usize>, Range<usize>)> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < m || j < n {
        let (i0, j0) = (i, j);
        for _ in 0..max {
            let ord = match (i < m, j < n) {
                (true, true) => a(i).cmp(b(j)),
                (true, false) => Ordering::Less,
                (false, true) => Ordering::Greater,
                (false, false) => break,
            };
            i += usize::from(ord != Ordering::Greater);
            j += usize::from(ord != Ordering::Less);
        }
        out.push((i0..i, j0..j));
    }
    out
}

/// One subdirectory of a pair: its index among each side's subdirectories.
struct SubPair {
    in_s: Option<usize>,
    in_d: Option<usize>,
}

/// The union of two sorted subdirectory lists, sorted by name.
fn pair_subdirs(a: &[Entry], b: &[Entry]) -> Vec<SubPair> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let ord = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.path.file_name().cmp(y.path.file_name()),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        out.push(SubPair {
            in_s: (ord != Ordering::Greater).then_some(i),
            in_d: (ord != Ordering::Less).then_some(j),
        });
        i += usize::from(ord != Ordering::Greater);
        j += usize::from(ord != Ordering::Less);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::XattrFilter;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// Per directory and side: the names of its children (subdirectories
    /// included) as the visits gave them, in visit order, and the slices.
    type Seen = BTreeMap<String, (Vec<String>, Vec<String>, Vec<Option<Slice>>)>;

    fn walk_seen(s: &Root, d: &Root, slice: Option<usize>) -> Seen {
        let seen = Mutex::new(Seen::new());
        let rules = IgnoreRules::new(&[]).unwrap();
        let (so, dopt) = (
            ScanOptions::plain(XattrFilter::NONE, true),
            ScanOptions::plain(XattrFilter::NONE, false),
        );
        let names = |l: Option<&Listing>| -> Vec<String> {
            l.map_or(Vec::new(), |l| {
                let own = &l.entries[0];
                assert!(l.entries.len() + l.subdirs.len() > 0);
                l.entries[1..]
                    .iter()
                    .chain(&l.subdirs)
                    .inspect(|e| assert_eq!(e.path.parent().as_ref(), Some(&own.path)))
                    .map(|e| String::from_utf8_lossy(e.path.file_name()).into_owned())
                    .collect()
            })
        };
        walk_pair((s, &rules, &so), (d, &rules, &dopt), slice, &|v| {
            let mut seen = seen.lock().unwrap();
            let at = seen.entry(v.path.display().to_string()).or_default();
            at.0.extend(names(v.src));
            at.1.extend(names(v.dst));
            at.2.push(v.slice);
        });
        let mut seen = seen.into_inner().unwrap();
        for v in seen.values_mut() {
            // Within a slice, files before subdirectories: by name here.
            v.0.sort();
            v.1.sort();
        }
        seen
    }

    #[test]
    fn a_walk_in_slices_visits_every_name_once_as_a_whole_walk_does() {
        let tmp = tempfile::tempdir().unwrap();
        let (s, d) = (tmp.path().join("s"), tmp.path().join("d"));
        for (side, range, sub) in [(&s, 0..23, "big/sub07"), (&d, 10..30, "big/sub15")] {
            std::fs::create_dir_all(side.join(sub)).unwrap();
            std::fs::create_dir_all(side.join("small")).unwrap();
            std::fs::write(side.join("small/one"), "x").unwrap();
            for i in range {
                std::fs::write(side.join(format!("big/f{i:02}")), "x").unwrap();
            }
        }
        // A stale temp: that directory is visited whole.
        std::fs::create_dir_all(d.join("temps")).unwrap();
        for i in 0..9 {
            std::fs::write(d.join(format!("temps/t{i}")), "x").unwrap();
        }
        std::fs::write(d.join("temps/.accord-tmp-x"), "x").unwrap();
        let (sr, dr) = (Root::open(&s).unwrap(), Root::open(&d).unwrap());
        let whole = walk_seen(&sr, &dr, None);
        let sliced = walk_seen(&sr, &dr, Some(4));
        for (path, (s_names, d_names, slices)) in &sliced {
            let (ws, wd, wslices) = &whole[path];
            assert_eq!((s_names, d_names), (ws, wd), "{path}: the same names");
            assert_eq!(wslices, &[None]);
            match path.as_str() {
                "big" => {
                    // 24 + 21 names, 32 distinct: 4 a slice.
                    assert_eq!(slices.len(), 8, "{slices:?}");
                    let last: Vec<bool> = slices.iter().map(|x| x.unwrap().last).collect();
                    assert_eq!(last.iter().filter(|l| **l).count(), 1);
                    assert!(last[last.len() - 1]);
                    assert_eq!(slices[0].unwrap().names, (24, 21));
                }
                "temps" => assert_eq!(slices, &[None], "reserved names: whole"),
                _ => assert!(slices.len() == 1),
            }
        }
        assert_eq!(
            sliced.keys().collect::<Vec<_>>(),
            whole.keys().collect::<Vec<_>>()
        );
    }

    fn cut(a: &[&str], b: &[&str], max: usize) -> Vec<(Vec<String>, Vec<String>)> {
        let s = |v: &[&str], r: Range<usize>| v[r].iter().map(|x| x.to_string()).collect();
        cut_slices(
            |i| a[i].as_bytes(),
            a.len(),
            |j| b[j].as_bytes(),
            b.len(),
            max,
        )
        .into_iter()
        .map(|(x, y)| (s(a, x), s(b, y)))
        .collect()
    }

    #[test]
    fn slices_cut_both_sides_at_the_same_names() {
        let got = cut(&["a", "b", "d", "e"], &["b", "c", "e", "f"], 2);
        let want = [
            (vec!["a", "b"], vec!["b"]),
            (vec!["d"], vec!["c"]),
            (vec!["e"], vec!["e", "f"]),
        ];
        // a b | c d | e f: each slice two names of the union.
        let want: Vec<(Vec<String>, Vec<String>)> = want
            .iter()
            .map(|(x, y)| {
                (
                    x.iter().map(|s| s.to_string()).collect(),
                    y.iter().map(|s| s.to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(cut(&[], &[], 3), vec![]);
        assert_eq!(cut(&["a"], &[], 3).len(), 1);
    }

    #[test]
    fn every_name_is_in_exactly_one_slice_of_at_most_max() {
        // Two sides drawn from one pool of names, every slice size.
        let pool: Vec<String> = (0..40).map(|i| format!("n{i:02}")).collect();
        for seed in 0..50u64 {
            let pick = |k: u64| -> Vec<&str> {
                pool.iter()
                    .enumerate()
                    .filter(|(i, _)| {
                        (seed.wrapping_mul(0x9e37_79b9) >> (*i as u64 % 29) ^ k) & 1 == 1
                    })
                    .map(|(_, s)| s.as_str())
                    .collect()
            };
            let (a, b) = (pick(0), pick(1));
            for max in 1..8 {
                let got = cut(&a, &b, max);
                let flat = |side: usize| -> Vec<String> {
                    got.iter()
                        .flat_map(|s| if side == 0 { s.0.clone() } else { s.1.clone() })
                        .collect()
                };
                assert_eq!(flat(0), a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
                assert_eq!(flat(1), b.iter().map(|s| s.to_string()).collect::<Vec<_>>());
                for (x, y) in &got {
                    let mut union: Vec<&String> = x.iter().chain(y).collect();
                    union.sort();
                    union.dedup();
                    assert!(!union.is_empty() && union.len() <= max);
                    for name in x {
                        // A name on both sides is in the same slice of both.
                        assert_eq!(b.contains(&name.as_str()), y.contains(name));
                    }
                }
            }
        }
    }
}
