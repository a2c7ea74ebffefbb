//! Version vectors: which changes of one path a version includes, when a
//! sync has more than two replicas.
//!
//! With two replicas that sync only with each other, both archives always
//! hold the same last agreement, and "changed since the last agreement"
//! decides everything. With three or more, a replica may miss runs (it was
//! switched off, or unreachable), and two replicas that both look
//! unchanged against their own archives may hold versions of different
//! ages. A vector counts, per replica of the set, the changes that replica
//! originated at the path and that a version includes: one version came
//! after another exactly when its vector includes the other's
//! ([`VersionVector::includes`]), and two versions neither of whose vectors
//! includes the other's were made apart: a conflict unless they are equal.
//!
//! A replica is named by its index in the set's own order (the order of
//! its roots' identities, not the command line's), so every run of a set
//! counts the same replica at the same place.

use std::cmp::Ordering;

/// The most replicas one set may have: vectors, archives and the terminal
/// view are bounded by it.
pub const MAX_REPLICAS: usize = 32;

/// Per replica of a set, how many of its changes of one path a version
/// includes. Replicas that changed nothing are left out: an empty vector is
/// the version of a path nobody has changed (never seen, or forgotten
/// everywhere).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VersionVector {
    /// `(replica, count)`, replicas strictly increasing, counts above zero.
    counts: Vec<(u8, u64)>,
}

/// Why a vector read from outside (an archive) was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VectorError {
    /// A replica index at or above [`MAX_REPLICAS`].
    ReplicaOutOfRange(usize),
    /// Replicas not in strictly increasing order.
    OutOfOrder,
    /// A count of zero (a replica that changed nothing is left out).
    ZeroCount,
}

impl std::fmt::Display for VectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VectorError::ReplicaOutOfRange(replica) => write!(
                f,
                "names replica {replica}, but a set has at most {MAX_REPLICAS}"
            ),
            VectorError::OutOfOrder => write!(f, "lists its replicas out of order"),
            VectorError::ZeroCount => write!(f, "holds a count of zero"),
        }
    }
}

impl VersionVector {
    /// The vector of `(replica, count)` pairs, checked: replicas below
    /// [`MAX_REPLICAS`] in strictly increasing order, counts above zero.
    pub fn from_counts(counts: Vec<(u8, u64)>) -> Result<VersionVector, VectorError> {
        if let Some(&(replica, _)) = counts
            .iter()
            .find(|(replica, _)| usize::from(*replica) >= MAX_REPLICAS)
        {
            return Err(VectorError::ReplicaOutOfRange(replica.into()));
        }
        if counts.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
            return Err(VectorError::OutOfOrder);
        }
        if counts.iter().any(|&(_, count)| count == 0) {
            return Err(VectorError::ZeroCount);
        }
        Ok(VersionVector { counts })
    }

    /// The `(replica, count)` pairs, replicas increasing.
    pub fn counts(&self) -> &[(u8, u64)] {
        &self.counts
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// How many changes of `replica` this version includes.
    pub fn count(&self, replica: usize) -> u64 {
        self.counts
            .iter()
            .find(|(at, _)| usize::from(*at) == replica)
            .map_or(0, |&(_, count)| count)
    }

    /// This vector with a change originated by `replica`, which counts it
    /// as `count`: each replica counts its changes by its own counter, which
    /// only grows (the sync counts its runs), so a later change of a replica
    /// always counts more than its earlier ones and includes them, as it
    /// came after them on that replica.
    ///
    /// # Panics
    /// When `replica` is at or above [`MAX_REPLICAS`], or `count` is not
    /// above the replica's count here (a caller's bug: both are checked
    /// where they come in).
    pub fn with_change(&self, replica: usize, count: u64) -> VersionVector {
        assert!(replica < MAX_REPLICAS, "replica {replica} out of range");
        assert!(count > self.count(replica), "a change must count more");
        let replica = replica as u8;
        let mut counts = self.counts.clone();
        match counts.binary_search_by_key(&replica, |&(at, _)| at) {
            Ok(index) => counts[index].1 = count,
            Err(index) => counts.insert(index, (replica, count)),
        }
        VersionVector { counts }
    }

    /// The least vector that includes both: each replica's larger count.
    pub fn merged(&self, other: &VersionVector) -> VersionVector {
        let mut counts = Vec::with_capacity(self.counts.len().max(other.counts.len()));
        let (mut mine, mut theirs) = (
            self.counts.iter().peekable(),
            other.counts.iter().peekable(),
        );
        loop {
            let next = match (mine.peek(), theirs.peek()) {
                (None, None) => break,
                (Some(_), None) => mine.next(),
                (None, Some(_)) => theirs.next(),
                (Some(x), Some(y)) => match x.0.cmp(&y.0) {
                    Ordering::Less => mine.next(),
                    Ordering::Greater => theirs.next(),
                    Ordering::Equal => {
                        let larger = (x.0, x.1.max(y.1));
                        mine.next();
                        theirs.next();
                        counts.push(larger);
                        continue;
                    }
                },
            };
            counts.extend(next.copied());
        }
        VersionVector { counts }
    }

    /// Does this version include every change `other` includes (it came
    /// after `other`, or is the same)?
    pub fn includes(&self, other: &VersionVector) -> bool {
        other
            .counts
            .iter()
            .all(|&(replica, count)| self.count(replica.into()) >= count)
    }

    /// Does this version include `other` and more (it came strictly after)?
    pub fn strictly_includes(&self, other: &VersionVector) -> bool {
        self != other && self.includes(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vector(counts: &[(u8, u64)]) -> VersionVector {
        VersionVector::from_counts(counts.to_vec()).unwrap()
    }

    #[test]
    fn bad_vectors_are_refused() {
        assert_eq!(
            VersionVector::from_counts(vec![(32, 1)]),
            Err(VectorError::ReplicaOutOfRange(32))
        );
        assert_eq!(
            VersionVector::from_counts(vec![(2, 1), (1, 1)]),
            Err(VectorError::OutOfOrder)
        );
        assert_eq!(
            VersionVector::from_counts(vec![(1, 1), (1, 2)]),
            Err(VectorError::OutOfOrder)
        );
        assert_eq!(
            VersionVector::from_counts(vec![(1, 0)]),
            Err(VectorError::ZeroCount)
        );
    }

    #[test]
    fn a_change_comes_after_what_it_was_made_from() {
        let agreed = vector(&[(0, 2), (3, 1)]);
        let changed = agreed.with_change(1, 4);
        assert_eq!(changed, vector(&[(0, 2), (1, 4), (3, 1)]));
        assert!(changed.strictly_includes(&agreed));
        assert!(!agreed.includes(&changed));
        let elsewhere = agreed.with_change(0, 7);
        assert!(!changed.includes(&elsewhere) && !elsewhere.includes(&changed));
        let merged = changed.merged(&elsewhere);
        assert_eq!(merged, vector(&[(0, 7), (1, 4), (3, 1)]));
    }

    fn any_vector() -> impl Strategy<Value = VersionVector> {
        proptest::collection::btree_map(0u8..6, 1u64..4, 0..5)
            .prop_map(|map| VersionVector::from_counts(map.into_iter().collect()).unwrap())
    }

    proptest! {
        #[test]
        fn merging_is_the_least_upper_bound(x in any_vector(), y in any_vector(), z in any_vector()) {
            let m = x.merged(&y);
            prop_assert!(m.includes(&x) && m.includes(&y));
            prop_assert_eq!(&m, &y.merged(&x));
            if z.includes(&x) && z.includes(&y) {
                prop_assert!(z.includes(&m));
            }
            prop_assert_eq!(x.merged(&x), x.clone());
            prop_assert!(VersionVector::from_counts(m.counts().to_vec()).is_ok());
        }

        #[test]
        fn inclusion_is_a_partial_order(x in any_vector(), y in any_vector()) {
            prop_assert!(x.includes(&x));
            if x.includes(&y) && y.includes(&x) {
                prop_assert_eq!(&x, &y);
            }
            prop_assert!(x.includes(&VersionVector::default()));
        }
    }
}
