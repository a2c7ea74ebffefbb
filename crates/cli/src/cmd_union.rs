//! `accord union`: mount, unmount and reconfigure a live union file system; also
//! `mount.fuse.accord`, the helper mount(8) runs for unions in fstab (`mount_helper`).

mod mount_helper;

use std::ffi::OsStr;
use std::io::{BufRead, ErrorKind};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use accord_union::branch::{default_modes, mistyped_mode, parse_spec, BranchConfig, BranchSpec};
use accord_union::options::parse_mount_options;
use accord_union::{guard, io_words};
use accord_union::{Mode, MountConfig};

pub use mount_helper::run_as_mount_helper;

use crate::exit;

#[derive(clap::Args)]
pub struct UnionArgs {
    #[command(subcommand)]
    cmd: UnionCmd,
}

#[derive(clap::Subcommand)]
enum UnionCmd {
    /// Mount a union of BRANCHES (highest priority first) at MNT.
    ///
    /// A branch is DIR, DIR=rw, DIR=ro or (in a pool) DIR=nc; without a mode the first branch
    /// is writable and the others read-only (in a pool, all writable). In a pool a branch may
    /// have a minfreespace of its own, as mergerfs spells it: DIR=RW,10G. `-o dirs=/a=rw:/b=ro`
    /// is Unionfs's spelling of the same list.
    Mount {
        mountpoint: PathBuf,
        branches: Vec<String>,
        /// Mount options, comma-separated: `dirs=` (branches), `redirect_dir=on|off` (off:
        /// renaming a directory with lower parts fails with EXDEV instead of moving it in
        /// place), `readdirplus=on|off` (off: listings of names only, which the kernel then
        /// looks up one by one when they are stat'ed), mergerfs's pool options (`pool`, `category.create=POLICY`,
        /// `category.action=`, `category.search=`, `func.NAME=POLICY`, `minfreespace=SIZE`,
        /// `moveonenospc=`: every writable branch takes new names as the policy says), and the
        /// standard FUSE options: allow_other, allow_root,
        /// default_permissions, auto_unmount, fsname=, max_read=, ro, rw, nodev, nosuid,
        /// noexec, noatime, sync, dirsync and their opposites. May be given more than once.
        #[arg(short = 'o')]
        options: Vec<String>,
        /// Stay in the foreground until unmounted.
        #[arg(long)]
        foreground: bool,
        /// (internal) report readiness on this descriptor
        #[arg(long, hide = true)]
        notify_fd: Option<i32>,
    },
    /// Unmount the union at MNT.
    Umount { mountpoint: PathBuf },
    /// Add DIR as a branch of the live union at MNT.
    Add {
        mountpoint: PathBuf,
        dir: PathBuf,
        /// Insert below branch number N (as `list` numbers them). Default: a read-only
        /// branch goes directly below the writable one (it never hides a writable name), a
        /// writable one on top (it takes the writes from then on).
        #[arg(long)]
        after: Option<usize>,
        /// ro, rw or (in a pool) nc.
        #[arg(long, default_value = "ro")]
        mode: String,
    },
    /// Remove branch DIR from the live union at MNT (open files keep working).
    Remove { mountpoint: PathBuf, dir: PathBuf },
    /// Make branch DIR of the union at MNT read-only (ro), writable (rw) or, in a pool,
    /// writable but not taking new names (nc).
    Mode {
        mountpoint: PathBuf,
        dir: PathBuf,
        mode: String,
    },
    /// List the branches of the union at MNT: number, mode, directory.
    List { mountpoint: PathBuf },
    /// Show a pool's policies, or change them while it is mounted: KEY=VALUE with mergerfs's
    /// keys (category.create, category.action, category.search, func.NAME as func.chmod,
    /// minfreespace, moveonenospc).
    Policy {
        mountpoint: PathBuf,
        settings: Vec<String>,
    },
    /// Put NEWDIR (created if missing) on top as the writable branch and make the branches
    /// that were writable read-only: the state until now is frozen below.
    Snapshot {
        mountpoint: PathBuf,
        newdir: PathBuf,
    },
}

pub fn run(args: UnionArgs) -> i32 {
    match args.cmd {
        UnionCmd::Mount {
            mountpoint,
            branches,
            options,
            foreground,
            notify_fd,
        } => mount(
            mountpoint,
            branches,
            &options.join(","),
            foreground,
            notify_fd,
        ),
        UnionCmd::Umount { mountpoint } => match accord_union::unmount(&mountpoint) {
            Ok(()) => exit::OK,
            Err(e) => fail(&e.to_string()),
        },
        UnionCmd::Add {
            mountpoint,
            dir,
            after,
            mode,
        } => add(&mountpoint, &dir, after, &mode),
        UnionCmd::Remove { mountpoint, dir } => {
            let dir = dir.canonicalize().unwrap_or(dir);
            control(&mountpoint, &[OsStr::new("remove"), dir.as_os_str()])
        }
        UnionCmd::Mode {
            mountpoint,
            dir,
            mode,
        } => {
            if let Err(e) = Mode::parse(&mode) {
                return usage(&e);
            }
            let dir = dir.canonicalize().unwrap_or(dir);
            control(
                &mountpoint,
                &[OsStr::new("mode"), dir.as_os_str(), OsStr::new(&mode)],
            )
        }
        UnionCmd::List { mountpoint } => control(&mountpoint, &[OsStr::new("list")]),
        UnionCmd::Policy {
            mountpoint,
            settings,
        } => {
            let mut fields = vec![OsStr::new("policy")];
            fields.extend(settings.iter().map(OsStr::new));
            control(&mountpoint, &fields)
        }
        UnionCmd::Snapshot { mountpoint, newdir } => snapshot(&mountpoint, &newdir),
    }
}

fn add(mountpoint: &Path, dir: &Path, after: Option<usize>, mode: &str) -> i32 {
    if let Err(e) = Mode::parse(mode) {
        return usage(&e);
    }
    let dir = match dir.canonicalize() {
        Ok(d) => d,
        Err(e) => return fail(&format!("{}: {}", dir.display(), io_words(&e))),
    };
    // Checked here as well as in the daemon: this process serves no union, so it may look
    // inside one.
    if let Err(e) = check_branch_of(&dir, mountpoint) {
        return fail(&e);
    }
    // `-`: the daemon picks the place (`Table::default_position`) from the table it holds.
    let after = after.map_or("-".to_string(), |n| n.to_string());
    let fields = [
        OsStr::new("add"),
        dir.as_os_str(),
        OsStr::new(&after),
        OsStr::new(mode),
    ];
    control(mountpoint, &fields)
}

fn snapshot(mountpoint: &Path, newdir: &Path) -> i32 {
    // Judged before it is created: making it inside the union would already change the union.
    if let Err(e) = check_new_dir(newdir) {
        return fail(&e);
    }
    if let Err(e) = std::fs::create_dir_all(newdir) {
        return fail(&match newdir.symlink_metadata() {
            Ok(m) if !m.is_dir() => format!(
                "{} exists and is not a directory: the new writable branch must be a \
                 directory; name an empty directory, or a path that does not exist yet (it is \
                 created)",
                newdir.display()
            ),
            _ => format!("cannot create {}: {}", newdir.display(), io_words(&e)),
        });
    }
    let dir = match newdir.canonicalize() {
        Ok(d) => d,
        Err(e) => return fail(&format!("{}: {}", newdir.display(), io_words(&e))),
    };
    if let Err(e) = check_branch_of(&dir, mountpoint) {
        return fail(&e);
    }
    control(mountpoint, &[OsStr::new("snapshot"), dir.as_os_str()])
}

/// `guard::check_branch`, and canonical `dir` must not hold the union's mount point.
fn check_branch_of(dir: &Path, mountpoint: &Path) -> Result<(), String> {
    guard::check_branch(dir)?;
    let mnt = mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {}", mountpoint.display(), io_words(&e)))?;
    let id = std::fs::metadata(dir)
        .map(|m| (m.dev(), m.ino()))
        .map_err(|e| format!("{}: {}", dir.display(), io_words(&e)))?;
    guard::check_not_above(dir, id, &mnt)
}

/// The checks of `guard::check_branch` for a directory that may not exist yet: on its nearest
/// existing ancestor.
fn check_new_dir(dir: &Path) -> Result<(), String> {
    let abs =
        std::path::absolute(dir).map_err(|e| format!("{}: {}", dir.display(), io_words(&e)))?;
    let existing = abs
        .ancestors()
        .find(|a| a.symlink_metadata().is_ok())
        .unwrap_or(Path::new("/"));
    guard::check_branch(existing).map_err(|e| {
        if existing == abs {
            e
        } else {
            format!(
                "{} would be created in {}: {e}",
                dir.display(),
                existing.display()
            )
        }
    })
}

fn fail(msg: &str) -> i32 {
    eprintln!("{}: {msg}", mount_helper::program());
    exit::FAILURE
}

fn usage(msg: &str) -> i32 {
    eprintln!("{}: {msg}", mount_helper::program());
    exit::USAGE
}

fn control(mountpoint: &Path, fields: &[&OsStr]) -> i32 {
    match accord_union::control::request(mountpoint, fields) {
        Ok(out) => {
            print!("{out}");
            exit::OK
        }
        Err(e) => fail(&e),
    }
}

fn mount(
    mountpoint: PathBuf,
    branches: Vec<String>,
    options: &str,
    foreground: bool,
    notify_fd: Option<i32>,
) -> i32 {
    let cfg = match mount_config(mountpoint, &branches, options) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    if foreground {
        serve(&cfg, notify_fd)
    } else {
        daemonize(&cfg)
    }
}

/// What to mount, checked: the options, the branches (canonical, with their modes) and the
/// mount point; or the exit code after the error was reported.
fn mount_config(
    mountpoint: PathBuf,
    branches: &[String],
    options: &str,
) -> Result<MountConfig, i32> {
    let mut specs: Vec<BranchSpec> = Vec::new();
    let opts = parse_mount_options(options).map_err(|e| usage(&e))?;
    specs.extend(opts.branches);
    for b in branches {
        specs.push(parse_spec(b).map_err(|e| usage(&e))?);
    }
    if specs.is_empty() {
        return Err(usage("no branches: give DIR[=rw|=ro]... or -o dirs=..."));
    }
    // The mount point first: a wrong one makes every branch moot.
    if let Err(e) = accord_union::mount_point(&mountpoint) {
        return Err(fail(&e.to_string()));
    }
    Ok(MountConfig {
        mountpoint,
        branches: resolve_branches(&specs, opts.pool.is_some())?,
        redirect_dir: opts.redirect_dir,
        readdirplus: opts.readdirplus,
        pool: opts.pool,
        fuse: opts.fuse,
    })
}

/// Serve the union in this process until it is unmounted, telling `notify_fd` (the process
/// that started this one, see `daemonize`) whether the mount went live.
fn serve(cfg: &MountConfig, notify_fd: Option<i32>) -> i32 {
    let notify = notify_fd.map(|fd| {
        // SAFETY: the parent handed us this descriptor (see `daemonize`) and nobody else
        // owns it in this process. Close-on-exec, so helpers we start (fusermount3) do
        // not keep the parent waiting.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            OwnedFd::from_raw_fd(fd)
        }
    });
    let res = accord_union::serve(cfg, move |r| {
        let msg = match &r {
            Ok(()) => "ok\n".to_string(),
            Err(e) => format!("err {e}\n"),
        };
        if let Some(fd) = notify {
            let mut f = std::fs::File::from(fd);
            let _ = std::io::Write::write_all(&mut f, msg.as_bytes());
        } else if let Err(e) = r {
            eprintln!("{}: {e}", mount_helper::program());
        }
    });
    match res {
        Ok(()) => exit::OK,
        Err(e) => {
            if notify_fd.is_none() {
                eprintln!("{}: {}", mount_helper::program(), io_words(&e));
            }
            exit::FAILURE
        }
    }
}

/// The branch directories of `specs`, canonical, with their modes; or the exit code after the
/// error was reported.
fn resolve_branches(specs: &[BranchSpec], pool: bool) -> Result<Vec<BranchConfig>, i32> {
    let mut resolved = Vec::new();
    for (spec, b) in specs.iter().zip(default_modes(specs, pool)) {
        match b.path.canonicalize() {
            Ok(path) => resolved.push(BranchConfig { path, ..b }),
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(missing_branch(spec, &e)),
            Err(e) => {
                let p = b.path.display();
                return Err(fail(&format!("branch {p}: {}", io_words(&e))));
            }
        }
    }
    Ok(resolved)
}

/// Report a branch that names no directory; when it looks like a misplaced or mistyped mode,
/// say that instead of only "not found".
fn missing_branch(spec: &BranchSpec, e: &std::io::Error) -> i32 {
    let p = spec.path.display();
    // (With or without a mode of its own: `rw=ro` is as misplaced as `ro`.)
    if Mode::parse(&p.to_string()).is_ok() {
        return usage(&format!(
            "branch {p}: no such directory (a mode goes after its directory, as DIR={p})"
        ));
    }
    match mistyped_mode(spec) {
        Some(word) => usage(&format!(
            "branch {p}: unknown mode {word:?} (a mode is ro, rw or nc), and no directory of that \
             whole name exists"
        )),
        None => fail(&format!("branch {p}: {}", io_words(e))),
    }
}

/// Start the file system as a detached copy of this program and return once it reports the
/// mount live (or why it failed), so `accord union mount` behaves like mount(8).
fn daemonize(cfg: &MountConfig) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(&format!("cannot find own executable: {}", io_words(&e))),
    };
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return fail(&format!(
            "pipe: {}",
            io_words(&std::io::Error::last_os_error())
        ));
    }
    // SAFETY: pipe2 just created both descriptors; each is owned once.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut cmd = Command::new(exe);
    cmd.args(["union", "mount", "--foreground", "--notify-fd", "3"])
        .arg(&cfg.mountpoint);
    let mut options = cfg.fuse.clone();
    if !cfg.redirect_dir {
        options.push("redirect_dir=off".into());
    }
    if !cfg.readdirplus {
        options.push("readdirplus=off".into());
    }
    if let Some(p) = &cfg.pool {
        options.extend(p.to_options());
    }
    if !options.is_empty() {
        cmd.arg("-o").arg(options.join(","));
    }
    for b in &cfg.branches {
        cmd.arg(b.to_arg());
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let w = wr.as_raw_fd();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            if libc::dup2(w, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(&format!("cannot start the file system: {}", io_words(&e))),
    };
    drop(wr);
    let mut answer = String::new();
    let _ = std::io::BufReader::new(std::fs::File::from(rd)).read_line(&mut answer);
    drop(child);
    match answer.lines().next() {
        Some("ok") => exit::OK,
        Some(l) => fail(l.strip_prefix("err ").unwrap_or(l)),
        None => fail("the file system process ended before mounting"),
    }
}
