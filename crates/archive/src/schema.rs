//! The archive file's layout, its version, and the checks made on open.
//!
//! The file says what it is in SQLite's header: `application_id` marks it as
//! an Accord archive, `user_version` is its format version. Both are read
//! before anything is written, so a newer archive is refused untouched.

use crate::error::ArchiveError;
use crate::migrate;
use rusqlite::{Connection, OptionalExtension};
use std::path::Path;

/// The format this code reads and writes. Bump it with any change of the
/// tables below or of how a column is encoded, and migrate the format
/// before it on open (`migrate.rs`).
///
/// Format 2 keeps an entry in one blob (`codec::encode_entry`); format 1
/// kept a column per field, which made reading the archive a third of a
/// no-change scan's time.
pub const FORMAT_VERSION: i64 = 2;

/// "ACar": SQLite's header field that names the program owning the file.
pub(crate) const APPLICATION_ID: i64 = 0x4143_6172;

/// One row per path this replica agreed on. WITHOUT ROWID: the rows live in
/// the primary key's b-tree, so a scan in key order (which is `RelPath`
/// order, see `codec::key_of`) reads them in place.
pub(crate) const CREATE_ENTRIES: &str =
    "CREATE TABLE entries (key BLOB PRIMARY KEY NOT NULL, entry BLOB NOT NULL) WITHOUT ROWID";

/// The pair this archive belongs to: `this_root` and `other_root`.
pub(crate) const CREATE_META: &str =
    "CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL) WITHOUT ROWID";

/// Whether [`prepare`] found an archive or made one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    Existing,
    Created,
}

/// Ready a connection: refuse what is not ours or is newer, create the
/// tables in a new file, check them in an old one.
pub(crate) fn prepare(
    connection: &mut Connection,
    file: &Path,
    this_root: &[u8],
    other_root: &[u8],
) -> Result<Opened, ArchiveError> {
    let sqlite = |error| ArchiveError::from_sqlite(file, error);
    // A crafted archive must not run SQL functions through views or
    // triggers it brings along.
    connection
        .execute_batch("PRAGMA trusted_schema = OFF")
        .map_err(sqlite)?;
    let header = read_header(connection).map_err(sqlite)?;
    if header.is_new() {
        set_durability(connection).map_err(sqlite)?;
        create(connection, this_root, other_root).map_err(sqlite)?;
        return Ok(Opened::Created);
    }
    // Only reads until the file is known to be ours and whole: a refused
    // file is left exactly as it was found.
    check_header(&header, file)?;
    let format_1 = header.user_version == migrate::FORMAT_1;
    let entries = match format_1 {
        true => migrate::CREATE_ENTRIES_1,
        false => CREATE_ENTRIES,
    };
    check_tables(connection, file, entries)?;
    check_roots(connection, file, this_root, other_root)?;
    set_durability(connection).map_err(sqlite)?;
    if format_1 {
        migrate::from_format_1(connection, file)?;
    }
    Ok(Opened::Existing)
}

struct Header {
    application_id: i64,
    user_version: i64,
    pages: i64,
}

impl Header {
    /// A file without a page: just made, or made by a run that died before
    /// the first commit (which writes the tables and the header at once).
    /// Anything else that is not marked as ours is refused, never made anew.
    fn is_new(&self) -> bool {
        self.pages == 0
    }
}

fn read_header(connection: &Connection) -> rusqlite::Result<Header> {
    Ok(Header {
        application_id: connection.query_row("PRAGMA application_id", [], |row| row.get(0))?,
        user_version: connection.query_row("PRAGMA user_version", [], |row| row.get(0))?,
        pages: connection.query_row("PRAGMA page_count", [], |row| row.get(0))?,
    })
}

fn check_header(header: &Header, file: &Path) -> Result<(), ArchiveError> {
    if header.application_id != APPLICATION_ID {
        return Err(ArchiveError::damaged(
            file,
            format!(
                "not an Accord archive (application id {:#x})",
                header.application_id
            ),
        ));
    }
    if header.user_version > FORMAT_VERSION {
        return Err(ArchiveError::NewerFormat {
            file: file.to_path_buf(),
            found: header.user_version,
            supported: FORMAT_VERSION,
        });
    }
    if header.user_version != FORMAT_VERSION && header.user_version != migrate::FORMAT_1 {
        return Err(ArchiveError::damaged(
            file,
            format!(
                "format version {} is not one Accord wrote",
                header.user_version
            ),
        ));
    }
    Ok(())
}

/// Write-ahead log with `synchronous=FULL`.
///
/// Both WAL modes make a commit atomic: a crash (of the process or of the
/// machine) leaves the archive as it was before the transaction or after
/// it, never half-written. They differ in durability: with NORMAL the last
/// commits may be undone by a power failure while the user files they
/// describe, already fsynced by the engine, stay. The Unison paper shows
/// such a lagging archive loses no data (both sides then look changed to
/// the same contents, which agree), but a file then edited on one side
/// before the next run would look changed on both and be a false conflict.
/// FULL syncs the log at each commit, so once `Batch::commit` returns, the
/// archive says what the replicas hold; the cost is one fsync per batch.
fn set_durability(connection: &Connection) -> rusqlite::Result<()> {
    // A run holds the pair's own lock file while the archive is open, so
    // SQLite's per-statement file locks guard nothing more and cost five
    // fcntl calls a query; held once (and a WAL index in memory instead of
    // a shared-memory file), they cost nothing.
    let _mode: String =
        connection.query_row("PRAGMA locking_mode = EXCLUSIVE", [], |row| row.get(0))?;
    // The pragma answers with the mode it set; a file system that cannot
    // hold a WAL keeps the rollback journal, as atomic and as durable under
    // FULL.
    let _mode: String = connection.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    // Check each page's cells as it is read: a damaged page is reported as
    // damage instead of being read as entries.
    connection.execute_batch("PRAGMA synchronous = FULL; PRAGMA cell_size_check = ON")
}

/// Make the tables and mark the file, in one transaction: a run that dies
/// here leaves an empty file, which the next open makes again.
fn create(
    connection: &mut Connection,
    this_root: &[u8],
    other_root: &[u8],
) -> rusqlite::Result<()> {
    let transaction = connection.transaction()?;
    transaction.execute_batch(CREATE_ENTRIES)?;
    transaction.execute_batch(CREATE_META)?;
    transaction.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {FORMAT_VERSION}"
    ))?;
    let insert = "INSERT INTO meta (name, value) VALUES (?1, ?2)";
    transaction.execute(insert, rusqlite::params!["this_root", this_root])?;
    transaction.execute(insert, rusqlite::params!["other_root", other_root])?;
    transaction.commit()
}

/// Exactly our two tables, as we made them: an archive that gained an
/// index, a view or a trigger, or whose tables differ, is not one we wrote.
fn check_tables(connection: &Connection, file: &Path, entries: &str) -> Result<(), ArchiveError> {
    let sqlite = |error| ArchiveError::from_sqlite(file, error);
    let mut statement = connection
        .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY name")
        .map_err(sqlite)?;
    let mut found: Vec<(String, String, Option<String>)> = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(|error| ArchiveError::damaged(file, format!("its schema: {error}")))?;
    // SQLite's own index of a primary key (no SQL text) may be listed.
    found.retain(|(kind, _, sql)| !(kind == "index" && sql.is_none()));
    // A set's archive (more than two replicas) has a table of versions
    // too (`versions.rs`); a pair's has none.
    let mut expected = vec![
        ("table", "entries", entries),
        ("table", "meta", CREATE_META),
    ];
    if found.iter().any(|(_, name, _)| name == "versions") {
        expected.push(("table", "versions", crate::versions::CREATE_VERSIONS));
    }
    let matches = found.len() == expected.len()
        && found.iter().zip(expected).all(|(got, want)| {
            got.0 == want.0 && got.1 == want.1 && got.2.as_deref() == Some(want.2)
        });
    if !matches {
        return Err(ArchiveError::damaged(
            file,
            "its tables are not the ones Accord makes",
        ));
    }
    Ok(())
}

/// The roots recorded at creation are the ones asked for: the file name is
/// a digest of them, so a mismatch means a copied or crafted file.
fn check_roots(
    connection: &Connection,
    file: &Path,
    this_root: &[u8],
    other_root: &[u8],
) -> Result<(), ArchiveError> {
    for (name, want) in [("this_root", this_root), ("other_root", other_root)] {
        let got: Option<Vec<u8>> = connection
            .query_row("SELECT value FROM meta WHERE name = ?1", [name], |row| {
                row.get(0)
            })
            .optional()
            .map_err(|error| ArchiveError::damaged(file, format!("its {name}: {error}")))?;
        if got.as_deref() != Some(want) {
            return Err(ArchiveError::damaged(
                file,
                format!("it records another {name} than this pair's"),
            ));
        }
    }
    Ok(())
}
