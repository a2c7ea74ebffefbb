//! Transfer and commit of non-directory entries.

use crate::{parent_of, DeltaMode, Exec};
use accord_fsys::{fstat, Dir, Stat};
use accord_model::{Entry, Kind, RelPath};
use accord_plan::{Item, Op};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Files per commit batch.
const BATCH_FILES: usize = 2048;
/// Bytes per commit batch.
const BATCH_BYTES: u64 = 256 << 20;

/// A temp file (or link, or node) ready to be renamed over its target.
struct Staged<'a> {
    item: &'a Item,
    dir: Arc<Dir>,
    temp: Vec<u8>,
    xfer: Xfer,
}

/// Bytes moved for one file.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Xfer {
    pub written: u64,
    pub literal: u64,
    pub matched: u64,
}

fn changed_err(what: &str) -> io::Error {
    io::Error::other(format!("{what} changed since it was scanned; left alone"))
}

fn same_as_scanned(st: &Stat, e: &Entry) -> bool {
    st.kind == e.kind
        && st.ino == e.ino
        && st.dev == e.dev
        && (e.kind != Kind::File || (st.size == e.size && st.mtime == e.props.mtime))
}

/// Rule 3: the target is still what the plan saw.
fn recheck_target(dir: &Dir, item: &Item) -> io::Result<()> {
    match dir.stat(item.path.file_name()) {
        Ok(st) => match &item.dst {
            Some(d) if same_as_scanned(&st, d) => Ok(()),
            _ => Err(changed_err("the destination")),
        },
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

pub(crate) fn run_files(x: &Exec, items: &[Item]) {
    let mut groups: BTreeMap<RelPath, Vec<&Item>> = BTreeMap::new();
    let mut metas: Vec<&Item> = Vec::new();
    for it in items {
        if it.op == Op::Meta {
            metas.push(it);
        } else {
            groups.entry(parent_of(&it.path)).or_default().push(it);
        }
    }
    let mut batches: Vec<Vec<(RelPath, Vec<&Item>)>> = Vec::new();
    let mut batch: Vec<(RelPath, Vec<&Item>)> = Vec::new();
    let (mut n, mut bytes) = (0usize, 0u64);
    for (parent, its) in groups {
        for chunk in its.chunks(BATCH_FILES) {
            n += chunk.len();
            bytes += chunk
                .iter()
                .map(|i| i.src.as_ref().map(|s| s.size).unwrap_or(0))
                .sum::<u64>();
            batch.push((parent.clone(), chunk.to_vec()));
            if n >= BATCH_FILES || bytes >= BATCH_BYTES {
                batches.push(std::mem::take(&mut batch));
                n = 0;
                bytes = 0;
            }
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    // Pipelined: while batch N is flushed and committed, batch N+1 is staged.
    let mut pending: Option<Vec<Staged>> = None;
    for b in &batches {
        let prev = pending.take();
        let ((), staged) = rayon::join(
            || {
                if let Some(p) = prev {
                    finish_batch(x, p)
                }
            },
            || stage_batch(x, b),
        );
        pending = Some(staged);
    }
    if let Some(p) = pending {
        finish_batch(x, p);
    }
    if x.stopped() {
        return;
    }
    metas.par_iter().for_each(|it| {
        if x.stopped() {
            return;
        }
        let r = x.dst.open_dir(&parent_of(&it.path)).and_then(|dir| {
            let (Some(s), Some(d)) = (&it.src, &it.dst) else {
                return Ok(());
            };
            let st = dir.stat(it.path.file_name())?;
            if st.kind != d.kind || st.ino != d.ino {
                return Err(changed_err("the destination"));
            }
            dir.set_props_at(it.path.file_name(), s.kind, &s.props, x.mask())
        });
        match r {
            Ok(()) => x.changed(it),
            Err(e) => x.fail(&it.path, &e),
        }
    });
}

fn stage_batch<'a>(x: &Exec, batch: &[(RelPath, Vec<&'a Item>)]) -> Vec<Staged<'a>> {
    if x.stopped() {
        return Vec::new();
    }
    batch
        .par_iter()
        .flat_map_iter(|(parent, its)| stage_group(x, parent, its))
        .collect()
}

fn finish_batch(x: &Exec, staged: Vec<Staged>) {
    if x.stopped() {
        for s in &staged {
            let _ = s.dir.unlink(&s.temp);
        }
        return;
    }
    // Make every temp file of the batch durable before any rename.
    if x.cfg.fsync && staged.iter().any(|s| s.item.op == Op::Write) {
        if let Err(e) = x.dst.syncfs() {
            for s in &staged {
                let _ = s.dir.unlink(&s.temp);
                x.fail_msg(&s.item.path, format!("flushing to disk failed: {e}"));
            }
            return;
        }
    }
    staged.par_iter().for_each(|s| commit(x, s));
}

fn commit(x: &Exec, s: &Staged) {
    let name = s.item.path.file_name();
    let r = recheck_target(&s.dir, s.item).and_then(|_| s.dir.rename(&s.temp, name));
    match r {
        Ok(()) => {
            if matches!(s.item.op, Op::Link { .. }) {
                // Renaming a link over a name of the same inode does nothing.
                let _ = s.dir.unlink(&s.temp);
            }
            let c = &x.counters;
            c.transferred.fetch_add(1, Ordering::Relaxed);
            c.written.fetch_add(s.xfer.written, Ordering::Relaxed);
            c.literal.fetch_add(s.xfer.literal, Ordering::Relaxed);
            c.matched.fetch_add(s.xfer.matched, Ordering::Relaxed);
            if s.item.op == Op::Write {
                x.progress.files_done.fetch_add(1, Ordering::Relaxed);
            }
            x.changed(s.item);
        }
        Err(e) => {
            let _ = s.dir.unlink(&s.temp);
            x.fail(&s.item.path, &e);
        }
    }
}

fn stage_group<'a>(x: &Exec, parent: &RelPath, its: &[&'a Item]) -> Vec<Staged<'a>> {
    let ddir = match x.dst.open_dir(parent) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            for it in its {
                x.fail(&it.path, &e);
            }
            return Vec::new();
        }
    };
    let need_src = its.iter().any(|i| i.op == Op::Write);
    let sdir = if need_src {
        match x.src.open_dir(parent) {
            Ok(d) => Some(d),
            Err(e) => {
                for it in its {
                    x.fail(&it.path, &e);
                }
                return Vec::new();
            }
        }
    } else {
        None
    };
    // Directories in parallel, the files of one directory in order (creating
    // names in one directory from several threads contends on its lock);
    // large directories are split into chunks that run in parallel.
    its.par_chunks(256)
        .flat_map_iter(|chunk| chunk.iter())
        .filter_map(|it| {
            if x.stopped() {
                return None;
            }
            let r = match it.op {
                Op::Write => stage_write(x, sdir.as_ref().unwrap(), &ddir, it),
                Op::Create => stage_create(x, &ddir, it),
                _ => return None,
            };
            match r {
                Ok(Some((temp, xfer))) => Some(Staged {
                    item: it,
                    dir: ddir.clone(),
                    temp,
                    xfer,
                }),
                Ok(None) => None,
                Err(e) => {
                    x.fail(&it.path, &e);
                    None
                }
            }
        })
        .collect()
}

fn stage_create(x: &Exec, ddir: &Dir, it: &Item) -> io::Result<Option<(Vec<u8>, Xfer)>> {
    let s = it.src.as_ref().expect("create has a source");
    let name = it.path.file_name();
    let temp = match s.kind {
        Kind::Symlink => ddir.symlink_temp(s.link_target.as_deref().unwrap_or_default(), name)?,
        k => ddir.mknod_temp(k, s.rdev, name)?,
    };
    if let Err(e) = ddir.set_props_at(&temp, s.kind, &s.props, x.mask()) {
        let _ = ddir.unlink(&temp);
        return Err(e);
    }
    Ok(Some((temp, Xfer::default())))
}

fn open_source(sdir: &Dir, s: &Entry) -> io::Result<(File, Stat)> {
    let f = sdir.open_read(s.path.file_name())?;
    let st = fstat(f.as_fd())?;
    if st.kind != Kind::File || st.size != s.size || st.mtime != s.props.mtime {
        return Err(changed_err("the source"));
    }
    Ok((f, st))
}

fn stage_write(x: &Exec, sdir: &Dir, ddir: &Dir, it: &Item) -> io::Result<Option<(Vec<u8>, Xfer)>> {
    let s = it.src.as_ref().expect("write has a source");
    let name = it.path.file_name();
    let (sf, st) = open_source(sdir, s)?;
    let old = it
        .dst
        .as_ref()
        .filter(|d| d.kind == Kind::File && d.size > 0);
    if x.cfg.inplace {
        // Never rewrite in place an inode with other names: they may be
        // outside the source's group (even excluded), or fail mid-update
        // where no recovery rename can reach them. Those go temp + rename.
        if let Some(d) = old.filter(|d| d.nlink <= 1) {
            let xf = crate::transfer_delta::update_in_place(x, &sf, ddir, s, d)?;
            let c = &x.counters;
            c.transferred.fetch_add(1, Ordering::Relaxed);
            c.written.fetch_add(xf.written, Ordering::Relaxed);
            c.literal.fetch_add(xf.literal, Ordering::Relaxed);
            c.matched.fetch_add(xf.matched, Ordering::Relaxed);
            x.progress.files_done.fetch_add(1, Ordering::Relaxed);
            x.progress.bytes_done.fetch_add(s.size, Ordering::Relaxed);
            x.changed(it);
            return Ok(None);
        }
    }
    let (temp, tf) = ddir.create_temp(name)?;
    let r = (|| {
        let mut xfer = None;
        if let Some(d) = old {
            if x.cfg.delta != DeltaMode::Never {
                xfer = crate::transfer_delta::delta_to_temp(x, &sf, ddir, d, &tf, s)?;
            }
        }
        let xfer = match xfer {
            Some(xf) => xf,
            None => {
                let c = accord_fsys::copy_data(&sf, &tf, s.size, s.looks_sparse(), x.cfg.reflink)?;
                Xfer {
                    written: c.written,
                    literal: if c.cloned { 0 } else { s.size },
                    matched: if c.cloned { s.size } else { 0 },
                }
            }
        };
        accord_fsys::set_props_fd(tf.as_fd(), &s.props, x.mask())?;
        let st2 = fstat(sf.as_fd())?;
        if st2.size != st.size || st2.mtime != st.mtime {
            return Err(changed_err("the source"));
        }
        Ok(xfer)
    })();
    drop(tf);
    match r {
        Ok(xfer) => {
            x.progress.bytes_done.fetch_add(s.size, Ordering::Relaxed);
            Ok(Some((temp, xfer)))
        }
        Err(e) => {
            let _ = ddir.unlink(&temp);
            Err(e)
        }
    }
}

pub(crate) fn run_links(x: &Exec, items: &[Item]) {
    let staged: Vec<Staged> = items
        .par_iter()
        .filter_map(|it| {
            if x.stopped() {
                return None;
            }
            let Op::Link { leader } = &it.op else {
                return None;
            };
            let r = (|| {
                let ddir = Arc::new(x.dst.open_dir(&parent_of(&it.path))?);
                let ldir = x.dst.open_dir(&parent_of(leader))?;
                let lst = ldir.stat(leader.file_name())?;
                if lst.kind != Kind::File {
                    return Err(io::Error::other(format!(
                        "cannot link to {}: not a file",
                        leader.display()
                    )));
                }
                let temp = ddir.link_temp(&ldir, leader.file_name(), it.path.file_name())?;
                Ok((ddir, temp))
            })();
            match r {
                Ok((dir, temp)) => Some(Staged {
                    item: it,
                    dir,
                    temp,
                    xfer: Xfer::default(),
                }),
                Err(e) => {
                    x.fail(&it.path, &e);
                    None
                }
            }
        })
        .collect();
    staged.par_iter().for_each(|s| commit(x, s));
}
