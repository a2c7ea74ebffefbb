//! The log of the long-running commands, `accord server --listen` and
//! `accord worker`: one line per event on stderr (the journal, under
//! systemd) or in `--log-file`, at levels chosen by `-v` or `RUST_LOG`.
//! The commands a person runs at a terminal (mirror, sync) print their own
//! messages and do not log.

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use tracing_subscriber::EnvFilter;

/// The target of the line a long-running command writes once it is
/// ready (the daemon's "listening on", the worker's first line): written
/// at info whatever RUST_LOG says unless it names this target, so that
/// `RUST_LOG=warn` still says where the daemon listens.
pub const START: &str = "accord_start";

#[derive(clap::Args, Debug, Default)]
pub struct LogArgs {
    /// More in the log: -v adds debug lines, -vv trace lines (RUST_LOG,
    /// when set, chooses instead, as in `RUST_LOG=debug`).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Append the log to FILE instead of stderr (created mode 0640).
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
}

impl LogArgs {
    /// Whether any logging flag was given.
    pub fn given(&self) -> bool {
        self.verbose > 0 || self.log_file.is_some()
    }
}

/// Start the log. With `--log-file` the file takes stderr's place, so that
/// everything the process says (a panic too) lands in it in order.
pub fn init(args: &LogArgs) -> Result<(), String> {
    if let Some(path) = &args.log_file {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(path)
            .map_err(|e| format!("--log-file {}: {e}", path.display()))?;
        // SAFETY: dup2 onto stderr's descriptor; `file` stays open until
        // it returns.
        if unsafe { libc::dup2(file.as_raw_fd(), libc::STDERR_FILENO) } < 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("--log-file {}: {e}", path.display()));
        }
    }
    let level = match args.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() => {
            let filter = EnvFilter::try_new(&spec).map_err(|e| format!("RUST_LOG={spec}: {e}"))?;
            if spec.contains(START) {
                filter
            } else {
                filter.add_directive(format!("{START}=info").parse().expect("a directive"))
            }
        }
        _ => EnvFilter::new(level),
    };
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false);
    // The journal stamps each line itself.
    let set = if stderr_is_journal() {
        log.without_time().try_init()
    } else {
        log.try_init()
    };
    set.map_err(|e| e.to_string())
}

/// Whether stderr is the journal's stream that systemd connected (its
/// device and inode in JOURNAL_STREAM), not one inherited by a child.
fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let stream = stream.to_string_lossy();
    let Some((dev, ino)) = stream.split_once(':') else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills `st` when it returns 0.
    if unsafe { libc::fstat(libc::STDERR_FILENO, st.as_mut_ptr()) } != 0 {
        return false;
    }
    let st = unsafe { st.assume_init() };
    dev.parse() == Ok(st.st_dev) && ino.parse() == Ok(st.st_ino)
}
