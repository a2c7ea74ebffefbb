//! What `-o` says: the union's own options (Unionfs's `dirs=`, overlayfs's `redirect_dir=`) and
//! the standard FUSE mount options of mount.fuse3(8), which go to the mount itself.
//!
//! Every option is checked here, so a mistyped one is refused by name before anything is
//! mounted rather than ignored or reported by a helper program in its own words.

use crate::branch::{parse_spec, BranchSpec};
use crate::pool::Policies;

/// Everything `-o` said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountOptions {
    /// Unionfs's `dirs=/a=rw:/b=ro`.
    pub branches: Vec<BranchSpec>,
    /// overlayfs's `redirect_dir=on|off` (see `crate::redirect`); on unless switched off.
    pub redirect_dir: bool,
    /// `readdirplus=on|off`: listings carry each name's attributes (on, the default: one
    /// request per chunk of a listing for `ls -l`, `find`, `du`), or names only (off: a
    /// listing of names alone costs less, and each name stat'ed after costs a LOOKUP).
    pub readdirplus: bool,
    /// A pool (mergerfs's model) rather than an overlay: set by `pool` or by any of
    /// mergerfs's policy options (`category.create=`, `func.create=`, `minfreespace=` …).
    pub pool: Option<Policies>,
    /// Standard FUSE options in their canonical spelling (`allow_other`, `nodev`,
    /// `fsname=NAME` …); when two say opposite things (`ro` and `rw`) the later one wins, as
    /// with mount(8).
    pub fuse: Vec<String>,
}

/// Kernel mount flags, each with its opposite.
const FLAGS: [(&str, &str); 7] = [
    ("ro", "rw"),
    ("nodev", "dev"),
    ("nosuid", "suid"),
    ("noexec", "exec"),
    ("noatime", "atime"),
    ("sync", "async"),
    ("dirsync", ""),
];

/// FUSE options without a value.
const SWITCHES: [&str; 4] = [
    "allow_other",
    "allow_root",
    "auto_unmount",
    "default_permissions",
];

/// The options we take, for the error that names an unknown one.
const KNOWN: &str = "dirs=, redirect_dir=on|off, readdirplus=on|off, pool, category.create=, category.action=, \
     category.search=, func.NAME=, minfreespace=, moveonenospc=, allow_other, allow_root, default_permissions, \
     auto_unmount, fsname=, subtype=accord, max_read=, ro, rw, dev, nodev, suid, nosuid, exec, \
     noexec, atime, noatime, sync, async, dirsync";

/// Parse comma-separated mount options; any option not known is refused.
pub fn parse_mount_options(opts: &str) -> Result<MountOptions, String> {
    let mut out = MountOptions {
        redirect_dir: true,
        readdirplus: true,
        ..MountOptions::default()
    };
    for opt in opts.split(',').filter(|o| !o.is_empty()) {
        if let Some(dirs) = opt.strip_prefix("dirs=") {
            for d in dirs.split(':') {
                out.branches.push(parse_spec(d)?);
            }
        } else if let Some(v) = opt.strip_prefix("redirect_dir=") {
            out.redirect_dir = match v {
                "on" => true,
                "off" => false,
                _ => return Err(format!("redirect_dir={v:?}: on or off")),
            };
        } else if let Some(v) = opt.strip_prefix("readdirplus=") {
            out.readdirplus = match v {
                "on" => true,
                "off" => false,
                _ => return Err(format!("readdirplus={v:?}: on or off")),
            };
        } else if opt == "pool" {
            out.pool.get_or_insert_with(Policies::default);
        } else if !pool_option(&mut out, opt)? {
            let fuse = fuse_option(opt)?;
            out.add_fuse(fuse);
        }
    }
    Ok(out)
}

/// A pool option (`KEY=VALUE` of mergerfs's): applied, and the union made a pool. Ok(false)
/// when `opt` is not one.
fn pool_option(out: &mut MountOptions, opt: &str) -> Result<bool, String> {
    let Some((key, value)) = opt.split_once('=') else {
        return Ok(false);
    };
    let mut p = out.pool.unwrap_or_default();
    if !p.set(key, value)? {
        return Ok(false);
    }
    out.pool = Some(p);
    Ok(true)
}

impl MountOptions {
    /// Record a FUSE option; it replaces an earlier one that says the opposite or sets the
    /// same name.
    fn add_fuse(&mut self, opt: String) {
        let opposite = FLAGS.iter().find_map(|&(a, b)| match opt.as_str() {
            o if o == a => Some(b),
            o if o == b => Some(a),
            _ => None,
        });
        let key = opt.split_once('=').map(|(k, _)| k);
        self.fuse.retain(|o| {
            let same_key = key.is_some_and(|k| o.split_once('=').is_some_and(|(ok, _)| ok == k));
            o != &opt && Some(o.as_str()) != opposite && !same_key
        });
        self.fuse.push(opt);
    }

    /// Is the FUSE option `name` (without a value) set?
    pub fn has(&self, name: &str) -> bool {
        self.fuse.iter().any(|o| o == name)
    }
}

/// One standard FUSE option, checked; the error names it and says what to do.
fn fuse_option(opt: &str) -> Result<String, String> {
    let (name, value) = match opt.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (opt, None),
    };
    let flag = FLAGS.iter().any(|&(a, b)| name == a || name == b);
    match (name, value) {
        _ if value.is_none() && (flag || SWITCHES.contains(&name)) => Ok(opt.to_string()),
        ("fsname", Some(v)) if !v.is_empty() => Ok(opt.to_string()),
        ("subtype", Some("accord")) => Ok(opt.to_string()),
        ("subtype", Some(v)) => Err(format!(
            "subtype={v}: the subtype of a union is always accord (the type fuse.accord is how \
             accord union recognises its own mounts)"
        )),
        ("max_read", Some(v)) if v.parse::<u32>().is_ok_and(|n| n > 0) => Ok(opt.to_string()),
        ("fd" | "rootmode" | "user_id" | "group_id", _) => Err(format!(
            "mount option {opt:?} is set by the FUSE mount itself and cannot be given"
        )),
        ("blkdev" | "blksize", _) => Err(format!(
            "mount option {opt:?} is for FUSE file systems on a block device, which a union \
             is not"
        )),
        _ => Err(format!("unknown mount option {opt:?} (known: {KNOWN})")),
    }
}

/// Options that mount(8) and fstab(5) put in the option list for themselves (when to mount,
/// who may, comments for other programs) and that mount.fuse3 drops before starting a file
/// system: `defaults`, `auto`, `noauto`, `user`, `users`, `nouser`, `owner`, `group`,
/// `_netdev`, `nofail`, `comment=…`, `x-…`/`X-…` (`x-systemd.automount` and the like).
pub fn is_fstab_only(opt: &str) -> bool {
    const WORDS: [&str; 10] = [
        "defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group", "_netdev",
        "nofail",
    ];
    WORDS.contains(&opt)
        || opt.starts_with("comment=")
        || opt.starts_with("x-")
        || opt.starts_with("X-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::branch::Mode;

    #[test]
    fn union_options() {
        let o = parse_mount_options("dirs=/a=rw:/b=ro:/c").unwrap();
        assert!(o.redirect_dir);
        assert_eq!(o.branches.len(), 3);
        assert_eq!(o.branches[1].mode, Some(Mode::Ro));
        let o = parse_mount_options("redirect_dir=off,dirs=/a").unwrap();
        assert!(!o.redirect_dir);
        assert_eq!(o.branches.len(), 1);
        assert!(parse_mount_options("redirect_dir=yes").is_err());
        assert!(parse_mount_options("").unwrap().readdirplus);
        assert!(!parse_mount_options("readdirplus=off").unwrap().readdirplus);
        assert!(parse_mount_options("readdirplus=no").is_err());
    }

    #[test]
    fn pool_options() {
        assert_eq!(parse_mount_options("dirs=/a").unwrap().pool, None);
        let o = parse_mount_options("category.create=mfs,minfreespace=1G,allow_other").unwrap();
        let p = o.pool.unwrap();
        let create = p.create(crate::pool::CreateFn::Create);
        assert_eq!((create.to_string(), p.min_free), ("mfs".into(), 1 << 30));
        let per_function = parse_mount_options("func.chmod=epff,func.getattr=ff").unwrap();
        let chmod = per_function
            .pool
            .unwrap()
            .action(crate::pool::ActionFn::Chmod);
        assert_eq!(chmod.to_string(), "epff");
        assert_eq!(o.fuse, ["allow_other"]);
        assert_eq!(
            parse_mount_options("pool").unwrap().pool,
            Some(Policies::default())
        );
        let err = parse_mount_options("func.create=best").unwrap_err();
        assert!(
            err.contains("func.create=best") && err.contains("lus"),
            "{err}"
        );
    }

    #[test]
    fn fuse_options_pass_and_the_later_of_two_opposites_wins() {
        let o = parse_mount_options(
            "allow_other,ro,nodev,nosuid,noexec,fsname=pool,noatime,rw,fsname=data,max_read=65536",
        )
        .unwrap();
        assert_eq!(
            o.fuse,
            [
                "allow_other",
                "nodev",
                "nosuid",
                "noexec",
                "noatime",
                "rw",
                "fsname=data",
                "max_read=65536"
            ]
        );
        assert!(o.has("allow_other") && !o.has("ro"));
    }

    #[test]
    fn unknown_and_unusable_options_are_named() {
        let err = parse_mount_options("dirs=/a,alow_other").unwrap_err();
        assert!(
            err.contains("\"alow_other\"") && err.contains("allow_other"),
            "{err}"
        );
        for bad in [
            "subtype=foo",
            "fd=3",
            "blkdev",
            "max_read=x",
            "ro=1",
            "direct_io",
        ] {
            let err = parse_mount_options(bad).unwrap_err();
            assert!(err.contains(bad.split('=').next().unwrap()), "{bad}: {err}");
        }
        assert!(parse_mount_options("subtype=accord").is_ok());
    }

    #[test]
    fn fstab_words() {
        for w in [
            "defaults",
            "noauto",
            "_netdev",
            "nofail",
            "x-systemd.automount",
            "X-mount.mkdir",
        ] {
            assert!(is_fstab_only(w), "{w}");
        }
        for w in ["ro", "allow_other", "xattr"] {
            assert!(!is_fstab_only(w), "{w}");
        }
    }
}
