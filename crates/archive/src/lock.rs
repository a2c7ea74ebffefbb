//! The lock that keeps two runs off one archive: flock(2) on a lock file
//! beside it, held for as long as the [`crate::Archive`] lives.
//!
//! A file of its own rather than the database: SQLite takes POSIX record
//! locks on its database file, and where flock is emulated with record locks
//! (NFS) the two would meet on one file. The kernel releases a flock when the
//! last descriptor of its open file closes, so a run that dies, even by
//! SIGKILL, leaves no stale lock behind. The lock file itself is never
//! removed: a run that removed it could let a second run lock a fresh file
//! while a third still held the old one.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A held lock; dropping it releases it.
#[derive(Debug)]
pub(crate) struct PairLock {
    _file: File,
}

/// What trying to take the lock found.
pub(crate) enum LockAttempt {
    Taken(PairLock),
    /// Another process holds it; `holder` is the process id it wrote, when
    /// it could be read.
    Busy {
        holder: Option<u32>,
    },
}

/// Longest process id text read back from a lock file.
const PID_TEXT_MAX: u64 = 32;

impl PairLock {
    /// Take the lock at once or say who holds it; never waits.
    pub(crate) fn try_take(lock_file: &Path) -> io::Result<LockAttempt> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(lock_file)?;
        if !try_flock(&file)? {
            return Ok(LockAttempt::Busy {
                holder: read_holder(&mut file),
            });
        }
        write_holder(&mut file)?;
        Ok(LockAttempt::Taken(PairLock { _file: file }))
    }
}

fn try_flock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor we own for the duration of the call; no
    // memory is shared with the kernel.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

/// The holder's process id, so the refused run can name it. Only what the
/// message needs: a holder caught between truncating and writing shows as
/// unknown.
fn read_holder(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(PID_TEXT_MAX).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

fn write_holder(file: &mut File) -> io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    writeln!(file, "{}", std::process::id())
}
