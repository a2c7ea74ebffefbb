//! `--merge CMD` carried out: a conflict between two regular files is
//! given to the merge program (`sync/merge_program.rs`, run on this host) and its
//! result becomes the path's contents on both sides. For a path P:
//!
//! 1. both versions are read through the seam (a remote one fetched) into
//!    read-only files of a private directory, each checked against the
//!    fingerprint update detection saw;
//! 2. the program runs; a non-zero exit, a kill, the time limit or no
//!    regular file at NEW leave the conflict as it was, nothing changed;
//! 3. NEW is received into a temp for P on each side (whole: it is new on
//!    both), each with that side's synced properties (which agree, else
//!    the path is not merged) and, under `--times`, NEW's mtime;
//! 4. with `--backup` both old versions are kept; one flush makes temps
//!    and backups durable;
//! 5. both sides are stat'ed and must still be what detection saw (else
//!    "changed during sync", both temps discarded, nothing overwritten);
//!    then A's temp replaces P after its re-check, then B's after its
//!    own; a write on B in the moment between those two renames leaves A
//!    merged and B as written (reported; the next run sees a conflict
//!    between them, nothing is lost);
//! 6. P is recorded on both sides as holding the merge, so the next run
//!    is a no-op.

use super::{changed_entry, index, split, synced_props, Done, Propagation, Record};
use crate::sync::merge_program::{
    create_version, run_program, seal_version, MergeDir, MergeFailure, MergeProgram, MergeWords,
};
use crate::sync::SyncError;
use accord_model::{Entry, Expect, Fingerprint, Kind, Props, RelPath, Time};
use accord_plan::{Action, Side, SyncItem};
use accord_replica::Action as Step;
use accord_replica::Fingerprinting;
use accord_replica::{Incoming, ReplicaDir};
use std::fs::File;
use std::io::{self, Seek};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a conflict the program was to merge is still one.
pub(crate) enum NotMerged {
    /// Not two regular files, or their properties differ: never given
    /// to the program (`None`: nothing worth saying, a kind the merge
    /// never takes).
    Ineligible(Option<&'static str>),
    /// The program failed (the conflict stays, nothing changed).
    Program(MergeFailure),
    /// A replica failed or a side changed during the sync.
    Sync(SyncError),
}

impl From<SyncError> for NotMerged {
    fn from(e: SyncError) -> NotMerged {
        NotMerged::Sync(e)
    }
}

impl From<crate::Error> for NotMerged {
    fn from(e: crate::Error) -> NotMerged {
        NotMerged::Sync(SyncError::Replica(e))
    }
}

/// The merged contents, in a sealed local file (an open handle: the
/// file's directory may be gone).
pub(crate) struct Merged {
    file: File,
    hash: Fingerprint,
    size: u64,
    mtime: Time,
}

impl Merged {
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Its fingerprint, size and mtime.
    pub(crate) fn facts(&self) -> (Fingerprint, u64, Time) {
        (self.hash, self.size, self.mtime)
    }
}

impl<'a> Propagation<'a> {
    /// Merge every conflict `chosen` accepts; returns those left as
    /// conflicts with why (failures of a replica are this run's errors).
    pub(super) fn merge_conflicts(
        &mut self,
        items: &'a [SyncItem],
        program: &MergeProgram,
        chosen: &dyn Fn(&RelPath) -> bool,
        premerged: &super::Premerger,
    ) -> Vec<(RelPath, String)> {
        let mut not_merged = Vec::new();
        let conflicts = items
            .iter()
            .filter(|item| matches!(item.action, Action::Conflict(_)) && chosen(&item.path));
        for item in conflicts {
            match self.merge_one(item, program, premerged.take(&item.path)) {
                Ok(()) => {}
                Err(NotMerged::Ineligible(None)) => {}
                Err(NotMerged::Ineligible(Some(why))) => {
                    not_merged.push((item.path.clone(), format!("not merged: {why}")))
                }
                Err(NotMerged::Program(failure)) => {
                    not_merged.push((item.path.clone(), failure.to_string()))
                }
                Err(NotMerged::Sync(error)) => {
                    not_merged.push((item.path.clone(), format!("not merged: {error}")));
                    self.fail(&item.path, error);
                }
            }
        }
        not_merged
    }

    /// `premerged`: the program's result made before the plan was
    /// confirmed (the interactive mode's 'm'), else it is run now.
    fn merge_one(
        &mut self,
        item: &SyncItem,
        program: &MergeProgram,
        premerged: Option<Merged>,
    ) -> Result<(), NotMerged> {
        let [a, b] = mergeable(item, self.cfg)?;
        let (parent, name) = split(&item.path);
        let dirs = [
            self.dir(Side::A, &parent, Step::OpenDestination)?,
            self.dir(Side::B, &parent, Step::OpenDestination)?,
        ];
        let merged = match premerged {
            Some(merged) => merged,
            None => run_merge(item, [a, b], &dirs, program)?,
        };
        let temps = self.receive_merged(item, [a, b], &dirs, merged)?;
        self.commit_merged(item, [a, b], &dirs, &temps)?;
        let records = [Side::A, Side::B].map(|side| {
            let entry = item.entry(side).expect("both sides hold a file");
            let taken = merged_entry(entry, &temps, self.cfg);
            let found = dirs[index(side)].stat(name).ok().flatten();
            Record::Put(changed_entry(&taken, found, self.cfg))
        });
        self.done.push(Done {
            path: item.path.clone(),
            action: item.action,
            records,
            from: None,
        });
        Ok(())
    }

    /// Step 3: the merge received into a temp for the path on each side.
    fn receive_merged(
        &self,
        item: &SyncItem,
        versions: [&Entry; 2],
        dirs: &[Box<dyn ReplicaDir + 'a>; 2],
        mut merged: Merged,
    ) -> Result<MergedTemps, NotMerged> {
        let name = item.path.file_name();
        let mut temps = MergedTemps {
            temps: [None, None],
            hash: merged.hash,
            size: merged.size,
            mtime: merged.mtime,
        };
        for (side, version) in [Side::A, Side::B].into_iter().zip(versions) {
            let dir = dirs[index(side)].as_ref();
            let (mut props, mask) = synced_props(version, self.cfg);
            props.mtime = merged.mtime;
            let received = receive_one(dir, name, &mut merged, &props, mask);
            match received {
                Ok(temp) => temps.temps[index(side)] = Some(temp),
                Err(e) => {
                    if let Some(temp) = &temps.temps[0] {
                        dirs[0].discard(temp);
                    }
                    return Err(e);
                }
            }
        }
        Ok(temps)
    }

    /// Steps 4 and 5; both temps are discarded unless committed.
    fn commit_merged(
        &mut self,
        item: &SyncItem,
        versions: [&Entry; 2],
        dirs: &[Box<dyn ReplicaDir + 'a>; 2],
        temps: &MergedTemps,
    ) -> Result<(), SyncError> {
        let result = self.check_and_commit(item, versions, dirs, temps);
        if let Err(error) = &result {
            if !matches!(error, SyncError::MergedOnOneSide { .. }) {
                for (dir, temp) in dirs.iter().zip(&temps.temps) {
                    if let Some(temp) = temp {
                        dir.discard(temp);
                    }
                }
            }
        }
        result
    }

    /// Backups, one flush, the re-checks of both sides, both renames.
    fn check_and_commit(
        &mut self,
        item: &SyncItem,
        versions: [&Entry; 2],
        dirs: &[Box<dyn ReplicaDir + 'a>; 2],
        temps: &MergedTemps,
    ) -> Result<(), SyncError> {
        for side in [Side::A, Side::B] {
            self.back_up(side, Some(versions[index(side)]))?;
        }
        self.flush_replicas();
        let name = item.path.file_name();
        for side in [Side::A, Side::B] {
            let found = dirs[index(side)]
                .stat(name)
                .map_err(crate::Error::io(Step::Replace))?;
            if !Expect::entry(versions[index(side)]).still_holds(found.as_ref()) {
                return Err(SyncError::Replica(crate::Error::Changed(
                    accord_replica::End::Written,
                )));
            }
        }
        let [Some(on_a), Some(on_b)] = &temps.temps else {
            unreachable!("both temps were received")
        };
        dirs[0].commit(on_a, name, &Expect::entry(versions[0]))?;
        if let Err(e) = dirs[1].commit(on_b, name, &Expect::entry(versions[1])) {
            dirs[1].discard(on_b);
            return Err(SyncError::MergedOnOneSide {
                written: Side::A,
                cause: Box::new(e),
            });
        }
        Ok(())
    }
}

/// Both versions, when the program may merge them: two regular files
/// whose synced properties (but the mtime) agree, since the merge
/// gives both sides the same contents and nothing else.
pub(super) fn mergeable<'i>(
    item: &'i SyncItem,
    cfg: &crate::sync::SyncConfig,
) -> Result<[&'i Entry; 2], NotMerged> {
    let (Some(a), Some(b)) = (item.entry(Side::A), item.entry(Side::B)) else {
        return Err(NotMerged::Ineligible(None));
    };
    if a.kind != Kind::File || b.kind != Kind::File {
        return Err(NotMerged::Ineligible(None));
    }
    if !props_agree(a, b, cfg) {
        return Err(NotMerged::Ineligible(Some(
            "the two sides' permissions, owners, extended attributes or ACLs differ",
        )));
    }
    Ok([a, b])
}

/// Steps 1 and 2: both versions fetched, the program run.
pub(super) fn run_merge(
    item: &SyncItem,
    versions: [&Entry; 2],
    dirs: &[Box<dyn ReplicaDir + '_>; 2],
    program: &MergeProgram,
) -> Result<Merged, NotMerged> {
    let inputs = [Side::A, Side::B].map(|side| MergeInput {
        dir: dirs[index(side)].as_ref(),
        version: versions[index(side)],
        label: side_label(side),
    });
    run_fold(&item.path, &inputs, program)
}

fn side_label(side: Side) -> String {
    match side {
        Side::A => "A".into(),
        Side::B => "B".into(),
    }
}

/// One version the program reads: the directory of a replica holding it
/// (the file there must still be `version`), and the label its copy is
/// named with.
pub(crate) struct MergeInput<'i> {
    pub dir: &'i dyn ReplicaDir,
    pub version: &'i Entry,
    pub label: String,
}

/// Steps 1 and 2 for two versions or more: the program merges the first
/// two, then its result with the third, and so on (CURRENT1: the result
/// so far, named by the labels it merged, `AB-NAME`; CURRENT2: the next
/// version), one run of the program per step, each in a private directory
/// of its own. Any step that fails leaves the whole merge undone.
pub(crate) fn run_fold(
    path: &RelPath,
    inputs: &[MergeInput<'_>],
    program: &MergeProgram,
) -> Result<Merged, NotMerged> {
    let setup = |e: io::Error| NotMerged::Program(MergeFailure::Setup(e));
    let (first, rest) = inputs
        .split_first()
        .filter(|(_, rest)| !rest.is_empty())
        .expect("a merge takes two versions at least");
    let name = path.file_name();
    let mut label = first.label.clone();
    let mut so_far: Option<Merged> = None;
    for next in rest {
        let work = MergeDir::new().map_err(setup)?;
        let files: [PathBuf; 3] = [
            work.file(&label, name),
            work.file(&next.label, name),
            work.file("NEW", name),
        ];
        match &mut so_far {
            None => fetch(first.dir, first.version, &files[0])?,
            Some(merged) => copy_merged(merged, &files[0]).map_err(setup)?,
        }
        fetch(next.dir, next.version, &files[1])?;
        let words = MergeWords {
            current1: &files[0],
            current2: &files[1],
            new: &files[2],
            path: path.as_bytes(),
        };
        let new = run_program(program, &work, &words).map_err(NotMerged::Program)?;
        // Taken into a file of ours, so nothing the program left running
        // can change what is sent after it was fingerprinted.
        so_far = Some(seal_merged(new, &work.file("MERGED", name)).map_err(setup)?);
        label.push_str(&next.label);
    }
    Ok(so_far.expect("one step at least"))
}

/// The result so far as a new read-only file at `to` (the next step's
/// CURRENT1).
fn copy_merged(merged: &mut Merged, to: &Path) -> io::Result<()> {
    merged.file.rewind()?;
    let mut file = create_version(to)?;
    io::copy(&mut merged.file, &mut file)?;
    drop(file);
    seal_version(to)
}

/// The temps holding the merge on each side, and what they hold.
struct MergedTemps {
    temps: [Option<Vec<u8>>; 2],
    hash: Fingerprint,
    size: u64,
    mtime: Time,
}

/// What a side holds once the merge replaced its version.
fn merged_entry(version: &Entry, temps: &MergedTemps, cfg: &crate::sync::SyncConfig) -> Entry {
    merged_version(version, (temps.hash, temps.size, temps.mtime), cfg)
}

/// What a replica holds once a merge (its fingerprint, size and mtime:
/// [`Merged::facts`]) replaced `version` there: the merge's contents with
/// the version's synced properties.
pub(crate) fn merged_version(
    version: &Entry,
    (hash, size, mtime): (Fingerprint, u64, Time),
    cfg: &crate::sync::SyncConfig,
) -> Entry {
    let (props, _) = synced_props(version, cfg);
    Entry {
        size,
        hash: Some(hash),
        props: Props { mtime, ..props },
        ..version.clone()
    }
}

/// Do the synced properties of both versions agree (the mtime aside)?
pub(crate) fn props_agree(a: &Entry, b: &Entry, cfg: &crate::sync::SyncConfig) -> bool {
    let ((pa, _), (pb, _)) = (synced_props(a, cfg), synced_props(b, cfg));
    let xattrs = |props: &Props| props.xattrs.clone().filter(|list| !list.is_empty());
    pa.mode == pb.mode
        && xattrs(&pa) == xattrs(&pb)
        && (!cfg.owner || (pa.uid == pb.uid && pa.gid == pb.gid))
}

/// Read `version` (the file at its path in `dir`, which must still be it)
/// into a new read-only file at `to`, checked against its fingerprint.
fn fetch(dir: &dyn ReplicaDir, version: &Entry, to: &Path) -> Result<(), NotMerged> {
    let name = version.path.file_name();
    let mut source = dir.open_read(name, &Expect::entry(version))?;
    let mut passing = Fingerprinting::new(&mut *source);
    let write = |e: io::Error| NotMerged::Program(MergeFailure::Setup(e));
    let mut file = create_version(to).map_err(write)?;
    io::copy(&mut passing, &mut file).map_err(crate::Error::io(Step::ReadSource))?;
    if version.hash.is_some_and(|hash| hash != passing.finish()) {
        return Err(NotMerged::Sync(SyncError::ContentsChanged));
    }
    seal_version(to).map_err(write)
}

/// Copy what the program wrote into a sealed file of ours, fingerprinted.
fn seal_merged(mut new: File, to: &Path) -> io::Result<Merged> {
    let meta = new.metadata()?;
    let mut file = create_version(to)?;
    let mut passing = Fingerprinting::new(&mut new);
    let size = io::copy(&mut passing, &mut file)?;
    let hash = passing.finish();
    drop(file);
    seal_version(to)?;
    Ok(Merged {
        file: File::open(to)?,
        hash,
        size,
        mtime: Time {
            sec: meta.mtime(),
            nsec: meta.mtime_nsec() as u32,
        },
    })
}

/// Send the merge whole into a temp for `name` in `dir`, checked against
/// its fingerprint on the way.
fn receive_one(
    dir: &dyn ReplicaDir,
    name: &[u8],
    merged: &mut Merged,
    props: &Props,
    mask: accord_fsys::PropsMask,
) -> Result<Vec<u8>, NotMerged> {
    merged
        .file
        .rewind()
        .map_err(crate::Error::io(Step::ReadSource))?;
    let mut passing = Fingerprinting::new(&mut merged.file);
    let temp = dir.receive(name, Incoming::Whole(&mut passing), props, mask)?;
    if passing.finish() != merged.hash {
        dir.discard(&temp);
        return Err(NotMerged::Sync(SyncError::ContentsChanged));
    }
    Ok(temp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::SyncConfig;

    fn file(mode: u32, uid: u32, xattrs: Option<Vec<(Vec<u8>, Vec<u8>)>>) -> Entry {
        Entry {
            path: RelPath::new(b"f").unwrap(),
            kind: Kind::File,
            size: 3,
            props: Props {
                mode: 0o100000 | mode,
                uid,
                xattrs,
                mtime: Time { sec: 7, nsec: 0 },
                ..Props::default()
            },
            dev: 1,
            ino: 2,
            nlink: 1,
            rdev: 0,
            blocks: 0,
            link_target: None,
            hash: None,
        }
    }

    #[test]
    fn properties_agree_on_what_a_sync_keeps_in_agreement() {
        let mut cfg = SyncConfig::new("/nowhere".into());
        let plain = file(0o644, 1, None);
        assert!(props_agree(&plain, &file(0o644, 1, Some(Vec::new())), &cfg));
        assert!(props_agree(&plain, &file(0o644, 2, None), &cfg));
        // The mtime is the merge's own.
        let mut later = plain.clone();
        later.props.mtime = Time { sec: 9, nsec: 0 };
        assert!(props_agree(&plain, &later, &cfg));
        assert!(!props_agree(&plain, &file(0o600, 1, None), &cfg));
        let tagged = file(0o644, 1, Some(vec![(b"user.tag".to_vec(), b"x".to_vec())]));
        assert!(!props_agree(&plain, &tagged, &cfg));
        cfg.xattrs = false;
        cfg.acls = false;
        assert!(props_agree(&plain, &tagged, &cfg));
        cfg.owner = true;
        assert!(!props_agree(&plain, &file(0o644, 2, None), &cfg));
    }
}
