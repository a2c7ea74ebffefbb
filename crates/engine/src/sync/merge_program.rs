//! `--merge CMD`: the external merge program of a sync, run on this host.
//!
//! The command is run by `sh -c` with these words replaced by shell-quoted
//! paths (a word is replaced where it stands alone, not inside a longer
//! name: `NEWS` and `$NEWDIR` are left as they are):
//!
//! - `CURRENT1`: a read-only copy of A's version;
//! - `CURRENT2`: a read-only copy of B's version;
//! - `NEW`: the file the program must write (it does not exist before);
//! - `PATH`: the path in the roots, for messages (no file there is meant
//!   to be touched through it).
//!
//! Unison's `CURRENTARCH` (the last agreed version) is not offered: the
//! archives keep states, not contents, and `--backup`'s directory holds
//! what was overwritten, which is not always the agreed version. A
//! command naming it is refused ([`MergeProgram::new`]).
//!
//! The files live in a private directory (0700) under the system's temp
//! directory, which is also the program's working directory, removed with
//! everything in it when the merge is done (one a killed run left behind
//! is removed by the next merge, once its process is gone). The
//! program's stdin is /dev/null (a batch run is unattended) and its
//! stdout and stderr go to a file there, whose first lines are reported
//! when it fails. A program that runs past its time limit is killed with
//! its whole process group (a shell's children too) and the merge fails;
//! should this process die first, the program (the shell) is killed too.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How many lines of the program's output a failure reports.
const REPORTED_LINES: usize = 5;
/// At most this many bytes of them.
const REPORTED_BYTES: usize = 2000;
/// The bytes of a file's name its versions' names keep (a name is at most
/// 255 bytes, and a label goes before it).
const NAME_KEPT: usize = 200;

/// A merge program, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeProgram {
    command: String,
    /// The program is killed after this long (None: never).
    time_limit: Option<Duration>,
}

impl MergeProgram {
    /// Check `command`: it must name `NEW` (else the result could not be
    /// found) and not `CURRENTARCH` (not offered).
    pub fn new(command: &str, time_limit: Option<Duration>) -> Result<MergeProgram, String> {
        if command.trim().is_empty() {
            return Err("the merge command is empty".into());
        }
        if !words_of(command).any(|word| word == "NEW") {
            return Err("the merge command must name NEW, the file it writes".into());
        }
        if words_of(command).any(|word| word == "CURRENTARCH") {
            return Err("CURRENTARCH (the last agreed version) is not offered: \
                 accord keeps no old contents; use CURRENT1, CURRENT2, NEW and PATH"
                .into());
        }
        Ok(MergeProgram {
            command: command.to_owned(),
            time_limit,
        })
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    pub fn time_limit(&self) -> Option<Duration> {
        self.time_limit
    }
}

/// The identifier-like words of a command, with their byte ranges.
fn words_of(command: &str) -> impl Iterator<Item = &str> {
    word_ranges(command).map(move |(start, end)| &command[start..end])
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

fn word_ranges(command: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let bytes = command.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() && !is_word_byte(bytes[at]) {
            at += 1;
        }
        if at == bytes.len() {
            return None;
        }
        let start = at;
        while at < bytes.len() && is_word_byte(bytes[at]) {
            at += 1;
        }
        Some((start, at))
    })
}

/// `text` quoted for `sh`: in single quotes, each `'` written `'\''`.
pub(crate) fn shell_quote(text: &[u8]) -> Vec<u8> {
    let mut quoted = Vec::with_capacity(text.len() + 2);
    quoted.push(b'\'');
    for &byte in text {
        if byte == b'\'' {
            quoted.extend_from_slice(b"'\\''");
        } else {
            quoted.push(byte);
        }
    }
    quoted.push(b'\'');
    quoted
}

/// What each word stands for in one merge.
pub(crate) struct MergeWords<'p> {
    pub current1: &'p Path,
    pub current2: &'p Path,
    pub new: &'p Path,
    /// The path in the roots, as bytes.
    pub path: &'p [u8],
}

/// The command with its words replaced by quoted paths.
pub(crate) fn substitute(command: &str, words: &MergeWords) -> Vec<u8> {
    let mut out = Vec::with_capacity(command.len() + 256);
    let mut copied = 0;
    for (start, end) in word_ranges(command) {
        let value: &[u8] = match &command[start..end] {
            "CURRENT1" => words.current1.as_os_str().as_bytes(),
            "CURRENT2" => words.current2.as_os_str().as_bytes(),
            "NEW" => words.new.as_os_str().as_bytes(),
            "PATH" => words.path,
            _ => continue,
        };
        out.extend_from_slice(&command.as_bytes()[copied..start]);
        out.extend_from_slice(&shell_quote(value));
        copied = end;
    }
    out.extend_from_slice(&command.as_bytes()[copied..]);
    out
}

/// Why a merge left the conflict as it was.
#[derive(Debug, thiserror::Error)]
pub enum MergeFailure {
    /// The program could not be started, or its files not made.
    #[error("merge program not run: {0}")]
    Setup(#[source] io::Error),
    /// It exited with a non-zero status or was killed by a signal.
    #[error("merge program {status}{}", with_output(output))]
    Failed { status: String, output: String },
    /// It ran past the time limit and was killed.
    #[error("merge program killed after {} s{}", after.as_secs(), with_output(output))]
    TimedOut { after: Duration, output: String },
    /// It exited 0 but wrote no regular file at NEW.
    #[error("merge program exited 0 but wrote no NEW file{}", with_output(output))]
    NoResult { output: String },
}

/// The program's first lines of output after a message, when it wrote any.
fn with_output(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!(": {output}")
    }
}

/// The private directory of one merge, removed when dropped.
pub(crate) struct MergeDir {
    dir: PathBuf,
}

static MERGE_DIRS: AtomicU64 = AtomicU64::new(0);

impl MergeDir {
    pub(crate) fn new() -> io::Result<MergeDir> {
        let base = std::env::temp_dir();
        let pid = std::process::id();
        remove_stale_dirs(&base);
        // Another process may have left a name behind: try a few.
        for _ in 0..100 {
            let n = MERGE_DIRS.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!("accord-merge-{pid}-{n}"));
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(MergeDir { dir }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free name for a merge directory",
        ))
    }

    /// Where a version (`label`: A, B or NEW) of the file `name` goes: the
    /// file's own name kept last, so a program sees its extension (only
    /// its end when long, so the label still fits in a name).
    pub(crate) fn file(&self, label: &str, name: &[u8]) -> PathBuf {
        let kept = &name[name.len().saturating_sub(NAME_KEPT)..];
        let mut file = format!("{label}-").into_bytes();
        file.extend_from_slice(kept);
        self.dir.join(OsStr::from_bytes(&file))
    }

    fn output(&self) -> PathBuf {
        self.dir.join("output")
    }
}

impl Drop for MergeDir {
    fn drop(&mut self) {
        // The program may have made the copies writable or added files.
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Remove the merge directories a killed run left in `base`: ours (by
/// owner), named `accord-merge-PID-N`, whose process is gone. Anything
/// else, or a directory of a live process, is left alone.
fn remove_stale_dirs(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    // SAFETY: geteuid(2) cannot fail.
    let uid = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = stale_dir_pid(name.as_bytes()) else {
            continue;
        };
        let ours = entry
            .path()
            .symlink_metadata()
            .is_ok_and(|meta| meta.is_dir() && std::os::unix::fs::MetadataExt::uid(&meta) == uid);
        if ours && !process_alive(pid) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The PID in a merge directory's name `accord-merge-PID-N`.
fn stale_dir_pid(name: &[u8]) -> Option<libc::pid_t> {
    let rest = name.strip_prefix(b"accord-merge-")?;
    let text = std::str::from_utf8(rest).ok()?;
    let (pid, n) = text.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse::<libc::pid_t>().ok().filter(|pid| *pid > 0)
}

fn process_alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let sent = unsafe { libc::kill(pid, 0) };
    sent == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Make `path` a new file (never following or replacing anything) for a
/// version to be written into.
pub(crate) fn create_version(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A version written whole: read-only from now on.
pub(crate) fn seal_version(path: &Path) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o400))
}

/// Run the program over the files of `dir`; `Ok`: it exited 0 and NEW is
/// a regular file, opened (not through a symlink).
pub(crate) fn run_program(
    program: &MergeProgram,
    dir: &MergeDir,
    words: &MergeWords,
) -> Result<File, MergeFailure> {
    let setup = |e: io::Error| MergeFailure::Setup(e);
    let output_path = dir.output();
    let output = create_version(&output_path).map_err(setup)?;
    let script = substitute(&program.command, words);
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(OsStr::from_bytes(&script))
        .stdin(Stdio::null())
        .stdout(output.try_clone().map_err(setup)?)
        .stderr(output)
        // Scratch files it makes without a path land in its own directory.
        .current_dir(&dir.dir)
        // Its own process group, so a time limit kills what it started.
        .process_group(0)
        .spawn_dying_with_us()
        .map_err(setup)?;
    let status = wait_within(&mut child, program.time_limit);
    let output = first_lines(&output_path);
    match status {
        Err(e) => Err(MergeFailure::Setup(e)),
        Ok(None) => Err(MergeFailure::TimedOut {
            after: program.time_limit.unwrap_or_default(),
            output,
        }),
        Ok(Some(status)) if !status.success() => Err(MergeFailure::Failed {
            status: status_text(status),
            output,
        }),
        Ok(Some(_)) => open_result(words.new).ok_or(MergeFailure::NoResult { output }),
    }
}

trait SpawnDyingWithUs {
    /// Spawn a child that is killed should this process die first (the
    /// program is in a process group of its own, so a Ctrl-C at the
    /// terminal does not reach it).
    fn spawn_dying_with_us(&mut self) -> io::Result<std::process::Child>;
}

impl SpawnDyingWithUs for Command {
    fn spawn_dying_with_us(&mut self) -> io::Result<std::process::Child> {
        // SAFETY: prctl(2) is async-signal-safe; nothing is allocated
        // between fork and exec.
        unsafe {
            self.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self.spawn()
    }
}

/// Wait for the child; `None`: killed (with its group) at the time limit.
fn wait_within(
    child: &mut std::process::Child,
    limit: Option<Duration>,
) -> io::Result<Option<ExitStatus>> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if limit.is_some_and(|limit| start.elapsed() >= limit) {
            // SAFETY: kill(2) with the child's process group id, which it
            // leads (process_group(0)) until it is reaped below.
            unsafe {
                libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
            }
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

fn status_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("ended: {status}"),
    }
}

/// NEW as the program left it: a regular file, not a link to one.
fn open_result(new: &Path) -> Option<File> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(new)
        .ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

/// The first lines of the program's output, on one line, bounded.
fn first_lines(path: &Path) -> String {
    let mut head = Vec::new();
    if let Ok(file) = File::open(path) {
        let _ = file.take(REPORTED_BYTES as u64).read_to_end(&mut head);
    }
    let text = String::from_utf8_lossy(&head);
    text.lines()
        .map(str::trim_end)
        .filter(|line| !line.is_empty())
        .take(REPORTED_LINES)
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words<'p>(dir: &'p MergeDir, files: &'p [PathBuf; 3]) -> MergeWords<'p> {
        let _ = dir;
        MergeWords {
            current1: &files[0],
            current2: &files[1],
            new: &files[2],
            path: b"d/it's.txt",
        }
    }

    #[test]
    fn only_whole_words_are_replaced_and_quoted() {
        let files = [
            PathBuf::from("/t/A-x"),
            PathBuf::from("/t/B-x"),
            PathBuf::from("/t/NEW-x"),
        ];
        let dir = MergeDir::new().unwrap();
        let words = words(&dir, &files);
        let out = substitute("diff3 CURRENT1 CURRENT2>NEW; echo PATH $NEWS NEWER", &words);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "diff3 '/t/A-x' '/t/B-x'>'/t/NEW-x'; echo 'd/it'\\''s.txt' $NEWS NEWER"
        );
    }

    #[test]
    fn a_command_must_name_new_and_not_currentarch() {
        assert!(MergeProgram::new("cat CURRENT1 > NEW", None).is_ok());
        assert!(MergeProgram::new("cat CURRENT1 > NEWER", None).is_err());
        assert!(MergeProgram::new("   ", None).is_err());
        let arch = MergeProgram::new("diff3 -m CURRENT1 CURRENTARCH CURRENT2 > NEW", None);
        assert!(arch.unwrap_err().contains("CURRENTARCH"));
    }

    #[test]
    fn quoting_survives_the_shell() {
        let text = b"a 'b' $c \"d\" `e` \\f";
        let script = [b"printf %s ".as_slice(), &shell_quote(text)].concat();
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(OsStr::from_bytes(&script))
            .output()
            .unwrap();
        assert_eq!(out.stdout, text);
    }

    fn run(command: &str, limit: Option<Duration>) -> Result<Vec<u8>, MergeFailure> {
        let dir = MergeDir::new().unwrap();
        let files = [
            dir.file("A", b"f"),
            dir.file("B", b"f"),
            dir.file("NEW", b"f"),
        ];
        fs::write(&files[0], b"one\n").unwrap();
        fs::write(&files[1], b"two\n").unwrap();
        let program = MergeProgram::new(command, limit).unwrap();
        let mut file = run_program(&program, &dir, &words(&dir, &files))?;
        let mut merged = Vec::new();
        file.read_to_end(&mut merged).unwrap();
        Ok(merged)
    }

    #[test]
    fn outcomes_of_a_program() {
        assert_eq!(
            run("cat CURRENT1 CURRENT2 > NEW", None).unwrap(),
            b"one\ntwo\n"
        );
        let failed = run("echo nope >&2; exit 3 # NEW", None).unwrap_err();
        assert!(
            matches!(
                &failed,
                MergeFailure::Failed { status, output }
                    if status == "exited with status 3" && output == "nope"
            ),
            "{failed:?}"
        );
        assert!(matches!(
            run("true NEW", None).unwrap_err(),
            MergeFailure::NoResult { .. }
        ));
        assert!(matches!(
            run("ln -s CURRENT1 NEW", None).unwrap_err(),
            MergeFailure::NoResult { .. }
        ));
        let start = Instant::now();
        let slow = run(
            "sleep 30; cat CURRENT1 > NEW",
            Some(Duration::from_millis(300)),
        );
        assert!(matches!(slow.unwrap_err(), MergeFailure::TimedOut { .. }));
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_dead_process_s_directory_is_removed_and_others_kept() {
        let base = tempfile::tempdir().unwrap();
        // A pid above the kernel's largest (4194304) is never alive.
        let dead = base.path().join("accord-merge-999999999-0");
        let alive = base
            .path()
            .join(format!("accord-merge-{}-7", std::process::id()));
        let other = base.path().join("accord-merge-notes");
        for dir in [&dead, &alive, &other] {
            fs::create_dir(dir).unwrap();
            fs::write(dir.join("A-f"), b"x").unwrap();
        }
        remove_stale_dirs(base.path());
        assert!(!dead.exists());
        assert!(alive.exists() && other.exists());
        assert_eq!(stale_dir_pid(b"accord-merge-12-3"), Some(12));
        assert_eq!(stale_dir_pid(b"accord-merge-12"), None);
        assert_eq!(stale_dir_pid(b"accord-merge-0-1"), None);
    }

    #[test]
    fn a_long_name_keeps_its_end() {
        let dir = MergeDir::new().unwrap();
        let name = [b"x".repeat(250), b".txt".to_vec()].concat();
        let file = dir.file("NEW", &name);
        let file_name = file.file_name().unwrap().as_bytes();
        assert!(file_name.len() <= 255);
        assert!(file_name.starts_with(b"NEW-x") && file_name.ends_with(b"x.txt"));
        fs::write(&file, b"fits").unwrap();
    }

    #[test]
    fn the_merge_directory_goes_with_its_files() {
        let dir = MergeDir::new().unwrap();
        let path = dir.dir.clone();
        let file = dir.file("A", b"x");
        fs::write(&file, b"1").unwrap();
        seal_version(&file).unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
