//! Updating a file from a similar old version: in place (`--inplace`), or in
//! a temp file that starts as a reflink of the old one.
//!
//! Locally both versions are at hand, so the first try is a plain comparison
//! at equal offsets (edits that do not shift data: only the differing pages
//! are written). When data moved, the delta engine's in-place planner rebuilds
//! the file in its own storage.

use crate::transfer::Xfer;
use crate::{DeltaMode, Exec};
use accord_delta::{
    make_delta, patch_in_place, Command, Delta, DeltaOptions, InPlaceOptions, PatchOptions,
    Signature, SignatureOptions,
};
use accord_fsys::{fstat, Dir, Mapped};
use accord_model::Entry;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

/// Page granularity of the equal-offset comparison.
const PAGE: usize = 4096;

/// A mapping that a truncation by another process cannot crash the run
/// with (`Mapped::damaged` tells; sizes are also re-checked after).
fn map(f: &File, len: u64) -> io::Result<Option<Mapped>> {
    if len == 0 {
        return Ok(None);
    }
    Mapped::new(f, len).map(Some)
}

/// An error if a mapping read zeros where the file was cut short.
fn intact(m: &Option<Mapped>, what: &str) -> io::Result<()> {
    if m.as_ref().is_some_and(Mapped::damaged) {
        return Err(io::Error::other(format!(
            "{what} was truncated while it was read"
        )));
    }
    Ok(())
}

/// An update that failed after the target was changed: it holds neither
/// version and must be moved aside.
pub(crate) struct Modified(pub io::Error);

/// Rebuild `target` (holding `old_len` bytes of the old version) into `new`.
/// `Ok(None)`: not worth it (nothing was written).
fn rebuild(
    x: &Exec,
    target: &mut File,
    old_len: u64,
    new: &[u8],
    force: bool,
) -> Result<Option<Xfer>, Modified> {
    let old_map = map(target, old_len).map_err(Modified)?;
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
    intact(&old_map, "the destination").map_err(Modified)?;
    let diff_bytes = diff_pages.len() as u64 * PAGE as u64 + (new.len() - common) as u64;
    let new_len = new.len() as u64;
    if diff_bytes <= new_len / 4 || x.cfg.delta == DeltaMode::Never {
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
            })),
            Err(e) => Err(Modified(e)),
        };
    }
    // Data moved: the delta engine's in-place plan.
    let sig = Signature::generate(old, &SignatureOptions::default())
        .map_err(|e| Modified(delta_io(e)))?;
    let mut buf = Vec::new();
    let stats = make_delta(
        &sig,
        new,
        &DeltaOptions {
            in_place: Some(InPlaceOptions::default()),
        },
        &mut buf,
    )
    .map_err(|e| Modified(delta_io(e)))?;
    intact(&old_map, "the destination").map_err(Modified)?;
    drop(old_map);
    if !force && stats.literal_bytes > new_len / 2 {
        return Ok(None);
    }
    let delta = Delta::parse(&buf).map_err(|e| Modified(delta_io(e)))?;
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
    .map_err(|e| Modified(delta_io(e.error)))?;
    Ok(Some(Xfer {
        written,
        literal: stats.literal_bytes,
        matched: stats.matched_bytes,
    }))
}

/// Fill the empty temp `tf` from the old destination file `d` plus the delta,
/// when the old file can be reflinked into it (so only changes are written).
/// `Ok(None)`: do a whole-file copy instead.
pub(crate) fn delta_to_temp(
    x: &Exec,
    sf: &File,
    ddir: &Dir,
    d: &Entry,
    tf: &File,
    s: &Entry,
) -> io::Result<Option<Xfer>> {
    if s.size < 64 * 1024 && x.cfg.delta == DeltaMode::Auto {
        return Ok(None);
    }
    let old = ddir.open_read(d.path.file_name())?;
    let ost = fstat(old.as_fd())?;
    if ost.ino != d.ino || ost.size != d.size || ost.mtime != d.props.mtime {
        return Ok(None);
    }
    let cloned =
        accord_fsys::copy_data(&old, tf, d.size, false, accord_fsys::Reflink::Always).is_ok();
    if !cloned {
        if x.cfg.delta != DeltaMode::Always {
            return Ok(None);
        }
        // No reflink: a sequential delta streamed into the temp (writes the
        // whole file, reads the old one).
        let old_map = map(&old, d.size)?;
        let new_map = map(sf, s.size)?;
        let oldb: &[u8] = old_map.as_deref().unwrap_or(&[]);
        let newb: &[u8] = new_map.as_deref().unwrap_or(&[]);
        let sig = Signature::generate(oldb, &SignatureOptions::default()).map_err(delta_io)?;
        let mut buf = Vec::new();
        let stats = make_delta(&sig, newb, &DeltaOptions::default(), &mut buf).map_err(delta_io)?;
        let delta = Delta::parse(&buf).map_err(delta_io)?;
        let mut w = io::BufWriter::with_capacity(1 << 20, tf);
        accord_delta::patch_to(oldb, &delta, &mut w).map_err(delta_io)?;
        io::Write::flush(&mut w)?;
        intact(&new_map, "the source")?;
        intact(&old_map, "the old destination file")?;
        return Ok(Some(Xfer {
            written: s.size,
            literal: stats.literal_bytes,
            matched: stats.matched_bytes,
        }));
    }
    let new_map = map(sf, s.size)?;
    let newb: &[u8] = new_map.as_deref().unwrap_or(&[]);
    let mut t = tf.try_clone()?;
    match rebuild(x, &mut t, d.size, newb, x.cfg.delta == DeltaMode::Always) {
        Ok(Some(xf)) => intact(&new_map, "the source").map(|()| Some(xf)),
        Ok(None) => {
            // Start over with a whole copy into the (untouched) clone.
            tf.set_len(0)?;
            Ok(None)
        }
        Err(Modified(e)) => Err(e),
    }
}

/// `--inplace`: rebuild the destination file `d` in its own storage. On a
/// failure after the first write the file is renamed to a hidden recovery
/// name beside it (it holds neither version).
pub(crate) fn update_in_place(
    x: &Exec,
    sf: &File,
    ddir: &Dir,
    s: &Entry,
    d: &Entry,
) -> io::Result<Xfer> {
    let name = d.path.file_name();
    let mut target = ddir.open_rw(name)?;
    let st = fstat(target.as_fd())?;
    if st.ino != d.ino || st.size != d.size || st.mtime != d.props.mtime {
        return Err(io::Error::other(
            "the destination changed since it was scanned; left alone",
        ));
    }
    let new_map = map(sf, s.size)?;
    let newb: &[u8] = new_map.as_deref().unwrap_or(&[]);
    // If this process dies mid-update, the marker makes the next run move
    // the file aside before anything else.
    let marker = ddir.create_inplace_marker(name, x.cfg.fsync)?;
    let r = match rebuild(x, &mut target, d.size, newb, true) {
        Ok(Some(xf)) => intact(&new_map, "the source").map(|()| xf),
        Ok(None) => unreachable!("forced rebuild always writes"),
        Err(Modified(e)) => Err(e),
    }
    .and_then(|xf| {
        accord_fsys::set_props_fd(target.as_fd(), &s.props, x.mask())?;
        if x.cfg.fsync {
            accord_fsys::fsync(&target)?;
        }
        let st2 = fstat(sf.as_fd())?;
        if st2.size != s.size || st2.mtime != s.props.mtime {
            return Err(io::Error::other("the source changed during the update"));
        }
        Ok(xf)
    });
    match r {
        Ok(xf) => {
            let _ = ddir.unlink(&marker);
            Ok(xf)
        }
        Err(e) => {
            // Whatever happened, the file may be neither version now.
            let rec = accord_fsys::recovery_name(name);
            let moved = ddir.rename_noreplace(name, &rec);
            if moved.is_ok() {
                let _ = ddir.unlink(&marker);
            }
            Err(io::Error::new(
                e.kind(),
                match moved {
                    Ok(()) => format!(
                        "{e}; the partly updated file was moved to {}",
                        accord_model::escape_for_display(&rec)
                    ),
                    Err(m) => format!("{e}; moving the partly updated file aside failed: {m}"),
                },
            ))
        }
    }
}

/// A delta-engine error as an I/O error, keeping the OS error of an I/O
/// failure (so a full disk is still recognised as fatal by `is_no_space`).
fn delta_io(e: accord_delta::DeltaError) -> io::Error {
    match e {
        accord_delta::DeltaError::Io(io) => io,
        other => io::Error::other(other.to_string()),
    }
}
