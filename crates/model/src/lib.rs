//! Shared types of Accord: paths inside a replica, entries, properties. No I/O.
//!
//! A [`RelPath`] is a path *inside* a replica: data, never a host path. It is
//! validated on construction (no `..`, no `.`, no empty component, not absolute,
//! no NUL, bounded length) so that everything below can join it to a directory
//! handle without further thought.

use std::fmt;
use std::sync::Arc;

/// Longest accepted relative path, in bytes (Linux PATH_MAX).
pub const MAX_PATH_LEN: usize = 4096;
/// Longest accepted file name component, in bytes (Linux NAME_MAX).
pub const MAX_NAME_LEN: usize = 255;

/// Prefix of what arrived of a file whose transfer was cut off (a lost
/// connection, a killed peer): `PARTIAL_PREFIX` + the file's name, in the
/// file's directory. The next run that writes that name uses it as the
/// basis of a delta, so the bytes already sent are not sent again; a run
/// that does not write that name removes it.
pub const PARTIAL_PREFIX: &[u8] = b".accord-partial-";

/// The partial file's name for `name` (`None` when it would be longer than
/// a name may be: such files are not resumed).
pub fn partial_name(name: &[u8]) -> Option<Vec<u8>> {
    let mut p = PARTIAL_PREFIX.to_vec();
    p.extend_from_slice(name);
    (p.len() <= MAX_NAME_LEN && !name.is_empty() && !name.contains(&b'/')).then_some(p)
}

/// The name whose partial file `partial` is (`None`: not a partial file).
pub fn partial_target(partial: &[u8]) -> Option<&[u8]> {
    partial
        .strip_prefix(PARTIAL_PREFIX)
        .filter(|n| !n.is_empty())
}

/// Why a byte string is not a valid [`RelPath`] or file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    Absolute,
    DotDot,
    Dot,
    EmptyComponent,
    Nul,
    TooLong,
    NameTooLong,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            PathError::Absolute => "absolute path",
            PathError::DotDot => "`..` component",
            PathError::Dot => "`.` component",
            PathError::EmptyComponent => "empty component",
            PathError::Nul => "NUL byte",
            PathError::TooLong => "path too long",
            PathError::NameTooLong => "file name too long",
        };
        f.write_str(s)
    }
}

impl std::error::Error for PathError {}

/// Check one file name component.
pub fn validate_name(name: &[u8]) -> Result<(), PathError> {
    if name.is_empty() {
        return Err(PathError::EmptyComponent);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(PathError::NameTooLong);
    }
    if name == b"." {
        return Err(PathError::Dot);
    }
    if name == b".." {
        return Err(PathError::DotDot);
    }
    if name.contains(&0) {
        return Err(PathError::Nul);
    }
    if name.contains(&b'/') {
        return Err(PathError::EmptyComponent);
    }
    Ok(())
}

/// A validated path relative to a replica root; the empty path is the root.
/// Ordering is by component (bytewise within a component), so a directory
/// sorts before everything under it and its subtree is contiguous: a
/// depth-first walk that visits names in order yields sorted paths.
///
/// The bytes are shared: a clone costs a reference count, not a copy. A
/// path is held many times over (an entry, the plan item that moves it,
/// both sides of a sync's update, its archive record), and a sync of a
/// million paths would otherwise keep several copies of each.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct RelPath(Arc<[u8]>);

impl Ord for RelPath {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        path_order(&self.0, &other.0)
    }
}

/// The order of [`RelPath`]s, on the bytes of two valid paths: bytewise,
/// except that the separator sorts below every byte a name may hold (names
/// hold no NUL and no '/'), so a directory's entries follow it together.
pub fn path_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let same = common_prefix_len(a, b);
    let key = |c: Option<&u8>| match c {
        None => 0u16,
        Some(b'/') => 1,
        Some(&x) => x as u16 + 1,
    };
    key(a.get(same)).cmp(&key(b.get(same)))
}

/// How many leading bytes `a` and `b` share. Eight bytes at a time: the
/// planner compares every path of both trees, and paths share long prefixes.
fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().unwrap());
        let y = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        if x != y {
            // Little-endian: the lowest differing byte is the first one.
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

impl PartialOrd for RelPath {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl RelPath {
    /// The root of the replica.
    pub fn root() -> RelPath {
        RelPath::default()
    }

    /// Validate `bytes` (components separated by `/`).
    pub fn new(bytes: &[u8]) -> Result<RelPath, PathError> {
        RelPath::with_separator(bytes, b'/')
    }

    /// Validate `bytes`, components separated by `separator` (`/` or a
    /// byte no name holds, such as NUL), into a path separated by `/`: one
    /// allocation, whatever the separator.
    pub fn with_separator(bytes: &[u8], separator: u8) -> Result<RelPath, PathError> {
        if bytes.is_empty() {
            return Ok(RelPath::root());
        }
        if bytes.len() > MAX_PATH_LEN {
            return Err(PathError::TooLong);
        }
        if bytes[0] == b'/' {
            return Err(PathError::Absolute);
        }
        for c in bytes.split(|b| *b == separator) {
            validate_name(c)?;
        }
        if separator == b'/' {
            return Ok(RelPath(bytes.into()));
        }
        let slashed = bytes.iter().map(|&b| if b == separator { b'/' } else { b });
        Ok(RelPath(slashed.collect()))
    }

    /// This path with one more component.
    pub fn join(&self, name: &[u8]) -> Result<RelPath, PathError> {
        validate_name(name)?;
        if self.0.is_empty() {
            return Ok(RelPath(name.into()));
        }
        let len = self.0.len() + 1 + name.len();
        if len > MAX_PATH_LEN {
            return Err(PathError::TooLong);
        }
        // One allocation of the exact length (the iterator knows it).
        let bytes = self.0.iter().copied();
        let joined = bytes.chain([b'/']).chain(name.iter().copied());
        Ok(RelPath(joined.collect()))
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The containing directory (`None` for the root).
    pub fn parent(&self) -> Option<RelPath> {
        if self.0.is_empty() {
            return None;
        }
        match self.0.iter().rposition(|b| *b == b'/') {
            Some(i) => Some(RelPath(self.0[..i].into())),
            None => Some(RelPath::root()),
        }
    }

    /// The last component (empty for the root).
    pub fn file_name(&self) -> &[u8] {
        match self.0.iter().rposition(|b| *b == b'/') {
            Some(i) => &self.0[i + 1..],
            None => &self.0,
        }
    }

    /// Number of components (0 for the root).
    pub fn depth(&self) -> usize {
        if self.0.is_empty() {
            0
        } else {
            1 + self.0.iter().filter(|b| **b == b'/').count()
        }
    }

    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|b| *b == b'/').filter(|c| !c.is_empty())
    }

    /// True if `self` is `other` or lies beneath it.
    pub fn starts_with(&self, other: &RelPath) -> bool {
        other.0.is_empty()
            || (self.0.starts_with(&other.0)
                && (self.0.len() == other.0.len() || self.0[other.0.len()] == b'/'))
    }

    /// For people: see [`escape_for_display`].
    pub fn display(&self) -> String {
        escape_for_display(&self.0)
    }
}

/// A name for a person, escaped so that distinct byte strings always show
/// distinctly (two names that differ only in bytes that are not UTF-8 must
/// not look alike): each byte that is not part of valid UTF-8 and each byte
/// of a control character shows as `\xNN`, a backslash as `\\`, everything
/// else as itself. The escaping is reversible. The empty string (the root)
/// shows as `.`, which no file name can be.
pub fn escape_for_display(bytes: &[u8]) -> String {
    use fmt::Write;
    if bytes.is_empty() {
        return ".".into();
    }
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for ch in chunk.valid().chars() {
            if ch.is_control() {
                // Byte by byte (C1 controls are two bytes), so that `\xNN`
                // always means the byte NN.
                let mut buf = [0u8; 4];
                for b in ch.encode_utf8(&mut buf).as_bytes() {
                    let _ = write!(out, "\\x{b:02x}");
                }
            } else if ch == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(ch);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RelPath({:?})", self.display())
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// The kind of a file system entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
            Kind::CharDev => "chardev",
            Kind::BlockDev => "blockdev",
        }
    }
    pub fn is_special(self) -> bool {
        matches!(self, Kind::Fifo | Kind::Socket)
    }
    pub fn is_device(self) -> bool {
        matches!(self, Kind::CharDev | Kind::BlockDev)
    }
}

/// A timestamp to the nanosecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// One extended attribute (name, value). ACLs are the
/// `system.posix_acl_access` / `system.posix_acl_default` attributes.
pub type Xattr = (Vec<u8>, Vec<u8>);

/// The properties of an entry that a mirror keeps.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Props {
    /// Permission bits including setuid/setgid/sticky (`mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: Time,
    /// Sorted by name; `None` when not read.
    pub xattrs: Option<Vec<Xattr>>,
}

/// A BLAKE3 content fingerprint.
pub type Fingerprint = [u8; 32];

/// One entry of a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: RelPath,
    pub kind: Kind,
    /// Bytes (files), target length (symlinks), 0 otherwise.
    pub size: u64,
    pub props: Props,
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    /// Device number of a device node.
    pub rdev: u64,
    /// 512-byte blocks allocated (to detect sparse files).
    pub blocks: u64,
    /// Target of a symlink, as bytes, never interpreted.
    pub link_target: Option<Vec<u8>>,
    /// Content fingerprint when asked for (`--checksum`).
    pub hash: Option<Fingerprint>,
}

/// An entry with its inode change time: what a two-way sync's update
/// detection compares, and what its archive records. `Entry` leaves the
/// ctime out because a mirror never needs it; a sync does, because nobody
/// can set a ctime back, so an unchanged ctime vouches for unchanged
/// contents where an mtime alone cannot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub entry: Entry,
    pub ctime: Time,
}

impl Entry {
    /// A file whose allocated blocks cover less than its size has holes.
    pub fn looks_sparse(&self) -> bool {
        self.kind == Kind::File && self.blocks.saturating_mul(512) < self.size
    }
}

/// What is found at a path when a step re-checks it: the fields that
/// [`Expect::still_holds`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: Time,
}

/// What a step expects to find at a path when it is carried out: the one
/// definition of "the target is still what we planned on" (safety rule 3 of
/// the design), used by every step that replaces, changes or deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Nothing at that name.
    Absent,
    /// The entry as scanned. A directory is compared by identity only (its
    /// size and mtime move whenever an entry is added or removed in it,
    /// which the run itself does); anything else also by mtime, and a
    /// regular file by size too (every write moves one or both; a symlink's
    /// size as `lstat` reports it is not the same on every file system).
    Entry(Found),
    /// Something of this kind that this run made (no scan saw it).
    Made(Kind),
}

impl Expect {
    /// The expectation of a scanned entry.
    pub fn entry(e: &Entry) -> Expect {
        Expect::Entry(Found {
            kind: e.kind,
            dev: e.dev,
            ino: e.ino,
            size: e.size,
            mtime: e.props.mtime,
        })
    }

    /// `entry` of `Some`, `Absent` of `None`.
    pub fn of(e: Option<&Entry>) -> Expect {
        e.map_or(Expect::Absent, Expect::entry)
    }

    /// Does what is there now (`None`: nothing) still match?
    pub fn still_holds(&self, now: Option<&Found>) -> bool {
        match (self, now) {
            (Expect::Absent, None) => true,
            (Expect::Made(kind), Some(f)) => f.kind == *kind,
            (Expect::Entry(want), Some(f)) => {
                f.kind == want.kind
                    && f.dev == want.dev
                    && f.ino == want.ino
                    && (f.kind == Kind::Dir
                        || (f.mtime == want.mtime && (f.kind != Kind::File || f.size == want.size)))
            }
            _ => false,
        }
    }
}

/// An error tied to one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathFailure {
    pub path: RelPath,
    pub message: String,
}

#[cfg(test)]
mod tests {
    #[test]
    fn partial_names_round_trip_and_stay_names() {
        let p = super::partial_name(b"big.iso").unwrap();
        assert_eq!(super::partial_target(&p), Some(&b"big.iso"[..]));
        assert_eq!(super::partial_target(b"big.iso"), None);
        assert_eq!(super::partial_target(super::PARTIAL_PREFIX), None);
        assert!(super::partial_name(&[b'x'; 255]).is_none());
        assert!(super::partial_name(&[b'x'; 255 - 16]).is_some());
        assert!(super::partial_name(b"").is_none());
    }

    use super::*;

    #[test]
    fn relpath_order_keeps_subtrees_together() {
        let mut v: Vec<RelPath> = ["a.b", "a/x", "a", "a0", "a b", "a/x/y", "", "b", "a/\u{1}"]
            .iter()
            .map(|s| RelPath::new(s.as_bytes()).unwrap())
            .collect();
        v.sort();
        let got: Vec<String> = v.iter().map(|p| p.display()).collect();
        assert_eq!(
            got,
            ["", "a", "a/\u{1}", "a/x", "a/x/y", "a b", "a.b", "a0", "b"]
                .map(|s| { RelPath::new(s.as_bytes()).unwrap().display() })
        );
        // Component order agrees with comparing the component lists.
        for x in &v {
            for y in &v {
                let cx: Vec<&[u8]> = x.as_bytes().split(|b| *b == b'/').collect();
                let cy: Vec<&[u8]> = y.as_bytes().split(|b| *b == b'/').collect();
                let (cx, cy) = (
                    if x.is_root() { vec![] } else { cx },
                    if y.is_root() { vec![] } else { cy },
                );
                assert_eq!(x.cmp(y), cx.cmp(&cy), "{} vs {}", x.display(), y.display());
            }
        }
    }

    #[test]
    fn relpath_order_of_long_paths_matches_component_order() {
        // Long shared prefixes and differences at every offset, so the
        // word-at-a-time comparison meets its every case.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let stem = "directory-with-a-long-name/sub/";
        let paths: Vec<RelPath> = (0..300)
            .map(|_| {
                let mut s = stem[..next(stem.len() as u64) as usize]
                    .trim_end_matches('/')
                    .to_string();
                for _ in 0..next(4) {
                    if !s.is_empty() {
                        s.push('/');
                    }
                    for _ in 0..1 + next(12) {
                        s.push(b"ab/y\x7f\xff"[next(5) as usize] as char);
                    }
                }
                let parts: Vec<&str> = s.split('/').filter(|c| !c.is_empty()).collect();
                RelPath::new(parts.join("/").as_bytes()).unwrap()
            })
            .collect();
        let comps = |p: &RelPath| -> Vec<Vec<u8>> {
            if p.is_root() {
                return vec![];
            }
            p.as_bytes()
                .split(|b| *b == b'/')
                .map(<[u8]>::to_vec)
                .collect()
        };
        for x in &paths {
            for y in &paths {
                assert_eq!(
                    x.cmp(y),
                    comps(x).cmp(&comps(y)),
                    "{} vs {}",
                    x.display(),
                    y.display()
                );
            }
        }
    }

    #[test]
    fn relpath_validation() {
        assert!(RelPath::new(b"a/b/c").is_ok());
        assert!(RelPath::new(b"").unwrap().is_root());
        assert_eq!(RelPath::new(b"/a"), Err(PathError::Absolute));
        assert_eq!(RelPath::new(b"a/../b"), Err(PathError::DotDot));
        assert_eq!(RelPath::new(b"a/./b"), Err(PathError::Dot));
        assert_eq!(RelPath::new(b"a//b"), Err(PathError::EmptyComponent));
        assert_eq!(RelPath::new(b"a/"), Err(PathError::EmptyComponent));
        assert_eq!(RelPath::new(b"a\0b"), Err(PathError::Nul));
        assert_eq!(RelPath::new(&[b'a'; 256]), Err(PathError::NameTooLong));
        let long: Vec<u8> = std::iter::repeat_n(b"abcdefgh/".as_slice(), 600)
            .flatten()
            .copied()
            .collect();
        assert_eq!(
            RelPath::new(&long[..long.len() - 1]),
            Err(PathError::TooLong)
        );
        assert!(RelPath::root().join(b"..").is_err());
        assert!(RelPath::root().join(b"x/y").is_err());
    }

    #[test]
    fn expectations() {
        let f = Found {
            kind: Kind::File,
            dev: 1,
            ino: 2,
            size: 3,
            mtime: Time { sec: 4, nsec: 5 },
        };
        let e = Expect::Entry(f);
        assert!(e.still_holds(Some(&f)));
        assert!(!e.still_holds(None));
        assert!(!Expect::Absent.still_holds(Some(&f)));
        assert!(Expect::Absent.still_holds(None));
        for changed in [
            Found { dev: 9, ..f },
            Found { ino: 9, ..f },
            Found { size: 9, ..f },
            Found {
                mtime: Time { sec: 4, nsec: 6 },
                ..f
            },
            Found {
                kind: Kind::Symlink,
                ..f
            },
        ] {
            assert!(!e.still_holds(Some(&changed)), "{changed:?}");
        }
        // A directory: identity only.
        let d = Found {
            kind: Kind::Dir,
            ..f
        };
        assert!(Expect::Entry(d).still_holds(Some(&Found { size: 99, ..d })));
        assert!(!Expect::Entry(d).still_holds(Some(&Found { ino: 99, ..d })));
        assert!(Expect::Made(Kind::Dir).still_holds(Some(&d)));
        assert!(!Expect::Made(Kind::Dir).still_holds(Some(&f)));
    }

    #[test]
    fn relpath_parts() {
        let p = RelPath::new(b"a/b/c").unwrap();
        assert_eq!(p.file_name(), b"c");
        assert_eq!(p.parent().unwrap().as_bytes(), b"a/b");
        assert_eq!(p.depth(), 3);
        assert!(RelPath::new(b"a").unwrap().parent().unwrap().is_root());
        assert!(p.starts_with(&RelPath::new(b"a/b").unwrap()));
        assert!(!RelPath::new(b"a/bc")
            .unwrap()
            .starts_with(&RelPath::new(b"a/b").unwrap()));
        assert!(RelPath::new(b"a").unwrap() < RelPath::new(b"a/b").unwrap());
        assert_eq!(RelPath::new(b"x\ny").unwrap().display(), "x\\x0ay");
    }

    /// The inverse of `escape_for_display` (for non-empty inputs).
    fn unescape(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(ch) = rest.chars().next() {
            if let Some(r) = rest.strip_prefix("\\\\") {
                out.push(b'\\');
                rest = r;
            } else if let Some(r) = rest.strip_prefix("\\x") {
                out.push(u8::from_str_radix(&r[..2], 16).unwrap());
                rest = &r[2..];
            } else {
                let mut buf = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                rest = &rest[ch.len_utf8()..];
            }
        }
        out
    }

    #[test]
    fn names_that_are_not_utf8_display_distinctly() {
        assert_eq!(escape_for_display(b"a\xff"), "a\\xff");
        assert_eq!(escape_for_display(b"a\xfe"), "a\\xfe");
        // A backslash is escaped, so a name spelled like an escape differs
        // from the byte it spells.
        assert_eq!(escape_for_display(b"a\\xff"), "a\\\\xff");
        // A C1 control (two bytes of valid UTF-8) shows byte by byte, never
        // like the lone invalid byte 0x85.
        assert_eq!(escape_for_display("a\u{85}".as_bytes()), "a\\xc2\\x85");
        assert_eq!(escape_for_display(b"a\x85"), "a\\x85");
        // A truncated multi-byte sequence: each of its bytes.
        assert_eq!(escape_for_display(b"\xe6\x97x"), "\\xe6\\x97x");
        assert_eq!(escape_for_display(b"x\x7fy"), "x\\x7fy");
        assert_eq!(escape_for_display("名前 é".as_bytes()), "名前 é");
    }

    proptest::proptest! {
        #[test]
        fn display_is_reversible_hence_distinct(
            a in proptest::collection::vec(proptest::num::u8::ANY, 1..24),
            b in proptest::collection::vec(proptest::num::u8::ANY, 1..24),
        ) {
            let (x, y) = (escape_for_display(&a), escape_for_display(&b));
            proptest::prop_assert_eq!(unescape(&x), a.clone());
            proptest::prop_assert_eq!(a == b, x == y);
        }

        #[test]
        fn display_keeps_plain_text(s in "[^\\\\\\p{Cc}]{1,24}") {
            proptest::prop_assert_eq!(escape_for_display(s.as_bytes()), s);
        }

        #[test]
        fn display_of_near_alike_bytes_differs(
            a in proptest::collection::vec(
                proptest::sample::select(b"a\\x\xc2\x85\xe6\x97\xa5\xff\n".to_vec()),
                1..12,
            ),
            b in proptest::collection::vec(
                proptest::sample::select(b"a\\x\xc2\x85\xe6\x97\xa5\xff\n".to_vec()),
                1..12,
            ),
        ) {
            // Drawn from bytes that make escapes, backslashes, C1 controls
            // and broken sequences, so collisions would be likely if possible.
            proptest::prop_assume!(a != b);
            proptest::prop_assert_ne!(escape_for_display(&a), escape_for_display(&b));
        }
    }
}
