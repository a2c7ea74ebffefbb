//! The bodies of the requests and replies that only a sync of more than two
//! roots sends (`docs/protocol.md`, "A sync of more than two roots"): version
//! vectors, alone, by path, and with the records they go with.
//!
//! A vector is its count of entries, then each entry's replica (one byte)
//! and count (a varint). Every decoder bounds its counts by what the message
//! holds and checks each vector as the archive does (replicas in range and
//! in order, no zero count): a reply is the other host's word.

use crate::sync_wire::{encode_records, get_paths, get_records, MAX_ITEMS};
use accord_model::RelPath;
use accord_plan::{VersionVector, MAX_REPLICAS};
use accord_proto::codec::{get_path, put_path};
use accord_proto::{Dec, Enc, ProtoError};
use accord_replica::ArchiveRecord;

pub fn put_vector(e: &mut Enc, vector: &VersionVector) {
    e.varint(vector.counts().len() as u64);
    for &(replica, count) in vector.counts() {
        e.u8(replica).varint(count);
    }
}

pub fn get_vector(d: &mut Dec) -> Result<VersionVector, ProtoError> {
    let n = d.bounded(MAX_REPLICAS as u64, "version vector length")? as usize;
    let mut counts = Vec::with_capacity(n);
    for _ in 0..n {
        let replica = d.u8("replica")?;
        let count = d.varint("change count")?;
        counts.push((replica, count));
    }
    VersionVector::from_counts(counts)
        .map_err(|why| ProtoError::Invalid(format!("a version vector that {why}")))
}

/// Vectors by path (the reply of `SyncVersions`, and the second part of
/// `SyncRecordVersions`'s body).
pub fn put_versions(e: &mut Enc, versions: &[(RelPath, VersionVector)]) {
    e.varint(versions.len() as u64);
    for (path, vector) in versions {
        put_path(e, path);
        put_vector(e, vector);
    }
}

pub fn get_versions(d: &mut Dec) -> Result<Vec<(RelPath, VersionVector)>, ProtoError> {
    // A path takes a byte at least, a vector its length.
    let n = d.count(MAX_ITEMS, 2, "version count")?;
    let mut versions = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let path = get_path(d, "versioned path")?;
        versions.push((path, get_vector(d)?));
    }
    Ok(versions)
}

/// The reply of `SyncVersionsAt`: one vector for each path asked.
pub fn put_vectors(e: &mut Enc, vectors: &[VersionVector]) {
    e.varint(vectors.len() as u64);
    for vector in vectors {
        put_vector(e, vector);
    }
}

/// Read the reply to a `SyncVersionsAt` of `asked` paths: exactly one vector
/// for each.
pub fn get_vectors(d: &mut Dec, asked: usize) -> Result<Vec<VersionVector>, ProtoError> {
    let n = d.count(MAX_ITEMS, 1, "vector count")?;
    if n != asked {
        return Err(ProtoError::Invalid(format!(
            "{n} version vectors for {asked} paths"
        )));
    }
    (0..n).map(|_| get_vector(d)).collect()
}

/// The body of `SyncVersionsAt`: the paths, in increasing order.
pub fn decode_versions_at(b: &[u8]) -> Result<Vec<RelPath>, ProtoError> {
    let mut d = Dec::new(b);
    let paths = get_paths(&mut d)?;
    d.end("the paths")?;
    Ok(paths)
}

/// The body of `SyncRecordVersions`: the records, then the vectors.
pub fn encode_record_versions(
    records: &[ArchiveRecord],
    versions: &[(RelPath, VersionVector)],
) -> Vec<u8> {
    let mut e = Enc::new();
    e.raw(&encode_records(records));
    put_versions(&mut e, versions);
    e.finish()
}

#[allow(clippy::type_complexity)]
pub fn decode_record_versions(
    b: &[u8],
) -> Result<(Vec<ArchiveRecord>, Vec<(RelPath, VersionVector)>), ProtoError> {
    let mut d = Dec::new(b);
    let records = get_records(&mut d)?;
    let versions = get_versions(&mut d)?;
    d.end("the records and versions")?;
    Ok((records, versions))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(counts: &[(u8, u64)]) -> VersionVector {
        VersionVector::from_counts(counts.to_vec()).unwrap()
    }

    fn path(p: &str) -> RelPath {
        RelPath::new(p.as_bytes()).unwrap()
    }

    #[test]
    fn versions_and_records_round_trip() {
        let versions = vec![
            (path("a"), vector(&[(0, 3), (2, 1)])),
            (path("b/c"), VersionVector::default()),
        ];
        let records = vec![ArchiveRecord::Remove(path("b/c"))];
        let body = encode_record_versions(&records, &versions);
        let (back_records, back_versions) = decode_record_versions(&body).unwrap();
        assert_eq!(back_versions, versions);
        assert_eq!(back_records.len(), 1);
        assert!(matches!(&back_records[0], ArchiveRecord::Remove(p) if *p == path("b/c")));
    }

    #[test]
    fn vectors_the_archive_would_refuse_are_refused() {
        for counts in [
            vec![(1u8, 1u64), (0, 1)],
            vec![(0, 0)],
            vec![(MAX_REPLICAS as u8, 1)],
        ] {
            let mut e = Enc::new();
            e.varint(counts.len() as u64);
            for (replica, count) in counts {
                e.u8(replica).varint(count);
            }
            let bytes = e.finish();
            assert!(get_vector(&mut Dec::new(&bytes)).is_err(), "{bytes:?}");
        }
        let mut e = Enc::new();
        e.varint(MAX_REPLICAS as u64 + 1);
        let bytes = e.finish();
        assert!(get_vector(&mut Dec::new(&bytes)).is_err());
    }

    #[test]
    fn a_reply_with_another_count_of_vectors_is_refused() {
        let mut e = Enc::new();
        put_vectors(&mut e, &[vector(&[(0, 1)])]);
        let bytes = e.finish();
        assert!(get_vectors(&mut Dec::new(&bytes), 1).is_ok());
        assert!(get_vectors(&mut Dec::new(&bytes), 2).is_err());
    }
}
