//! Renames and moves: a path deleted on one side and another created there
//! with the same contents become one rename on the other side, so a moved
//! file or tree costs nothing on the wire (Unison copies it and deletes the
//! old one).
//!
//! The pairing works on the reconciled plan, not on the updates: an item
//! that deletes `p` on side Y and an item that copies a new entry `q` from
//! X to Y, where Y has nothing at `q`, become one [`Action::Rename`] when
//! what Y holds at `p` equals what X holds at `q` (kind, contents and
//! synced properties; a directory with its whole subtree, path by path).
//! Y then ends holding exactly what it would have held after the deletion
//! and the copy, which is why no other condition is needed for the result:
//! if Y changed `p` since the last sync, reconciliation made a conflict of
//! it and there is no deletion to pair; if X's new entry differs, nothing
//! pairs. Propagation re-checks `p` and the absence of `q` before it
//! renames.
//!
//! Two conditions come from the order propagation runs in. Every ancestor
//! of `p` that has an item is either deleted on Y too (those deletions wait
//! until after the renames) or a directory on both sides; every ancestor of
//! `q` that has an item is a directory on both sides or a new directory
//! copied to Y (made before `q`, in path order). Anything else (a parent
//! replaced by a file, say) keeps the deletion and the copy.
//!
//! Ambiguity is harmless: any source with equal contents and properties
//! gives the same result. Targets are taken in path order and each takes
//! the first free source with the same name, else the first free one in
//! path order, so a plan is the same every time. Empty files and entries
//! other than files and directories are not paired (nothing to save).
//! Directories are paired before files, so a moved tree is one rename
//! rather than one per file.

use crate::detect::SyncedProps;
use crate::reconcile::{same_contents, same_props, Action, Moved, Side, SyncItem};
use accord_model::{Entry, Kind, RelPath};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Pair deletions with equal creations on each side (see the module's
/// comment). `items` are in `RelPath` order, as reconciliation made them
/// (or as a set's propagation makes one receiver's plan).
pub fn pair_renames(items: Vec<SyncItem>, synced: &SyncedProps) -> Vec<SyncItem> {
    let mut pairs = Vec::new();
    for on in [Side::A, Side::B] {
        pairs.extend(Pairing::new(&items, on, synced).find());
    }
    if pairs.is_empty() {
        return items;
    }
    rewrite(items, &pairs)
}

/// One rename: the subtree at `source` (its `len` items, itself included)
/// moves on `on` to where the subtree at `target` is.
struct Pair {
    on: Side,
    source: usize,
    target: usize,
    len: usize,
}

/// The search for renames on one side.
struct Pairing<'i> {
    items: &'i [SyncItem],
    /// The side that renames (Y); the other one (X) made the change.
    on: Side,
    synced: &'i SyncedProps,
    used: Vec<bool>,
}

impl<'i> Pairing<'i> {
    fn new(items: &'i [SyncItem], on: Side, synced: &'i SyncedProps) -> Pairing<'i> {
        Pairing {
            items,
            on,
            synced,
            used: vec![false; items.len()],
        }
    }

    fn find(mut self) -> Vec<Pair> {
        let mut pairs = self.pair_directories();
        pairs.extend(self.pair_files());
        pairs
    }

    /// What the renaming side holds at a source.
    fn held(&self, index: usize) -> Option<&'i Entry> {
        self.items[index].entry(self.on)
    }

    /// What the other side holds at a target.
    fn wanted(&self, index: usize) -> Option<&'i Entry> {
        self.items[index].entry(self.on.other())
    }

    fn deletes_here(&self, item: &SyncItem) -> bool {
        item.action == Action::Delete { on: self.on } && item.entry(self.on).is_some()
    }

    fn copies_here(&self, item: &SyncItem) -> bool {
        let x = self.on.other();
        item.action
            == Action::Copy {
                from: x,
                to: self.on,
            }
            && item.entry(self.on).is_none()
            && item.entry(x).is_some()
    }

    /// The item at `path`, if the plan has one.
    fn item_at(&self, path: &RelPath) -> Option<&'i SyncItem> {
        let index = self
            .items
            .binary_search_by(|item| item.path.cmp(path))
            .ok()?;
        Some(&self.items[index])
    }

    fn ancestors_allow(&self, path: &RelPath, allowed: impl Fn(&SyncItem) -> bool) -> bool {
        std::iter::successors(path.parent(), RelPath::parent)
            .filter(|ancestor| !ancestor.is_root())
            .filter_map(|ancestor| self.item_at(&ancestor))
            .all(|item| dir_on_both(item) || allowed(item))
    }

    /// A deletion whose entry can be moved away before its directories
    /// are deleted.
    fn is_source(&self, index: usize) -> bool {
        let item = &self.items[index];
        self.deletes_here(item) && self.ancestors_allow(&item.path, |a| self.deletes_here(a))
    }

    /// A copy whose directory exists on the renaming side when its turn
    /// comes.
    fn is_target(&self, index: usize) -> bool {
        let item = &self.items[index];
        let new_dir = |a: &SyncItem| self.copies_here(a) && is_dir(a.entry(self.on.other()));
        self.copies_here(item) && self.ancestors_allow(&item.path, new_dir)
    }

    // ---- directories ----

    fn pair_directories(&mut self) -> Vec<Pair> {
        let mut sources: HashMap<(usize, u64), Vec<usize>> = HashMap::new();
        for index in 0..self.items.len() {
            if is_dir(self.held(index)) && self.is_source(index) {
                if let Some(key) = self.subtree_key(index, self.on, |p, i| p.deletes_here(i)) {
                    sources.entry(key).or_default().push(index);
                }
            }
        }
        let mut pairs = Vec::new();
        let mut index = 0;
        while index < self.items.len() {
            let x = self.on.other();
            let candidate = is_dir(self.wanted(index)) && self.is_target(index);
            let key = candidate
                .then(|| self.subtree_key(index, x, |p, i| p.copies_here(i)))
                .flatten();
            let found = key.and_then(|key| self.take_directory(index, sources.get(&key)?));
            match found {
                Some(pair) => {
                    index += pair.len;
                    pairs.push(pair);
                }
                None => index += 1,
            }
        }
        pairs
    }

    /// The first free source directory among `candidates` (same name
    /// first) whose subtree equals the target's.
    fn take_directory(&mut self, target: usize, candidates: &[usize]) -> Option<Pair> {
        let len = subtree_end(self.items, target) - target;
        let source = self.preferred(target, candidates, |me, source| {
            (source..source + len).all(|i| !me.used[i]) && me.subtrees_equal(source, target, len)
        })?;
        self.used[source..source + len].fill(true);
        Some(Pair {
            on: self.on,
            source,
            target,
            len,
        })
    }

    /// A key for the subtree at `index` as `side` holds it (its relative
    /// paths and contents), when every item beneath it passes `each`.
    fn subtree_key(
        &self,
        index: usize,
        side: Side,
        each: impl Fn(&Self, &SyncItem) -> bool,
    ) -> Option<(usize, u64)> {
        let end = subtree_end(self.items, index);
        let top = &self.items[index].path;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for item in &self.items[index + 1..end] {
            if !each(self, item) {
                return None;
            }
            relative(&item.path, top).hash(&mut hasher);
            contents_key(item.entry(side)?).hash(&mut hasher);
        }
        Some((end - index, hasher.finish()))
    }

    fn subtrees_equal(&self, source: usize, target: usize, len: usize) -> bool {
        let (from, to) = (&self.items[source].path, &self.items[target].path);
        (0..len).all(|offset| {
            let (s, t) = (&self.items[source + offset], &self.items[target + offset]);
            relative(&s.path, from) == relative(&t.path, to)
                && self.equal(s.entry(self.on), t.entry(self.on.other()))
        })
    }

    /// Does the renamed entry give what a copy of the wanted one would?
    fn equal(&self, held: Option<&Entry>, wanted: Option<&Entry>) -> bool {
        match (held, wanted) {
            (Some(held), Some(wanted)) => {
                same_contents(Some(held), Some(wanted)) && same_props(held, wanted, self.synced)
            }
            _ => false,
        }
    }

    // ---- files ----

    fn pair_files(&mut self) -> Vec<Pair> {
        let mut sources: HashMap<[u8; 32], Vec<usize>> = HashMap::new();
        for index in 0..self.items.len() {
            if let Some(hash) = pairable_file(self.held(index)) {
                if !self.used[index] && self.is_source(index) {
                    sources.entry(hash).or_default().push(index);
                }
            }
        }
        let mut pairs = Vec::new();
        for target in 0..self.items.len() {
            let Some(hash) = pairable_file(self.wanted(target)) else {
                continue;
            };
            if self.used[target] || !self.is_target(target) {
                continue;
            }
            let Some(candidates) = sources.get(&hash) else {
                continue;
            };
            let found = self.preferred(target, candidates, |me, source| {
                !me.used[source] && me.equal(me.held(source), me.wanted(target))
            });
            if let Some(source) = found {
                self.used[source] = true;
                self.used[target] = true;
                pairs.push(Pair {
                    on: self.on,
                    source,
                    target,
                    len: 1,
                });
            }
        }
        pairs
    }

    /// The first candidate that `fits`, one with the target's own name
    /// (a move to another directory) before the others.
    fn preferred(
        &self,
        target: usize,
        candidates: &[usize],
        fits: impl Fn(&Self, usize) -> bool,
    ) -> Option<usize> {
        let name = self.items[target].path.file_name();
        let same_name = |&&source: &&usize| self.items[source].path.file_name() == name;
        let mut ordered: Vec<usize> = candidates.iter().filter(same_name).copied().collect();
        ordered.extend(candidates.iter().filter(|c| !same_name(c)));
        ordered.into_iter().find(|&source| fits(self, source))
    }
}

/// A regular file worth renaming: its fingerprint.
fn pairable_file(entry: Option<&Entry>) -> Option<[u8; 32]> {
    entry
        .filter(|e| e.kind == Kind::File && e.size > 0)
        .and_then(|e| e.hash)
}

fn is_dir(entry: Option<&Entry>) -> bool {
    entry.is_some_and(|e| e.kind == Kind::Dir)
}

fn dir_on_both(item: &SyncItem) -> bool {
    is_dir(item.a.as_deref()) && is_dir(item.b.as_deref())
}

/// What of an entry a rename must keep (for grouping only: candidates are
/// compared in full).
fn contents_key(entry: &Entry) -> (u8, Option<[u8; 32]>, Option<&[u8]>, u64) {
    (
        entry.kind as u8,
        entry.hash,
        entry.link_target.as_deref(),
        entry.rdev,
    )
}

/// `path` below `top`, with its leading '/'.
fn relative<'p>(path: &'p RelPath, top: &RelPath) -> &'p [u8] {
    &path.as_bytes()[top.as_bytes().len()..]
}

/// The index just past the items of the subtree at `index`.
fn subtree_end(items: &[SyncItem], index: usize) -> usize {
    let top = &items[index].path;
    index
        + 1
        + items[index + 1..]
            .iter()
            .take_while(|item| item.path.starts_with(top))
            .count()
}

/// What becomes of each item.
#[derive(Clone)]
enum Role {
    Keep,
    /// A source: its deletion is the rename's.
    Drop,
    /// A target: renamed (`top`) or moved with its directory.
    Moved {
        on: Side,
        top: bool,
        from: Box<Moved>,
    },
}

fn rewrite(items: Vec<SyncItem>, pairs: &[Pair]) -> Vec<SyncItem> {
    let mut roles = vec![Role::Keep; items.len()];
    for pair in pairs {
        for offset in 0..pair.len {
            let source = &items[pair.source + offset];
            let entry = source.entry(pair.on).expect("a source holds an entry");
            roles[pair.source + offset] = Role::Drop;
            roles[pair.target + offset] = Role::Moved {
                on: pair.on,
                top: offset == 0,
                from: Box::new(Moved {
                    from: source.path.clone(),
                    entry: entry.clone(),
                }),
            };
        }
    }
    items
        .into_iter()
        .zip(roles)
        .filter_map(|(mut item, role)| match role {
            Role::Keep => Some(item),
            Role::Drop => None,
            Role::Moved { on, top, from } => {
                item.action = if top {
                    Action::Rename { on }
                } else {
                    Action::MovedWith { on }
                };
                item.moved = Some(from);
                Some(item)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_model::Props;
    use std::sync::Arc;

    fn path(text: &str) -> RelPath {
        RelPath::new(text.as_bytes()).unwrap()
    }

    fn entry(at: &str, kind: Kind, contents: u8) -> Entry {
        Entry {
            path: path(at),
            kind,
            size: 5,
            props: Props {
                mode: 0o644,
                ..Props::default()
            },
            dev: 1,
            ino: u64::from(contents),
            nlink: 1,
            rdev: 0,
            blocks: 0,
            link_target: None,
            hash: (kind == Kind::File).then_some([contents; 32]),
        }
    }

    fn item(at: &str, action: Action, a: Option<Entry>, b: Option<Entry>) -> SyncItem {
        SyncItem {
            path: path(at),
            action,
            overridden: None,
            a: a.map(Arc::new),
            b: b.map(Arc::new),
            moved: None,
            link: None,
        }
    }

    /// B deleted `at` (A still holds it): A deletes it.
    fn deleted_on_b(at: &str, kind: Kind, contents: u8) -> SyncItem {
        item(
            at,
            Action::Delete { on: Side::A },
            Some(entry(at, kind, contents)),
            None,
        )
    }

    /// B created `at`: A takes a copy.
    fn created_on_b(at: &str, kind: Kind, contents: u8) -> SyncItem {
        let copy = Action::Copy {
            from: Side::B,
            to: Side::A,
        };
        item(at, copy, None, Some(entry(at, kind, contents)))
    }

    fn summary(items: &[SyncItem]) -> Vec<(String, Action, Option<String>)> {
        items
            .iter()
            .map(|i| {
                let from = i.moved.as_ref().map(|m| m.from.display());
                (i.path.display(), i.action, from)
            })
            .collect()
    }

    const RENAME_ON_A: Action = Action::Rename { on: Side::A };

    #[test]
    fn a_file_deleted_here_and_created_there_is_a_rename() {
        let items = vec![
            created_on_b("new", Kind::File, 1),
            deleted_on_b("old", Kind::File, 1),
        ];
        let planned = pair_renames(items, &SyncedProps::default());
        assert_eq!(
            summary(&planned),
            [("new".into(), RENAME_ON_A, Some("old".into()))]
        );
    }

    #[test]
    fn other_contents_or_permissions_are_no_rename() {
        let mut chmodded = created_on_b("new", Kind::File, 1);
        std::sync::Arc::make_mut(chmodded.b.as_mut().unwrap())
            .props
            .mode = 0o600;
        for created in [created_on_b("new", Kind::File, 2), chmodded] {
            let items = vec![created, deleted_on_b("old", Kind::File, 1)];
            let planned = pair_renames(items.clone(), &SyncedProps::default());
            assert_eq!(planned, items);
        }
    }

    #[test]
    fn a_directory_moves_whole_with_its_subtree() {
        let items = vec![
            deleted_on_b("d", Kind::Dir, 0),
            deleted_on_b("d/f", Kind::File, 1),
            deleted_on_b("d/s", Kind::Dir, 0),
            deleted_on_b("d/s/g", Kind::File, 2),
            created_on_b("e", Kind::Dir, 0),
            created_on_b("e/f", Kind::File, 1),
            created_on_b("e/s", Kind::Dir, 0),
            created_on_b("e/s/g", Kind::File, 2),
        ];
        let planned = pair_renames(items, &SyncedProps::default());
        let moved_with = Action::MovedWith { on: Side::A };
        assert_eq!(
            summary(&planned),
            [
                ("e".into(), RENAME_ON_A, Some("d".into())),
                ("e/f".into(), moved_with, Some("d/f".into())),
                ("e/s".into(), moved_with, Some("d/s".into())),
                ("e/s/g".into(), moved_with, Some("d/s/g".into())),
            ]
        );
    }

    #[test]
    fn a_directory_changed_inside_moves_file_by_file() {
        let items = vec![
            deleted_on_b("d", Kind::Dir, 0),
            deleted_on_b("d/f", Kind::File, 1),
            deleted_on_b("d/g", Kind::File, 2),
            created_on_b("e", Kind::Dir, 0),
            created_on_b("e/f", Kind::File, 1),
            created_on_b("e/g", Kind::File, 3),
        ];
        let planned = pair_renames(items, &SyncedProps::default());
        let delete = Action::Delete { on: Side::A };
        let copy = Action::Copy {
            from: Side::B,
            to: Side::A,
        };
        assert_eq!(
            summary(&planned),
            [
                ("d".into(), delete, None),
                ("d/g".into(), delete, None),
                ("e".into(), copy, None),
                ("e/f".into(), RENAME_ON_A, Some("d/f".into())),
                ("e/g".into(), copy, None),
            ]
        );
    }

    #[test]
    fn equal_sources_are_taken_by_name_then_in_order() {
        let items = vec![
            deleted_on_b("a/x", Kind::File, 1),
            deleted_on_b("b/y", Kind::File, 1),
            created_on_b("c/y", Kind::File, 1),
            created_on_b("c/z", Kind::File, 1),
        ];
        let planned = pair_renames(items, &SyncedProps::default());
        assert_eq!(
            summary(&planned),
            [
                ("c/y".into(), RENAME_ON_A, Some("b/y".into())),
                ("c/z".into(), RENAME_ON_A, Some("a/x".into())),
            ]
        );
    }

    #[test]
    fn a_target_whose_parent_is_replaced_keeps_its_copy() {
        // `p` was a file on A and is a directory on B: A's file is replaced
        // when `p` comes, so `p/new` cannot be renamed into it first.
        let replaced = item(
            "p",
            Action::Copy {
                from: Side::B,
                to: Side::A,
            },
            Some(entry("p", Kind::File, 9)),
            Some(entry("p", Kind::Dir, 0)),
        );
        let items = vec![
            deleted_on_b("old", Kind::File, 1),
            replaced,
            created_on_b("p/new", Kind::File, 1),
        ];
        let planned = pair_renames(items.clone(), &SyncedProps::default());
        assert_eq!(planned, items);
    }

    #[test]
    fn empty_files_are_not_paired() {
        let mut created = created_on_b("new", Kind::File, 1);
        let mut deleted = deleted_on_b("old", Kind::File, 1);
        Arc::make_mut(created.b.as_mut().unwrap()).size = 0;
        Arc::make_mut(deleted.a.as_mut().unwrap()).size = 0;
        let items = vec![created, deleted];
        assert_eq!(pair_renames(items.clone(), &SyncedProps::default()), items);
    }
}
