//! Archives of format 1, which kept each field of an entry in a column of
//! its own, brought to the current format on open: every row read back as
//! format 1 wrote it (checked as any read is) and written again as one
//! blob, in one transaction, so a run that dies midway leaves the file as
//! it was and the next run migrates it again.

use crate::codec::{check_entry, decode_xattrs, key_of, kind_of_code, path_of, read_blob, row_key};
use crate::error::ArchiveError;
use accord_model::{Entry, Fingerprint, Observed, Props, Time, MAX_PATH_LEN};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, Row, TransactionBehavior};
use std::path::Path;

/// The format this module reads.
pub(crate) const FORMAT_1: i64 = 1;

/// Format 1's table of entries, as format 1 made it.
pub(crate) const CREATE_ENTRIES_1: &str = "CREATE TABLE entries (\
key BLOB PRIMARY KEY NOT NULL, kind INTEGER NOT NULL, size INTEGER NOT NULL, \
mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL, \
mtime_s INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, \
ctime_s INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, \
dev INTEGER NOT NULL, ino INTEGER NOT NULL, nlink INTEGER NOT NULL, \
rdev INTEGER NOT NULL, blocks INTEGER NOT NULL, \
link_target BLOB, fingerprint BLOB, xattrs BLOB) WITHOUT ROWID";

/// Format 1's columns, in the order `decode_row_1` reads them.
const COLUMNS_1: &str = "key, kind, size, mode, uid, gid, mtime_s, mtime_ns, \
     ctime_s, ctime_ns, dev, ino, nlink, rdev, blocks, link_target, fingerprint, xattrs";

/// Rewrite a format 1 archive (tables and roots already checked) in the
/// current format. A row format 1 could not have written is damage, and
/// the file is left as it was.
pub(crate) fn from_format_1(connection: &mut Connection, file: &Path) -> Result<(), ArchiveError> {
    let sqlite = |error| ArchiveError::from_sqlite(file, error);
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite)?;
    // The new table is made from its own text (the open checks compare it),
    // so the old one moves aside first.
    transaction
        .execute_batch("ALTER TABLE entries RENAME TO entries_1")
        .and_then(|()| transaction.execute_batch(crate::schema::CREATE_ENTRIES))
        .map_err(sqlite)?;
    {
        let mut select = transaction
            .prepare(&format!("SELECT {COLUMNS_1} FROM entries_1"))
            .map_err(sqlite)?;
        let mut insert = transaction
            .prepare("INSERT INTO entries (key, entry) VALUES (?1, ?2)")
            .map_err(sqlite)?;
        let mut rows = select.query([]).map_err(sqlite)?;
        while let Some(row) = rows.next().map_err(sqlite)? {
            let observed =
                decode_row_1(row).map_err(|reason| ArchiveError::damaged(file, reason))?;
            let entry = crate::codec::encode_entry(&observed);
            insert
                .execute(rusqlite::params![key_of(&observed.entry.path), entry])
                .map_err(sqlite)?;
        }
    }
    transaction
        .execute_batch(&format!(
            "DROP TABLE entries_1; PRAGMA user_version = {}",
            crate::schema::FORMAT_VERSION
        ))
        .map_err(sqlite)?;
    transaction.commit().map_err(sqlite)?;
    // Format 1's pages are free now, as many as the entries take again:
    // given back to the file system once. A failure leaves the file whole
    // and migrated, only larger, so it is no reason to stop the run.
    let _ = connection.execute_batch("VACUUM");
    Ok(())
}

fn read_u64(row: &Row<'_>, column: usize) -> Result<u64, String> {
    Ok(read_i64(row, column)? as u64)
}

fn read_i64(row: &Row<'_>, column: usize) -> Result<i64, String> {
    match row.get_ref(column) {
        Ok(ValueRef::Integer(value)) => Ok(value),
        Ok(other) => Err(format!(
            "column {column} holds {} where an integer belongs",
            other.data_type()
        )),
        Err(error) => Err(error.to_string()),
    }
}

fn read_u32(row: &Row<'_>, column: usize, max: u32) -> Result<u32, String> {
    let value = read_i64(row, column)?;
    u32::try_from(value)
        .ok()
        .filter(|value| *value <= max)
        .ok_or_else(|| format!("column {column} holds {value}, out of range"))
}

fn read_time(row: &Row<'_>, seconds_column: usize) -> Result<Time, String> {
    let sec = read_i64(row, seconds_column)?;
    let nsec = read_u32(row, seconds_column + 1, 999_999_999)?;
    Ok(Time { sec, nsec })
}

fn read_fingerprint(row: &Row<'_>, column: usize) -> Result<Option<Fingerprint>, String> {
    match read_blob(row, column)? {
        None => Ok(None),
        Some(bytes) => Fingerprint::try_from(bytes)
            .map(Some)
            .map_err(|_| format!("a fingerprint of {} bytes", bytes.len())),
    }
}

fn read_link_target(row: &Row<'_>, column: usize) -> Result<Option<Vec<u8>>, String> {
    match read_blob(row, column)? {
        Some(bytes) if bytes.len() > MAX_PATH_LEN => {
            Err(format!("a link target of {} bytes", bytes.len()))
        }
        other => Ok(other.map(<[u8]>::to_vec)),
    }
}

/// One row of format 1 (columns in `COLUMNS_1` order) back to an entry,
/// checked.
fn decode_row_1(row: &Row<'_>) -> Result<Observed, String> {
    let path = path_of(row_key(row)?)?;
    let observed = Observed {
        entry: Entry {
            kind: kind_of_code(read_i64(row, 1)?)?,
            size: read_u64(row, 2)?,
            props: read_props(row)?,
            dev: read_u64(row, 10)?,
            ino: read_u64(row, 11)?,
            nlink: read_u64(row, 12)?,
            rdev: read_u64(row, 13)?,
            blocks: read_u64(row, 14)?,
            link_target: read_link_target(row, 15)?,
            hash: read_fingerprint(row, 16)?,
            path,
        },
        ctime: read_time(row, 8)?,
    };
    check_entry(&observed).map_err(|reason| format!("{}: {reason}", observed.entry.path))?;
    Ok(observed)
}

fn read_props(row: &Row<'_>) -> Result<Props, String> {
    Ok(Props {
        mode: read_u32(row, 3, 0o7777)?,
        uid: read_u32(row, 4, u32::MAX)?,
        gid: read_u32(row, 5, u32::MAX)?,
        mtime: read_time(row, 6)?,
        xattrs: read_blob(row, 17)?.map(decode_xattrs).transpose()?,
    })
}
