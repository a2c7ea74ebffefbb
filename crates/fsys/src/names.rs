//! A directory's names as listed, packed: every name in one buffer and a
//! 16-byte record per name (its place in the buffer, its `d_type`, its
//! inode number). A listing of 17,869 names held 2.1 MB as a vector of
//! separately allocated names (heaptrack); this way it takes 16 bytes and
//! the name's own a name, about 0.6 MB. A walk holds both sides' names of
//! the directories in flight.

use std::io;

/// One name's place in the buffer, its type and its inode number.
#[derive(Clone, Copy, Debug)]
struct Item {
    ino: u64,
    start: u32,
    len: u8,
    dtype: u8,
}

/// A directory's names, in the order they were added.
#[derive(Clone, Debug, Default)]
pub struct NameList {
    bytes: Vec<u8>,
    items: Vec<Item>,
}

impl NameList {
    pub fn new() -> NameList {
        NameList::default()
    }

    /// Room for about `names` more names of `bytes` bytes in all.
    pub fn reserve(&mut self, names: usize, bytes: usize) {
        self.items.reserve(names);
        self.bytes.reserve(bytes);
    }

    /// Add a name (at most 255 bytes, as any file system's names are).
    pub fn push(&mut self, name: &[u8], dtype: u8, ino: u64) -> io::Result<()> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        let len = u8::try_from(name.len()).map_err(|_| bad("a name longer than 255 bytes"))?;
        let start = u32::try_from(self.bytes.len())
            .map_err(|_| bad("a directory whose names take more than 4 GiB"))?;
        self.bytes.extend_from_slice(name);
        self.items.push(Item {
            ino,
            start,
            len,
            dtype,
        });
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The `i`th name.
    pub fn name(&self, i: usize) -> &[u8] {
        let it = self.items[i];
        &self.bytes[it.start as usize..it.start as usize + it.len as usize]
    }

    /// The `i`th name's inode number.
    pub fn ino(&self, i: usize) -> u64 {
        self.items[i].ino
    }

    /// (name, d_type, inode number) of each name, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u8, u64)> + '_ {
        (0..self.len()).map(|i| (self.name(i), self.items[i].dtype, self.items[i].ino))
    }

    /// Keep only the names `keep` says yes to (in order).
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        let mut kept = NameList::new();
        for (name, dtype, ino) in self.iter() {
            if keep(name) {
                // Shorter than what it is taken from: cannot fail.
                let _ = kept.push(name, dtype, ino);
            }
        }
        *self = kept;
    }

    /// Give back the room grown beyond the names held.
    pub fn shrink_to_fit(&mut self) {
        self.items.shrink_to_fit();
        self.bytes.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_back_as_added_and_retain_keeps_their_order() {
        let mut l = NameList::new();
        let names: Vec<Vec<u8>> = (0..300u32)
            .map(|i| vec![b'a' + (i % 26) as u8; (i % 255 + 1) as usize])
            .collect();
        for (i, n) in names.iter().enumerate() {
            l.push(n, (i % 12) as u8, i as u64 * 7).unwrap();
        }
        assert_eq!(l.len(), 300);
        for (i, (n, t, ino)) in l.iter().enumerate() {
            assert_eq!((n, t, ino), (&names[i][..], (i % 12) as u8, i as u64 * 7));
        }
        l.retain(|n| n.len() % 3 == 0);
        let want: Vec<&Vec<u8>> = names.iter().filter(|n| n.len() % 3 == 0).collect();
        let got: Vec<&[u8]> = l.iter().map(|x| x.0).collect();
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(&want).all(|(a, b)| *a == &b[..]));
        assert!(l.push(&[b'x'; 256], 0, 0).is_err(), "a name over 255 bytes");
    }
}
