//! Entries to and from the archive's rows. An archive is outside input (a
//! file anyone with the user's rights can edit, a disk can damage), so every
//! value read back is checked: the path through `RelPath::new`, each number
//! against its range, each code against the known ones, each length against
//! its bound before anything is allocated for it.

use accord_model::{Entry, Fingerprint, Kind, Observed, Props, RelPath, Time, Xattr, MAX_PATH_LEN};
use rusqlite::types::ValueRef;
use rusqlite::Row;

/// Most extended attributes one entry may record.
pub(crate) const MAX_XATTRS: usize = 4096;
/// Longest extended attribute name (Linux XATTR_NAME_MAX).
pub(crate) const MAX_XATTR_NAME: usize = 255;
/// Longest extended attribute value (Linux XATTR_SIZE_MAX).
pub(crate) const MAX_XATTR_VALUE: usize = 64 * 1024;
/// Largest encoded attribute list of one entry; above what Linux lets one
/// file hold on any file system we know, so only a damaged row reaches it.
pub(crate) const MAX_XATTRS_BYTES: usize = 8 << 20;

/// The columns of a row, in the order `ENTRY_COLUMNS` names them.
pub(crate) const ENTRY_COLUMNS: &str = "key, kind, size, mode, uid, gid, mtime_s, mtime_ns, \
     ctime_s, ctime_ns, dev, ino, nlink, rdev, blocks, link_target, fingerprint, xattrs";

/// The sort key of a path: its bytes with each '/' stored as 0x00.
///
/// `RelPath` orders by component: the separator sorts below every byte a
/// name may hold, and a path before every longer path it begins. Names hold
/// no NUL, so 0x00 in the separator's place keeps both rules under a plain
/// byte comparison, which is how SQLite orders BLOBs (memcmp, the shorter
/// first on a tie). The archive's primary key index is then in `RelPath`
/// order, and a directory's subtree is one key range.
pub(crate) fn key_of(path: &RelPath) -> Vec<u8> {
    path.as_bytes()
        .iter()
        .map(|&byte| if byte == b'/' { 0 } else { byte })
        .collect()
}

/// The path a stored key names, validated.
pub(crate) fn path_of(key: &[u8]) -> Result<RelPath, String> {
    if key.contains(&b'/') {
        return Err("a stored path holds '/' where its separators are 0x00".into());
    }
    RelPath::with_separator(key, 0).map_err(|error| format!("a stored path is invalid ({error})"))
}

/// A key above every key: longer than any first component (a name has at
/// most 255 bytes) and made of the highest byte, so any key differs from it
/// at a lower byte, or ends or meets a separator before it does.
pub(crate) fn key_above_all() -> Vec<u8> {
    vec![0xff; accord_model::MAX_NAME_LEN + 1]
}

/// The keys strictly beneath `dir`: greater than the first bound and less
/// than the second.
pub(crate) fn subtree_bounds(dir: &RelPath) -> (Vec<u8>, Vec<u8>) {
    if dir.is_root() {
        return (Vec::new(), key_above_all());
    }
    let mut lower = key_of(dir);
    let mut upper = lower.clone();
    lower.push(0);
    upper.push(1);
    (lower, upper)
}

pub(crate) fn kind_code(kind: Kind) -> i64 {
    match kind {
        Kind::File => 1,
        Kind::Dir => 2,
        Kind::Symlink => 3,
        Kind::Fifo => 4,
        Kind::Socket => 5,
        Kind::CharDev => 6,
        Kind::BlockDev => 7,
    }
}

fn kind_of_code(code: i64) -> Result<Kind, String> {
    Ok(match code {
        1 => Kind::File,
        2 => Kind::Dir,
        3 => Kind::Symlink,
        4 => Kind::Fifo,
        5 => Kind::Socket,
        6 => Kind::CharDev,
        7 => Kind::BlockDev,
        _ => return Err(format!("unknown kind code {code}")),
    })
}

/// The bounds every stored entry keeps, checked before a write and after a
/// read, so that an entry that was stored can always be read back.
pub(crate) fn check_entry(observed: &Observed) -> Result<(), String> {
    let entry = &observed.entry;
    if entry.props.mode & !0o7777 != 0 {
        return Err(format!(
            "mode {:o} has bits beyond 0o7777",
            entry.props.mode
        ));
    }
    check_time("mtime", entry.props.mtime)?;
    check_time("ctime", observed.ctime)?;
    check_link_target(entry)?;
    if (entry.kind == Kind::File) != entry.hash.is_some() {
        return Err("a regular file is recorded with its fingerprint, nothing else is".into());
    }
    if let Some(xattrs) = &entry.props.xattrs {
        check_xattrs(xattrs)?;
    }
    Ok(())
}

fn check_time(what: &str, time: Time) -> Result<(), String> {
    if time.nsec >= 1_000_000_000 {
        return Err(format!("{what} has {} nanoseconds", time.nsec));
    }
    Ok(())
}

fn check_link_target(entry: &Entry) -> Result<(), String> {
    match (&entry.link_target, entry.kind) {
        // A file or directory seen through a link a sync follows keeps
        // the link's target: the archive says what the path was seen as.
        (Some(target), Kind::Symlink | Kind::File | Kind::Dir) => {
            if target.is_empty() || target.len() > MAX_PATH_LEN || target.contains(&0) {
                return Err("a link target is empty, too long or holds a NUL".into());
            }
            Ok(())
        }
        (None, Kind::Symlink) => Err("a symlink is recorded without its target".into()),
        (Some(_), _) => {
            Err("only a symlink, or what a followed one leads to, has a link target".into())
        }
        (None, _) => Ok(()),
    }
}

fn check_xattrs(xattrs: &[Xattr]) -> Result<(), String> {
    if xattrs.len() > MAX_XATTRS {
        return Err(format!("{} extended attributes", xattrs.len()));
    }
    let mut encoded_len = 4;
    for (name, value) in xattrs {
        if name.is_empty() || name.len() > MAX_XATTR_NAME || value.len() > MAX_XATTR_VALUE {
            return Err("an extended attribute name or value is out of bounds".into());
        }
        encoded_len += 2 + name.len() + 4 + value.len();
    }
    if encoded_len > MAX_XATTRS_BYTES {
        return Err(format!("{encoded_len} bytes of extended attributes"));
    }
    if xattrs.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
        return Err("extended attributes are not sorted by name, or a name repeats".into());
    }
    Ok(())
}

/// Extended attributes as one blob: a u32 count, then per attribute a u16
/// name length, the name, a u32 value length, the value (little-endian).
pub(crate) fn encode_xattrs(xattrs: &[Xattr]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(xattrs.len() as u32).to_le_bytes());
    for (name, value) in xattrs {
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// The inverse of [`encode_xattrs`]; every length is checked against the
/// bytes present and its bound before it is used.
pub(crate) fn decode_xattrs(blob: &[u8]) -> Result<Vec<Xattr>, String> {
    if blob.len() > MAX_XATTRS_BYTES {
        return Err(format!("{} bytes of extended attributes", blob.len()));
    }
    let mut reader = Reader { rest: blob };
    let count = reader.u32()? as usize;
    if count > MAX_XATTRS {
        return Err(format!("{count} extended attributes"));
    }
    let mut xattrs = Vec::with_capacity(count);
    for _ in 0..count {
        let name_len = reader.u16()? as usize;
        let name = reader.bytes(name_len)?.to_vec();
        let value_len = reader.u32()? as usize;
        let value = reader.bytes(value_len)?.to_vec();
        xattrs.push((name, value));
    }
    if !reader.rest.is_empty() {
        return Err("bytes after the last extended attribute".into());
    }
    check_xattrs(&xattrs)?;
    Ok(xattrs)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, len: usize) -> Result<&'a [u8], String> {
        if len > self.rest.len() {
            return Err("extended attributes cut short".into());
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into().unwrap()))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap()))
    }
}

/// A stored u64 (inode, device, size, ...): SQLite integers are signed, so
/// the bits are kept as they are and read back the same way; every i64 is
/// some u64, so there is nothing to check.
pub(crate) fn stored_u64(value: u64) -> i64 {
    value as i64
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

fn read_blob<'r>(row: &'r Row<'_>, column: usize) -> Result<Option<&'r [u8]>, String> {
    match row.get_ref(column) {
        Ok(ValueRef::Null) => Ok(None),
        Ok(ValueRef::Blob(bytes)) => Ok(Some(bytes)),
        Ok(other) => Err(format!(
            "column {column} holds {} where a blob belongs",
            other.data_type()
        )),
        Err(error) => Err(error.to_string()),
    }
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

/// One row (columns in `ENTRY_COLUMNS` order) back to an entry, checked.
pub(crate) fn decode_row(row: &Row<'_>) -> Result<Observed, String> {
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

/// The key of a row (columns in `ENTRY_COLUMNS` order), unchecked.
pub(crate) fn row_key<'r>(row: &'r Row<'_>) -> Result<&'r [u8], String> {
    read_blob(row, 0)?.ok_or_else(|| "a row without a path".to_string())
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Paths from names that meet every ordering trap: bytes just above and
    /// below '/', the lowest and highest name bytes, prefixes of each other.
    fn awkward_path() -> impl Strategy<Value = RelPath> {
        let name = prop::collection::vec(prop::sample::select(b"a-.0\x01\x7f\xff".to_vec()), 1..4);
        prop::collection::vec(name, 0..4)
            .prop_filter_map("not a path", |names| RelPath::new(&names.join(&b'/')).ok())
    }

    fn xattr_list() -> impl Strategy<Value = Vec<Xattr>> {
        let entry = (
            prop::collection::vec(any::<u8>(), 1..8),
            prop::collection::vec(any::<u8>(), 0..16),
        );
        prop::collection::btree_map(entry.0, entry.1, 0..6)
            .prop_map(|sorted| sorted.into_iter().collect())
    }

    proptest! {
        #[test]
        fn key_order_is_relpath_order(x in awkward_path(), y in awkward_path()) {
            prop_assert_eq!(key_of(&x).cmp(&key_of(&y)), x.cmp(&y));
            prop_assert_eq!(path_of(&key_of(&x)), Ok(x.clone()));
            prop_assert!(key_of(&x) < key_above_all());
        }

        #[test]
        fn subtree_bounds_hold_exactly_the_paths_beneath(x in awkward_path(), y in awkward_path()) {
            let (lower, upper) = subtree_bounds(&x);
            let key = key_of(&y);
            let inside = key > lower && key < upper;
            prop_assert_eq!(inside, y.starts_with(&x) && y != x);
        }

        #[test]
        fn xattrs_round_trip(list in xattr_list()) {
            prop_assert_eq!(decode_xattrs(&encode_xattrs(&list)), Ok(list));
        }

        #[test]
        fn any_bytes_decode_to_valid_xattrs_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(list) = decode_xattrs(&bytes) {
                prop_assert!(check_xattrs(&list).is_ok());
                prop_assert_eq!(encode_xattrs(&list), bytes);
            }
        }
    }

    #[test]
    fn a_key_with_a_slash_or_an_empty_name_is_no_path() {
        assert!(path_of(b"a/b").is_err());
        assert!(path_of(b"a\0\0b").is_err());
        assert!(path_of(b"a\0").is_err());
        assert!(path_of(b"..").is_err());
        assert_eq!(path_of(b"a\0b"), Ok(RelPath::new(b"a/b").unwrap()));
    }
}
