//! What the folded merge of a sync ignoring case (`sync/case/scan.rs`)
//! hands to propagation: each side's spellings of the plan's paths, and
//! the records that keep each side's archive under that side's own
//! spelling, one record per folded path.

use crate::sync::case::fold_path;
use crate::sync::case::replica::Spellings;
use accord_model::{Kind, RelPath};
use accord_replica::ArchiveRecord;
use std::collections::HashMap;
use std::sync::Arc;

/// What the folded merge learnt that propagation needs.
#[derive(Debug, Default)]
pub(crate) struct CaseFacts {
    /// Per side, the plan paths it spells otherwise (directories
    /// included), with its spelling.
    pub spellings: [Arc<Spellings>; 2],
    /// Per side, by folded path, where that side's spelling or archive
    /// spelling differs from the plan path.
    pub respell: [HashMap<RelPath, Respelled>; 2],
    /// Some path is spelled differently somewhere: renames are not
    /// detected this run (a rename's records move whole subtrees by path).
    pub any_difference: bool,
    /// Per side, the records that move its archive's entries from the
    /// spelling they were recorded under to the one the side holds now (a
    /// change of case only is no update, and the record follows it):
    /// recorded before propagation, so that a renamed directory's
    /// subtree keeps its records (the removal of the old spelling that
    /// `CaseFacts::respell` makes takes its subtree).
    pub rekey: [Vec<ArchiveRecord>; 2],
}

/// One side's spellings of a path whose spellings differ.
#[derive(Clone, Debug)]
pub(crate) struct Respelled {
    /// The spelling this side's archive records it under: the side's own
    /// when it holds the path, else the plan path.
    pub key: RelPath,
    /// The spelling (and kind) its archive held it under.
    pub archived: Option<(RelPath, Kind)>,
}

impl CaseFacts {
    /// `side`'s records that follow its changes of case
    /// (`CaseFacts::rekey`), taken: the old spellings' removals first (each
    /// takes its subtree), then the entries under the new ones.
    pub fn take_rekey(&mut self, side: usize) -> Vec<ArchiveRecord> {
        let mut records = std::mem::take(&mut self.rekey[side]);
        records.sort_by_key(|record| matches!(record, ArchiveRecord::Put(_)));
        records
    }

    /// `records` for `side`'s archive, each under that side's spelling; a
    /// record at a new spelling first removes the old one (for a
    /// directory, with the records beneath it: by then they have followed
    /// it to its new spelling, `CaseFacts::take_rekey`).
    pub fn respell(&self, side: usize, records: Vec<ArchiveRecord>) -> Vec<ArchiveRecord> {
        if self.respell[side].is_empty() {
            return records;
        }
        let mut out = Vec::with_capacity(records.len());
        for record in records {
            let at = match &record {
                ArchiveRecord::Put(observed) => &observed.entry.path,
                ArchiveRecord::Remove(path) => path,
            };
            let Some(spelled) = self.respell[side].get(&fold_path(at)) else {
                out.push(record);
                continue;
            };
            let old = spelled.archived.as_ref().map(|(old, _)| old);
            match record {
                ArchiveRecord::Put(mut observed) => {
                    if let Some(old) = old.filter(|old| **old != spelled.key) {
                        out.push(ArchiveRecord::Remove(old.clone()));
                    }
                    observed.entry.path = spelled.key.clone();
                    out.push(ArchiveRecord::Put(observed));
                }
                ArchiveRecord::Remove(path) => {
                    out.push(ArchiveRecord::Remove(old.cloned().unwrap_or(path)));
                }
            }
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use accord_model::{Entry, Observed, Props, Time};

    pub(crate) fn path(p: &str) -> RelPath {
        RelPath::new(p.as_bytes()).unwrap()
    }

    /// A record of an entry of `kind` at `p`.
    pub(crate) fn put(p: &str, kind: Kind) -> ArchiveRecord {
        ArchiveRecord::Put(Observed {
            entry: Entry {
                path: path(p),
                kind,
                size: 0,
                props: Props::default(),
                dev: 1,
                ino: 2,
                nlink: 1,
                rdev: 0,
                blocks: 0,
                link_target: None,
                hash: None,
            },
            ctime: Time { sec: 5, nsec: 0 },
        })
    }

    fn at(record: &ArchiveRecord) -> (&'static str, String) {
        match record {
            ArchiveRecord::Put(o) => ("put", o.entry.path.display()),
            ArchiveRecord::Remove(p) => ("remove", p.display()),
        }
    }

    #[test]
    fn records_take_the_sides_spelling_and_drop_the_old_one() {
        let mut facts = CaseFacts::default();
        // B holds `README`, archived under `Readme`; the plan says `Readme`.
        facts.respell[1].insert(
            path("readme"),
            Respelled {
                key: path("README"),
                archived: Some((path("Readme"), Kind::File)),
            },
        );
        let records = vec![
            put("Readme", Kind::File),
            put("other", Kind::File),
            ArchiveRecord::Remove(path("README")),
        ];
        let a: Vec<_> = facts.respell(0, records.clone()).iter().map(at).collect();
        assert_eq!(a.len(), 3, "side A has nothing respelled");
        let b: Vec<_> = facts.respell(1, records).iter().map(at).collect();
        let want = [
            ("remove", "Readme".to_string()),
            ("put", "README".to_string()),
            ("put", "other".to_string()),
            ("remove", "Readme".to_string()),
        ];
        assert_eq!(b, want);
    }

    #[test]
    fn records_following_a_change_of_case_remove_before_they_put() {
        let mut facts = CaseFacts::default();
        facts.rekey[1] = vec![
            ArchiveRecord::Remove(path("Dir")),
            put("DIR", Kind::Dir),
            ArchiveRecord::Remove(path("Dir/x")),
            put("DIR/x", Kind::File),
        ];
        let b: Vec<_> = facts.take_rekey(1).iter().map(at).collect();
        let want = [
            ("remove", "Dir".to_string()),
            ("remove", "Dir/x".to_string()),
            ("put", "DIR".to_string()),
            ("put", "DIR/x".to_string()),
        ];
        assert_eq!(b, want);
        assert!(facts.take_rekey(1).is_empty(), "taken once");
    }
}
