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
//! Detection: each root is probed on its own host
//! (`accord_replica::case_probe`: a name's case-swapped twin looked up, or
//! an empty temp of ours where the root has no such name). A remote root's
//! server probes its root in one call where it offers to
//! (`Replica::start_case_probe`); through an older server the probe's
//! calls cross the wire, and an empty root there counts as case-sensitive
//! until it has a name.

pub(crate) mod facts;
pub(crate) mod replica;
pub(crate) mod scan;

use accord_model::RelPath;
use accord_replica::case_probe::probe;
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
    // Both asked before either answer is waited for.
    let asked = replicas.map(|replica| replica.start_case_probe());
    for (side, (replica, asked)) in replicas.into_iter().zip(asked).enumerate() {
        let probed = asked.map_or_else(|| probe(replica), |pending| pending.wait());
        insensitive[side] = match (probed, forced) {
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
}
