//! Where each root of a set is, and so whom a receiver takes a version
//! from: a root on this host is read here, so a version crosses the wire
//! once to each remote host; and a remote root that copies from other
//! roots of its own host (the server's `CopySibling`) takes a version one
//! of them holds on that host, so its bytes do not cross the wire at all.
//! Two remote roots are on one host when their identities name the same
//! host (`identity_host_and_path`); the receiver checks the source root's
//! identity there before it copies, and the bytes' fingerprint after.

use accord_replica::{identity_host_and_path, Replica, SiblingRoot};

/// One root's place, by its index in the set's order.
#[derive(Default)]
struct Place {
    /// Across a wire (or not reached: never read from).
    far: bool,
    /// A remote root's host and its root there, by its identity.
    on_host: Option<(Vec<u8>, SiblingRoot)>,
    /// It copies a version from another root of its host.
    copies_on_host: bool,
}

/// Every root's place, in the set's order.
pub(crate) struct Places(Vec<Place>);

impl Places {
    /// The places of roots given in the set's order: the replica (`None`:
    /// not reached) and the identity that names it.
    pub(crate) fn of<'r>(
        roots: impl Iterator<Item = (Option<&'r dyn Replica>, &'r [u8])>,
    ) -> Places {
        Places(
            roots
                .map(|(replica, identity)| {
                    let Some(replica) = replica else {
                        return Place {
                            far: true,
                            ..Place::default()
                        };
                    };
                    let far = replica.local_root().is_none();
                    let on_host =
                        identity_host_and_path(identity)
                            .filter(|_| far)
                            .map(|(host, path)| {
                                let root = SiblingRoot {
                                    path: path.to_vec(),
                                    identity: replica.identity(),
                                };
                                (host.to_vec(), root)
                            });
                    Place {
                        far,
                        copies_on_host: on_host.is_some() && replica.copies_from_siblings(),
                        on_host,
                    }
                })
                .collect(),
        )
    }

    /// Is the root with set index `index` across a wire?
    pub(crate) fn far(&self, index: usize) -> bool {
        self.0[index].far
    }

    /// The holder (by set index) `receiver` takes a version from: one on
    /// the receiver's own host where it copies there, else the first on
    /// this host, else the first. The choice depends on the holders and
    /// the receiver only, so one source gives a receiver a new directory
    /// and what it holds.
    pub(crate) fn source_for(
        &self,
        holders: impl Iterator<Item = usize>,
        receiver: usize,
    ) -> usize {
        holders
            .min_by_key(|&holder| {
                let here = self.sibling(holder, receiver).is_none();
                (here, self.far(holder), holder)
            })
            .expect("a settled version has a holder")
    }

    /// The root `receiver` copies from on its own host when it takes a
    /// version from `source`: both across a wire, on one host, and the
    /// receiver copies there.
    pub(crate) fn sibling(&self, source: usize, receiver: usize) -> Option<&SiblingRoot> {
        let (to, from) = (&self.0[receiver], &self.0[source]);
        let (host, _) = to.on_host.as_ref().filter(|_| to.copies_on_host)?;
        let (from_host, root) = from.on_host.as_ref()?;
        (source != receiver && host == from_host).then_some(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Place {
        Place::default()
    }

    fn remote(host: &str, root: &str, copies_on_host: bool) -> Place {
        let root = SiblingRoot {
            path: root.as_bytes().to_vec(),
            identity: (1, root.len() as u64),
        };
        Place {
            far: true,
            on_host: Some((host.as_bytes().to_vec(), root)),
            copies_on_host,
        }
    }

    #[test]
    fn a_receiver_that_copies_on_its_host_takes_from_a_holder_there() {
        // 0 local, 1 on h1, 2 on h2, 3 on h2 (copies there), 4 on h2 (does not).
        let places = Places(vec![
            local(),
            remote("h1", "/one", true),
            remote("h2", "/two", true),
            remote("h2", "/three", true),
            remote("h2", "/four", false),
        ]);
        assert_eq!(places.source_for([0, 1, 2].into_iter(), 3), 2);
        assert_eq!(
            places.sibling(2, 3).map(|r| &r.path[..]),
            Some(&b"/two"[..])
        );
        // A holder on another host, or a receiver that does not copy there:
        // this host's holder first, else the first.
        assert_eq!(places.source_for([0, 1, 2].into_iter(), 4), 0);
        assert_eq!(places.source_for([1, 2].into_iter(), 4), 1);
        assert_eq!(places.sibling(2, 4), None);
        assert_eq!(places.source_for([1, 2].into_iter(), 0), 1);
        assert_eq!(places.source_for([0, 1].into_iter(), 3), 0);
        // A root with the receiver's host that is this host's never copies.
        assert_eq!(places.sibling(0, 3), None);
    }
}
