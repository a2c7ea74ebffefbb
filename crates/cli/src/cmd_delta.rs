//! `accord delta`: signatures, deltas and patches of single files.
//!
//! Outputs are written to a hidden temporary file beside the destination and
//! renamed into place, so a failed run never leaves a half-written output.
//! An in-place patch that fails after it started writing moves the damaged
//! file to a hidden recovery file beside it and says so.
//!
//! As with rdiff, `-` names standard input or output wherever a file is read or
//! written whole (not the FILE of `patch --in-place`, which is rebuilt in its own
//! storage). An input that is not a regular file (`-`, a pipe, `/dev/stdin`) is read
//! into memory first, since the signature and the delta need all of it at once; an
//! output that is not a regular file (`-`, `/dev/stdout`, a pipe) is written as a
//! stream, with no temporary file.

use crate::exit;
use accord_delta::{
    make_delta_with, patch_in_place, patch_to, CyclePolicy, Delta, DeltaOptions, InPlaceOptions,
    LiteralCoding, PatchOptions, Signature, SignatureOptions,
};
use clap::{Args, Subcommand, ValueEnum};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct DeltaArgs {
    #[command(subcommand)]
    cmd: DeltaCmd,
}

#[derive(Subcommand)]
enum DeltaCmd {
    /// Write the block signature of OLD to SIG.
    Signature {
        /// Block length in bytes (default: about the square root of the file size).
        #[arg(long, value_parser = parse_size)]
        block_size: Option<u64>,
        /// Strong-sum length in bytes, 8..=32 (default: from file and block counts).
        #[arg(long)]
        strong_len: Option<u8>,
        old: PathBuf,
        sig: PathBuf,
    },
    /// Write the delta that turns the file SIG describes into NEW.
    Delta {
        /// Order the commands so the old file can be patched in its own storage.
        #[arg(long)]
        in_place: bool,
        /// Print statistics as one JSON object.
        #[arg(long)]
        json: bool,
        /// Receiver scratch memory the in-place plan may use (e.g. 8M).
        #[arg(long, default_value = "8M", value_parser = parse_size)]
        scratch: u64,
        /// How to break dependency cycles of an in-place plan.
        #[arg(long, value_enum, default_value_t = Policy::Stash)]
        policy: Policy,
        /// Most copies ordered together in one planner window.
        #[arg(long, default_value_t = 1 << 20)]
        window_nodes: usize,
        /// Compress the literal data against the matched bytes at this zstd
        /// level (1..=22; delta format 2, which older accords do not read). 0,
        /// the default: raw (format 1, read by every accord). In-place
        /// deltas are always raw.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..=22))]
        compress_level: i32,
        sig: PathBuf,
        new: PathBuf,
        delta: PathBuf,
    },
    /// Apply DELTA: `patch OLD DELTA OUT`, or `patch --in-place FILE DELTA`.
    Patch {
        /// Rebuild FILE in its own storage instead of writing OUT.
        #[arg(long)]
        in_place: bool,
        /// Most scratch memory a delta may ask for.
        #[arg(long, default_value = "64M", value_parser = parse_size)]
        max_scratch: u64,
        /// Skip fsync of the result.
        #[arg(long)]
        no_fsync: bool,
        #[arg(num_args = 2..=3, required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Policy {
    /// Keep the bytes of the cheapest edge in receiver scratch memory.
    Stash,
    /// Send the smallest overlap as literal data.
    Trim,
    /// Send the smallest copy of the cycle as literal data.
    Delete,
}

pub fn run(args: DeltaArgs) -> i32 {
    let result = check_streams(&args.cmd).and_then(|()| run_checked(args.cmd));
    match result {
        Ok(()) => exit::OK,
        Err(f) => {
            eprintln!("accord delta: {}", f.message);
            f.code
        }
    }
}

/// `-` (standard input or output) where it cannot work: twice as an input, as the file of an
/// in-place patch, or as a delta's output beside `--json`.
fn check_streams(cmd: &DeltaCmd) -> Result<(), Failure> {
    let dash = |p: &Path| p == STDIO;
    match cmd {
        DeltaCmd::Delta { sig, new, .. } if dash(sig) && dash(new) => Err(Failure::usage(
            "SIG and NEW cannot both be standard input (-): give one of them as a file",
        )),
        DeltaCmd::Delta { delta, json, .. } if *json && dash(delta) => Err(Failure::usage(
            "--json prints to standard output, where the delta (-) goes: write the delta to \
             a file",
        )),
        DeltaCmd::Patch {
            in_place: true,
            files,
            ..
        } if files.first().is_some_and(|f| dash(f)) => Err(Failure::usage(
            "patch --in-place rebuilds FILE in its own storage: FILE must be a regular file, \
             not standard input (-); use patch OLD DELTA OUT to read a stream",
        )),
        DeltaCmd::Patch {
            in_place: false,
            files,
            ..
        } if files.len() == 3 && dash(&files[0]) && dash(&files[1]) => Err(Failure::usage(
            "OLD and DELTA cannot both be standard input (-): give one of them as a file",
        )),
        _ => Ok(()),
    }
}

fn run_checked(cmd: DeltaCmd) -> Result<(), Failure> {
    match cmd {
        DeltaCmd::Signature {
            block_size,
            strong_len,
            old,
            sig,
        } => signature(&old, &sig, block_size, strong_len),
        DeltaCmd::Delta {
            in_place,
            json,
            scratch,
            policy,
            window_nodes,
            compress_level,
            sig,
            new,
            delta,
        } => {
            let ip = in_place.then_some(InPlaceOptions {
                scratch,
                policy: match policy {
                    Policy::Stash => CyclePolicy::Stash,
                    Policy::Trim => CyclePolicy::Trim,
                    Policy::Delete => CyclePolicy::Delete,
                },
                window_nodes,
            });
            let coding = match compress_level {
                0 => LiteralCoding::Raw,
                level => LiteralCoding::Zstd { level },
            };
            write_delta(&sig, &new, &delta, (ip, coding), json)
        }
        DeltaCmd::Patch {
            in_place,
            max_scratch,
            no_fsync,
            files,
        } => {
            let opts = PatchOptions {
                max_scratch,
                sync: !no_fsync,
            };
            match (in_place, files.as_slice()) {
                (true, [file, delta]) => patch_file_in_place(file, delta, &opts),
                (false, [old, delta, out]) => patch_new(old, delta, out, &opts),
                (true, _) => Err(Failure::usage("patch --in-place takes FILE DELTA")),
                (false, _) => Err(Failure::usage(
                    "patch takes OLD DELTA OUT (or --in-place FILE DELTA)",
                )),
            }
        }
    }
}

/// The file name that means standard input or output, as for rdiff.
const STDIO: &str = "-";

struct Failure {
    message: String,
    code: i32,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: exit::FAILURE,
        }
    }
    fn usage(message: &str) -> Self {
        Failure {
            message: message.to_string(),
            code: exit::USAGE,
        }
    }
    fn io(path: &Path, what: &str, e: impl std::fmt::Display) -> Self {
        Failure::new(format!("{what} {}: {}", shown(path), words(&e)))
    }
}

/// A path for a person to read, control characters escaped; `-` is standard input or output.
fn shown(p: &Path) -> String {
    if p == STDIO {
        return "standard input or output (-)".to_string();
    }
    p.display().to_string().escape_debug().to_string()
}

/// An error's words without the "(os error N)" that an I/O error's `Display` adds to them.
fn words(e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    match text.rsplit_once(" (os error ") {
        Some((words, code)) if code.trim_end_matches(')').parse::<i32>().is_ok() => {
            words.to_string()
        }
        _ => text,
    }
}

fn signature(
    old: &Path,
    out: &Path,
    block: Option<u64>,
    strong_len: Option<u8>,
) -> Result<(), Failure> {
    let block_len = match block {
        Some(b) => Some(u32::try_from(b).map_err(|_| Failure::usage("block size too large"))?),
        None => None,
    };
    let data = Input::open(old)?;
    let sig = Signature::generate(
        data.bytes(),
        &SignatureOptions {
            block_len,
            strong_len,
            key: None,
            // The file's owner may patch in place with it.
            verified: false,
        },
    )
    .map_err(|e| Failure::new(e.to_string()))?;
    data.intact()
        .map_err(|e| Failure::io(old, "cannot read", e))?;
    write_atomically(out, false, None, |w| w.write_all(&sig.encode()))
}

fn write_delta(
    sig_path: &Path,
    new: &Path,
    out: &Path,
    (in_place, coding): (Option<InPlaceOptions>, LiteralCoding),
    json: bool,
) -> Result<(), Failure> {
    let sig_bytes = read_whole(sig_path)?;
    let sig = Signature::decode(&sig_bytes)
        .map_err(|e| Failure::new(format!("{}: {e}", shown(sig_path))))?;
    let data = Input::open(new)?;
    let mut stats = None;
    write_atomically(out, false, None, |mut w| {
        let st = make_delta_with(
            &sig,
            data.bytes(),
            &DeltaOptions {
                in_place: in_place.clone(),
            },
            coding,
            &mut w,
        )
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        data.intact()?;
        stats = Some(st);
        Ok(())
    })?;
    if json {
        let st = stats.expect("delta written");
        let p = &st.plan;
        let obj = serde_json::json!({
            "layout": if in_place.is_some() { "in-place" } else { "sequential" },
            "new_bytes": st.new_len,
            "delta_bytes": st.delta_bytes,
            "literal_bytes": st.literal_bytes,
            "matched_bytes": st.matched_bytes,
            "copy_commands": st.copy_commands,
            "add_commands": st.add_commands,
            "cycles_broken": p.cycles_broken,
            "cycles_stashed": p.cycles_stashed,
            "cycles_trimmed": p.cycles_trimmed,
            "cycles_deleted": p.cycles_deleted,
            "stashes_evicted": p.stashes_evicted,
            "converted_bytes": p.converted_bytes,
            "stashed_bytes": p.stashed_bytes,
            "scratch_bytes": p.scratch_len,
            "planner_windows": p.windows,
            "planner_peak_bytes": p.planner_peak_bytes,
            "block_len": st.block_len,
            "strong_len": st.strong_len,
        });
        println!("{obj}");
    }
    Ok(())
}

fn read_delta(path: &Path) -> Result<Vec<u8>, Failure> {
    read_whole(path)
}

/// All of `path`, or of standard input for `-`.
fn read_whole(path: &Path) -> Result<Vec<u8>, Failure> {
    if path == STDIO {
        let mut v = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut v)
            .map_err(|e| Failure::new(format!("cannot read standard input: {}", words(&e))))?;
        return Ok(v);
    }
    std::fs::read(path).map_err(|e| Failure::io(path, "cannot read", e))
}

fn patch_new(
    old: &Path,
    delta_path: &Path,
    out: &Path,
    opts: &PatchOptions,
) -> Result<(), Failure> {
    let bytes = read_delta(delta_path)?;
    let delta =
        Delta::parse(&bytes).map_err(|e| Failure::new(format!("{}: {e}", shown(delta_path))))?;
    let data = Input::open(old)?;
    write_atomically(out, opts.sync, Some(data.mode), |mut w| {
        patch_to(data.bytes(), &delta, &mut w).map_err(|e| std::io::Error::other(e.to_string()))?;
        data.intact()
    })
}

fn patch_file_in_place(file: &Path, delta_path: &Path, opts: &PatchOptions) -> Result<(), Failure> {
    let bytes = read_delta(delta_path)?;
    let delta = Delta::parse(&bytes).map_err(|e| {
        Failure::new(format!(
            "{}: {e} ({} was not changed)",
            shown(delta_path),
            shown(file)
        ))
    })?;
    let (root, name) = dir_and_name(file)?;
    // open_rw: no symlink followed, and only a regular file is accepted.
    let mut target = root
        .dir()
        .open_rw(&name)
        .map_err(|e| Failure::io(file, "cannot open", e))?;
    lock_exclusive(&target).map_err(|e| Failure::io(file, "cannot lock", e))?;
    match patch_in_place(&mut target, &delta, opts) {
        Ok(()) => Ok(()),
        Err(e) if !e.target_modified => Err(Failure::new(format!(
            "{}: {e} (the file was not changed)",
            shown(file)
        ))),
        Err(e) => {
            drop(target);
            // Never leave it under its own name: it holds neither version.
            let rec = accord_fsys::recovery_name(&name);
            match root.dir().rename_noreplace(&name, &rec) {
                Ok(()) => Err(Failure::new(format!(
                    "{}: {e}; the partly rebuilt file was moved to {} beside it (it holds neither version)",
                    shown(file),
                    accord_model::escape_for_display(&rec)
                ))),
                Err(re) => Err(Failure::new(format!(
                    "{}: {e}; moving the damaged file to a recovery file also failed ({re}): do not trust its contents",
                    shown(file)
                ))),
            }
        }
    }
}

/// Like the In-Place Rsync paper's exclusive open: readers that honour
/// advisory locks do not see the file mid-rebuild, and two patches never race.
fn lock_exclusive(f: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own; no memory is shared with the kernel.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// An input file, memory-mapped when not empty (through `accord_fsys::Mapped`,
/// so a file truncated underneath is an error, not a SIGBUS); a stream (`-`, a
/// pipe, `/dev/stdin`) read into memory.
struct Input {
    data: Data,
    /// Permission bits, given to a file patched from this one.
    mode: u32,
}

enum Data {
    Empty,
    Mapped(accord_fsys::Mapped),
    Read(Vec<u8>),
}

impl Input {
    fn open(path: &Path) -> Result<Input, Failure> {
        if path == STDIO {
            return Ok(Input::read(read_whole(path)?));
        }
        let mut f = File::open(path).map_err(|e| Failure::io(path, "cannot open", e))?;
        let meta = f
            .metadata()
            .map_err(|e| Failure::io(path, "cannot stat", e))?;
        if meta.is_dir() {
            return Err(Failure::new(format!(
                "{} is a directory, not a file",
                shown(path)
            )));
        }
        if !meta.is_file() {
            // A pipe or a device: read once, front to back.
            let mut v = Vec::new();
            f.read_to_end(&mut v)
                .map_err(|e| Failure::io(path, "cannot read", e))?;
            return Ok(Input::read(v));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if meta.len() == 0 {
            return Ok(Input {
                data: Data::Empty,
                mode,
            });
        }
        let map = accord_fsys::Mapped::populated(&f, meta.len())
            .map_err(|e| Failure::io(path, "cannot map", e))?;
        Ok(Input {
            data: Data::Mapped(map),
            mode,
        })
    }

    /// Bytes read from a stream; a file patched from them gets the mode a new file gets.
    fn read(v: Vec<u8>) -> Input {
        Input {
            data: Data::Read(v),
            mode: default_mode(),
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Empty => &[],
            Data::Mapped(m) => m,
            Data::Read(v) => v,
        }
    }

    /// An error if the file was cut short while it was read.
    fn intact(&self) -> std::io::Result<()> {
        if matches!(&self.data, Data::Mapped(m) if m.damaged()) {
            return Err(std::io::Error::other(
                "the input file was truncated while it was read",
            ));
        }
        Ok(())
    }
}

/// The directory holding `path` and the name in it, for the `*at` calls of
/// `accord_fsys` (which never follow a symlink in the last component).
fn dir_and_name(path: &Path) -> Result<(accord_fsys::Root, Vec<u8>), Failure> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| Failure::new(format!("{} names no file", shown(path))))?;
    let root = accord_fsys::Root::open(dir).map_err(|e| Failure::io(dir, "cannot open", e))?;
    Ok((root, name.as_bytes().to_vec()))
}

/// Writes `out` through a hidden temp file beside it (accord_fsys: O_EXCL |
/// O_NOFOLLOW), then renames it into place; on any error the temp is removed
/// and `out` is untouched. The result gets `mode`, or 0666 less the umask.
///
/// `-` is standard output, and an existing output that is not a regular file (a
/// pipe, `/dev/stdout`, a terminal) is written as a stream: there is nothing to
/// rename over it.
fn write_atomically(
    out: &Path,
    sync: bool,
    mode: Option<u32>,
    body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), Failure> {
    if out == STDIO {
        let mut w = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
        return body(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| Failure::new(format!("cannot write standard output: {}", words(&e))));
    }
    if std::fs::metadata(out).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let stream = std::fs::OpenOptions::new()
            .write(true)
            .open(out)
            .map_err(|e| Failure::io(out, "cannot open", e))?;
        let mut w = BufWriter::with_capacity(1 << 20, stream);
        return body(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| Failure::io(out, "cannot write", e));
    }
    let (root, name) = dir_and_name(out)?;
    let dir = root.dir();
    let (tmp, file) = dir
        .create_temp(&name)
        .map_err(|e| Failure::io(root.path(), "cannot create a file in", e))?;
    let result = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, file);
        body(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.set_permissions(std::fs::Permissions::from_mode(
            mode.unwrap_or_else(default_mode),
        ))?;
        if sync {
            f.sync_all()?;
        }
        dir.rename(&tmp, &name)?;
        if sync {
            dir.sync()?;
        }
        Ok::<(), std::io::Error>(())
    })();
    result.map_err(|e| {
        let _ = dir.unlink(&tmp);
        Failure::io(out, "cannot write", e)
    })
}

/// 0666 less the process umask, as `open(2)` would give a new file.
fn default_mode() -> u32 {
    // SAFETY: umask only swaps a process-wide integer; it is restored at once.
    let mask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    0o666 & !(mask as u32)
}

/// Sizes such as `8M`, `64MiB`, `1G`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 8M, 1G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("{s:?}: unknown unit {unit:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}
