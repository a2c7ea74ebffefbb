//! `-b`/`--backup`: before the mirror overwrites or deletes an entry of
//! the destination that is not a directory, the old version is kept: beside
//! it as NAME + suffix, or under `--backup-dir` at its relative path. A
//! regular file is kept as a hard link (no data copied), anything else as
//! a copy of the node; an older backup at that name is replaced, as rsync
//! does. Its path is never missing: the backup is linked, then the new
//! version is renamed over the old name as without `-b`.
//!
//! Backups are made through the destination replica (so they work across
//! a wire too), before the temps of their batch: the batch's flush makes
//! them durable before any commit or deletion. A backup directory outside
//! the destination is reached on this host only (`Place::Outside`).
//!
//! What keeps backups from the mirror itself: a backup directory inside
//! the destination is left out of the walk on both sides (`exclude_rule`),
//! and with backups beside their files and deletion on, a destination
//! entry whose name ends with the suffix and that the source does not hold
//! is kept (`protects`: rsync's `P *SUFFIX` rule).

use crate::mirror::exec::{parent_of, Exec};
use crate::{Backup, BackupPlace, End, MirrorConfig};
use accord_fsys::{Dir, Root};
use accord_model::{Entry, Expect, Found, Kind, RelPath};
use accord_plan::{Item, Method, Op};
use accord_replica::{Action, Error};
use std::collections::HashSet;
use std::io;
use std::sync::Mutex;

/// Where backups go, opened.
enum Place {
    Beside,
    /// A directory inside the destination, by its path there.
    Inside(RelPath),
    /// A directory outside the destination, on this host (opened at the
    /// start of the run; its error is each backup's).
    Outside(io::Result<Root>),
}

/// A run's backups (none for a dry run: it keeps nothing).
pub(crate) struct Backups {
    place: Place,
    suffix: Vec<u8>,
    /// Backup directories this run made or found (each made once).
    made: Mutex<HashSet<RelPath>>,
}

impl Backups {
    pub fn new(cfg: &MirrorConfig) -> Option<Backups> {
        let b = cfg.backup.as_ref().filter(|_| !cfg.dry_run)?;
        let place = match &b.place {
            BackupPlace::Beside => Place::Beside,
            BackupPlace::Inside(dir) => Place::Inside(dir.clone()),
            BackupPlace::Outside(path) => {
                Place::Outside(std::fs::create_dir_all(path).and_then(|()| Root::open(path)))
            }
        };
        Some(Backups {
            place,
            suffix: b.suffix.clone(),
            made: Mutex::new(HashSet::new()),
        })
    }
}

/// Keep what the destination holds at `it`'s path (the version the plan
/// saw) before it is replaced or deleted. An error means it could not be
/// kept: the caller then leaves the path alone.
pub(crate) fn back_up(x: &Exec, it: &Item) -> Result<(), Error> {
    let (Some(b), Some(old)) = (&x.backups, &it.dst) else {
        return Ok(());
    };
    if old.kind == Kind::Dir {
        return Ok(());
    }
    if it.op == Op::Write(Method::InPlace) {
        // A link would share the very inode rewritten in place.
        return Err(Error::io(Action::UpdateInPlace)(io::Error::other(
            "--backup cannot keep the old version of a file updated --inplace",
        )));
    }
    let name = backup_name(it.path.file_name(), &b.suffix)?;
    let parent = parent_of(&it.path);
    let kept = match &b.place {
        Place::Beside => keep_in_dst(x, &parent, &name, old),
        Place::Inside(top) => {
            make_dirs_in_dst(x, b, top, &parent).and_then(|at| keep_in_dst(x, &at, &name, old))
        }
        Place::Outside(Err(e)) => Err(Error::io(Action::MakeDir)(
            crate::mirror::transfer::clone_io(e),
        )),
        Place::Outside(Ok(root)) => keep_outside(x, b, root, &parent, &name, old),
    };
    kept.map_err(in_backup_words)
}

/// `NAME` + suffix, if it is a valid file name.
fn backup_name(name: &[u8], suffix: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = name.to_vec();
    out.extend_from_slice(suffix);
    if out.len() > 255 {
        return Err(Error::io(Action::MakeLink)(io::Error::other(
            "the backup's name (the name and --suffix) is longer than 255 bytes",
        )));
    }
    Ok(out)
}

/// Say that the failure was the backup's (the path is left as it was).
fn in_backup_words(e: Error) -> Error {
    match e {
        Error::Io { action, source } => Error::Io {
            action,
            source: io::Error::new(
                source.kind(),
                format!(
                    "{} (while keeping the old version for --backup; it was left in place)",
                    accord_fsys::io_words(&source)
                ),
            ),
        },
        other => other,
    }
}

/// `top/parent` in the destination, each directory made if missing (mode
/// 0700, as `mkdir` gives it: backups are the owner's).
fn make_dirs_in_dst(
    x: &Exec,
    b: &Backups,
    top: &RelPath,
    parent: &RelPath,
) -> Result<RelPath, Error> {
    let mut at = RelPath::root();
    for component in top.components().chain(parent.components()) {
        let next = at.join(component).map_err(|_| too_long())?;
        if !b.made.lock().unwrap().contains(&next) {
            let dir = x.dst.open_dir(&at).map_err(Error::io(Action::MakeDir))?;
            dir.mkdir(component)?;
            b.made.lock().unwrap().insert(next.clone());
        }
        at = next;
    }
    Ok(at)
}

fn too_long() -> Error {
    Error::io(Action::MakeDir)(io::Error::other("the backup's path is too long"))
}

/// Keep `old` as `name` in the destination's directory `at`: a hard link
/// of a regular file, a copy of anything else; then check it is the
/// version the plan saw (else it is removed again and the path fails as
/// changed).
fn keep_in_dst(x: &Exec, at: &RelPath, name: &[u8], old: &Entry) -> Result<(), Error> {
    let dir = x
        .dst
        .open_dir(at)
        .map_err(Error::io(Action::OpenDestination))?;
    let temp = if old.kind == Kind::File {
        dir.link_temp(name, &old.path)?
    } else {
        dir.make_node(name, old, x.mask())?
    };
    let replaced = match dir.stat(name) {
        Ok(found) => expect_of(found),
        Err(e) => {
            dir.discard(&temp);
            return Err(Error::io(Action::MakeLink)(e));
        }
    };
    if let Err(e) = dir.commit(&temp, name, &replaced) {
        dir.discard(&temp);
        return Err(e);
    }
    if old.kind != Kind::File {
        return Ok(());
    }
    let now = dir.stat(name).map_err(Error::io(Action::MakeLink))?;
    if Expect::entry(old).still_holds(now.as_ref()) {
        return Ok(());
    }
    // Not the version the plan would replace: its overwrite is refused.
    let _ = dir.delete(name, &expect_of(now));
    Err(Error::Changed(End::Written))
}

fn expect_of(found: Option<Found>) -> Expect {
    found.map_or(Expect::Absent, Expect::Entry)
}

/// Keep `old` in the backup directory outside the destination (this
/// host): a hard link of any entry, or, across file systems, a durable
/// copy of a regular file.
fn keep_outside(
    x: &Exec,
    b: &Backups,
    root: &Root,
    parent: &RelPath,
    name: &[u8],
    old: &Entry,
) -> Result<(), Error> {
    let ddir = x
        .dst
        .open_dir(parent)
        .map_err(Error::io(Action::OpenDestination))?;
    let Some(from) = ddir.local() else {
        return Err(Error::io(Action::MakeLink)(io::Error::other(
            "a --backup-dir outside DST needs DST on this host",
        )));
    };
    let bdir = outside_dir(b, root, parent)?;
    let from_name = old.path.file_name();
    let (temp, copied) = match bdir.link_temp(from, from_name, name) {
        Ok(t) => (t, false),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) && old.kind == Kind::File => {
            (copy_outside(x, from, &bdir, old, name)?, true)
        }
        Err(e) => return Err(Error::io(Action::MakeLink)(e)),
    };
    let same = bdir
        .stat(&temp)
        .map(|st| copied || Expect::entry(old).still_holds(Some(&st.found())));
    match same {
        Ok(true) => {}
        Ok(false) => {
            let _ = bdir.unlink(&temp);
            return Err(Error::Changed(End::Written));
        }
        Err(e) => {
            let _ = bdir.unlink(&temp);
            return Err(Error::io(Action::MakeLink)(e));
        }
    }
    if let Err(e) = bdir.rename(&temp, name) {
        let _ = bdir.unlink(&temp);
        return Err(Error::io(Action::Replace)(e));
    }
    // A copy on another file system is not covered by the destination's
    // flush: its directory entry is made durable here.
    if copied && x.cfg.fsync {
        bdir.sync().map_err(Error::io(Action::Flush))?;
    }
    Ok(())
}

/// A copy of the regular file `old` under a temp name in `bdir`, with its
/// properties, flushed (with fsync on); checked to be the planned version.
fn copy_outside(
    x: &Exec,
    from: &Dir,
    bdir: &Dir,
    old: &Entry,
    name: &[u8],
) -> Result<Vec<u8>, Error> {
    use std::os::fd::AsFd;
    let (f, st) = from
        .open_read_stat(old.path.file_name())
        .map_err(Error::io(Action::OpenDestination))?;
    if !Expect::entry(old).still_holds(Some(&st.found())) {
        return Err(Error::Changed(End::Written));
    }
    let (temp, tf) = bdir
        .create_temp(name)
        .map_err(Error::io(Action::WriteTemp))?;
    let r = accord_fsys::copy_data(&f, &tf, old.size, old.looks_sparse(), x.cfg.reflink)
        .and_then(|_| accord_fsys::set_props_fd(tf.as_fd(), &old.props, x.mask()))
        .and_then(|()| {
            if x.cfg.fsync {
                accord_fsys::fsync(&tf)
            } else {
                Ok(())
            }
        });
    if let Err(e) = r {
        let _ = bdir.unlink(&temp);
        return Err(Error::io(Action::WriteTemp)(e));
    }
    Ok(temp)
}

/// The backup directory's `parent` (outside the destination), each
/// directory made if missing (mode 0700).
fn outside_dir(b: &Backups, root: &Root, parent: &RelPath) -> Result<Dir, Error> {
    let mut at = RelPath::root();
    for component in parent.components() {
        let next = at.join(component).map_err(|_| too_long())?;
        if !b.made.lock().unwrap().contains(&next) {
            let dir = root.open_dir(&at).map_err(Error::io(Action::MakeDir))?;
            match dir.mkdir(component, 0o700) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(Action::MakeDir)(e)),
            }
            b.made.lock().unwrap().insert(next.clone());
        }
        at = next;
    }
    root.open_dir(&at).map_err(Error::io(Action::MakeDir))
}

/// Back up what each of `items` would lose, then (with fsync on) flush the
/// destination once so every backup is durable before any of them is
/// replaced or deleted. Returns the items whose old version is kept (the
/// others failed, and are left alone).
pub(crate) fn back_up_all<'a>(x: &Exec, items: &[&'a Item]) -> Vec<&'a Item> {
    if x.backups.is_none() {
        return items.to_vec();
    }
    use rayon::prelude::*;
    let kept: Vec<&Item> = items
        .par_iter()
        .filter(|it| match back_up(x, it) {
            Ok(()) => true,
            Err(e) => {
                x.fail_item(it, e);
                false
            }
        })
        .copied()
        .collect();
    if x.cfg.fsync && !kept.is_empty() {
        if let Err(e) = x.dst.sync_all() {
            for it in &kept {
                x.fail_item(
                    it,
                    Error::io(Action::Flush)(crate::mirror::transfer::clone_io(&e)),
                );
            }
            return Vec::new();
        }
    }
    kept
}

/// The exclude line that leaves a backup directory inside the destination
/// out of the mirror (on both sides: never scanned, never deleted, never
/// written into from the source).
pub(crate) fn exclude_rule(b: &Backup) -> Option<String> {
    let BackupPlace::Inside(dir) = &b.place else {
        return None;
    };
    let text = std::str::from_utf8(dir.as_bytes()).ok()?;
    let mut out = String::from("/");
    for c in text.chars() {
        if matches!(c, '\\' | '*' | '?' | '[' | ']' | '!' | '#' | ' ') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('/');
    Some(out)
}

/// rsync's protect rule of `-b` without `--backup-dir` (and with
/// deletion): a destination entry whose name ends with the suffix, where
/// the source holds nothing of that name, is kept (an earlier run's
/// backup).
pub(crate) fn protects(cfg: &MirrorConfig, dst: &Entry, in_src: bool) -> bool {
    let Some(b) = &cfg.backup else {
        return false;
    };
    matches!(b.place, BackupPlace::Beside)
        && cfg.plan.delete
        && !in_src
        && !b.suffix.is_empty()
        && dst.path.file_name().ends_with(&b.suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backup_directory_rule_is_anchored_and_literal() {
        let inside = |p: &str| Backup {
            place: BackupPlace::Inside(RelPath::new(p.as_bytes()).unwrap()),
            suffix: Vec::new(),
        };
        assert_eq!(exclude_rule(&inside("bak")).unwrap(), "/bak/");
        assert_eq!(exclude_rule(&inside("a b/*x!")).unwrap(), "/a\\ b/\\*x\\!/");
        let beside = Backup {
            place: BackupPlace::Beside,
            suffix: b"~".to_vec(),
        };
        assert_eq!(exclude_rule(&beside), None);
    }

    #[test]
    fn backup_names_keep_within_a_file_name() {
        assert_eq!(backup_name(b"f", b"~").unwrap(), b"f~");
        assert!(backup_name(&[b'x'; 254], b"~").is_ok());
        assert!(backup_name(&[b'x'; 255], b"~").is_err());
    }
}
