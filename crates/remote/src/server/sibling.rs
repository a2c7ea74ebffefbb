//! `CopySibling`: a file of another root of this host copied into a temp
//! here, so that a sync of several roots with two of them on this host
//! does not carry its bytes out to the client and back. Offered only to a
//! session without a restriction (one that may open any path its user
//! may), and only from a directory whose identity is the one the client
//! saw when it reached that root: a path that has come to name another
//! directory is refused. What is copied is fingerprinted as it passes and
//! must have the hash update detection found; otherwise the temp goes.

use super::{denied, io_error, to_wire, Reply, Session};
use accord_model::RelPath;
use accord_proto::Request;
use accord_replica::{Action, Fingerprinting, Incoming, LocalReplica, Replica};
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

/// Roots copied from that a session keeps open (a set has few).
const KEPT_SIBLINGS: usize = 16;

/// The roots of this host a session copied from, by path.
pub(super) type Siblings = HashMap<Vec<u8>, Arc<LocalReplica>>;

impl Session<'_> {
    pub(super) fn copy_sibling(&self, stream: u32, req: &Request) -> Reply {
        let Request::CopySibling {
            dir,
            name,
            root,
            identity,
            path,
            expect,
            hash,
            props,
            mask,
        } = req
        else {
            unreachable!("only a CopySibling comes here");
        };
        if !self.sibling_copies {
            return Err(denied(
                "this session does not copy from other roots of its host",
            ));
        }
        let sibling = self.sibling(root, *identity)?;
        let parent = path.parent().unwrap_or_else(RelPath::root);
        let source = sibling
            .open_dir(&parent)
            .map_err(|e| io_error(Action::OpenSource, &e))?;
        let mut reader = source
            .open_read(path.file_name(), expect)
            .map_err(|e| to_wire(&e))?;
        let mut passing = Fingerprinting::new(&mut *reader);
        let d = self.dir(dir, Action::WriteTemp)?;
        let temp = d
            .receive(name, Incoming::Whole(&mut passing), props, *mask)
            .map_err(|e| to_wire(&e))?;
        if passing.finish() != *hash {
            d.discard(&temp);
            let changed = io::Error::other("the file was written while it was copied");
            return Err(io_error(Action::ReadSource, &changed));
        }
        Ok(self.issue_temp(stream, dir, temp))
    }

    /// The root at `path`, opened once a session, if it is the directory
    /// with `identity`.
    fn sibling(
        &self,
        path: &[u8],
        identity: (u64, u64),
    ) -> Result<Arc<LocalReplica>, super::WireError> {
        use std::os::unix::ffi::OsStrExt;
        let mut kept = self.siblings.lock().unwrap();
        if let Some(root) = kept.get(path) {
            return Ok(root.clone());
        }
        let at = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
        let root = LocalReplica::open(at).map_err(|e| io_error(Action::OpenSource, &e))?;
        if root.identity() != identity {
            return Err(denied(
                "the root to copy from is not the directory the client reached",
            ));
        }
        if kept.len() >= KEPT_SIBLINGS {
            kept.clear();
        }
        let root = Arc::new(root);
        kept.insert(path.to_vec(), root.clone());
        Ok(root)
    }
}
