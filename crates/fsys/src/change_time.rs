//! Whether a file system's change times vouch for a file from the moment
//! they are read: whether every change made after a stat moves the ctime
//! that stat returned.
//!
//! File systems stamp changes with a coarse clock (one tick of a few
//! milliseconds), so on most a write made just after a stat, within the
//! same tick as the file's last change, leaves its ctime as it was: a ctime
//! vouches for a file only once it is older than any tick that could still
//! be running (the two-second rule of the sync's scan). Since Linux 6.13,
//! ext4, XFS, Btrfs and tmpfs use *multigrain* timestamps: once a stat has
//! read an inode's ctime, the next change of that inode takes a
//! fine-grained timestamp, later than the one read. There a file a sync has
//! just written can be recorded with the ctime a stat read right after, and
//! the next run need not read it again.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The file systems that took multigrain timestamps in Linux 6.13, by the
/// type the mount table names (ext2 and ext3 mounts, served by the ext4
/// driver under those names, are not among them).
const MULTIGRAIN_FILE_SYSTEMS: [&str; 4] = ["ext4", "xfs", "btrfs", "tmpfs"];

/// The first kernel release with multigrain timestamps.
const MULTIGRAIN_SINCE: (u32, u32) = (6, 13);

/// Whether a change made to a file of the file system with device number
/// `dev` (as `stat` gives it) after a stat read its ctime moves that ctime
/// (see the module comment). False when the mount table does not name
/// that device (a Btrfs subvolume's own device number, say): the caller
/// then keeps to the coarse rule. Each device is looked up once.
pub fn ctime_moves_after_stat(dev: u64) -> bool {
    static SEEN: OnceLock<Mutex<HashMap<u64, bool>>> = OnceLock::new();
    if !kernel_has_multigrain() {
        return false;
    }
    let seen = SEEN.get_or_init(Mutex::default);
    if let Some(&moves) = seen.lock().expect("not poisoned").get(&dev) {
        return moves;
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let moves = fs_type_of(&mounts, dev).is_some_and(|t| MULTIGRAIN_FILE_SYSTEMS.contains(&t));
    seen.lock().expect("not poisoned").insert(dev, moves);
    moves
}

fn kernel_has_multigrain() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        release_at_least(&release, MULTIGRAIN_SINCE)
    })
}

/// The file system type `mountinfo` (proc(5)) gives for device `dev`, when
/// every mount of that device agrees on it.
fn fs_type_of(mountinfo: &str, dev: u64) -> Option<&str> {
    let wanted = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let mut found = None;
    for line in mountinfo.lines() {
        let mut fields = line.split(' ');
        if fields.nth(2) != Some(wanted.as_str()) {
            continue;
        }
        let fs_type = fields.skip_while(|&f| f != "-").nth(1)?;
        match found {
            Some(seen) if seen != fs_type => return None,
            _ => found = Some(fs_type),
        }
    }
    found
}

/// Whether a kernel release string ("6.18.0-1-amd64") is `since` or later.
fn release_at_least(release: &str, since: (u32, u32)) -> bool {
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= since,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_compared_by_major_and_minor() {
        assert!(release_at_least("6.13.0", (6, 13)));
        assert!(release_at_least("6.18.0-1-cloud-amd64\n", (6, 13)));
        assert!(release_at_least("7.0", (6, 13)));
        assert!(!release_at_least("6.12.48+deb13-amd64", (6, 13)));
        assert!(!release_at_least("5.19.0", (6, 13)));
        assert!(!release_at_least("", (6, 13)));
        assert!(!release_at_least("garbage", (6, 13)));
    }

    #[test]
    fn a_device_is_named_by_its_mounts() {
        let table = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                     29 27 254:1 / / rw,relatime - ext4 /dev/vda1 rw\n\
                     31 29 254:1 /srv /srv rw,relatime shared:3 - ext4 /dev/vda1 rw\n\
                     33 29 8:17 / /old rw - ext3 /dev/sdb1 rw\n\
                     34 29 8:33 / /odd rw - ext4 /dev/sdc1 rw\n\
                     35 29 8:33 / /odd2 rw - xfs /dev/sdc1 rw\n";
        assert_eq!(fs_type_of(table, libc::makedev(254, 1)), Some("ext4"));
        assert_eq!(fs_type_of(table, libc::makedev(8, 17)), Some("ext3"));
        assert_eq!(fs_type_of(table, libc::makedev(0, 21)), Some("proc"));
        assert_eq!(fs_type_of(table, libc::makedev(9, 9)), None);
        assert_eq!(
            fs_type_of(table, libc::makedev(8, 33)),
            None,
            "mounts disagree"
        );
    }

    /// Where it is claimed, a change right after a stat moves the ctime,
    /// however soon it comes.
    #[test]
    fn where_it_is_claimed_a_change_after_a_stat_moves_the_ctime() {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("accord-ctime-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("probe");
        let mut file = std::fs::File::create(&path).unwrap();
        let claimed = ctime_moves_after_stat(file.metadata().unwrap().dev());
        let mut unmoved = 0;
        for _ in 0..200 {
            let before = std::fs::symlink_metadata(&path).unwrap();
            file.write_all(b"x").unwrap();
            let after = std::fs::symlink_metadata(&path).unwrap();
            unmoved += ((before.ctime(), before.ctime_nsec())
                == (after.ctime(), after.ctime_nsec())) as u32;
        }
        std::fs::remove_dir_all(&dir).unwrap();
        if claimed {
            assert_eq!(unmoved, 0, "a change after a stat left the ctime as read");
        } else {
            eprintln!("this kernel or file system gives coarse ctimes ({unmoved} of 200 unmoved)");
        }
    }
}
