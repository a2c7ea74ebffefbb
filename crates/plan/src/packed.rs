//! Directory properties that wait for the whole walk, packed.
//!
//! A mirror sets a directory's properties after its subtree, so the items
//! of every new or changed directory wait until the walk ends and then
//! until everything under them is done. As items (an `Item` and its boxed
//! entry: about 330 bytes a directory with its path) the 17,000 directories
//! of a system's program tree added about 5 MB to an initial copy's peak
//! RSS; packed as varints they take the path and about 40 bytes each (a
//! record and its place in the index). The engine
//! unpacks them one depth level at a time, as it sets them.
//!
//! The bytes never leave the process and are only read back by this
//! module, which therefore treats a malformed record as a bug, not as
//! input.

use crate::{Item, Op};
use accord_model::{path_order, Entry, Kind, Props, RelPath, Time, Xattr};
use std::cmp::Reverse;

/// Bytes per chunk at most: the list grows by chunks rather than by
/// doubling one buffer, so it never holds a grown copy beside the old one.
/// A list's first chunks are small (a directory's own list holds one item).
const CHUNK: usize = 64 << 10;

const HAS_DST: u8 = 1;
const PROPS_DIFFER: u8 = 2;

const HAS_LINK_TARGET: u8 = 1;
const HAS_FINGERPRINT: u8 = 2;
const HAS_XATTRS: u8 = 4;
/// The entry's path is not the item's (never so for a directory's
/// properties; kept exact all the same).
const OWN_PATH: u8 = 8;

/// `DirMeta` items, packed, in the list's order.
#[derive(Clone, Default)]
pub struct DirMetaList {
    chunks: Vec<Vec<u8>>,
    /// Where each record is, in the list's order.
    index: Vec<Slot>,
}

/// A record's chunk, offset and length.
#[derive(Clone, Copy)]
struct Slot {
    chunk: u32,
    at: u32,
    len: u32,
}

impl std::fmt::Debug for DirMetaList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl DirMetaList {
    /// Pack a `DirMeta` item (its source entry present, as every one has).
    pub fn push(&mut self, it: &Item) {
        debug_assert!(it.op == Op::DirMeta && it.src.is_some());
        let mut record = Vec::with_capacity(64 + it.path.as_bytes().len());
        let mut flags = 0;
        if it.dst.is_some() {
            flags |= HAS_DST;
        }
        if it.props_differ {
            flags |= PROPS_DIFFER;
        }
        record.push(flags);
        put_bytes(&mut record, it.path.as_bytes());
        for e in it.src.iter().chain(&it.dst) {
            put_entry(&mut record, e, &it.path);
        }
        self.push_record(&record);
    }

    fn push_record(&mut self, record: &[u8]) {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.len() + record.len() <= c.capacity());
        if !fits {
            let held: usize = self.chunks.iter().map(Vec::len).sum();
            // A record larger than a chunk (large extended attributes)
            // gets a chunk of its own size.
            let capacity = held.min(CHUNK).max(record.len());
            self.chunks.push(Vec::with_capacity(capacity));
        }
        let chunk = self.chunks.len() - 1;
        let last = &mut self.chunks[chunk];
        let slot = Slot {
            chunk: u32::try_from(chunk).expect("fewer than 2^32 chunks"),
            at: u32::try_from(last.len()).expect("a chunk is under 4 GiB"),
            len: u32::try_from(record.len()).expect("a record is under 4 GiB"),
        };
        last.extend_from_slice(record);
        self.index.push(slot);
    }

    /// Move `other`'s items to the end of this list.
    pub fn append(&mut self, other: DirMetaList) {
        for i in 0..other.len() {
            self.push_record(other.record(i));
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The `i`th item, unpacked.
    pub fn get(&self, i: usize) -> Item {
        take_item(&mut Reader {
            rest: self.record(i),
        })
    }

    /// The items in order, each unpacked as it is reached.
    pub fn iter(&self) -> impl Iterator<Item = Item> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The path of the `i`th item, without unpacking it.
    pub fn path_bytes(&self, i: usize) -> &[u8] {
        let mut r = Reader {
            rest: self.record(i),
        };
        r.byte();
        r.bytes()
    }

    /// The depth of the `i`th item's path, as `RelPath::depth` counts it.
    pub fn depth(&self, i: usize) -> usize {
        let path = self.path_bytes(i);
        match path.is_empty() {
            true => 0,
            false => 1 + path.iter().filter(|b| **b == b'/').count(),
        }
    }

    /// Order the items deepest first, then by path: each directory after
    /// everything under it.
    pub fn sort_deepest_first(&mut self) {
        let mut order: Vec<(Reverse<usize>, usize)> = (0..self.len())
            .map(|i| (Reverse(self.depth(i)), i))
            .collect();
        order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| path_order(self.path_bytes(a.1), self.path_bytes(b.1)))
                .then(a.1.cmp(&b.1))
        });
        self.index = order.into_iter().map(|(_, i)| self.index[i]).collect();
    }

    /// Keep only the items `keep` accepts (each unpacked to be asked).
    pub fn retain(&mut self, mut keep: impl FnMut(&Item) -> bool) {
        let mut kept = DirMetaList::default();
        for i in 0..self.len() {
            if keep(&self.get(i)) {
                kept.push_record(self.record(i));
            }
        }
        *self = kept;
    }

    fn record(&self, i: usize) -> &[u8] {
        let Slot { chunk, at, len } = self.index[i];
        let at = at as usize;
        &self.chunks[chunk as usize][at..at + len as usize]
    }
}

/// The item of a record `push` wrote.
fn take_item(r: &mut Reader) -> Item {
    let flags = r.byte();
    let path = r.path();
    let src = take_entry(r, &path);
    let dst = (flags & HAS_DST != 0).then(|| Box::new(take_entry(r, &path)));
    Item {
        op: Op::DirMeta,
        path,
        src: Some(Box::new(src)),
        dst,
        props_differ: flags & PROPS_DIFFER != 0,
    }
}

/// An entry: its path only when it differs from the item's.
fn put_entry(out: &mut Vec<u8>, e: &Entry, item_path: &RelPath) {
    let mut flags = 0;
    if e.path != *item_path {
        flags |= OWN_PATH;
    }
    if e.link_target.is_some() {
        flags |= HAS_LINK_TARGET;
    }
    if e.hash.is_some() {
        flags |= HAS_FINGERPRINT;
    }
    if e.props.xattrs.is_some() {
        flags |= HAS_XATTRS;
    }
    out.push(flags);
    out.push(kind_code(e.kind));
    if flags & OWN_PATH != 0 {
        put_bytes(out, e.path.as_bytes());
    }
    let p = &e.props;
    let numbers = [
        e.size,
        u64::from(p.mode),
        u64::from(p.uid),
        u64::from(p.gid),
        zigzag(p.mtime.sec),
        u64::from(p.mtime.nsec),
        e.dev,
        e.ino,
        e.nlink,
        e.rdev,
        e.blocks,
    ];
    for n in numbers {
        put_varint(out, n);
    }
    if let Some(hash) = &e.hash {
        out.extend_from_slice(hash);
    }
    if let Some(target) = &e.link_target {
        put_bytes(out, target);
    }
    if let Some(xattrs) = &p.xattrs {
        put_varint(out, xattrs.len() as u64);
        for (name, value) in xattrs {
            put_bytes(out, name);
            put_bytes(out, value);
        }
    }
}

fn take_entry(r: &mut Reader, item_path: &RelPath) -> Entry {
    let flags = r.byte();
    let kind = kind_of_code(r.byte());
    // One allocation for the path shared by the item and its entries.
    let path = match flags & OWN_PATH {
        0 => item_path.clone(),
        _ => r.path(),
    };
    let mut n = [0u64; 11];
    for v in &mut n {
        *v = r.varint();
    }
    let narrow = |v: u64| u32::try_from(v).expect("packed from a u32");
    let hash = (flags & HAS_FINGERPRINT != 0).then(|| r.take(32).try_into().unwrap());
    let link_target = (flags & HAS_LINK_TARGET != 0).then(|| r.bytes().to_vec());
    let xattrs = (flags & HAS_XATTRS != 0).then(|| {
        let count = r.varint();
        (0..count)
            .map(|_| -> Xattr { (r.bytes().to_vec(), r.bytes().to_vec()) })
            .collect()
    });
    Entry {
        path,
        kind,
        size: n[0],
        props: Props {
            mode: narrow(n[1]),
            uid: narrow(n[2]),
            gid: narrow(n[3]),
            mtime: Time {
                sec: unzigzag(n[4]),
                nsec: narrow(n[5]),
            },
            xattrs,
        },
        dev: n[6],
        ino: n[7],
        nlink: n[8],
        rdev: n[9],
        blocks: n[10],
        link_target,
        hash,
    }
}

const KINDS: [Kind; 7] = [
    Kind::File,
    Kind::Dir,
    Kind::Symlink,
    Kind::Fifo,
    Kind::Socket,
    Kind::CharDev,
    Kind::BlockDev,
];

fn kind_code(kind: Kind) -> u8 {
    KINDS.iter().position(|k| *k == kind).unwrap() as u8
}

fn kind_of_code(code: u8) -> Kind {
    KINDS[usize::from(code)]
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Reads what `push` wrote; running out is a bug of this module.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        head
    }

    fn byte(&mut self) -> u8 {
        self.take(1)[0]
    }

    fn varint(&mut self) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte();
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return v;
            }
        }
        unreachable!("a packed varint is at most ten bytes")
    }

    fn bytes(&mut self) -> &'a [u8] {
        let n = usize::try_from(self.varint()).unwrap();
        self.take(n)
    }

    fn path(&mut self) -> RelPath {
        RelPath::new(self.bytes()).expect("packed from a valid path")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(path: &RelPath, n: [u64; 6], mtime: Time, extras: (bool, bool, bool)) -> Entry {
        Entry {
            path: path.clone(),
            kind: KINDS[(n[0] % 7) as usize],
            size: n[1],
            props: Props {
                mode: n[2] as u32,
                uid: (n[2] >> 32) as u32,
                gid: n[3] as u32,
                mtime,
                xattrs: extras.0.then(|| {
                    vec![
                        (b"user.a".to_vec(), vec![]),
                        (b"system.posix_acl_access".to_vec(), vec![2, 0, 0, 0, 1, 0]),
                    ]
                }),
            },
            dev: n[3],
            ino: n[4],
            nlink: n[5],
            rdev: n[4] ^ n[5],
            blocks: n[1] / 512,
            link_target: extras.1.then(|| b"../target".to_vec()),
            hash: extras.2.then_some([7u8; 32]),
        }
    }

    proptest! {
        /// What goes in comes out, field for field and in order, across
        /// chunk boundaries.
        #[test]
        fn items_come_back_as_pushed(
            specs in proptest::collection::vec(
                (
                    "[a-z]{1,12}(/[a-z0-9][a-z0-9.]{0,39}){0,3}",
                    any::<[u64; 6]>(),
                    any::<i64>(),
                    0u32..1_000_000_000,
                    any::<(bool, bool, bool)>(),
                    proptest::option::of(any::<[u64; 6]>()),
                    any::<bool>(),
                ),
                0..40,
            ),
            repeat in 1usize..2000,
        ) {
            let mut items = Vec::new();
            for (path, n, sec, nsec, extras, dst, differ) in specs {
                let path = RelPath::new(path.as_bytes()).unwrap();
                let mtime = Time { sec, nsec };
                let src = entry(&path, n, mtime, extras);
                let dst = dst.map(|d| Box::new(entry(&path, d, mtime, (!extras.0, false, false))));
                items.push(Item {
                    op: Op::DirMeta,
                    path,
                    src: Some(Box::new(src)),
                    dst,
                    props_differ: differ,
                });
            }
            let mut list = DirMetaList::default();
            let mut expected = Vec::new();
            // Enough records to span several chunks; every other one
            // through `append`, as the planner merges a directory's list.
            for (i, it) in items.iter().cycle().take(if items.is_empty() { 0 } else { repeat }).enumerate() {
                if i % 2 == 0 {
                    list.push(it);
                } else {
                    let mut one = DirMetaList::default();
                    one.push(it);
                    list.append(one);
                }
                expected.push(it.clone());
            }
            prop_assert_eq!(list.len(), expected.len());
            prop_assert_eq!(list.iter().collect::<Vec<_>>(), expected.clone());

            // Sorted as `RelPath`s sort the same items (stable: equal
            // paths keep their order on both sides).
            list.sort_deepest_first();
            expected.sort_by(|a, b| b.path.depth().cmp(&a.path.depth()).then_with(|| a.path.cmp(&b.path)));
            prop_assert_eq!(list.iter().collect::<Vec<_>>(), expected.clone());

            list.retain(|it| it.props_differ);
            expected.retain(|it| it.props_differ);
            prop_assert_eq!(list.iter().collect::<Vec<_>>(), expected);
        }
    }

    /// What the module is for: a new directory's item (a path of 40
    /// bytes, today's times, an ext4 directory's numbers) packs into the
    /// path and at most 32 bytes more, against about 330 as an item.
    #[test]
    fn a_directory_packs_small() {
        let path = RelPath::new(b"usr/share/doc/libexample-dev/examples/a1").unwrap();
        let e = Entry {
            path: path.clone(),
            kind: Kind::Dir,
            size: 4096,
            props: Props {
                mode: 0o755,
                uid: 0,
                gid: 0,
                mtime: Time {
                    sec: 1_795_000_000,
                    nsec: 123_456_789,
                },
                xattrs: None,
            },
            dev: 0xfe00,
            ino: 5_312_365,
            nlink: 2,
            rdev: 0,
            blocks: 8,
            link_target: None,
            hash: None,
        };
        let mut list = DirMetaList::default();
        list.push(&Item {
            op: Op::DirMeta,
            path,
            src: Some(Box::new(e)),
            dst: None,
            props_differ: true,
        });
        assert_eq!(list.path_bytes(0).len(), 40);
        let record = list.record(0).len();
        assert!(record <= 40 + 32, "{record} bytes");
    }

    /// A directory whose extended attributes outgrow a chunk, between
    /// two small ones.
    #[test]
    fn a_record_larger_than_a_chunk_fits() {
        let small = |name: &str| {
            let path = RelPath::new(name.as_bytes()).unwrap();
            let e = entry(&path, [1; 6], Time::default(), (false, false, false));
            Item {
                op: Op::DirMeta,
                path,
                src: Some(Box::new(e)),
                dst: None,
                props_differ: false,
            }
        };
        let mut big = small("b");
        big.src.as_mut().unwrap().props.xattrs = Some(vec![
            (b"user.one".to_vec(), vec![1; 60_000]),
            (b"user.two".to_vec(), vec![2; 60_000]),
        ]);
        let items = [small("a"), big, small("c")];
        let mut list = DirMetaList::default();
        for it in &items {
            list.push(it);
        }
        assert!(list.record(1).len() > CHUNK);
        assert_eq!(list.iter().collect::<Vec<_>>(), items);
    }

    #[test]
    fn extremes_survive() {
        let path = RelPath::new(b"d").unwrap();
        let mut e = entry(
            &path,
            [1, u64::MAX, u64::MAX, u64::MAX, u64::MAX, u64::MAX],
            Time {
                sec: i64::MIN,
                nsec: 999_999_999,
            },
            (true, true, true),
        );
        e.kind = Kind::Dir;
        let it = Item {
            op: Op::DirMeta,
            path: path.clone(),
            src: Some(Box::new(e.clone())),
            dst: Some(Box::new(Entry {
                path: RelPath::new(b"other").unwrap(),
                ..e
            })),
            props_differ: true,
        };
        let mut list = DirMetaList::default();
        list.push(&it);
        assert_eq!(list.get(0), it);
        assert_eq!(list.path_bytes(0), b"d");
    }
}
