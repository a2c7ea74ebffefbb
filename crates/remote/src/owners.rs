//! What a server not running as root may do with a file's owner: as
//! rsync's receiver, it gives no file away (only root may change an
//! owner) and sets a file's group only to one of its own user's groups
//! (what chown(2) allows that user). A request asking for more is carried
//! out without the owner change it may not make, not failed: the client
//! was told at the handshake (`FEATURE_NO_OWNERS`) and says so once.

use accord_fsys::PropsMask;
use accord_model::Props;
use accord_proto::Request;
use std::borrow::Cow;

/// The owner changes this process may make.
#[derive(Clone, Debug)]
pub struct OwnerLimits {
    /// Running as root: every owner change is made as asked.
    root: bool,
    /// The user files are written as.
    uid: u32,
    /// The groups a file may be given (the effective and supplementary
    /// groups of this process).
    groups: Vec<u32>,
}

/// chown(2)'s "leave this id as it is".
const UNCHANGED: u32 = u32::MAX;

impl OwnerLimits {
    /// The limits of this process, as it runs now.
    pub fn of_this_process() -> OwnerLimits {
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        OwnerLimits {
            root: uid == 0,
            uid,
            groups: std::iter::once(gid).chain(supplementary_groups()).collect(),
        }
    }

    /// Whether this process keeps the owners it is sent.
    pub fn keeps_owners(&self) -> bool {
        self.root
    }

    /// `req` as this process may carry it out, and whether an owner or
    /// group it asks for is left out. Unchanged when it asks for no owner
    /// or this process is root; otherwise the user is left as it is
    /// (unless it is ours already), and the group too unless it is one of
    /// ours.
    pub fn limit<'a>(&self, req: &'a Request) -> (Cow<'a, Request>, bool) {
        if self.root || !asks_for_owner(req) {
            return (Cow::Borrowed(req), false);
        }
        let mut req = req.clone();
        let left_out = match &mut req {
            Request::Receive { props, mask, .. }
            | Request::CopySibling { props, mask, .. }
            | Request::PatchInPlace { props, mask, .. }
            | Request::SetProps { props, mask, .. }
            | Request::SetOwnProps { props, mask, .. } => self.limit_props(props, mask),
            Request::MakeNode { entry, mask, .. } => self.limit_props(&mut entry.props, mask),
            _ => false,
        };
        (Cow::Owned(req), left_out)
    }

    /// Leave out of `props` what this user may not set; whether anything was.
    fn limit_props(&self, props: &mut Props, mask: &mut PropsMask) -> bool {
        let mut left_out = false;
        if props.uid != self.uid {
            props.uid = UNCHANGED;
            left_out = true;
        }
        if !self.groups.contains(&props.gid) {
            props.gid = UNCHANGED;
            left_out = true;
        }
        if props.uid == UNCHANGED && props.gid == UNCHANGED {
            mask.owner = false;
        }
        left_out
    }
}

/// Whether a request would change an owner.
fn asks_for_owner(req: &Request) -> bool {
    match req {
        Request::Receive { mask, .. }
        | Request::CopySibling { mask, .. }
        | Request::PatchInPlace { mask, .. }
        | Request::SetProps { mask, .. }
        | Request::SetOwnProps { mask, .. }
        | Request::MakeNode { mask, .. } => mask.owner,
        _ => false,
    }
}

/// The supplementary groups of this process (none when they cannot be read).
fn supplementary_groups() -> Vec<u32> {
    // SAFETY: with a size of 0, getgroups only counts.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: `groups` has room for `n` ids.
    let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    groups.truncate(got.max(0) as usize);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_model::RelPath;

    fn set_props(uid: u32, gid: u32) -> Request {
        Request::SetProps {
            dir: RelPath::new(b"").unwrap(),
            name: b"f".to_vec(),
            expect: accord_model::Expect::Absent,
            kind: accord_model::Kind::File,
            props: Props {
                uid,
                gid,
                ..Default::default()
            },
            mask: PropsMask {
                perms: true,
                owner: true,
                times: true,
                xattrs: None,
            },
        }
    }

    fn props_and_mask(req: &Request) -> (&Props, PropsMask) {
        match req {
            Request::SetProps { props, mask, .. } => (props, *mask),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_user_gives_no_file_away_and_sets_only_its_own_groups() {
        let user = OwnerLimits {
            root: false,
            uid: 1000,
            groups: vec![100, 7],
        };
        let asked = set_props(1234, 7);
        let (limited, left_out) = user.limit(&asked);
        let (props, mask) = props_and_mask(&limited);
        assert_eq!((props.uid, props.gid, mask.owner), (UNCHANGED, 7, true));
        assert!(left_out);
        let asked = set_props(1234, 42);
        let (limited, left_out) = user.limit(&asked);
        let (_, mask) = props_and_mask(&limited);
        assert!(left_out && !mask.owner && mask.perms && mask.times);
        // The user's own files, in its own group: nothing is left out.
        let asked = set_props(1000, 100);
        let (limited, left_out) = user.limit(&asked);
        let (props, mask) = props_and_mask(&limited);
        assert_eq!((props.uid, props.gid, mask.owner), (1000, 100, true));
        assert!(!left_out);

        let root = OwnerLimits {
            root: true,
            uid: 0,
            groups: vec![0],
        };
        let asked = set_props(1234, 42);
        let (limited, left_out) = root.limit(&asked);
        assert!(matches!(limited, Cow::Borrowed(_)) && !left_out);
    }
}
