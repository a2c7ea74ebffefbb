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
pub(crate) const ENTRY_COLUMNS: &str = "key, entry";

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

pub(crate) fn kind_of_code(code: i64) -> Result<Kind, String> {
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

pub(crate) fn check_xattrs(xattrs: &[Xattr]) -> Result<(), String> {
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

    /// A LEB128 varint of at most ten bytes that fits in a u64.
    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let [byte] = self.bytes(1).map_err(|_| "its entry is cut short")?[..] else {
                unreachable!("one byte taken")
            };
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err("a number beyond 64 bits".into());
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                // One spelling per number, as `put_varint` writes it.
                if byte == 0 && shift > 0 {
                    return Err("a number not in its shortest form".into());
                }
                return Ok(value);
            }
        }
        Err("a number beyond 64 bits".into())
    }

    /// A varint length of at most `max`, then that many bytes.
    fn sized(&mut self, max: usize, what: &str) -> Result<&'a [u8], String> {
        let len = self.varint()?;
        if len > max as u64 {
            return Err(format!("a {what} of {len} bytes"));
        }
        self.bytes(len as usize)
            .map_err(|_| format!("its {what} is cut short"))
    }
}

/// The blob column of a row (`column`), or None for NULL.
pub(crate) fn read_blob<'r>(row: &'r Row<'_>, column: usize) -> Result<Option<&'r [u8]>, String> {
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

/// The key of a row (columns in `ENTRY_COLUMNS` order), unchecked.
pub(crate) fn row_key<'r>(row: &'r Row<'_>) -> Result<&'r [u8], String> {
    read_blob(row, 0)?.ok_or_else(|| "a row without a path".to_string())
}

/// One row (columns in `ENTRY_COLUMNS` order) back to an entry, checked.
pub(crate) fn decode_row(row: &Row<'_>) -> Result<Observed, String> {
    decode_keyed_row(row, row_key(row)?)
}

/// [`decode_row`] for a row whose key the caller read already.
pub(crate) fn decode_keyed_row(row: &Row<'_>, key: &[u8]) -> Result<Observed, String> {
    let path = path_of(key)?;
    let bytes = read_blob(row, 1)?.ok_or_else(|| format!("{path}: a row without its entry"))?;
    decode_entry(path, bytes)
}

/// `flags` bits of an encoded entry: which optional parts follow.
const HAS_LINK_TARGET: u8 = 1;
const HAS_FINGERPRINT: u8 = 2;
const HAS_XATTRS: u8 = 4;

/// An entry (all but its path, which is the row's key) as one blob: what a
/// scan reads back for every path of the tree, so one column to fetch and
/// bytes to walk instead of a column per field.
///
/// Layout: the kind's code (one byte); a byte of `flags`; then as LEB128
/// varints size, mode, uid, gid, mtime seconds (zigzag), mtime
/// nanoseconds, ctime seconds (zigzag), ctime nanoseconds, dev, ino, nlink,
/// rdev, blocks; then the fingerprint (32 bytes) if its flag is set; the
/// link target (a varint length, the bytes) if its flag is set; the
/// extended attributes (a varint length, `encode_xattrs`'s bytes) if
/// recorded. Nothing follows.
pub(crate) fn encode_entry(observed: &Observed) -> Vec<u8> {
    let entry = &observed.entry;
    let mut out = Vec::with_capacity(64);
    let mut flags = 0;
    if entry.link_target.is_some() {
        flags |= HAS_LINK_TARGET;
    }
    if entry.hash.is_some() {
        flags |= HAS_FINGERPRINT;
    }
    if entry.props.xattrs.is_some() {
        flags |= HAS_XATTRS;
    }
    out.push(kind_code(entry.kind) as u8);
    out.push(flags);
    let props = &entry.props;
    let numbers = [
        entry.size,
        u64::from(props.mode),
        u64::from(props.uid),
        u64::from(props.gid),
        zigzag(props.mtime.sec),
        u64::from(props.mtime.nsec),
        zigzag(observed.ctime.sec),
        u64::from(observed.ctime.nsec),
        entry.dev,
        entry.ino,
        entry.nlink,
        entry.rdev,
        entry.blocks,
    ];
    for n in numbers {
        put_varint(&mut out, n);
    }
    if let Some(hash) = &entry.hash {
        out.extend_from_slice(hash);
    }
    if let Some(target) = &entry.link_target {
        put_varint(&mut out, target.len() as u64);
        out.extend_from_slice(target);
    }
    if let Some(xattrs) = &props.xattrs {
        let blob = encode_xattrs(xattrs);
        put_varint(&mut out, blob.len() as u64);
        out.extend_from_slice(&blob);
    }
    out
}

/// The inverse of [`encode_entry`], for the entry at `path`; every part
/// checked against its range and against the bytes present.
pub(crate) fn decode_entry(path: RelPath, bytes: &[u8]) -> Result<Observed, String> {
    let fail = |what: &str| format!("{path}: {what}");
    let mut reader = Reader { rest: bytes };
    let head = reader
        .bytes(2)
        .map_err(|_| fail("its entry is cut short"))?;
    let kind = kind_of_code(i64::from(head[0])).map_err(|e| fail(&e))?;
    let flags = head[1];
    if flags & !(HAS_LINK_TARGET | HAS_FINGERPRINT | HAS_XATTRS) != 0 {
        return Err(fail(&format!("unknown entry flags {flags:#x}")));
    }
    let mut numbers = [0u64; 13];
    for n in &mut numbers {
        *n = reader.varint().map_err(|e| fail(&e))?;
    }
    let [size, mode, uid, gid, mtime_s, mtime_ns, ctime_s, ctime_ns, dev, ino, nlink, rdev, blocks] =
        numbers;
    let small = |value: u64, max: u32, what: &str| {
        u32::try_from(value)
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| fail(&format!("{what} {value} is out of range")))
    };
    let mtime = Time {
        sec: unzigzag(mtime_s),
        nsec: small(mtime_ns, 999_999_999, "an mtime's nanoseconds")?,
    };
    let ctime = Time {
        sec: unzigzag(ctime_s),
        nsec: small(ctime_ns, 999_999_999, "a ctime's nanoseconds")?,
    };
    let hash = if flags & HAS_FINGERPRINT != 0 {
        let bytes = reader
            .bytes(32)
            .map_err(|_| fail("its fingerprint is cut short"))?;
        Some(Fingerprint::try_from(bytes).expect("32 bytes"))
    } else {
        None
    };
    let link_target = if flags & HAS_LINK_TARGET != 0 {
        Some(
            reader
                .sized(MAX_PATH_LEN, "link target")
                .map_err(|e| fail(&e))?
                .to_vec(),
        )
    } else {
        None
    };
    let xattrs = if flags & HAS_XATTRS != 0 {
        let blob = reader
            .sized(MAX_XATTRS_BYTES, "extended attributes")
            .map_err(|e| fail(&e))?;
        Some(decode_xattrs(blob).map_err(|e| fail(&e))?)
    } else {
        None
    };
    if !reader.rest.is_empty() {
        return Err(fail("bytes after its entry"));
    }
    let observed = Observed {
        entry: Entry {
            kind,
            size,
            props: Props {
                mode: small(mode, 0o7777, "mode")?,
                uid: small(uid, u32::MAX, "uid")?,
                gid: small(gid, u32::MAX, "gid")?,
                mtime,
                xattrs,
            },
            dev,
            ino,
            nlink,
            rdev,
            blocks,
            link_target,
            hash,
            path,
        },
        ctime,
    };
    check_entry(&observed).map_err(|reason| format!("{}: {reason}", observed.entry.path))?;
    Ok(observed)
}

/// Seconds before 1970 stored as small varints too.
fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
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

    fn any_entry() -> impl Strategy<Value = Observed> {
        let kind = prop::sample::select(vec![Kind::File, Kind::Dir, Kind::Symlink, Kind::CharDev]);
        let time = (any::<i64>(), 0..1_000_000_000u32).prop_map(|(sec, nsec)| Time { sec, nsec });
        let numbers = prop::array::uniform5(any::<u64>());
        let ids = (0..=0o7777u32, any::<u32>(), any::<u32>());
        let extra = (
            prop::option::of(xattr_list()),
            prop::collection::vec(1..=255u8, 1..40),
            any::<[u8; 32]>(),
            any::<bool>(),
        );
        (
            awkward_path(),
            kind,
            any::<u64>(),
            ids,
            time.clone(),
            time,
            numbers,
            extra,
        )
            .prop_map(
                |(
                    path,
                    kind,
                    size,
                    (mode, uid, gid),
                    mtime,
                    ctime,
                    [dev, ino, nlink, rdev, blocks],
                    extra,
                )| {
                    let (xattrs, target, hash, followed) = extra;
                    let link_target = (kind == Kind::Symlink
                        || (followed && kind != Kind::CharDev))
                        .then_some(target);
                    Observed {
                        entry: Entry {
                            path,
                            kind,
                            size,
                            props: Props {
                                mode,
                                uid,
                                gid,
                                mtime,
                                xattrs,
                            },
                            dev,
                            ino,
                            nlink,
                            rdev,
                            blocks,
                            link_target,
                            hash: (kind == Kind::File).then_some(hash),
                        },
                        ctime,
                    }
                },
            )
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
        fn entries_round_trip(observed in any_entry()) {
            let blob = encode_entry(&observed);
            prop_assert_eq!(decode_entry(observed.entry.path.clone(), &blob), Ok(observed));
        }

        /// Whatever the bytes, an entry that decodes is one that can be
        /// stored, and encodes to the same bytes (one spelling per entry).
        #[test]
        fn any_bytes_decode_to_a_valid_entry_or_an_error(
            head in prop::sample::select(vec![[1u8, 2], [2, 0], [3, 1], [1, 6], [3, 5]]),
            bytes in prop::collection::vec(any::<u8>(), 0..96),
        ) {
            let blob = [&head[..], &bytes].concat();
            if let Ok(observed) = decode_entry(RelPath::new(b"p").unwrap(), &blob) {
                prop_assert!(check_entry(&observed).is_ok());
                prop_assert_eq!(encode_entry(&observed), blob);
            }
        }

        /// The same for a real entry's bytes with one of them changed: most
        /// such blobs are close enough to decode.
        #[test]
        fn changed_entries_decode_to_a_valid_entry_or_an_error(
            observed in any_entry(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut blob = encode_entry(&observed);
            let at = at.index(blob.len());
            blob[at] = byte;
            if let Ok(decoded) = decode_entry(observed.entry.path.clone(), &blob) {
                prop_assert!(check_entry(&decoded).is_ok());
                prop_assert_eq!(encode_entry(&decoded), blob);
            }
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
