//! Merging one directory's listings from several branches into the view the union shows.
//!
//! Pure: the caller reads each branch's directory (highest priority first) and feeds the names
//! in; the result says, for every visible name, which branches hold it (`positions`, highest
//! first, the first one wins). `positions` stops at a whiteout or an opaque directory, so it is
//! exactly the set of copies a delete must hide and the set of layers a subdirectory merges.

use std::ffi::OsString;

use hashbrown::{HashMap, HashSet};

use crate::whiteout;

/// What one branch holds for a name. `Dir` matters for merging subdirectories; the rest only
/// decides the `d_type` a listing reports (the real kind comes from stat).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Fifo,
    Char,
    Block,
    Socket,
}

/// The branches that hold a name. Most names live in one or two, so up to four are kept
/// inline: a listing allocates nothing per name for them, and a copy of an entry none at all.
pub type Positions = smallvec::SmallVec<[u32; 4]>;

/// The names of one directory (hashbrown's foldhash, seeded at random per process: a
/// lookup through the mount hashes its name cheaply, and names cannot be made to collide).
pub type Names = HashMap<OsString, MergedEntry>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedEntry {
    /// Kind in the winning (first) branch.
    pub kind: Kind,
    /// Branch indices holding the name, highest priority first; never empty.
    pub positions: Positions,
}

impl MergedEntry {
    pub fn winner(&self) -> u32 {
        self.positions[0]
    }
}

/// Incremental merge: call `add` per branch in priority order until it returns false.
#[derive(Default, Debug)]
pub struct Merger {
    entries: Names,
    blocked: HashSet<OsString>,
    layers: Vec<u32>,
    done: bool,
}

impl Merger {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add branch `branch`'s listing of this directory. Returns false once the directory was
    /// opaque in this branch: lower branches must not be read at all.
    pub fn add(&mut self, branch: u32, names: impl IntoIterator<Item = (OsString, Kind)>) -> bool {
        if self.done {
            return false;
        }
        self.layers.push(branch);
        let names = names.into_iter();
        self.entries.reserve(names.size_hint().0);
        let mut opaque = false;
        // Whiteouts hide lower branches only, so they take effect after this branch is merged.
        let mut new_whiteouts = Vec::new();
        for (name, kind) in names {
            if whiteout::is_opaque_marker(&name) {
                opaque = true;
                continue;
            }
            if let Some(target) = whiteout::whiteout_target(&name) {
                new_whiteouts.push(target.to_os_string());
                continue;
            }
            if whiteout::is_reserved(&name) || self.blocked.contains(&name) {
                continue;
            }
            self.entries
                .entry(name)
                .and_modify(|e| e.positions.push(branch))
                .or_insert_with(|| MergedEntry {
                    kind,
                    positions: smallvec::smallvec![branch],
                });
        }
        self.blocked.extend(new_whiteouts);
        if opaque {
            self.done = true;
        }
        !self.done
    }

    /// The visible names and the branches (in order) that contributed to this directory.
    pub fn finish(self) -> (Names, Vec<u32>) {
        (self.entries, self.layers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn l(names: &[(&str, Kind)]) -> Vec<(OsString, Kind)> {
        names.iter().map(|(n, k)| (OsString::from(n), *k)).collect()
    }

    #[test]
    fn higher_branch_wins_and_no_duplicates() {
        let mut m = Merger::new();
        assert!(m.add(0, l(&[("a", Kind::File), ("d", Kind::Dir)])));
        assert!(m.add(
            1,
            l(&[("a", Kind::Dir), ("b", Kind::File), ("d", Kind::Dir)])
        ));
        let (e, layers) = m.finish();
        assert_eq!(layers, vec![0, 1]);
        assert_eq!(e.len(), 3);
        assert_eq!(e[OsStr::new("a")].kind, Kind::File);
        assert_eq!(e[OsStr::new("a")].positions[..], [0, 1]);
        assert_eq!(e[OsStr::new("d")].positions[..], [0, 1]);
        assert_eq!(e[OsStr::new("b")].positions[..], [1]);
    }

    #[test]
    fn whiteout_hides_lower_but_not_own_branch() {
        let mut m = Merger::new();
        m.add(
            0,
            l(&[
                (".wh.a", Kind::File),
                (".wh.c", Kind::File),
                ("c", Kind::File),
            ]),
        );
        m.add(
            1,
            l(&[("a", Kind::File), ("b", Kind::File), ("c", Kind::File)]),
        );
        let (e, _) = m.finish();
        assert!(!e.contains_key(OsStr::new("a")));
        assert!(!e.contains_key(OsStr::new(".wh.a")));
        assert_eq!(
            e[OsStr::new("c")].positions[..],
            [0],
            "lower c is hidden by the whiteout"
        );
        assert_eq!(e[OsStr::new("b")].positions[..], [1]);
    }

    #[test]
    fn whiteout_in_middle_branch() {
        let mut m = Merger::new();
        m.add(0, l(&[]));
        m.add(1, l(&[(".wh.x", Kind::File)]));
        m.add(2, l(&[("x", Kind::File)]));
        let (e, _) = m.finish();
        assert!(e.is_empty());
    }

    #[test]
    fn opaque_stops_lower_branches() {
        let mut m = Merger::new();
        assert!(m.add(0, l(&[("a", Kind::File)])));
        assert!(!m.add(1, l(&[(".wh.__dir_opaque", Kind::File), ("b", Kind::File)])));
        assert!(!m.add(2, l(&[("c", Kind::File)])));
        let (e, layers) = m.finish();
        assert_eq!(layers, vec![0, 1]);
        let mut names: Vec<_> = e.keys().cloned().collect();
        names.sort();
        assert_eq!(names, vec![OsString::from("a"), OsString::from("b")]);
    }

    #[test]
    fn reserved_names_never_show() {
        let mut m = Merger::new();
        m.add(
            0,
            l(&[
                (".wh..wh.accord-tmp.1.2.3", Kind::File),
                (".wh.", Kind::File),
            ]),
        );
        let (e, _) = m.finish();
        assert!(e.is_empty());
    }
}
