//! The local fast path: both replicas are on this host, so a file is copied
//! with `copy_file_range` or a reflink, and updated from its old version
//! either in place (`--inplace`) or in a temp file that starts as a reflink
//! of the old one.
//!
//! Both versions are at hand, so the first try is a plain comparison at
//! equal offsets (edits that do not shift data: only the differing pages are
//! written). When data moved, the delta engine's in-place planner rebuilds
//! the file in its own storage.

use crate::mirror::exec::Exec;
use crate::mirror::transfer::Xfer;
use crate::{DeltaMode, End};
use accord_delta::{
    make_delta, patch_in_place, Command, Delta, DeltaOptions, InPlaceOptions, PatchOptions,
    Signature, SignatureOptions,
};
use accord_fsys::{Dir, Mapped};
use accord_model::{Entry, Kind};
use accord_plan::{Item, Method};
use accord_replica::local_io::{check_open, guarded_in_place, map};
use accord_replica::{Action, Error};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

/// Page granularity of the equal-offset comparison.
const PAGE: usize = 4096;

/// An error if a mapping read zeros where the file was cut short.
fn intact(m: &Option<Mapped>, end: End) -> Result<(), Error> {
    if m.as_ref().is_some_and(Mapped::damaged) {
        return Err(Error::Changed(end));
    }
    Ok(())
}

/// An update that failed after the target was changed: it holds neither
/// version and must be moved aside.
pub(crate) struct Modified(pub Error);

fn delta_err(action: Action) -> impl Fn(accord_delta::DeltaError) -> Error {
    move |source| Error::Delta { action, source }
}

/// Rebuild `target` (holding `old_len` bytes of the old version) into `new`.
/// `Ok(None)`: not worth it (nothing was written).
fn rebuild(
    delta_mode: DeltaMode,
    target: &mut File,
    old_len: u64,
    new: &[u8],
    force: bool,
) -> Result<Option<Xfer>, Modified> {
    let old_map =
        map(target, old_len).map_err(|e| Modified(Error::io(Action::OpenDestination)(e)))?;
    let old: &[u8] = old_map.as_deref().unwrap_or(&[]);
    let common = old.len().min(new.len());
    // Pages that differ at equal offsets.
    let mut diff_pages: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < common {
        let end = (i + PAGE).min(common);
        if old[i..end] != new[i..end] {
            diff_pages.push(i);
        }
        i = end;
    }
    // Someone else cut the file short while we compared: give up on it.
    intact(&old_map, End::Written).map_err(Modified)?;
    let diff_bytes = diff_pages.len() as u64 * PAGE as u64 + (new.len() - common) as u64;
    let new_len = new.len() as u64;
    if diff_bytes <= new_len / 4 || delta_mode == DeltaMode::Never {
        drop(old_map);
        let mut written = 0u64;
        let r = (|| {
            for &p in &diff_pages {
                let end = (p + PAGE).min(common);
                target.write_all_at(&new[p..end], p as u64)?;
                written += (end - p) as u64;
            }
            if new.len() > common {
                target.write_all_at(&new[common..], common as u64)?;
                written += (new.len() - common) as u64;
            }
            target.set_len(new_len)
        })();
        return match r {
            Ok(()) => Ok(Some(Xfer {
                written,
                literal: written,
                matched: new_len - written,
                linked: false,
            })),
            Err(e) => Err(Modified(Error::io(Action::UpdateInPlace)(e))),
        };
    }
    // Data moved: the delta engine's in-place plan.
    let sig = Signature::generate(old, &SignatureOptions::default())
        .map_err(|e| Modified(delta_err(Action::OpenDestination)(e)))?;
    let mut buf = Vec::new();
    let stats = make_delta(
        &sig,
        new,
        &DeltaOptions {
            in_place: Some(InPlaceOptions::default()),
        },
        &mut buf,
    )
    .map_err(|e| Modified(delta_err(Action::ReadSource)(e)))?;
    intact(&old_map, End::Written).map_err(Modified)?;
    drop(old_map);
    if !force && stats.literal_bytes > new_len / 2 {
        return Ok(None);
    }
    let delta = Delta::parse(&buf).map_err(|e| Modified(delta_err(Action::UpdateInPlace)(e)))?;
    let written: u64 = delta
        .commands
        .iter()
        .map(|c| match *c {
            Command::Copy { src, dst, len } if src != dst => len,
            Command::Add { len, .. } => len,
            Command::Unstash { len, .. } => len,
            _ => 0,
        })
        .sum();
    patch_in_place(
        target,
        &delta,
        &PatchOptions {
            sync: false,
            ..PatchOptions::default()
        },
    )
    .map_err(|e| Modified(delta_err(Action::UpdateInPlace)(e.error)))?;
    Ok(Some(Xfer {
        written,
        literal: stats.literal_bytes,
        matched: stats.matched_bytes,
        linked: false,
    }))
}

/// Fill the empty temp `tf` from the old destination file `d` plus the delta,
/// when the old file can be reflinked into it (so only changes are written).
/// `Ok(None)`: do a whole-file copy instead.
fn delta_to_temp(
    mode: DeltaMode,
    sf: &File,
    ddir: &Dir,
    d: &Entry,
    tf: &File,
    s: &Entry,
) -> Result<Option<Xfer>, Error> {
    let old = match ddir.open_read(d.path.file_name()) {
        Ok(f) => f,
        Err(e) => return Err(Error::io(Action::OpenDestination)(e)),
    };
    // The basis is no longer what the plan saw: copy the whole file.
    if check_open(&old, &accord_model::Expect::entry(d), End::Written).is_err() {
        return Ok(None);
    }
    let cloned =
        accord_fsys::copy_data(&old, tf, d.size, false, accord_fsys::Reflink::Always).is_ok();
    if !cloned {
        if mode != DeltaMode::Always {
            return Ok(None);
        }
        // No reflink: a sequential delta streamed into the temp (writes the
        // whole file, reads the old one).
        let io_err = Error::io(Action::OpenDestination);
        let old_map = map(&old, d.size).map_err(io_err)?;
        let new_map = map(sf, s.size).map_err(Error::io(Action::ReadSource))?;
        let oldb: &[u8] = old_map.as_deref().unwrap_or(&[]);
        let newb: &[u8] = new_map.as_deref().unwrap_or(&[]);
        let sig = Signature::generate(oldb, &SignatureOptions::default())
            .map_err(delta_err(Action::OpenDestination))?;
        let mut buf = Vec::new();
        let stats = make_delta(&sig, newb, &DeltaOptions::default(), &mut buf)
            .map_err(delta_err(Action::ReadSource))?;
        let delta = Delta::parse(&buf).map_err(delta_err(Action::WriteTemp))?;
        let mut w = io::BufWriter::with_capacity(1 << 20, tf);
        accord_delta::patch_to(oldb, &delta, &mut w).map_err(delta_err(Action::WriteTemp))?;
        io::Write::flush(&mut w).map_err(Error::io(Action::WriteTemp))?;
        intact(&new_map, End::Read)?;
        intact(&old_map, End::Written)?;
        return Ok(Some(Xfer {
            written: s.size,
            literal: stats.literal_bytes,
            matched: stats.matched_bytes,
            linked: false,
        }));
    }
    let new_map = map(sf, s.size).map_err(Error::io(Action::ReadSource))?;
    let newb: &[u8] = new_map.as_deref().unwrap_or(&[]);
    let mut t = tf.try_clone().map_err(Error::io(Action::WriteTemp))?;
    match rebuild(mode, &mut t, d.size, newb, mode == DeltaMode::Always) {
        Ok(Some(xf)) => intact(&new_map, End::Read).map(|()| Some(xf)),
        Ok(None) => {
            // Start over with a whole copy into the (untouched) clone.
            tf.set_len(0).map_err(Error::io(Action::WriteTemp))?;
            Ok(None)
        }
        Err(Modified(e)) => Err(e),
    }
}

/// `--inplace`: rebuild the destination file `d` in its own storage. On a
/// failure after the first write the file is moved to a hidden recovery
/// name beside it (it holds neither version).
fn update_in_place(x: &Exec, sf: &File, ddir: &Dir, it: &Item) -> Result<Xfer, Error> {
    let (s, d) = (it.src.as_deref().unwrap(), it.dst.as_deref().unwrap());
    let name = d.path.file_name();
    let mut target = ddir
        .open_rw(name)
        .map_err(Error::io(Action::UpdateInPlace))?;
    check_open(&target, &it.expect_dst(), End::Written)?;
    let new_map = map(sf, s.size).map_err(Error::io(Action::ReadSource))?;
    let newb: &[u8] = new_map.as_deref().unwrap_or(&[]);
    let mode = x.cfg.plan.transfer.delta;
    let fsync = x.cfg.fsync;
    // If this process dies mid-update, the marker makes the next run move
    // the file aside before anything else.
    guarded_in_place(ddir, name, fsync, || {
        let xf = match rebuild(mode, &mut target, d.size, newb, true) {
            Ok(Some(xf)) => xf,
            Ok(None) => unreachable!("forced rebuild always writes"),
            Err(Modified(e)) => return Err(e),
        };
        intact(&new_map, End::Read)?;
        accord_fsys::set_props_fd(target.as_fd(), &s.props, x.mask())
            .map_err(Error::io(Action::SetProps))?;
        if fsync {
            accord_fsys::fsync(&target).map_err(Error::io(Action::Flush))?;
        }
        check_open(sf, &it.expect_src(), End::Read)?;
        Ok(xf)
    })
}

/// Open the source file of `it`, checked against the plan.
fn open_source(sdir: &Dir, it: &Item) -> Result<File, Error> {
    // The stat made by the open (of the file opened) is the one checked.
    let (f, st) = match sdir.open_read_stat(it.path.file_name()) {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(Error::Changed(End::Read)),
        Err(e) => return Err(Error::io(Action::OpenSource)(e)),
    };
    if !it.expect_src().still_holds(Some(&st.found())) {
        return Err(Error::Changed(End::Read));
    }
    Ok(f)
}

/// Write `it`'s new contents by `method`: into a temp file (returned, to be
/// committed) or in place (`None`: done and counted).
pub(crate) fn write(
    x: &Exec,
    sdir: &Dir,
    ddir: &Dir,
    it: &Item,
    method: Method,
) -> Result<Option<(Vec<u8>, Xfer)>, Error> {
    let s = it.src.as_deref().expect("a write has a source");
    let sf = open_source(sdir, it)?;
    if method == Method::InPlace {
        let xf = update_in_place(x, &sf, ddir, it)?;
        x.pace_after(xf.written);
        x.count_done(it, xf);
        x.data_written(s.size);
        return Ok(None);
    }
    if method == Method::Whole && it.dst.is_none() {
        if let Some(temp) = link_from_link_dest(x, ddir, it, s) {
            let linked = Xfer {
                linked: true,
                ..Xfer::default()
            };
            return Ok(Some((temp, linked)));
        }
    }
    let (temp, tf) = ddir
        .create_temp(it.path.file_name())
        .map_err(Error::io(Action::WriteTemp))?;
    let r = (|| {
        let mut xfer = None;
        if let (Method::Delta, Some(d)) = (method, &it.dst) {
            xfer = delta_to_temp(x.cfg.plan.transfer.delta, &sf, ddir, d, &tf, s)?;
        }
        let xfer = match xfer {
            Some(xf) => {
                x.pace_after(xf.written);
                xf
            }
            None => {
                let size = (s.size, s.looks_sparse());
                let c =
                    accord_fsys::copy_data_paced(&sf, &tf, size, x.cfg.reflink, x.pace.as_ref())
                        .map_err(|e| {
                            if e.kind() == io::ErrorKind::UnexpectedEof {
                                Error::Changed(End::Read)
                            } else {
                                Error::io(Action::WriteTemp)(e)
                            }
                        })?;
                Xfer {
                    written: c.written,
                    literal: if c.cloned { 0 } else { s.size },
                    matched: if c.cloned { s.size } else { 0 },
                    linked: false,
                }
            }
        };
        accord_fsys::set_props_fd(tf.as_fd(), &s.props, x.mask())
            .map_err(Error::io(Action::SetProps))?;
        check_open(&sf, &it.expect_src(), End::Read)?;
        Ok(xfer)
    })();
    drop(tf);
    match r {
        Ok(xfer) => Ok(Some((temp, xfer))),
        Err(e) => {
            let _ = ddir.unlink(&temp);
            Err(e)
        }
    }
}

/// `--link-dest`: a temp name in `ddir` hard-linked to the file at the
/// same path in the link-dest directory, when that file is what the
/// source's would become (a regular file of its size, with the properties
/// this run keeps: mtime, mode, owner, extended attributes). None: copy
/// it (no such file, another one, or a link that cannot be made, as across
/// file systems). The linked inode is never changed: its properties already
/// are the source's, so nothing is set on it.
fn link_from_link_dest(x: &Exec, ddir: &Dir, it: &Item, s: &Entry) -> Option<Vec<u8>> {
    let root = x.link_dest.as_ref()?;
    let dir = root.open_dir(&it.path.parent()?).ok()?;
    let name = it.path.file_name();
    let st = dir.stat(name).ok()?;
    let o = &x.cfg.plan;
    let same = st.kind == Kind::File
        && st.size == s.size
        && (!o.times || st.mtime == s.props.mtime)
        && (!o.perms || st.mode & 0o7777 == s.props.mode & 0o7777)
        && (!o.owner || (st.uid, st.gid) == (s.props.uid, s.props.gid));
    if !same || !same_xattrs(x, &dir, name, s) {
        return None;
    }
    ddir.link_temp(&dir, name, name).ok()
}

/// The link-dest file has the extended attributes (and ACLs) the source's
/// has, as far as this run keeps them.
fn same_xattrs(x: &Exec, dir: &Dir, name: &[u8], s: &Entry) -> bool {
    if !x.cfg.plan.xattrs || !x.cfg.xattrs.any() {
        return true;
    }
    let theirs = dir.xattrs_at(name, x.cfg.xattrs).ok();
    let ours = s.props.xattrs.clone().unwrap_or_default();
    theirs.is_some_and(|t| t == ours)
}
