//! `accord union`: mount, unmount and reconfigure a live union file system.

use std::ffi::OsStr;
use std::io::BufRead;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use accord_union::branch::{default_modes, parse_mount_options, parse_spec, BranchSpec};
use accord_union::{Mode, MountConfig};

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
    /// A branch is DIR, DIR=rw or DIR=ro; without a mode the first branch is writable and the
    /// others read-only. `-o dirs=/a=rw:/b=ro` is Unionfs's spelling of the same list.
    Mount {
        mountpoint: PathBuf,
        branches: Vec<String>,
        /// Mount options; only `dirs=` is understood.
        #[arg(short = 'o')]
        options: Option<String>,
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
        /// Insert below branch number N (as `list` numbers them); default: on top.
        #[arg(long)]
        after: Option<usize>,
        #[arg(long, default_value = "ro")]
        mode: String,
    },
    /// Remove branch DIR from the live union at MNT (open files keep working).
    Remove { mountpoint: PathBuf, dir: PathBuf },
    /// Make branch DIR of the union at MNT read-only or writable.
    Mode {
        mountpoint: PathBuf,
        dir: PathBuf,
        mode: String,
    },
    /// List the branches of the union at MNT: number, mode, directory.
    List { mountpoint: PathBuf },
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
        } => mount(mountpoint, branches, options, foreground, notify_fd),
        UnionCmd::Umount { mountpoint } => match accord_union::unmount(&mountpoint) {
            Ok(()) => exit::OK,
            Err(e) => fail(&e.to_string()),
        },
        UnionCmd::Add {
            mountpoint,
            dir,
            after,
            mode,
        } => {
            if let Err(e) = Mode::parse(&mode) {
                return usage(&e);
            }
            let dir = match dir.canonicalize() {
                Ok(d) => d,
                Err(e) => return fail(&format!("{}: {e}", dir.display())),
            };
            let pos = after.map(|n| n + 1).unwrap_or(0).to_string();
            control(
                &mountpoint,
                &[
                    OsStr::new("add"),
                    dir.as_os_str(),
                    OsStr::new(&pos),
                    OsStr::new(&mode),
                ],
            )
        }
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
        UnionCmd::Snapshot { mountpoint, newdir } => {
            if let Err(e) = std::fs::create_dir_all(&newdir) {
                return fail(&format!("{}: {e}", newdir.display()));
            }
            let dir = match newdir.canonicalize() {
                Ok(d) => d,
                Err(e) => return fail(&format!("{}: {e}", newdir.display())),
            };
            control(&mountpoint, &[OsStr::new("snapshot"), dir.as_os_str()])
        }
    }
}

fn fail(msg: &str) -> i32 {
    eprintln!("accord union: {msg}");
    exit::FAILURE
}

fn usage(msg: &str) -> i32 {
    eprintln!("accord union: {msg}");
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
    options: Option<String>,
    foreground: bool,
    notify_fd: Option<i32>,
) -> i32 {
    let mut specs: Vec<BranchSpec> = Vec::new();
    if let Some(o) = &options {
        match parse_mount_options(o) {
            Ok(v) => specs.extend(v),
            Err(e) => return usage(&e),
        }
    }
    for b in &branches {
        match parse_spec(b) {
            Ok(s) => specs.push(s),
            Err(e) => return usage(&e),
        }
    }
    if specs.is_empty() {
        return usage("no branches: give DIR[=rw|=ro]... or -o dirs=...");
    }
    let mut resolved = Vec::new();
    for (p, m) in default_modes(&specs) {
        match p.canonicalize() {
            Ok(c) => resolved.push((c, m)),
            Err(e) => return fail(&format!("branch {}: {e}", p.display())),
        }
    }
    if foreground {
        let cfg = MountConfig {
            mountpoint,
            branches: resolved,
        };
        let notify = notify_fd.map(|fd| {
            // SAFETY: the parent handed us this descriptor (see `daemonize`) and nobody else
            // owns it in this process. Close-on-exec, so helpers we start (fusermount3) do
            // not keep the parent waiting.
            unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                OwnedFd::from_raw_fd(fd)
            }
        });
        let res = accord_union::serve(&cfg, move |r| {
            let msg = match &r {
                Ok(()) => "ok\n".to_string(),
                Err(e) => format!("err {e}\n"),
            };
            if let Some(fd) = notify {
                let mut f = std::fs::File::from(fd);
                let _ = std::io::Write::write_all(&mut f, msg.as_bytes());
            } else if let Err(e) = r {
                eprintln!("accord union: {e}");
            }
        });
        return match res {
            Ok(()) => exit::OK,
            Err(e) => {
                if notify_fd.is_none() {
                    eprintln!("accord union: {e}");
                }
                exit::FAILURE
            }
        };
    }
    daemonize(&mountpoint, &resolved)
}

/// Start the file system as a detached copy of this program and return once it reports the
/// mount live (or why it failed), so `accord union mount` behaves like mount(8).
fn daemonize(mountpoint: &Path, branches: &[(PathBuf, Mode)]) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(&format!("cannot find own executable: {e}")),
    };
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return fail(&format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just created both descriptors; each is owned once.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut cmd = Command::new(exe);
    cmd.args(["union", "mount", "--foreground", "--notify-fd", "3"])
        .arg(mountpoint);
    for (p, m) in branches {
        let mut s = p.clone().into_os_string();
        s.push(format!("={m}"));
        cmd.arg(s);
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
        Err(e) => return fail(&format!("cannot start the file system: {e}")),
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
