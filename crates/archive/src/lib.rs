//! The archive of a two-way sync: the last state one replica agreed on with
//! the other, per path, kept on the replica's own host. It stores and
//! returns entries; it decides nothing (update detection and reconciliation
//! are in `accord-plan`).
//!
//! - **One file per side of a root pair.** Each host keeps the archive of
//!   its own root (its own inodes and change times), named from a digest of
//!   this root's identity followed by the other root's ([`pair_files`]). The
//!   order is this side's, not the command line's: `sync A B` and
//!   `sync B A` open the same two archives. When both roots are local, the
//!   two files lie side by side with a lock each; a caller that takes both
//!   should take them in one fixed order (say, by identity bytes) so that of
//!   two overlapping runs one gets both locks.
//! - **Locked.** [`Archive::open`] takes the pair's lock at once or fails
//!   with [`ArchiveError::Locked`] naming the other run's pid; the lock goes
//!   with the `Archive` and with the process.
//! - **Versioned.** A newer format is refused untouched
//!   ([`ArchiveError::NewerFormat`]); a damaged or foreign file is reported
//!   as [`ArchiveError::Damaged`], for the caller to treat as lost (the
//!   Unison paper: "as though the replicas had both been completely empty")
//!   and replace with [`Archive::recreate`]. Lost means lost on both sides:
//!   see [`Archive::was_created`].
//! - **Crash-safe.** Writes go through a [`Batch`], one SQLite transaction:
//!   a batch that is dropped, or a run that dies, leaves the archive as it
//!   was (see `schema::set_durability` for why `synchronous=FULL`). The
//!   caller records a path only after its propagation succeeded.
//! - **Bounded memory.** Entries are read in `RelPath` order a page at a
//!   time ([`Cursor`], [`Entries`]), the whole archive or one directory's
//!   subtree, never loaded whole; [`Archive::children`] reads one
//!   directory's entries, [`Archive::get`] one path's.
//!
//! Everything read back is validated: an archive is outside input.

mod codec;
mod error;
mod lock;
mod migrate;
mod schema;
mod versions;
mod xattr_scope;

pub use error::ArchiveError;
pub use schema::FORMAT_VERSION;
pub use versions::{VersionCounts, MAX_VERSION_COUNTS};

use accord_model::{Observed, RelPath};
use lock::{LockAttempt, PairLock};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Entries read from the file per query while streaming.
const PAGE_LEN: usize = 1024;

/// The files of one side of a root pair in a state directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairFiles {
    /// The SQLite database.
    pub archive: PathBuf,
    /// Held with flock(2) while a run uses the archive.
    pub lock: PathBuf,
    /// Where [`Archive::recreate`] moves a damaged archive, for inspection.
    pub set_aside: PathBuf,
}

/// The files of the archive that `this_root` keeps of its pair with
/// `other_root`, in `state_dir`.
///
/// The identities are the caller's bytes (say, host name, canonical path
/// and file system id of each root); the name is the first 128 bits of a
/// keyed BLAKE3 digest of both, each preceded by its length so that no two
/// pairs of identities hash the same bytes.
pub fn pair_files(state_dir: &Path, this_root: &[u8], other_root: &[u8]) -> PairFiles {
    let mut hasher = blake3::Hasher::new_derive_key("accord sync archive file name, version 1");
    for identity in [this_root, other_root] {
        hasher.update(&(identity.len() as u64).to_le_bytes());
        hasher.update(identity);
    }
    let digest = hasher.finalize();
    let stem: String = digest.as_bytes()[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    PairFiles {
        archive: state_dir.join(format!("archive-{stem}.sqlite")),
        lock: state_dir.join(format!("archive-{stem}.lock")),
        set_aside: state_dir.join(format!("archive-{stem}.damaged")),
    }
}

/// One side's archive of a root pair, open and locked.
pub struct Archive {
    // Declared before the lock, so dropped first: the connection closes
    // (and checkpoints its log) while the lock is still held.
    connection: Connection,
    file: PathBuf,
    created: bool,
    _lock: PairLock,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive").field("file", &self.file).finish()
    }
}

impl Archive {
    /// Open (creating if need be) the archive `this_root` keeps of its pair
    /// with `other_root`, in `state_dir` (created, mode 0700, if missing).
    pub fn open(
        state_dir: &Path,
        this_root: &[u8],
        other_root: &[u8],
    ) -> Result<Archive, ArchiveError> {
        let files = pair_files(state_dir, this_root, other_root);
        make_state_dir(state_dir)?;
        let lock = take_lock(&files.lock)?;
        open_locked(files.archive, lock, this_root, other_root)
    }

    /// Start afresh after [`ArchiveError::Damaged`]: under the lock, move
    /// the damaged file to [`PairFiles::set_aside`] (replacing an older one
    /// there), drop its log files, and open a new, empty archive.
    pub fn recreate(
        state_dir: &Path,
        this_root: &[u8],
        other_root: &[u8],
    ) -> Result<Archive, ArchiveError> {
        let files = pair_files(state_dir, this_root, other_root);
        make_state_dir(state_dir)?;
        let lock = take_lock(&files.lock)?;
        set_aside(&files)?;
        open_locked(files.archive, lock, this_root, other_root)
    }

    /// The database file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// This open made the archive: there was none (a first sync, or one
    /// deleted by hand) or only an empty file. When one side's archive is
    /// new and the other's is not, the two no longer describe one agreement
    /// and the caller must treat both as lost: a path deleted on the side
    /// that forgot it would otherwise look unchanged there, and never reach
    /// the other side.
    pub fn was_created(&self) -> bool {
        self.created
    }

    /// The entry recorded at `path`, if any.
    pub fn get(&self, path: &RelPath) -> Result<Option<Observed>, ArchiveError> {
        let sql = format!(
            "SELECT {} FROM entries WHERE key = ?1",
            codec::ENTRY_COLUMNS
        );
        let mut statement = self.prepare(&sql)?;
        let mut rows = statement
            .query([codec::key_of(path)])
            .map_err(|e| self.sqlite(e))?;
        match rows.next().map_err(|e| self.sqlite(e))? {
            Some(row) => self.decode(row).map(Some),
            None => Ok(None),
        }
    }

    /// How many entries are recorded.
    pub fn len(&self) -> Result<u64, ArchiveError> {
        let count: i64 = self
            .connection
            .query_row("SELECT count(*) FROM entries", [], |row| row.get(0))
            .map_err(|e| self.sqlite(e))?;
        Ok(count as u64)
    }

    pub fn is_empty(&self) -> Result<bool, ArchiveError> {
        Ok(self.len()? == 0)
    }

    /// Every entry, in `RelPath` order.
    pub fn entries(&self) -> Entries<'_> {
        Entries::new(self, Cursor::all())
    }

    /// Every entry strictly beneath `dir`, in `RelPath` order.
    pub fn subtree(&self, dir: &RelPath) -> Entries<'_> {
        Entries::new(self, Cursor::subtree(dir))
    }

    /// The entries directly in `dir`, in order: what a walk compares with
    /// one directory's listing. One index seek per child, skipping the
    /// subtrees between them, and memory for the listing only.
    pub fn children(&self, dir: &RelPath) -> Result<Vec<Observed>, ArchiveError> {
        let (subtree_lower, upper) = codec::subtree_bounds(dir);
        let child_prefix_len = subtree_lower.len();
        // Every child's key is the prefix and a name, whose first byte is
        // at least 0x01.
        let mut from = subtree_lower;
        from.push(1);
        let mut children = Vec::new();
        while let Some(found) = self.first_from(&from, &upper)? {
            let key = codec::key_of(&found.entry.path);
            // The key of the child that holds `found` (itself, or an
            // ancestor missing from the archive, when `found` is deeper).
            let child_len = key[child_prefix_len..]
                .iter()
                .position(|&byte| byte == 0)
                .map_or(key.len(), |at| child_prefix_len + at);
            from = key[..child_len].to_vec();
            from.push(1);
            if child_len == key.len() {
                children.push(found);
            }
        }
        Ok(children)
    }

    /// The first entry whose key is at least `from` and below `upper`.
    fn first_from(&self, from: &[u8], upper: &[u8]) -> Result<Option<Observed>, ArchiveError> {
        let sql = format!(
            "SELECT {} FROM entries WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT 1",
            codec::ENTRY_COLUMNS
        );
        let mut statement = self.prepare(&sql)?;
        let mut rows = statement
            .query(rusqlite::params![from, upper])
            .map_err(|e| self.sqlite(e))?;
        match rows.next().map_err(|e| self.sqlite(e))? {
            Some(row) => self.decode(row).map(Some),
            None => Ok(None),
        }
    }

    /// Start a batch of writes: one transaction, applied by
    /// [`Batch::commit`] and dropped whole otherwise.
    pub fn batch(&mut self) -> Result<Batch<'_>, ArchiveError> {
        let file = &self.file;
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| ArchiveError::from_sqlite(file, e))?;
        Ok(Batch {
            transaction,
            file,
            versions_digest: None,
        })
    }

    /// SQLite's own check of the file's structure (every page read once).
    /// Opening does not do it, to keep a run's cost to what it reads; a
    /// read that meets damage reports it anyway.
    pub fn check_integrity(&self) -> Result<(), ArchiveError> {
        let mut statement = self.prepare("PRAGMA quick_check")?;
        let problems: Vec<String> = statement
            .query_map([], |row| row.get(0))
            .and_then(|rows| rows.take(10).collect())
            .map_err(|e| self.sqlite(e))?;
        if problems.len() == 1 && problems[0] == "ok" {
            return Ok(());
        }
        Err(ArchiveError::damaged(&self.file, problems.join("; ")))
    }

    fn prepare(&self, sql: &str) -> Result<rusqlite::CachedStatement<'_>, ArchiveError> {
        self.connection
            .prepare_cached(sql)
            .map_err(|e| self.sqlite(e))
    }

    fn sqlite(&self, error: rusqlite::Error) -> ArchiveError {
        ArchiveError::from_sqlite(&self.file, error)
    }

    fn decode(&self, row: &rusqlite::Row<'_>) -> Result<Observed, ArchiveError> {
        codec::decode_row(row).map_err(|reason| ArchiveError::damaged(&self.file, reason))
    }
}

pub(crate) fn make_state_dir(state_dir: &Path) -> Result<(), ArchiveError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .map_err(|source| ArchiveError::Io {
            file: state_dir.to_path_buf(),
            source,
        })
}

pub(crate) fn take_lock(lock_file: &Path) -> Result<PairLock, ArchiveError> {
    let attempt = PairLock::try_take(lock_file).map_err(|source| ArchiveError::Io {
        file: lock_file.to_path_buf(),
        source,
    })?;
    match attempt {
        LockAttempt::Taken(lock) => Ok(lock),
        LockAttempt::Busy { holder } => Err(ArchiveError::Locked {
            lock_file: lock_file.to_path_buf(),
            holder,
        }),
    }
}

pub(crate) fn open_locked(
    file: PathBuf,
    lock: PairLock,
    this_root: &[u8],
    other_root: &[u8],
) -> Result<Archive, ArchiveError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let mut connection = Connection::open_with_flags(&file, flags)
        .map_err(|e| ArchiveError::from_sqlite(&file, e))?;
    let opened = schema::prepare(&mut connection, &file, this_root, other_root)?;
    check_no_hidden_keys(&connection, &file)?;
    Ok(Archive {
        connection,
        file,
        created: opened == schema::Opened::Created,
        _lock: lock,
    })
}

/// Every key lies where reads look: no key that is not a BLOB (SQLite
/// sorts them all below the empty BLOB, the root's key) and none at or above
/// the key above every path. Rows out there would be skipped by every read
/// instead of being reported; two index seeks find them.
fn check_no_hidden_keys(connection: &Connection, file: &Path) -> Result<(), ArchiveError> {
    let sql = "SELECT EXISTS (SELECT 1 FROM entries WHERE key < X'') \
               OR EXISTS (SELECT 1 FROM entries WHERE key >= ?1)";
    let hidden: bool = connection
        .query_row(sql, [codec::key_above_all()], |row| row.get(0))
        .map_err(|e| ArchiveError::from_sqlite(file, e))?;
    if hidden {
        return Err(ArchiveError::damaged(
            file,
            "it holds keys that are not paths",
        ));
    }
    Ok(())
}

/// Move a damaged archive aside and remove its log files: a log left beside
/// a new database must never be replayed into it.
pub(crate) fn set_aside(files: &PairFiles) -> Result<(), ArchiveError> {
    let moved = std::fs::rename(&files.archive, &files.set_aside);
    ignore_missing(moved, &files.archive)?;
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut log = files.archive.clone().into_os_string();
        log.push(suffix);
        let log = PathBuf::from(log);
        ignore_missing(std::fs::remove_file(&log), &log)?;
    }
    Ok(())
}

/// A file that is not there needs no moving or removing.
fn ignore_missing(result: std::io::Result<()>, file: &Path) -> Result<(), ArchiveError> {
    match result {
        Err(source) if source.kind() != std::io::ErrorKind::NotFound => Err(ArchiveError::Io {
            file: file.to_path_buf(),
            source,
        }),
        _ => Ok(()),
    }
}

/// A position in the archive's key order that reads a page of entries at a
/// time. It borrows nothing, so a caller can hold one across writes (each
/// page starts after the last key read, whatever was written meanwhile).
#[derive(Clone, Debug)]
pub struct Cursor {
    /// The last key read, or the lower bound before the first page.
    after: Vec<u8>,
    /// The first page includes `after` itself (the whole archive starts at
    /// the root's key, which nothing precedes).
    include_after: bool,
    /// Keys stop below this.
    upper: Vec<u8>,
    page: VecDeque<Observed>,
    exhausted: bool,
}

impl Cursor {
    /// Every entry, the root's first.
    pub fn all() -> Cursor {
        Cursor::new(Vec::new(), true, codec::key_above_all())
    }

    /// Every entry strictly beneath `dir`.
    pub fn subtree(dir: &RelPath) -> Cursor {
        let (lower, upper) = codec::subtree_bounds(dir);
        Cursor::new(lower, false, upper)
    }

    fn new(after: Vec<u8>, include_after: bool, upper: Vec<u8>) -> Cursor {
        Cursor {
            after,
            include_after,
            upper,
            page: VecDeque::new(),
            exhausted: false,
        }
    }

    /// The next entry in order (`None` at the end).
    pub fn next(&mut self, archive: &Archive) -> Result<Option<Observed>, ArchiveError> {
        if self.page.is_empty() && !self.exhausted {
            self.read_page(archive)?;
        }
        Ok(self.page.pop_front())
    }

    fn read_page(&mut self, archive: &Archive) -> Result<(), ArchiveError> {
        let comparison = if self.include_after { ">=" } else { ">" };
        let sql = format!(
            "SELECT {} FROM entries WHERE key {comparison} ?1 AND key < ?2 ORDER BY key LIMIT ?3",
            codec::ENTRY_COLUMNS
        );
        let mut statement = archive.prepare(&sql)?;
        let mut rows = statement
            .query(rusqlite::params![self.after, self.upper, PAGE_LEN as i64])
            .map_err(|e| archive.sqlite(e))?;
        let mut may_equal_after = self.include_after;
        while let Some(row) = rows.next().map_err(|e| archive.sqlite(e))? {
            let key = codec::row_key(row).map_err(|r| ArchiveError::damaged(&archive.file, r))?;
            // A damaged index could hand back keys out of order, and a
            // cursor that moved backwards might never end.
            let after = self.after.as_slice();
            let ahead = key > after || (may_equal_after && key == after);
            if !ahead || key >= self.upper.as_slice() {
                return Err(ArchiveError::damaged(
                    &archive.file,
                    "its entries are out of order",
                ));
            }
            let observed = codec::decode_keyed_row(row, key);
            let observed = observed.map_err(|r| ArchiveError::damaged(&archive.file, r))?;
            self.page.push_back(observed);
            may_equal_after = false;
            self.after.clear();
            self.after.extend_from_slice(key);
        }
        self.include_after = false;
        self.exhausted = self.page.len() < PAGE_LEN;
        Ok(())
    }
}

/// A [`Cursor`] over a borrowed archive, as an iterator. After an error it
/// yields that error once and then ends.
pub struct Entries<'a> {
    archive: &'a Archive,
    cursor: Cursor,
    failed: bool,
}

impl<'a> Entries<'a> {
    fn new(archive: &'a Archive, cursor: Cursor) -> Entries<'a> {
        Entries {
            archive,
            cursor,
            failed: false,
        }
    }
}

impl Iterator for Entries<'_> {
    type Item = Result<Observed, ArchiveError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = self.cursor.next(self.archive);
        self.failed = next.is_err();
        next.transpose()
    }
}

/// Writes that land together or not at all: one SQLite transaction, rolled
/// back when the batch is dropped without [`Batch::commit`].
pub struct Batch<'a> {
    transaction: rusqlite::Transaction<'a>,
    file: &'a Path,
    /// The digest of a set's versions as this batch leaves them, once a
    /// write changed them (`versions.rs`).
    versions_digest: Option<[u8; 32]>,
}

impl Batch<'_> {
    /// Record `observed` at its path (replacing what was recorded there).
    pub fn put(&mut self, observed: &Observed) -> Result<(), ArchiveError> {
        codec::check_entry(observed).map_err(|reason| ArchiveError::Unstorable {
            path: observed.entry.path.clone(),
            reason,
        })?;
        let sql = format!(
            "INSERT OR REPLACE INTO entries ({}) VALUES (?1, ?2)",
            codec::ENTRY_COLUMNS
        );
        let mut statement = self.prepare(&sql)?;
        statement
            .execute(rusqlite::params![
                codec::key_of(&observed.entry.path),
                codec::encode_entry(observed),
            ])
            .map_err(|e| self.sqlite(e))?;
        Ok(())
    }

    /// Forget the entry at `path` (its subtree stays; see
    /// [`Batch::remove_subtree`]).
    pub fn remove(&mut self, path: &RelPath) -> Result<(), ArchiveError> {
        let mut statement = self.prepare("DELETE FROM entries WHERE key = ?1")?;
        statement
            .execute([codec::key_of(path)])
            .map_err(|e| self.sqlite(e))?;
        Ok(())
    }

    /// Forget every entry strictly beneath `dir`.
    pub fn remove_subtree(&mut self, dir: &RelPath) -> Result<(), ArchiveError> {
        let (lower, upper) = codec::subtree_bounds(dir);
        let mut statement = self.prepare("DELETE FROM entries WHERE key > ?1 AND key < ?2")?;
        statement
            .execute([lower, upper])
            .map_err(|e| self.sqlite(e))?;
        Ok(())
    }

    /// Apply every write of the batch at once, durably.
    pub fn commit(mut self) -> Result<(), ArchiveError> {
        self.store_versions_digest()?;
        let file = self.file;
        self.transaction
            .commit()
            .map_err(|e| ArchiveError::from_sqlite(file, e))
    }

    fn prepare(&self, sql: &str) -> Result<rusqlite::CachedStatement<'_>, ArchiveError> {
        self.transaction
            .prepare_cached(sql)
            .map_err(|e| self.sqlite(e))
    }

    fn sqlite(&self, error: rusqlite::Error) -> ArchiveError {
        ArchiveError::from_sqlite(self.file, error)
    }
}
