//! Whether a root is case-insensitive, asked of the root itself through
//! the seam (a sync's probe; see `accord-engine`'s `sync/case` for what
//! the answer changes). First without writing: a name in the root with an
//! ASCII letter, whose case-swapped twin is not listed, is looked up under
//! that twin (found: case-insensitive). A root with no such name (empty,
//! or names without letters) gets an empty file made under one of our temp
//! names, looked up the same way and discarded at once (a run killed in
//! between leaves a temp the next scan removes; the root's mtime moves).
//! The probe looks at the root directory only (ext4's casefold is per
//! directory). A remote root is probed by its own server where it agreed to
//! (`Replica::start_case_probe`); through an older one, the calls below
//! cross the wire, and an empty root there counts as case-sensitive.

use crate::{Incoming, Replica, ReplicaDir};
use accord_fsys::PropsMask;
use accord_model::{Kind, Props, RelPath};

/// The name with the case of every ASCII letter swapped.
pub fn swap_case(name: &[u8]) -> Vec<u8> {
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
    let opts = accord_fsys::ScanOptions {
        alone: true,
        ..accord_fsys::ScanOptions::plain(accord_fsys::XattrFilter::NONE, false)
    };
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
fn probe_by_temp(root: &dyn ReplicaDir) -> Result<bool, String> {
    let mask = PropsMask {
        perms: false,
        owner: false,
        times: false,
        xattrs: None,
    };
    let mut empty = std::io::empty();
    let incoming = Incoming::Whole(&mut empty);
    let temp = root
        .receive(b"case-probe", incoming, &Props::default(), mask)
        .map_err(|e| format!("cannot make a probe file in the root: {e}"))?;
    let found = root.stat(&swap_case(&temp));
    root.discard(&temp);
    let found = found.map_err(|e| format!("cannot look the probe file up: {e}"))?;
    Ok(found.is_some_and(|f| f.kind == Kind::File))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swapped_name_differs_in_every_letter() {
        assert_eq!(swap_case(b".accord-tmp-x.1F"), b".ACCORD-TMP-X.1f");
    }
}
