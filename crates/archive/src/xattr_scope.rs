//! Which extended attributes an archive's lists were read under.
//!
//! A side records each entry with the list of extended attributes (and
//! ACLs) that its run's options select, and a later run takes a recorded
//! list instead of reading the file's again where the entry's change time
//! vouches for it. That is only sound when the later run selects the same
//! attributes: a list read without `user.*` (`--no-xattrs`) is empty for
//! a file that has some. So the archive keeps the selection its lists were
//! read under (the side's bytes, in `meta`); a run with another selection
//! forgets every recorded list first ([`Archive::set_xattr_scope`]), so
//! that each is read again and, where it holds attributes, compared as a
//! list read for the first time (the plan's detection), in agreement with
//! the other side or as a conflict, never taken as unchanged unseen.

use crate::{codec, Archive, ArchiveError};
use rusqlite::OptionalExtension;

/// Where the selection is kept in `meta`.
const XATTR_SCOPE: &str = "xattr_scope";

/// Longest selection kept (the side's bytes are a few).
const MAX_XATTR_SCOPE: usize = 64;

impl Archive {
    /// The selection the recorded lists were read under; `None` where none
    /// is recorded (an archive written before selections were kept, whose
    /// lists may have been read under any).
    pub fn xattr_scope(&self) -> Result<Option<Vec<u8>>, ArchiveError> {
        let scope: Option<Vec<u8>> = self
            .connection
            .query_row(
                "SELECT value FROM meta WHERE name = ?1",
                [XATTR_SCOPE],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.sqlite(e))?;
        match scope {
            Some(bytes) if bytes.len() > MAX_XATTR_SCOPE => Err(ArchiveError::damaged(
                &self.file,
                format!("its {XATTR_SCOPE} holds {} bytes", bytes.len()),
            )),
            scope => Ok(scope),
        }
    }

    /// Record that lists are read under `scope` from now on. Where the
    /// archive holds another selection, or none while it holds entries,
    /// every recorded list is forgotten first (kept as unknown), in the
    /// same transaction. Returns how many entries lost their list.
    pub fn set_xattr_scope(&mut self, scope: &[u8]) -> Result<u64, ArchiveError> {
        assert!(scope.len() <= MAX_XATTR_SCOPE, "a selection of a few bytes");
        if self.xattr_scope()?.as_deref() == Some(scope) {
            return Ok(0);
        }
        let file = self.file.clone();
        let sqlite = |e| ArchiveError::from_sqlite(&file, e);
        let damaged = |reason| ArchiveError::damaged(&file, reason);
        let transaction = self.connection.transaction().map_err(sqlite)?;
        let mut forgotten = 0;
        {
            let mut read = transaction
                .prepare("SELECT key, entry FROM entries")
                .map_err(sqlite)?;
            let mut write = transaction
                .prepare("UPDATE entries SET entry = ?2 WHERE key = ?1")
                .map_err(sqlite)?;
            let mut rows = read.query([]).map_err(sqlite)?;
            while let Some(row) = rows.next().map_err(sqlite)? {
                let key = codec::row_key(row).map_err(damaged)?;
                let mut observed = codec::decode_keyed_row(row, key).map_err(damaged)?;
                if observed.entry.props.xattrs.take().is_none() {
                    continue;
                }
                write
                    .execute(rusqlite::params![key, codec::encode_entry(&observed)])
                    .map_err(sqlite)?;
                forgotten += 1;
            }
            transaction
                .execute(
                    "INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)",
                    rusqlite::params![XATTR_SCOPE, scope],
                )
                .map_err(sqlite)?;
        }
        transaction.commit().map_err(sqlite)?;
        Ok(forgotten)
    }
}

#[cfg(test)]
mod tests {
    use crate::Archive;
    use accord_model::{Entry, Kind, Observed, Props, RelPath, Time};

    fn observed(path: &str, xattrs: Option<Vec<(Vec<u8>, Vec<u8>)>>) -> Observed {
        Observed {
            entry: Entry {
                path: RelPath::new(path.as_bytes()).unwrap(),
                kind: Kind::File,
                size: 1,
                props: Props {
                    mode: 0o644,
                    xattrs,
                    ..Props::default()
                },
                dev: 1,
                ino: 2,
                nlink: 1,
                rdev: 0,
                blocks: 0,
                link_target: None,
                hash: Some([7; 32]),
            },
            ctime: Time { sec: 5, nsec: 6 },
        }
    }

    #[test]
    fn another_selection_forgets_every_recorded_list() {
        let dir = tempfile::tempdir().unwrap();
        let mut archive = Archive::open(dir.path(), b"this", b"other").unwrap();
        assert_eq!(archive.xattr_scope().unwrap(), None);
        let with = observed("f", Some(vec![(b"user.k".to_vec(), b"1".to_vec())]));
        let empty = observed("g", Some(Vec::new()));
        let unread = observed("h", None);
        let mut batch = archive.batch().unwrap();
        for one in [&with, &empty, &unread] {
            batch.put(one).unwrap();
        }
        batch.commit().unwrap();
        // No selection recorded: the lists may have been read under any.
        assert_eq!(archive.set_xattr_scope(b"acls").unwrap(), 2);
        assert_eq!(
            archive.xattr_scope().unwrap().as_deref(),
            Some(&b"acls"[..])
        );
        for name in ["f", "g", "h"] {
            let got = archive.get(&RelPath::new(name.as_bytes()).unwrap());
            let got = got.unwrap().expect("kept");
            assert_eq!(got.entry.props.xattrs, None, "{name}");
            assert_eq!(got.ctime, with.ctime, "only the list is forgotten");
        }
        // The same selection again: nothing is forgotten.
        let mut batch = archive.batch().unwrap();
        batch.put(&with).unwrap();
        batch.commit().unwrap();
        assert_eq!(archive.set_xattr_scope(b"acls").unwrap(), 0);
        let f = archive.get(&with.entry.path).unwrap().unwrap();
        assert_eq!(f.entry.props.xattrs, with.entry.props.xattrs);
        assert_eq!(archive.set_xattr_scope(b"acls+user").unwrap(), 1);
    }
}
