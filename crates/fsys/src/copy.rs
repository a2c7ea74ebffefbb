//! Moving bytes between two open files: reflink, `copy_file_range`, holes kept.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `--reflink auto|always|never`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reflink {
    Auto,
    Always,
    Never,
}

/// What a copy did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Bytes written to the target (0 for a reflink).
    pub written: u64,
    /// True if the target shares the source's extents (FICLONE).
    pub cloned: bool,
}

const FICLONE: libc::c_ulong = 0x4004_9409;

use crate::throttle::{Throttle, PACED_CHUNK};

fn changed() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "source changed during copy")
}

/// Copy `len` bytes at `[off, off+len)` from `src` to the same offset of `dst`.
/// With `pace`, the bytes go a chunk at a time, each paid for.
/// The buffer of a copy by reads and writes (across file systems, where
/// `copy_file_range` refuses): 256 KiB, as GNU cp's is on most systems; a
/// megabyte per copy thread made a quarter of an initial copy's peak
/// memory, for no speed.
const COPY_BUF: usize = 256 << 10;

fn copy_range(
    src: &File,
    dst: &File,
    (off, len): (u64, u64),
    use_cfr: &mut bool,
    pace: Option<&Throttle>,
) -> io::Result<()> {
    let mut done = 0u64;
    let most = pace.map_or(1 << 30, |_| PACED_CHUNK as u64);
    while done < len {
        let want = (len - done).min(most) as usize;
        if *use_cfr {
            let mut oi = (off + done) as libc::loff_t;
            let mut oo = (off + done) as libc::loff_t;
            let r = unsafe {
                libc::copy_file_range(src.as_raw_fd(), &mut oi, dst.as_raw_fd(), &mut oo, want, 0)
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EXDEV)
                    | Some(libc::ENOSYS)
                    | Some(libc::EOPNOTSUPP)
                    | Some(libc::EINVAL)
                    | Some(libc::EBADF)
                        if done == 0 =>
                    {
                        *use_cfr = false;
                        continue;
                    }
                    _ => return Err(e),
                }
            }
            if r == 0 {
                return Err(changed());
            }
            done += r as u64;
            pace.inspect(|t| t.pace(r as usize));
        } else {
            // As large as cp's: a copy thread holds one while it copies.
            let mut buf = vec![0u8; want.min(COPY_BUF)];
            let n = pread(src, &mut buf, off + done)?;
            if n == 0 {
                return Err(changed());
            }
            pwrite_all(dst, &buf[..n], off + done)?;
            done += n as u64;
            pace.inspect(|t| t.pace(n));
        }
    }
    Ok(())
}

pub(crate) fn pread(f: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    loop {
        match f.read_at(buf, off) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

pub(crate) fn pwrite_all(f: &File, buf: &[u8], off: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    f.write_all_at(buf, off)
}

fn seek(f: &File, off: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let r = unsafe { libc::lseek(f.as_raw_fd(), off as libc::off_t, whence) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(r as u64))
}

/// Copy the first `size` bytes of `src` into the empty file `dst`.
/// `sparse`: copy only data extents (SEEK_DATA/SEEK_HOLE) so holes stay holes.
pub fn copy_data(
    src: &File,
    dst: &File,
    size: u64,
    sparse: bool,
    reflink: Reflink,
) -> io::Result<CopyStats> {
    copy_data_paced(src, dst, (size, sparse), reflink, None)
}

/// `copy_data`, the bytes written paid for to `pace` (`--bwlimit`); a
/// clone writes no data and is not paced.
pub fn copy_data_paced(
    src: &File,
    dst: &File,
    (size, sparse): (u64, bool),
    reflink: Reflink,
    pace: Option<&Throttle>,
) -> io::Result<CopyStats> {
    if size == 0 {
        return Ok(CopyStats::default());
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    // Once a file system said it cannot clone, `auto` stops asking.
    static NO_CLONE: AtomicBool = AtomicBool::new(false);
    if reflink == Reflink::Always || (reflink == Reflink::Auto && !NO_CLONE.load(Ordering::Relaxed))
    {
        let r = unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE as _, src.as_raw_fd()) };
        if r != 0
            && reflink == Reflink::Auto
            && matches!(
                io::Error::last_os_error().raw_os_error(),
                Some(libc::EOPNOTSUPP)
                    | Some(libc::ENOTTY)
                    | Some(libc::EINVAL)
                    | Some(libc::ENOSYS)
            )
        {
            NO_CLONE.store(true, Ordering::Relaxed);
        }
        if r == 0 {
            // The clone takes the whole source; make sure its length is the
            // one we planned.
            let len = dst.metadata()?.len();
            if len != size {
                return Err(changed());
            }
            return Ok(CopyStats {
                written: 0,
                cloned: true,
            });
        }
        if reflink == Reflink::Always {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("reflink: {e}")));
        }
    }
    let mut use_cfr = true;
    let mut written = 0u64;
    if sparse {
        let mut pos = 0u64;
        while pos < size {
            let Some(data) = seek(src, pos, libc::SEEK_DATA)? else {
                break;
            };
            if data >= size {
                break;
            }
            let end = seek(src, data, libc::SEEK_HOLE)?.unwrap_or(size).min(size);
            copy_range(src, dst, (data, end - data), &mut use_cfr, pace)?;
            written += end - data;
            pos = end;
        }
        dst.set_len(size)?;
    } else {
        copy_range(src, dst, (0, size), &mut use_cfr, pace)?;
        written = size;
    }
    Ok(CopyStats {
        written,
        cloned: false,
    })
}

/// BLAKE3 of a whole file.
pub fn hash_file(f: &File) -> io::Result<[u8; 32]> {
    thread_local! {
        // One buffer per thread, reused: a sync fingerprints every file of
        // a first run, mostly small ones, and a fresh megabyte for each
        // was zeroed by the allocator every time (a tenth of a first sync
        // of 100,000 small files went to that memset).
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        if buf.is_empty() {
            buf.resize(1 << 20, 0);
        }
        let mut h = blake3::Hasher::new();
        let mut off = 0u64;
        loop {
            let n = pread(f, &mut buf, off)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            off += n as u64;
        }
        Ok(*h.finalize().as_bytes())
    })
}

/// Write a stream into an empty file, leaving holes where whole 4 KiB
/// blocks are zero (a sparse file sent as a stream stays sparse); returns
/// the bytes read.
pub fn write_sparse(r: &mut dyn std::io::Read, f: &File) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    const BLOCK: usize = 4096;
    const MAX_BUF: usize = 1 << 20;
    // Small at first and doubled while the stream fills it: most files
    // are small, and zeroing a megabyte for each costs more than writing
    // them.
    let mut buf = vec![0u8; 16 << 10];
    let mut off: u64 = 0;
    // Where the written data ends: the file's length, unless it ends in a
    // hole (then it is set at the end).
    let mut data_end: u64 = 0;
    loop {
        if off > 0 && buf.len() < MAX_BUF {
            buf.resize(buf.len() * 2, 0);
        }
        // Fill the buffer as far as the stream goes, so blocks stay aligned.
        let mut n = 0;
        while n < buf.len() {
            match r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let mut i = 0;
        while i < n {
            let end = (i + BLOCK).min(n);
            let block = &buf[i..end];
            if block.iter().any(|b| *b != 0) {
                // One write for the run of data blocks that starts here.
                let mut j = end;
                while j < n && buf[j..(j + BLOCK).min(n)].iter().any(|b| *b != 0) {
                    j = (j + BLOCK).min(n);
                }
                f.write_all_at(&buf[i..j], off + i as u64)?;
                data_end = off + j as u64;
                i = j;
            } else {
                i = end;
            }
        }
        off += n as u64;
        if n < buf.len() {
            if data_end != off {
                f.set_len(off)?;
            }
            return Ok(off);
        }
    }
}
