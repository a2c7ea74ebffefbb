//! Read-only file mappings that survive the file being truncated under them.
//!
//! Reading a mapped page that lies past the end of a file that another
//! process truncated raises SIGBUS, which would kill the whole run (a log
//! rotated with `copytruncate` while it is mirrored is enough). Every
//! [`Mapped`] registers its address range; a SIGBUS inside a registered range
//! maps a page of zeros over the faulting page and marks the mapping damaged,
//! so the read completes and the caller learns from [`Mapped::damaged`] that
//! the bytes it read are not the file's. A SIGBUS anywhere else gets the
//! default action, as before.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Mappings tracked at once; beyond this, a mapping is made unguarded (as if
/// this module did not exist) rather than refused.
const SLOTS: usize = 256;

struct Slot {
    /// Start address (0: free); written last when taking the slot.
    start: AtomicUsize,
    len: AtomicUsize,
    damaged: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    damaged: AtomicBool::new(false),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
static INSTALL: Once = Once::new();

/// A read-only mapping of a file's first `len` bytes.
pub struct Mapped {
    map: memmap2::Mmap,
    slot: Option<usize>,
}

impl Mapped {
    /// Map the first `len` bytes of `f` (`len` > 0).
    pub fn new(f: &File, len: u64) -> io::Result<Mapped> {
        Mapped::map(f, len, false)
    }

    /// Like `new`, with the page tables filled up front (for a file that is
    /// about to be read whole).
    pub fn populated(f: &File, len: u64) -> io::Result<Mapped> {
        Mapped::map(f, len, true)
    }

    fn map(f: &File, len: u64, populate: bool) -> io::Result<Mapped> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
        INSTALL.call_once(install_handler);
        let mut opts = memmap2::MmapOptions::new();
        opts.len(len);
        if populate {
            opts.populate();
        }
        // SAFETY: read-only; truncation by another process is what the
        // SIGBUS guard below turns into a damaged flag instead of a crash.
        let map = unsafe { opts.map(f)? };
        let slot = register(map.as_ptr() as usize, map.len());
        Ok(Mapped { map, slot })
    }

    /// True if some page could not be read (the file shrank while mapped)
    /// and reads saw zeros there instead.
    pub fn damaged(&self) -> bool {
        self.slot
            .is_some_and(|i| TABLE[i].damaged.load(Ordering::SeqCst))
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            // Free the slot before the mapping goes (a new mapping may reuse
            // the addresses; it registers after it exists).
            TABLE[i].start.store(0, Ordering::SeqCst);
        }
    }
}

fn register(start: usize, len: usize) -> Option<usize> {
    for (i, s) in TABLE.iter().enumerate() {
        // Claim a free slot with a placeholder start, fill it, then publish.
        if s.start
            .compare_exchange(0, usize::MAX, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            s.len.store(len, Ordering::SeqCst);
            s.damaged.store(false, Ordering::SeqCst);
            s.start.store(start, Ordering::SeqCst);
            return Some(i);
        }
    }
    None
}

fn install_handler() {
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

/// Async-signal-safe: atomics, `mmap` and `signal` only.
extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in TABLE.iter() {
        let start = s.start.load(Ordering::SeqCst);
        if start == 0 || start == usize::MAX {
            continue;
        }
        if addr >= start && addr - start < s.len.load(Ordering::SeqCst) {
            let page = page_size();
            let at = addr & !(page - 1);
            let r = unsafe {
                libc::mmap(
                    at as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                s.damaged.store(true, Ordering::SeqCst);
                return;
            }
            break;
        }
    }
    // Not ours (or no page could be put there): the default action, which
    // the fault repeating on return now triggers.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
}

fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let p = PAGE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    PAGE.store(p, Ordering::Relaxed);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn truncation_under_a_mapping_reads_zeros_and_is_reported() {
        let page = page_size();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 4 * page]).unwrap();
        let m = Mapped::new(&f, 4 * page as u64).unwrap();
        assert_eq!(m[3 * page], 7);
        assert!(!m.damaged());
        // Another writer cuts the file to one page.
        f.set_len(page as u64).unwrap();
        // Dropping the page cache copy makes the pages past the end unbacked.
        let sum: u64 = m.iter().map(|b| *b as u64).sum();
        assert_eq!(m[0], 7, "the first page is still the file's");
        assert!(m.damaged(), "reading past the new end is reported");
        assert_eq!(sum, 7 * page as u64, "pages past the end read as zeros");
        drop(m);
        // A fresh mapping of the same slot starts clean.
        let m2 = Mapped::new(&f, page as u64).unwrap();
        assert!(!m2.damaged());
    }
}
