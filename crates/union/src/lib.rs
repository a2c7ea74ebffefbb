//! The FUSE union file system behind `accord union`.
//!
//! Branches are ordinary directories stacked by priority (first = highest). The union shows,
//! for every name, the copy in the highest branch that has it; writes go to the highest
//! writable branch ("upper"), copying files up from read-only branches first; deletions of
//! names that exist below leave `.wh.NAME` whiteouts. Read-only branches are never modified.
//!
//! Layout: pure logic in [`branch`] (branch specs and the branch table), [`options`] (what
//! `-o` says), [`whiteout`] (naming),
//! [`redirect`] (the redirect format) and [`merge`] (one directory's merge over branches); the FUSE layer in `fs/` (one file per
//! operation family); [`control`] is the live control channel; [`guard`] refuses branches
//! inside a union of ours; `sys` wraps the system calls.
//!
//! Caching: the kernel may trust names and attributes for one second (`TTL`), and a merged
//! directory is revalidated after that by one stat per branch that holds it, so a change made
//! directly in a branch shows within about a second; a live branch change invalidates the
//! kernel's caches at once.
//!
//! Passthrough (FUSE ABI 7.40, kernel 6.9 or later, needs CAP_SYS_ADMIN): read-only opens of
//! files on read-only branches are served by the kernel straight from the branch file, so large
//! reads run at the branch's speed; everything else (writes, files on the writable branch) goes
//! through the daemon, so a snapshot freezes a branch even under open writers. The kernel binds
//! an inode to one backing file while passthrough opens of it live: when the name's file changes
//! meanwhile (a copy-up), the name gets a new inode and the open is retried on it (ESTALE), and
//! the old readers keep the file they opened, as in overlayfs. Without the privilege or on older
//! kernels all reads go through the daemon.
//!
//! Hard links: names that share one file in a branch show as one union inode with the file's
//! link count, and a copy-up of one keeps the others linked to the copy through an index in the
//! upper branch, as overlayfs does with `index=on` (`fs/index.rs`).
//!
//! Directory renames: a directory with parts in lower branches moves in place, as on overlayfs
//! with `redirect_dir=on`: its upper copy moves and holds, in the `trusted.accord.redirect`
//! xattr, the path where its lower parts show below it ([`redirect`] has the format and the
//! checks on what is read back; `fs/redirect.rs` follows and writes it). `-o redirect_dir=off`
//! makes such renames fail with EXDEV instead (`mv` then copies).
//!
//! Concurrency: a reader thread per CPU, at most four (`ACCORD_UNION_THREADS`), each
//! answers the quick requests concurrently; slow ones (copy-up, truncate, fsync, big reads and
//! writes) run on worker threads meanwhile (`fs/kernel.rs`). See `fs::State` for the locks.
//!
//! Inodes: the daemon keeps a node per inode the kernel holds and drops it on FORGET, so memory
//! follows the kernel's caches; a name looked up again after its inode was forgotten (memory
//! pressure, drop_caches) gets a new inode number, while a cache expiry (TTL) keeps it.

pub mod branch;
pub mod control;
mod fs;
pub mod guard;
pub mod merge;
pub mod options;
pub mod pool;
mod pool_action;
pub mod redirect;
mod sys;
pub mod whiteout;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fuser::MountOption;

pub use branch::Mode;

/// What `accord union mount` asks for.
#[derive(Clone, Debug)]
pub struct MountConfig {
    pub mountpoint: PathBuf,
    /// Highest priority first.
    pub branches: Vec<branch::BranchConfig>,
    /// `-o redirect_dir=on|off`: rename directories with lower parts in place (on, the
    /// default) or refuse with EXDEV (off).
    pub redirect_dir: bool,
    /// `-o readdirplus=on|off`: listings with each name's attributes (on, the default) or
    /// names only.
    pub readdirplus: bool,
    /// A pool's policies (mergerfs's model: every writable branch takes new names as the
    /// create policy says, no copy-up, no whiteouts); None for an overlay.
    pub pool: Option<pool::Policies>,
    /// Standard FUSE mount options, as [`options::parse_mount_options`] checked them.
    pub fuse: Vec<String>,
}

/// Mount the union and serve it until it is unmounted. `ready` is called once: with Ok when
/// the mount and its control socket are live (so a parent process may return), or with the
/// error that prevented it.
pub fn serve(cfg: &MountConfig, ready: impl FnOnce(Result<(), String>)) -> io::Result<()> {
    let res = setup(cfg);
    let (session, listener, shared) = match res {
        Ok(x) => x,
        Err(e) => {
            ready(Err(e.to_string()));
            return Err(e);
        }
    };
    let _ = shared.notifier.set(session.notifier());
    let shared2 = shared.clone();
    std::thread::spawn(move || {
        control::serve(listener, shared2.clone(), || forget_cached(&shared2))
    });
    ready(Ok(()));
    session.run()
}

/// After the branch table changed: make the kernel forget every name it may have cached from
/// the old table, so the change shows at once instead of after the entry timeout.
pub(crate) fn forget_cached(shared: &fs::Shared) {
    let Some(notifier) = shared.notifier.get() else {
        return;
    };
    let (names, inos) = {
        let n = shared.nodes.lock().unwrap_or_else(|e| e.into_inner());
        (n.names(), n.inos())
    };
    for (parent, name) in names {
        let _ = notifier.inval_entry(fuser::INodeNo(parent), &name);
    }
    // Cached attributes and pages may now belong to another branch's copy.
    for ino in inos {
        let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
    }
}

/// FUSE mounts start with the kernel's 128 KiB readahead, which caps every read request at
/// 128 KiB; 1 MiB requests halve the per-byte overhead of large sequential reads. Best effort:
/// needs root, and only affects files opened afterwards.
///
/// Called at the first open, before it is answered (the kernel sets a file's readahead after
/// the open returns, so that file gets it too). Not sooner: the kernel lowers the setting to
/// what the answer to its first request allowed, which cannot be more than 128 KiB. And not
/// from a stat of the mount point, which is how this once waited for that answer: a stat goes
/// through the union and holds the mount while it waits, and an unmount that came in that
/// moment (a script that mounts and unmounts at once) failed as busy. The device comes from
/// mountinfo, which touches no mount.
pub(crate) fn raise_readahead(mountpoint: &Path) {
    let Ok(mounts) = guard::our_mounts() else {
        return;
    };
    if let Some(m) = mounts.iter().rev().find(|m| m.mountpoint == mountpoint) {
        let (maj, min) = (libc::major(m.dev), libc::minor(m.dev));
        let _ = std::fs::write(format!("/sys/class/bdi/{maj}:{min}/read_ahead_kb"), "1024");
    }
}

type Setup = (
    fuser::Session<fs::Union>,
    std::os::unix::net::UnixListener,
    Arc<fs::Shared>,
);

fn setup(cfg: &MountConfig) -> io::Result<Setup> {
    if cfg.branches.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no branches given",
        ));
    }
    let mountpoint = mount_point(&cfg.mountpoint)?;
    if cfg.pool.is_none() {
        let invalid = |msg| io::Error::new(io::ErrorKind::InvalidInput, msg);
        if let Some(b) = cfg.branches.iter().find(|b| b.mode == Mode::Nc) {
            return Err(invalid(nc_needs_pool(&b.path)));
        }
        if let Some(b) = cfg.branches.iter().find(|b| b.min_free.is_some()) {
            return Err(invalid(format!(
                "branch {} has a minfreespace of its own, which only a pool uses: mount with \
                 -o category.create=POLICY (or -o pool), or give the branch without it",
                b.path.display()
            )));
        }
    }
    let branches = open_branches(cfg, &mountpoint)?;
    // Modes of new files are exactly what the caller asked for (the kernel applied the umask).
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0) };
    let shared = Arc::new(fs::Shared {
        table: Mutex::new(Arc::new(branch::Table::new(branches))),
        nodes: Mutex::new(fs::Nodes::new()),
        notifier: std::sync::OnceLock::new(),
        mountpoint: mountpoint.clone(),
        redirect_dir: cfg.redirect_dir,
        readdirplus: cfg.readdirplus,
        pool: cfg.pool.map(Mutex::new),
        readahead_raised: std::sync::Once::new(),
    });
    let listener = control::listen(&mountpoint).map_err(|e| {
        let shown = mountpoint.display();
        let text = match e.kind() {
            io::ErrorKind::AddrInUse => {
                format!("is {shown} already mounted? An accord union already serves it")
            }
            _ => format!("cannot serve {shown}: {}", io_words(&e)),
        };
        io::Error::new(e.kind(), text)
    })?;
    let mut config = fuse_config(&cfg.fuse)?;
    // Reader threads (each with its own clone of the FUSE device) answer the quick requests
    // themselves; slow ones go to workers (see fs/kernel.rs). One reader per CPU, at most
    // four: on the 2-CPU machine two beat four on every row of the pooled table against
    // mergerfs and on the overlay's metadata rows (bench/union/README.md), and four beat one.
    // Confined to one CPU (taskset, a cpuset), one: the kernel hands each request to the
    // reader that waited longest, so a caller's chain of calls would wake a different thread
    // every time, and none of them can run beside another.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    config.n_threads = Some(env_count("ACCORD_UNION_THREADS", cpus.min(4)));
    config.clone_fd = true;
    let union = fs::Union::new(shared.clone(), env_count("ACCORD_UNION_WORKERS", 4));
    let session = fuser::Session::new(union, &mountpoint, &config).map_err(mount_refused)?;
    Ok((session, listener, shared))
}

/// The words for a branch of mode `nc` in a union that is not a pool.
pub fn nc_needs_pool(branch: &Path) -> String {
    format!(
        "branch {} has mode nc (no create), which only a pool has: mount with \
         -o category.create=POLICY (or -o pool), or give the branch ro or rw",
        branch.display()
    )
}

/// The FUSE mount options and access rule: ours, then what `-o` asked for.
fn fuse_config(asked: &[String]) -> io::Result<fuser::Config> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let has = |name: &str| asked.iter().any(|o| o == name);
    let value = |key: &str| {
        asked
            .iter()
            .find_map(|o| o.strip_prefix(key)?.strip_prefix('='))
    };
    let mut config = fuser::Config::default();
    // The kernel checks permissions against the branch files' modes and owners.
    config.mount_options = vec![
        MountOption::FSName(value("fsname").unwrap_or("accord-union").into()),
        MountOption::Subtype("accord".into()),
        MountOption::DefaultPermissions,
    ];
    if root {
        // Other users may use the union (the kernel checks their permissions), devices and
        // set-id files work as in the branches, and the mount goes away if we die; `-o
        // nodev`/`nosuid` still apply.
        config.acl = fuser::SessionACL::All;
        config.mount_options.push(MountOption::AutoUnmount);
        if !has("nodev") {
            config.mount_options.push(MountOption::Dev);
        }
        if !has("nosuid") {
            config.mount_options.push(MountOption::Suid);
        }
    }
    if has("allow_other") {
        config.acl = fuser::SessionACL::All;
    } else if has("allow_root") {
        config.acl = fuser::SessionACL::RootAndOwner;
    }
    if has("auto_unmount") && !root {
        if config.acl == fuser::SessionACL::Owner {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "auto_unmount for a user other than root works only together with \
                 allow_other or allow_root",
            ));
        }
        config.mount_options.push(MountOption::AutoUnmount);
    }
    for opt in asked {
        if let Some(o) = kernel_option(opt) {
            config.mount_options.push(o);
        }
    }
    Ok(config)
}

/// A standard option that goes to the kernel as it is (the others are handled above).
fn kernel_option(opt: &str) -> Option<MountOption> {
    Some(match opt {
        "ro" => MountOption::RO,
        "rw" => MountOption::RW,
        "nodev" => MountOption::NoDev,
        "dev" => MountOption::Dev,
        "nosuid" => MountOption::NoSuid,
        "suid" => MountOption::Suid,
        "noexec" => MountOption::NoExec,
        "exec" => MountOption::Exec,
        "noatime" => MountOption::NoAtime,
        "atime" => MountOption::Atime,
        "sync" => MountOption::Sync,
        "async" => MountOption::Async,
        "dirsync" => MountOption::DirSync,
        o if o.starts_with("max_read=") => MountOption::CUSTOM(o.into()),
        _ => return None,
    })
}

/// A refused mount, in words that say what to do. fusermount3 refuses `allow_other` to users
/// other than root unless /etc/fuse.conf says `user_allow_other`.
fn mount_refused(e: io::Error) -> io::Error {
    let text = e.to_string();
    if text.contains("user_allow_other") {
        return io::Error::new(
            io::ErrorKind::PermissionDenied,
            "allow_other was refused: for a user other than root it needs the line \
             user_allow_other in /etc/fuse.conf (root may always use it)",
        );
    }
    if e.raw_os_error() == Some(libc::EACCES) {
        // The mount opens /dev/fuse and the mount point itself before anything else.
        return io::Error::new(
            e.kind(),
            "cannot mount: permission denied opening /dev/fuse or the mount point (a user \
             other than root needs read and write access to /dev/fuse, which most systems give \
             everyone, and read access to the mount point)",
        );
    }
    let words = text.trim().trim_start_matches("fusermount3: ").to_string();
    io::Error::new(
        e.kind(),
        format!("cannot mount: {}", io_words_of(&e, &words)),
    )
}

/// The words of an I/O error without the "(os error N)" that `Display` adds to them.
pub fn io_words(e: &io::Error) -> String {
    io_words_of(e, &e.to_string())
}

fn io_words_of(e: &io::Error, text: &str) -> String {
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(text)
            .to_string(),
        None => text.to_string(),
    }
}

/// `path` canonical, if it is a directory that can become a mount point; the error names it.
/// (FUSE would mount over a file too, and the union's root would then show as that file.)
pub fn mount_point(path: &Path) -> io::Result<PathBuf> {
    let named = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("mount point {}: {}", path.display(), io_words(&e)),
        )
    };
    let canonical = path.canonicalize().map_err(named)?;
    if !std::fs::metadata(&canonical).map_err(named)?.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("mount point {} is not a directory", path.display()),
        ));
    }
    Ok(canonical)
}

/// Open the branches of `cfg`, refusing one given twice, one inside the mount point and one
/// inside a union of ours (see `guard`).
fn open_branches(cfg: &MountConfig, mountpoint: &Path) -> io::Result<Vec<branch::Branch>> {
    let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
    let mounts = guard::our_mounts()?;
    let mut branches: Vec<branch::Branch> = Vec::new();
    for c in &cfg.branches {
        let b = branch::Branch::open(&c.path, c.mode).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("branch {}: {}", c.path.display(), io_words(&e)),
            )
        })?;
        let b = b.with_min_free(c.min_free);
        if branches.iter().any(|x| x.path == b.path) {
            return Err(invalid(format!("branch {} given twice", b.path.display())));
        }
        let id = b.dev_ino()?;
        guard::check_under_mountpoint(&b.path, mountpoint).map_err(invalid)?;
        guard::check_not_above(&b.path, id, mountpoint).map_err(invalid)?;
        guard::check_lexically(&b.path, &mounts).map_err(invalid)?;
        guard::check_dev(&b.path, id.0, &mounts).map_err(invalid)?;
        branches.push(b);
    }
    Ok(branches)
}

/// A thread count from the environment (1 to 64), else `default`.
fn env_count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n: &usize| (1..=64).contains(n))
        .unwrap_or(default)
}

/// Unmount a union (or any FUSE mount) at `mountpoint`; one error, in words, when it cannot.
pub fn unmount(mountpoint: &Path) -> io::Result<()> {
    let shown = mountpoint.display();
    let canonical = mountpoint
        .canonicalize()
        .map_err(|e| io::Error::new(e.kind(), format!("{shown}: {}", io_words(&e))))?;
    match guard::mount_type(&canonical)? {
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{shown} is not a mount point"),
            ))
        }
        Some(t) if t != "fuse" && !t.starts_with("fuse.") => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{shown} is a {t} mount, not a union (unmount it with umount)"),
            ))
        }
        Some(_) => {}
    }
    let out = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(&canonical)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run fusermount3: {}", io_words(&e)),
            )
        })?;
    if out.status.success() {
        return Ok(());
    }
    // fusermount3 says "fusermount3: failed to unmount PATH: REASON"; keep the reason.
    let said = String::from_utf8_lossy(&out.stderr);
    let reason = said
        .trim()
        .rsplit_once(": ")
        .map_or(said.trim(), |(_, r)| r)
        .to_string();
    Err(io::Error::other(format!(
        "cannot unmount {shown}: {reason}"
    )))
}
