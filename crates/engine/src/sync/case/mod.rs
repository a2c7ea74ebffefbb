//! Case-insensitive roots for a sync (the Unison paper's rules): when
//! either root is case-insensitive, or `--ignorecase true` says so, names
//! are matched by their case-folded form, so `Readme` on one side and
//! `README` on the other are one path.
//!
//! Folding: a name that is valid UTF-8 is lowercased by Unicode's rules
//! (`str::to_lowercase`), any other name by ASCII's. That is what ciopfs
//! does (glib's `g_utf8_strdown`, ASCII for the rest), and it covers what
//! case-insensitive file systems fold (APFS, NTFS and ext4's casefold fold
//! beyond Latin-1); Unison folds ASCII and Latin-1 only. Folding more than
//! a file system does can only make two names one for us that it keeps
//! apart: refused as a clash, nothing lost. Folding less could let two
//! names we take as two land on one file there. Unicode normalisation
//! (NFC against NFD) is not folded.
//!
//! Detection: each root is probed through the `Replica` seam on its own
//! host (a remote root's server does the file system calls). First
//! without writing: a name in the root with an ASCII letter, whose
//! case-swapped twin is not listed, is looked up under that twin (found:
//! case-insensitive). A root with no such name (empty, or names without
//! letters) gets an empty file made under one of our temp names, looked
//! up the same way and discarded at once (a run killed in between leaves a
//! temp the next scan removes; the root's mtime moves); a remote root
//! with no such name counts as case-sensitive until it has one. Only seam calls
//! already on the wire are used, so any server answers; the probe looks
//! at the root directory only (ext4's casefold is per directory).

pub(crate) mod replica;
pub(crate) mod scan;

use accord_fsys::PropsMask;
use accord_model::{Kind, Props, RelPath};
use accord_replica::Replica;

/// `--ignorecase`: forced on or off, or `None` for detection.
pub type IgnoreCase = Option<bool>;

/// How the run compares names, and what each root is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaseMode {
    /// Names are matched by their folded form.
    pub ignore: bool,
    /// Each root is case-insensitive as probed (a root whose probe failed
    /// under a forced mode counts as case-sensitive: its spellings must
    /// then be used exactly).
    pub insensitive: [bool; 2],
}

/// One name folded for comparison (see the module's note).
pub fn fold_name(name: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(name) {
        Ok(text) if text.is_ascii() => text.to_ascii_lowercase().into_bytes(),
        Ok(text) => text.to_lowercase().into_bytes(),
        Err(_) => name.to_ascii_lowercase(),
    }
}

/// A path folded component by component, so that folded paths keep
/// `RelPath` order's rule that a subtree follows its directory.
pub fn fold_path(path: &RelPath) -> RelPath {
    fold_with(path, fold_name)
        // A Unicode lowercase may be longer than the name (U+0130): past
        // the lengths a path may have, the ASCII fold (never longer) is
        // used for the whole path. Only paths within a few bytes of the
        // limits can fold two ways.
        .or_else(|| fold_with(path, <[u8]>::to_ascii_lowercase))
        .expect("an ASCII-folded valid path is a valid path")
}

fn fold_with(path: &RelPath, fold: impl Fn(&[u8]) -> Vec<u8>) -> Option<RelPath> {
    let mut folded = RelPath::root();
    for name in path.components() {
        folded = folded.join(&fold(name)).ok()?;
    }
    Some(folded)
}

/// The name with the case of every ASCII letter swapped.
fn swap_case(name: &[u8]) -> Vec<u8> {
    name.iter()
        .map(|b| match b {
            b'a'..=b'z' => b.to_ascii_uppercase(),
            b'A'..=b'Z' => b.to_ascii_lowercase(),
            _ => *b,
        })
        .collect()
}

/// Is `replica`'s root case-insensitive? Err says why it could not tell.
pub fn probe(replica: &dyn Replica) -> Result<bool, String> {
    let root = replica
        .open_dir(&RelPath::root())
        .map_err(|e| format!("cannot open the root: {e}"))?;
    if let Some(name) = probe_name(replica)? {
        let found = root
            .stat(&swap_case(&name))
            .map_err(|e| format!("cannot look a name up: {e}"))?;
        return Ok(found.is_some());
    }
    if replica.local_root().is_none() {
        // A remote replica's temps are known by handle, not by name: an
        // empty remote root counts as case-sensitive this run (then two
        // names a case-insensitive one cannot hold both fail their
        // re-check there, nothing is overwritten), and is probed again by
        // its names on the next.
        return Ok(false);
    }
    probe_by_temp(root.as_ref())
}

/// A name in the root whose case-swapped twin is another name and is not
/// listed there (None: the root has none).
fn probe_name(replica: &dyn Replica) -> Result<Option<Vec<u8>>, String> {
    let opts = accord_fsys::ScanOptions::plain(accord_fsys::XattrFilter::NONE, false);
    let rules = accord_fsys::IgnoreRules::default();
    let (listing, scan) = replica.list_dir(&RelPath::root(), &rules, &opts);
    let Some(listing) = listing.filter(|_| scan.errors.is_empty()) else {
        let why = scan.errors.first().map(|e| e.message.clone());
        return Err(format!(
            "cannot list the root: {}",
            why.unwrap_or_else(|| "not a directory".into())
        ));
    };
    let names: std::collections::HashSet<Vec<u8>> = listing
        .entries
        .iter()
        .skip(1)
        .chain(&listing.subdirs)
        .map(|e| e.path.file_name().to_vec())
        .collect();
    Ok(names
        .iter()
        .find(|name| {
            let twin = swap_case(name);
            twin != **name && !names.contains(&twin)
        })
        .cloned())
}

/// The probe of a root with no name to look up: an empty temp file of
/// ours (any file system takes one), made and discarded.
fn probe_by_temp(root: &dyn accord_replica::ReplicaDir) -> Result<bool, String> {
    let mask = PropsMask {
        perms: false,
        owner: false,
        times: false,
        xattrs: None,
    };
    let mut empty = std::io::empty();
    let incoming = accord_replica::Incoming::Whole(&mut empty);
    let temp = root
        .receive(b"case-probe", incoming, &Props::default(), mask)
        .map_err(|e| format!("cannot make a probe file in the root: {e}"))?;
    let found = root.stat(&swap_case(&temp));
    root.discard(&temp);
    let found = found.map_err(|e| format!("cannot look the probe file up: {e}"))?;
    Ok(found.is_some_and(|f| f.kind == Kind::File))
}

/// Why the mode could not be settled: a root's probe failed under
/// detection.
#[derive(Debug)]
pub struct ProbeFailure {
    pub replica: String,
    pub why: String,
}

/// The run's mode: forced by `--ignorecase`, else on when either root is
/// case-insensitive. Both roots are probed either way (the spellings a
/// case-sensitive root holds are the ones written there).
pub fn settle(replicas: [&dyn Replica; 2], forced: IgnoreCase) -> Result<CaseMode, ProbeFailure> {
    let mut insensitive = [false; 2];
    if forced == Some(false) {
        return Ok(CaseMode {
            ignore: false,
            insensitive,
        });
    }
    for (side, replica) in replicas.into_iter().enumerate() {
        insensitive[side] = match (probe(replica), forced) {
            (Ok(found), _) => found,
            // Forced: no need to know, and case-sensitive is the careful
            // guess (its spellings are then kept exactly).
            (Err(_), Some(_)) => false,
            (Err(why), None) => {
                return Err(ProbeFailure {
                    replica: replica.describe(),
                    why,
                })
            }
        };
    }
    let ignore = forced.unwrap_or(insensitive[0] || insensitive[1]);
    Ok(CaseMode {
        ignore,
        insensitive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> RelPath {
        RelPath::new(p.as_bytes()).unwrap()
    }

    #[test]
    fn names_fold_by_unicode_and_other_bytes_by_ascii() {
        assert_eq!(fold_name(b"ReadMe.TXT"), b"readme.txt");
        assert_eq!(fold_name("ÉTÉ".as_bytes()), "été".as_bytes());
        assert_eq!(fold_name("ΣΟΦΙΑ".as_bytes()), "σοφια".as_bytes());
        assert_eq!(fold_name(b"A\xffB"), b"a\xffb");
    }

    #[test]
    fn paths_fold_per_component_and_keep_subtrees_together() {
        assert_eq!(fold_path(&path("Docs/ReadMe")), path("docs/readme"));
        assert!(fold_path(&path("B/x")) < fold_path(&path("b0")));
        let long = "İ".repeat(127);
        let folded = fold_path(&path(&long));
        assert_eq!(folded.as_bytes().len(), long.len());
    }

    #[test]
    fn a_swapped_name_differs_in_every_letter() {
        assert_eq!(swap_case(b".accord-tmp-x.1F"), b".ACCORD-TMP-X.1f");
    }
}
