//! Which directories may become branches.
//!
//! A branch inside a union of ours (the union itself, or another one) makes the daemon that
//! serves it look names up through its own mount: the request waits for a reader thread that
//! is itself waiting, and every access to the mount blocks for good. Such branches are refused
//! by device (a FUSE mount has a device of its own) and, for the mount point that does not
//! exist yet when a union is mounted, by device and inode.
//!
//! Our mounts are found in `/proc/self/mountinfo`, which is read without touching any mount:
//! a daemon checking a path against its own union must never wait on that union.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// The file system type of our mounts (`fuse.` and the subtype given at mount).
const FSTYPE: &str = "fuse.accord";

/// A mount of ours: its device (what `st_dev` of every file in it says) and mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurMount {
    pub dev: u64,
    pub mountpoint: PathBuf,
}

/// Every union of ours mounted in this mount namespace.
pub fn our_mounts() -> io::Result<Vec<OurMount>> {
    const MOUNTINFO: &str = "/proc/self/mountinfo";
    match std::fs::read_to_string(MOUNTINFO) {
        Ok(text) => Ok(parse_mountinfo(&text)),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("{MOUNTINFO}: {}", crate::io_words(&e)),
        )),
    }
}

/// The mounts of type `FSTYPE` in the text of a mountinfo file.
fn parse_mountinfo(text: &str) -> Vec<OurMount> {
    text.lines().filter_map(parse_line).collect()
}

/// `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER` (proc(5)).
fn parse_line(line: &str) -> Option<OurMount> {
    let (left, right) = line.split_once(" - ")?;
    if right.split(' ').next()? != FSTYPE {
        return None;
    }
    let fields: Vec<&str> = left.split(' ').collect();
    let (maj, min) = fields.get(2)?.split_once(':')?;
    let dev = libc::makedev(maj.parse().ok()?, min.parse().ok()?);
    Some(OurMount {
        dev,
        mountpoint: PathBuf::from(unescape(fields.get(4)?)),
    })
}

/// The file system type of the mount whose mount point is `path` (canonical), if one is;
/// the last one mounted there when several are.
pub fn mount_type(path: &Path) -> io::Result<Option<String>> {
    const MOUNTINFO: &str = "/proc/self/mountinfo";
    let text = std::fs::read_to_string(MOUNTINFO)
        .map_err(|e| io::Error::new(e.kind(), format!("{MOUNTINFO}: {}", crate::io_words(&e))))?;
    Ok(text.lines().rev().find_map(|l| type_at(l, path)))
}

fn type_at(line: &str, path: &Path) -> Option<String> {
    let (left, right) = line.split_once(" - ")?;
    let mountpoint = unescape(left.split(' ').nth(4)?);
    (Path::new(&mountpoint) == path).then(|| right.split(' ').next().unwrap_or("").to_string())
}

/// Mount points escape space, tab, newline and backslash as `\ooo` (octal).
fn unescape(s: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push(
                    d.iter()
                        .fold(0u8, |acc, c| acc.wrapping_mul(8) + (c - b'0')),
                );
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

fn refusal(dir: &Path, m: &OurMount) -> String {
    format!(
        "{} is inside the accord union mounted at {}: a branch there would make the union \
         wait on itself, so it is refused",
        dir.display(),
        m.mountpoint.display()
    )
}

/// Refuse absolute path `dir` if it lies at or under the mount point of a union of ours,
/// judged by its components alone: nothing is looked up, so this cannot wait on a union. Only
/// exact for a path without symlinks (`canonicalize` makes one); `check_dev` is the full check.
pub fn check_lexically(dir: &Path, mounts: &[OurMount]) -> Result<(), String> {
    let clean: PathBuf = dir
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    match mounts.iter().find(|m| clean.starts_with(&m.mountpoint)) {
        Some(m) => Err(refusal(dir, m)),
        None => Ok(()),
    }
}

/// Refuse a directory whose device (`st_dev` of an open handle or a stat) is that of a union
/// of ours.
pub fn check_dev(dir: &Path, dev: u64, mounts: &[OurMount]) -> Result<(), String> {
    match mounts.iter().find(|m| m.dev == dev) {
        Some(m) => Err(refusal(dir, m)),
        None => Ok(()),
    }
}

/// The full check of a directory about to be named as a branch (from a process that does not
/// serve any union: it looks the path up): its path and device against every union of ours.
pub fn check_branch(dir: &Path) -> Result<(), String> {
    let mounts = our_mounts()
        .map_err(|e| format!("cannot read the mount table: {}", crate::io_words(&e)))?;
    check_lexically(dir, &mounts)?;
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {}", dir.display(), crate::io_words(&e)))?;
    check_lexically(&dir, &mounts)?;
    let dev = std::fs::metadata(&dir)
        .map_err(|e| format!("{}: {}", dir.display(), crate::io_words(&e)))?
        .dev();
    check_dev(&dir, dev, &mounts)
}

/// Before a union is mounted at `mountpoint`: refuse canonical branch `dir` if it is the mount
/// point or lies under it (the same directory by device and inode, so a bind mount of it
/// counts too), since the union would then cover its own branch.
pub fn check_under_mountpoint(dir: &Path, mountpoint: &Path) -> Result<(), String> {
    let target = std::fs::metadata(mountpoint).map_err(|e| {
        format!(
            "mount point {}: {}",
            mountpoint.display(),
            crate::io_words(&e)
        )
    })?;
    let id = (target.dev(), target.ino());
    for ancestor in dir.ancestors() {
        let Ok(m) = std::fs::metadata(ancestor) else {
            continue;
        };
        if (m.dev(), m.ino()) == id {
            return Err(format!(
                "branch {} lies inside the mount point {}",
                dir.display(),
                mountpoint.display()
            ));
        }
    }
    Ok(())
}

/// Refuse branch `dir` (canonical; `id` its device and inode) if it holds `mountpoint`
/// (canonical): the union would show itself inside itself, and a walk down that endless tree
/// ties up every thread that serves it. By path, and by device and inode of the mount point's
/// ancestors (the mount point itself is not looked at: from the daemon that would be a look
/// inside its own mount).
pub fn check_not_above(dir: &Path, id: (u64, u64), mountpoint: &Path) -> Result<(), String> {
    let refuse = || {
        Err(format!(
            "branch {} holds the mount point {}: the union would contain itself",
            dir.display(),
            mountpoint.display()
        ))
    };
    if mountpoint.starts_with(dir) {
        return refuse();
    }
    for ancestor in mountpoint.ancestors().skip(1) {
        if let Ok(m) = std::fs::symlink_metadata(ancestor) {
            if (m.dev(), m.ino()) == id {
                return refuse();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
42 22 0:39 / /tmp/u\\040mnt rw,relatime shared:5 - fuse.accord accord-union rw,user_id=0
43 22 0:40 / /tmp/other rw - fuse.sshfs host: rw
44 22 0:41 /sub /srv/bind rw - fuse.accord accord-union rw
";

    #[test]
    fn finds_our_mounts_only() {
        let m = parse_mountinfo(INFO);
        assert_eq!(
            m,
            vec![
                OurMount {
                    dev: libc::makedev(0, 39),
                    mountpoint: "/tmp/u mnt".into()
                },
                OurMount {
                    dev: libc::makedev(0, 41),
                    mountpoint: "/srv/bind".into()
                },
            ]
        );
    }

    #[test]
    fn paths_at_or_under_a_mount_are_refused() {
        let m = parse_mountinfo(INFO);
        assert!(check_lexically(Path::new("/tmp/u mnt"), &m).is_err());
        assert!(check_lexically(Path::new("/tmp/u mnt/./x/y"), &m).is_err());
        assert!(check_lexically(Path::new("/srv/bind/a"), &m).is_err());
        assert!(check_lexically(Path::new("/tmp/u mntx"), &m).is_ok());
        assert!(check_lexically(Path::new("/tmp"), &m).is_ok());
        assert!(check_dev(Path::new("/x"), libc::makedev(0, 41), &m).is_err());
        assert!(check_dev(Path::new("/x"), libc::makedev(8, 1), &m).is_ok());
    }
}
