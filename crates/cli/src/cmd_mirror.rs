//! `accord mirror SRC DST`: arguments → `MirrorConfig`, progress, output,
//! exit codes. The work is in `accord_engine::mirror`.

use crate::exit;
use accord_engine::{
    DeltaMode, Kinds, MaxDelete, MirrorConfig, MirrorOptions, Progress, Reflink, Report, Selection,
    TransferOptions, XattrFilter,
};
use accord_remote::{parse_remote, RemoteSpec, RootMode};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum When {
    Auto,
    Always,
    Never,
}

/// Make DST an exact copy of SRC (SRC's contents go into DST, which is
/// created if missing). Extra entries in DST are deleted, guarded.
#[derive(clap::Args, Clone, Debug)]
#[command(after_help = MIRROR_AFTER_HELP)]
pub struct MirrorArgs {
    /// Source directory: a local path, [USER@]HOST:PATH,
    /// ssh://[USER@]HOST[:PORT]/PATH or accord://HOST[:PORT]/MODULE/PATH
    /// (for a local path with a colon before its first slash, write
    /// ./NAME:REST). SRC and SRC/ mean the same: its contents. With
    /// several sources, each goes into DST/NAME (its last name).
    #[arg(value_name = "SRC", required = true, num_args = 1..)]
    pub(crate) sources: Vec<PathBuf>,
    /// Destination directory (created if missing), local or remote like SRC.
    pub(crate) dst: PathBuf,
    /// The source of this run (one of `sources`).
    #[arg(skip)]
    pub(crate) src: PathBuf,

    /// Show what would change and change nothing.
    #[arg(short = 'n', long, help_heading = "Output")]
    dry_run: bool,
    /// List each change (created, updated, metadata, deleted), one per
    /// line, and end with a summary even off a terminal.
    #[arg(short = 'v', long, action = clap::ArgAction::Count, help_heading = "Output")]
    verbose: u8,
    /// List each change, one per line (as -v, without the summary).
    #[arg(short = 'i', long, help_heading = "Output")]
    itemize: bool,
    /// Show the progress line (the default on a terminal; -P is
    /// rsync's --partial --progress: partial files are always kept).
    #[arg(long, help_heading = "Output")]
    progress: bool,
    #[arg(short = 'P', hide = true)]
    partial_progress: bool,
    /// Print the run's figures as `Name: value` lines on stdout at the end.
    #[arg(long, help_heading = "Output")]
    stats: bool,
    /// Print one JSON object with the run's figures on stdout at the end.
    #[arg(long, help_heading = "Output")]
    json: bool,
    /// No progress display and no summary.
    #[arg(short = 'q', long, help_heading = "Output")]
    quiet: bool,

    /// Compare contents (BLAKE3) instead of size and modification time.
    #[arg(short = 'c', long, help_heading = "Which files are written")]
    checksum: bool,
    /// A file of the same size is up to date, whatever its modification time.
    #[arg(
        long,
        conflicts_with = "checksum",
        help_heading = "Which files are written"
    )]
    size_only: bool,
    /// Leave alone every entry that exists in DST (new ones are still made).
    #[arg(long, help_heading = "Which files are written")]
    ignore_existing: bool,
    /// Do not write source files larger than SIZE (4096, 100K, 5M, 1G);
    /// DST's file of that name is kept.
    #[arg(long, value_name = "SIZE", help_heading = "Which files are written")]
    max_size: Option<String>,
    /// Do not write source files smaller than SIZE; DST's file of that name is kept.
    #[arg(long, value_name = "SIZE", help_heading = "Which files are written")]
    min_size: Option<String>,

    /// Exclude entries matching PATTERN (gitignore syntax; repeatable; the
    /// first of --exclude, --include, --filter to match decides, as in rsync).
    #[arg(long, value_name = "PATTERN", help_heading = "Selection")]
    exclude: Vec<String>,
    /// Keep entries matching PATTERN that a later --exclude would leave out
    /// (e.g. --include '*/' --include '*.c' --exclude '*').
    #[arg(long, value_name = "PATTERN", help_heading = "Selection")]
    include: Vec<String>,
    /// An rsync filter rule: "- PATTERN", "+ PATTERN", "merge FILE", "clear".
    #[arg(
        short = 'f',
        long,
        value_name = "RULE",
        allow_hyphen_values = true,
        help_heading = "Selection"
    )]
    filter: Vec<String>,
    /// Copy only the paths FILE lists, one per line, relative to SRC (a
    /// directory with all it holds); DST's other entries are left alone.
    #[arg(long, value_name = "FILE", help_heading = "Selection")]
    files_from: Vec<PathBuf>,
    /// Do not walk into other file systems: a mount point is copied as an
    /// empty directory (-xx: left out); nothing across one in DST is deleted.
    #[arg(short = 'x', long, action = clap::ArgAction::Count, help_heading = "Selection")]
    one_file_system: u8,
    /// Read exclude patterns from FILE (gitignore syntax, `!` lines included).
    #[arg(long, value_name = "FILE", help_heading = "Selection")]
    exclude_from: Vec<PathBuf>,
    /// Ignore .accordignore files.
    #[arg(long, help_heading = "Selection")]
    no_ignore_files: bool,

    /// Delete extra entries in DST (the default, unlike rsync).
    #[arg(long, conflicts_with = "keep_extra", help_heading = "Deletion")]
    delete: bool,
    /// Keep entries of DST that are not in SRC (rsync's default).
    #[arg(long, help_heading = "Deletion")]
    keep_extra: bool,
    /// Most deletions allowed: a count, or a percentage of DST's entries ("50%").
    #[arg(
        long,
        value_name = "N|P%",
        default_value = "50%",
        help_heading = "Deletion"
    )]
    max_delete: String,
    /// Override the deletion guard (empty source, changed source root, --max-delete).
    #[arg(long, help_heading = "Deletion")]
    force: bool,

    /// Keep owner and group even when not root.
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    owner: bool,
    /// Do not keep owner and group.
    #[arg(
        long,
        conflicts_with = "owner",
        help_heading = "Metadata (all kept by default)"
    )]
    no_owner: bool,
    /// Do not keep permissions.
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    no_perms: bool,
    /// Do not keep modification times.
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    no_times: bool,
    /// Do not keep extended attributes.
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    no_xattrs: bool,
    /// Do not keep POSIX ACLs.
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    no_acls: bool,
    /// Copy hard-linked files separately.
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    no_hard_links: bool,
    /// Skip symlinks.
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    no_symlinks: bool,
    /// Skip fifos and sockets.
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    no_specials: bool,
    /// Skip device nodes (the default when not root).
    #[arg(long, help_heading = "Metadata (all kept by default)")]
    no_devices: bool,
    #[command(flatten)]
    rsync_letters: RsyncLetters,
    #[command(flatten, next_help_heading = "Backups")]
    pub(crate) backup: BackupArgs,

    /// A new file equal to the one at its path in DIR (an earlier snapshot;
    /// relative to DST, as in rsync) is made a hard link to it instead of
    /// a copy. Two local roots.
    #[arg(long, value_name = "DIR", help_heading = "Transfer")]
    pub(crate) link_dest: Option<PathBuf>,
    /// Whole-file copies share extents with the source when the file system can.
    #[arg(long, value_enum, default_value = "auto", help_heading = "Transfer")]
    reflink: When,
    /// Delta transfer against the old version (auto: when it writes fewer bytes).
    #[arg(long, value_enum, default_value = "auto", help_heading = "Transfer")]
    delta: When,
    /// Rebuild changed files in their own storage instead of temp + rename
    /// (a delta against the old version; not with --delta never).
    #[arg(long, help_heading = "Transfer")]
    inplace: bool,
    /// Skip the fsyncs (faster; a crash may lose the latest writes).
    #[arg(long, help_heading = "Transfer")]
    no_fsync: bool,
    /// Limit the I/O rate to RATE per second as rsync does (a plain number is
    /// KiB; 100K, 1.5M, 1G; KB, MB: powers of 1000; 0: no limit).
    #[arg(long, value_name = "RATE", help_heading = "Transfer")]
    bwlimit: Option<String>,
    /// Worker threads (0 or unset: twice the cores, at least 4). At most
    /// 1024: each is an OS thread with its own stack and buffers, and more
    /// than that only adds memory and contention on any one machine.
    #[arg(short = 'j', long, default_value_t = 0, value_name = "N", help_heading = "Transfer",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=MAX_JOBS))]
    jobs: usize,

    #[command(flatten, next_help_heading = "Remote roots")]
    remote: crate::remote_args::RemoteArgs,

    #[command(flatten, next_help_heading = "Task runs and clusters")]
    tasks: crate::cmd_tasks::TaskArgs,
    #[command(flatten, next_help_heading = "Task runs and clusters")]
    queue: crate::cmd_tasks::QueueArgs,

    /// Where the deletion guard remembers the source root.
    #[arg(long, hide = true)]
    state_dir: Option<PathBuf>,
}

/// rsync's letters for what it keeps, accepted so that `-a` and friends
/// work as typed: Accord keeps all of these by default (see after_help).
#[derive(clap::Args, Clone, Debug)]
struct RsyncLetters {
    #[arg(short = 'a', long = "archive", hide = true)]
    archive: bool,
    #[arg(short = 'r', long = "recursive", hide = true)]
    recursive: bool,
    #[arg(short = 'l', long = "links", hide = true)]
    links: bool,
    #[arg(short = 'p', long = "perms", hide = true)]
    perms: bool,
    #[arg(short = 't', long = "times", hide = true)]
    times: bool,
    #[arg(short = 'g', long = "group", hide = true)]
    group: bool,
    #[arg(short = 'o', hide = true)]
    owner_if_root: bool,
    #[arg(short = 'D', hide = true)]
    devices_specials: bool,
    #[arg(long = "devices", hide = true)]
    devices: bool,
    #[arg(long = "specials", hide = true)]
    specials: bool,
    #[arg(short = 'H', long = "hard-links", hide = true)]
    hard_links: bool,
    #[arg(short = 'A', long = "acls", hide = true)]
    acls: bool,
    #[arg(short = 'X', long = "xattrs", hide = true)]
    xattrs: bool,
    #[arg(long = "partial", hide = true)]
    partial: bool,
}

const MIRROR_AFTER_HELP: &str = "\
Where Accord differs from rsync:
  SRC and SRC/ mean the same: SRC's contents go into DST (rsync's SRC/).
  With several sources, each goes into DST/NAME (rsync's SRC without the
  slash) and DST's other entries are left alone.
  Extra entries in DST are deleted by default (rsync's --delete), guarded
  by --max-delete; --keep-extra keeps them.
  Everything is kept by default: -a, -r, -l, -p, -t, -g, -o, -D, -H, -A, -X
  and --partial are accepted and change nothing (use the --no-* flags to
  leave something out).
  Patterns are gitignore's: a pattern with a slash in the middle is anchored
  at SRC (rsync matches it at any depth: write **/a/b).

Exit status: 0 all done, 2 some paths failed, 3 the run stopped \
(fatal error or deletion guard, a lost connection), 64 usage error, 69 a remote root that \
could not be reached or refused the session (ssh failed, no accord on the far side, another \
protocol version, an unknown or wrong key, a read-only module).";

/// Most worker threads `--jobs` accepts (see its help).
pub const MAX_JOBS: u64 = 1024;

/// The remote roots of a run: SRC's and DST's (at most one is set).
pub(crate) type Remotes = (Option<RemoteSpec>, Option<RemoteSpec>);

/// The remote root `p` names, if any (`Err`: it looks remote but is not
/// a valid one). A root that is not UTF-8 is a local path.
pub(crate) fn remote_root(p: &std::path::Path) -> Result<Option<RemoteSpec>, String> {
    match p.to_str() {
        Some(s) => parse_remote(s),
        None => Ok(None),
    }
}

pub(crate) fn usage(msg: &str) -> i32 {
    use clap::CommandFactory;
    #[derive(clap::Parser)]
    #[command(name = "accord mirror")]
    struct Wrap {
        #[command(flatten)]
        args: MirrorArgs,
    }
    eprintln!(
        "accord mirror: {msg}\n\n{}\nFor more information, try 'accord mirror --help'.",
        Wrap::command().render_usage()
    );
    exit::USAGE
}

pub fn default_state_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("accord"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state/accord"))
}

pub fn run(mut args: MirrorArgs, matches: &clap::ArgMatches) -> i32 {
    // Before the walk's and the copy's threads start (see the function).
    accord_fsys::one_arena_per_core();
    if args.sources.len() > 1 {
        return crate::mirror_sources::run(args, matches);
    }
    args.src = args.sources.remove(0);
    match run_pair(&args, matches, true) {
        Ran::Report(report, wire) => output(&args, &report, wire),
        Ran::Exited(code) => code,
    }
}

/// How one SRC → DST run ended.
pub(crate) enum Ran {
    /// It ran (or stopped): its report, and the bytes on the wire.
    Report(Box<Report>, Option<(u64, u64)>),
    /// It has printed what it had to say: its exit status.
    Exited(i32),
}

/// Check the arguments of `args.src` → `args.dst` and make the engine's
/// configuration (a usage error's exit status otherwise).
pub(crate) fn checked_config(
    args: &MirrorArgs,
    matches: &clap::ArgMatches,
) -> Result<(Remotes, MirrorConfig), i32> {
    let is_root = unsafe { libc::geteuid() } == 0;
    let remote = check_roots_and_flags(args)?;
    let cfg = mirror_config(args, matches, is_root)?;
    Ok((remote, cfg))
}

/// Run `args.src` → `args.dst` (`note`: say where SRC's contents go when
/// that differs from rsync).
pub(crate) fn run_pair(args: &MirrorArgs, matches: &clap::ArgMatches, note: bool) -> Ran {
    let (remote, cfg) = match checked_config(args, matches) {
        Ok(checked) => checked,
        Err(code) => return Ran::Exited(code),
    };
    if note && !args.quiet && !args.json && remote == (None, None) {
        note_where_contents_go(&args.src, &args.dst);
    }
    if args.tasks.chosen() {
        let shown = !args.quiet && std::io::stderr().is_terminal();
        return Ran::Exited(crate::cmd_tasks::mirror(
            &args.src,
            &args.dst,
            &cfg,
            &args.tasks,
            &args.queue,
            crate::cmd_tasks::Shown {
                terminal: shown,
                summary: shown || args.verbose > 0,
                stats: args.stats,
            },
        ));
    }
    let progress = Progress::default();
    let show_progress = !args.quiet && !args.dry_run && std::io::stderr().is_terminal();
    let shown = show_progress.then_some(&progress);
    match crate::progress::while_showing(shown, || match remote {
        (None, None) => Ok((
            accord_engine::mirror(&args.src, &args.dst, &cfg, &progress),
            None,
        )),
        (src, dst) => mirror_remote(args, src, dst, &cfg, &progress),
    }) {
        Ok((report, wire)) => Ran::Report(Box::new(report), wire),
        Err(code) => Ran::Exited(code),
    }
}

/// rsync copies SRC itself into DST unless SRC ends in a slash; Accord
/// always copies SRC's contents. Said once, when it first matters: the
/// destination is about to be made under another name than SRC's, where
/// an rsync user would have expected DST/NAME.
fn note_where_contents_go(src: &Path, dst: &Path) {
    let Some(text) = src.to_str() else { return };
    if text.ends_with('/') || dst.exists() || !src.is_dir() {
        return;
    }
    if accord_fsys::nesting(src, dst).is_some() {
        return;
    }
    let (Some(name), Some(dst_name)) = (src.file_name(), dst.file_name()) else {
        return;
    };
    if name == dst_name {
        return;
    }
    eprintln!(
        "accord mirror: note: the contents of {text} go into {} (as rsync does for {text}/; \
         rsync without the slash would make {}/{})",
        dst.display(),
        dst.display(),
        name.to_string_lossy()
    );
}

/// The roots (at most one remote) and the flags that cannot go together;
/// a usage error's exit status otherwise.
fn check_roots_and_flags(args: &MirrorArgs) -> Result<Remotes, i32> {
    // --inplace applies a delta against the old version; `--delta never`
    // forbids exactly that. (--inplace alone uses --delta's default.)
    if args.inplace && args.delta == When::Never {
        return Err(usage(
            "--inplace cannot be used with --delta never (an in-place update is a delta)",
        ));
    }
    let remote = match (remote_root(&args.src), remote_root(&args.dst)) {
        (Ok(s), Ok(d)) => (s, d),
        (Err(e), _) | (_, Err(e)) => return Err(usage(&e)),
    };
    if remote.0.is_some() && remote.1.is_some() {
        return Err(usage(
            "at most one root may be remote (run accord on one of the two hosts)",
        ));
    }
    if let Some(dir) = &args.link_dest {
        if remote.0.is_some() || remote.1.is_some() || args.tasks.asked() {
            return Err(usage(
                "--link-dest takes two local roots, without --executor tasks or --cluster",
            ));
        }
        let at = link_dest_dir(&args.dst, dir);
        if !at.is_dir() {
            return Err(usage(&format!(
                "--link-dest {}: {} is not a directory (a relative DIR is taken from DST, \
                 as rsync does)",
                dir.display(),
                at.display()
            )));
        }
    }
    check_backup(args)?;
    if args.tasks.asked() {
        if args.one_file_system > 0 || args.bwlimit.is_some() {
            return Err(usage(
                "task runs (--executor tasks, --cluster) take neither -x (--one-file-system) \
                 nor --bwlimit: run without --executor tasks (or --exclude the mount points)",
            ));
        }
        if remote.0.is_some() || remote.1.is_some() {
            return Err(usage(
                "task runs (--executor tasks, --cluster) take local roots only",
            ));
        }
        if args.itemize || args.verbose > 0 || args.json || args.dry_run {
            return Err(usage(
                "task runs (--executor tasks, --cluster) have no -v, --itemize, --json or \
                 --dry-run: run without --executor tasks to see each change",
            ));
        }
    }
    Ok(remote)
}

/// `--link-dest DIR`: a relative DIR is taken from DST, as rsync does, by
/// its names (DST may not exist yet, so `..` cannot go through it).
pub(crate) fn link_dest_dir(dst: &Path, dir: &Path) -> PathBuf {
    use std::path::Component;
    let mut at = dst.to_path_buf();
    for c in dir.components() {
        match c {
            Component::ParentDir if at.file_name().is_some() => {
                at.pop();
            }
            Component::CurDir => {}
            other => at.push(other),
        }
    }
    at
}

/// `--max-delete N` or `P%`.
fn parse_max_delete(text: &str) -> Result<MaxDelete, i32> {
    let s = text.trim();
    let parsed = if let Some(p) = s.strip_suffix('%') {
        p.trim()
            .parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
            .map(|p| MaxDelete::Fraction(p / 100.0))
    } else {
        s.parse::<usize>().ok().map(MaxDelete::Count)
    };
    parsed.ok_or_else(|| usage(&format!("bad --max-delete value {s:?}: use N or P%")))
}

/// `--exclude`, `--include`, `--filter` and `--exclude-from`, in their
/// order, as the engine's gitignore lines (see `mirror_rules`).
fn excludes(matches: &clap::ArgMatches) -> Result<Vec<String>, i32> {
    crate::mirror_rules::from_matches(matches)
        .and_then(crate::mirror_rules::to_gitignore)
        .map_err(|e| usage(&e))
}

/// rsync's sizes: `4096`, `100K`, `1.5M`, `1G` (powers of 1024; `KB`,
/// `MB`, `GB` are powers of 1000; `KiB`, `MiB`, `GiB` as `K`, `M`, `G`).
pub fn parse_size(flag: &str, text: &str) -> Result<u64, i32> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let multiplier = size_unit(&unit.to_ascii_lowercase());
    let value = num.parse::<f64>().ok().filter(|v| v.is_finite());
    match (value, multiplier) {
        (Some(v), Some(m)) if v * m <= u64::MAX as f64 => Ok((v * m) as u64),
        _ => Err(usage(&format!(
            "bad {flag} value {text:?}: use a size such as 4096, 100K, 1.5M or 2G"
        ))),
    }
}

/// `--bwlimit` in bytes per second: rsync's sizes, a plain number in KiB.
fn bwlimit(text: &Option<String>) -> Result<u64, i32> {
    let Some(t) = text.as_deref().map(str::trim) else {
        return Ok(0);
    };
    let plain = !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.');
    let rate = parse_size(
        "--bwlimit",
        &if plain {
            format!("{t}K")
        } else {
            t.to_string()
        },
    )?;
    // rsync's own floor: a rate below 512 bytes a second is taken as none.
    if rate != 0 && rate < 512 {
        return Err(usage(&format!(
            "--bwlimit {t:?} is below 512 bytes a second: give 0 for no limit, or a larger rate"
        )));
    }
    Ok(rate)
}

/// The bytes in one of a size's units (lower case), as rsync reads them.
fn size_unit(unit: &str) -> Option<f64> {
    if unit.is_empty() || unit == "b" {
        return Some(1.0);
    }
    let (letter, rest) = unit.split_at(1);
    let power = "kmgtp".find(letter)? as i32 + 1;
    let base = match rest {
        "" | "ib" => 1024.0_f64,
        "b" => 1000.0,
        _ => return None,
    };
    Some(base.powi(power))
}

/// `--min-size`, `--max-size`, `--size-only`, `--ignore-existing`.
fn selection(args: &MirrorArgs) -> Result<Selection, i32> {
    let bound = |flag, v: &Option<String>| v.as_deref().map(|t| parse_size(flag, t)).transpose();
    Ok(Selection {
        size_only: args.size_only,
        ignore_existing: args.ignore_existing,
        min_size: bound("--min-size", &args.min_size)?,
        max_size: bound("--max-size", &args.max_size)?,
    })
}

/// What the engine is told, from the arguments.
fn mirror_config(
    args: &MirrorArgs,
    matches: &clap::ArgMatches,
    is_root: bool,
) -> Result<MirrorConfig, i32> {
    let plan = MirrorOptions {
        delete: !args.keep_extra,
        max_delete: parse_max_delete(&args.max_delete)?,
        force: args.force,
        checksum: args.checksum,
        perms: !args.no_perms,
        owner: !args.no_owner && (is_root || args.owner),
        times: !args.no_times,
        xattrs: !(args.no_xattrs && args.no_acls),
        hard_links: !args.no_hard_links,
        kinds: Kinds {
            symlinks: !args.no_symlinks,
            specials: !args.no_specials,
            devices: !args.no_devices && is_root,
        },
        transfer: TransferOptions {
            delta: match args.delta {
                When::Auto => DeltaMode::Auto,
                When::Always => DeltaMode::Always,
                When::Never => DeltaMode::Never,
            },
            inplace: args.inplace,
        },
        select: selection(args)?,
    };
    let state_dir = state_dir(args);
    let mut cfg = MirrorConfig {
        plan,
        xattrs: XattrFilter {
            xattrs: !args.no_xattrs,
            acls: !args.no_acls,
            user_only: false,
        },
        excludes: excludes(matches)?,
        ignore_files: !args.no_ignore_files,
        reflink: match args.reflink {
            When::Auto => Reflink::Auto,
            When::Always => Reflink::Always,
            When::Never => Reflink::Never,
        },
        fsync: !args.no_fsync,
        dry_run: args.dry_run,
        jobs: args.jobs,
        state_dir: state_dir.clone(),
        link_dest: args.link_dest.as_ref().map(|d| link_dest_dir(&args.dst, d)),
        backup: backup_config(args)?,
        one_file_system: args.one_file_system,
        bwlimit: bwlimit(&args.bwlimit)?,
        list_changes: args.itemize || args.verbose > 0,
        count_first: !args.quiet && std::io::stderr().is_terminal(),
    };
    if let Some(rule) = state_dir
        .as_deref()
        .and_then(|d| own_state_rule(&args.src, d))
    {
        cfg.excludes.push(rule);
    }
    Ok(cfg)
}

/// Where the deletion guard and the memos are kept.
fn state_dir(args: &MirrorArgs) -> Option<PathBuf> {
    args.state_dir
        .clone()
        .or_else(|| std::env::var_os("ACCORD_STATE_DIR").map(PathBuf::from))
        .or_else(default_state_dir)
}

/// Our own state directory when it lies inside the source (a backup of
/// a home directory): left out, as an exclude after every other rule. Its
/// memos are rewritten by the very run that copies them, so the copy could
/// only fail with "changed since it was scanned", and they mean nothing
/// anywhere else.
fn own_state_rule(src: &Path, state: &Path) -> Option<String> {
    let (src, state) = (
        std::fs::canonicalize(src).ok()?,
        std::fs::canonicalize(state).ok()?,
    );
    let rel = state.strip_prefix(&src).ok()?.to_str()?;
    (!rel.is_empty()).then(|| format!("/{}/", crate::mirror_rules::literal(rel)))
}

/// A mirror with one remote root: connect to it, open the local one, run.
/// Returns the report and the bytes sent and received on the wire, or the
/// exit status when the remote root could not be reached.
fn mirror_remote(
    args: &MirrorArgs,
    src: Option<RemoteSpec>,
    dst: Option<RemoteSpec>,
    cfg: &MirrorConfig,
    progress: &Progress,
) -> Result<(Report, Option<(u64, u64)>), i32> {
    let (spec, mode) = match (&src, &dst) {
        (Some(s), _) => (s, RootMode::Read),
        (_, Some(d)) if cfg.dry_run => (d, RootMode::Inspect),
        (_, Some(d)) => (d, RootMode::Write),
        (None, None) => unreachable!("one root is remote"),
    };
    let remote = match args.remote.connect(spec, mode) {
        Ok(r) => Some(r).inspect(|r| r.limit_rate(cfg.bwlimit)),
        Err(e) if mode == RootMode::Inspect && e.contains("No such file") => None,
        Err(e) => {
            eprintln!("accord mirror: {e}");
            return Err(exit::UNAVAILABLE);
        }
    };
    let (local_path, local_is_dst) = match src {
        Some(_) => (&args.dst, true),
        None => (&args.src, false),
    };
    let local = match accord_engine::open_local_root(local_path, local_is_dst, cfg) {
        Ok(l) => l,
        Err(f) => {
            let report = Report {
                fatal: Some(f),
                ..Report::default()
            };
            return Ok((report, remote.as_ref().map(|r| r.wire_bytes())));
        }
    };
    let local_ref = local.as_ref().map(|l| l as &dyn accord_engine::Replica);
    let remote_ref = remote.as_ref().map(|r| r as &dyn accord_engine::Replica);
    let report = if local_is_dst {
        let src = remote_ref.expect("a connected source");
        let name = local_path.display().to_string();
        accord_engine::mirror_replicas(src, local_ref, &name, cfg, progress)
    } else {
        let src = local_ref.expect("an opened source");
        accord_engine::mirror_replicas(src, remote_ref, &spec.display(), cfg, progress)
    };
    let owners_dropped = remote.as_ref().is_some_and(|r| !r.keeps_owners());
    if owners_dropped && !local_is_dst && cfg.plan.owner && !cfg.dry_run {
        // Said once, not per file: as rsync's receiver, a server that is
        // not root skips what it may not do.
        eprintln!(
            "accord mirror: owners were not kept in {}: its server does not run as root \
             (it sets only groups its user belongs to)",
            spec.display()
        );
    }
    Ok((report, remote.as_ref().map(|r| r.wire_bytes())))
}

/// One path's failure in `--json`.
#[derive(serde::Serialize)]
struct JsonError {
    path: String,
    message: String,
}

/// The `--json` report: what each figure counts is in docs/mirror.md.
#[derive(serde::Serialize)]
struct JsonReport {
    files_total: u64,
    files_transferred: u64,
    others_created: u64,
    links_created: u64,
    dirs_created: u64,
    metadata_updated: u64,
    files_deleted: u64,
    bytes_total: u64,
    bytes_written: u64,
    literal_bytes: u64,
    matched_bytes: u64,
    errors: Vec<JsonError>,
    elapsed_s: f64,
    scan_s: f64,
    plan_s: f64,
    execute_s: f64,
    dry_run: bool,
    deletions_suspended: bool,
    refused: Option<String>,
    fatal: Option<String>,
    /// Bytes on the wire (with a remote root).
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_sent: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_received: Option<u64>,
}

impl JsonReport {
    fn new(r: &Report, dry_run: bool) -> JsonReport {
        // A dry run's figures are what it would do (see `DryRun`).
        JsonReport {
            files_total: r.files_total,
            files_transferred: r.files_transferred,
            others_created: r.others_created,
            links_created: r.links_created,
            dirs_created: r.dirs_created,
            metadata_updated: r.metadata_updated,
            files_deleted: r.files_deleted,
            bytes_total: r.bytes_total,
            bytes_written: r.bytes_written,
            literal_bytes: r.literal_bytes,
            matched_bytes: r.matched_bytes,
            errors: r
                .errors
                .iter()
                .map(|e| JsonError {
                    path: e.path.display(),
                    message: e.message().to_string(),
                })
                .collect(),
            elapsed_s: r.elapsed_s,
            scan_s: r.scan_s,
            plan_s: r.plan_s,
            execute_s: r.execute_s,
            dry_run,
            deletions_suspended: r.deletions_suspended,
            refused: r.refusal.as_ref().map(|x| x.to_string()),
            fatal: r.fatal.as_ref().map(|x| x.to_string()),
            bytes_sent: None,
            bytes_received: None,
        }
    }
}

/// A planned item for `-n`: its change, its path, and how a file's
/// contents would be written when that is not a whole copy.
fn dry_run_line(it: &accord_engine::PlanItem, prefix: &str) -> Option<String> {
    let c = it.change()?;
    let how = match it.op {
        accord_engine::Op::Write(m) if m != accord_engine::Method::Whole => {
            format!(" ({})", m.name())
        }
        _ => String::new(),
    };
    Some(format!(
        "{:<9} {prefix}{}{how}",
        c.name(),
        it.path.display()
    ))
}

fn output(args: &MirrorArgs, r: &Report, wire: Option<(u64, u64)>) -> i32 {
    print_lines(args, r, "");
    finish(args, r, wire)
}

/// A run's lines: the changes (or with `-n` those it would make), its
/// failures and why it stopped; each path after `prefix` (a source's
/// name, when there are several).
pub(crate) fn print_lines(args: &MirrorArgs, r: &Report, prefix: &str) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.dry_run {
        if let (Some(plan), false) = (&r.plan, args.json) {
            for line in plan.items().filter_map(|it| dry_run_line(&it, prefix)) {
                let _ = writeln!(out, "{line}");
            }
        }
    } else if args.itemize || args.verbose > 0 {
        for (c, p) in &r.changes {
            let _ = writeln!(out, "{:<9} {prefix}{}", c.name(), p.display());
        }
    }
    let _ = out.flush();
    for e in &r.errors {
        eprintln!("accord mirror: {prefix}{e}");
    }
    let source = if prefix.is_empty() {
        String::new()
    } else {
        format!("{}: ", args.src.display())
    };
    if r.deletions_suspended {
        eprintln!(
            "accord mirror: {source}some source directories could not be read; no deletions \
             were made"
        );
    }
    if let Some(refusal) = &r.refusal {
        eprintln!("accord mirror: {source}{refusal}");
    }
    if let Some(f) = &r.fatal {
        eprintln!("accord mirror: {source}{f}");
    }
}

/// The end of the output (the dry run's summary, `--json`, `--stats`, the
/// summary line) and the exit status, for `r`: one run's report, or the
/// totals of several.
pub(crate) fn finish(args: &MirrorArgs, r: &Report, wire: Option<(u64, u64)>) -> i32 {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let (true, Some(plan), false) = (args.dry_run, &r.plan, args.json) {
        let _ = writeln!(out, "{}", dry_run_summary(&plan.summary));
    }
    if args.json {
        let mut report = JsonReport::new(r, args.dry_run);
        if let Some((sent, received)) = wire {
            report.bytes_sent = Some(sent);
            report.bytes_received = Some(received);
        }
        let json = serde_json::to_string(&report)
            .unwrap_or_else(|e| format!("{{\"fatal\":\"cannot encode the report: {e}\"}}"));
        let _ = writeln!(out, "{json}");
    }
    if args.stats && !args.json {
        let _ = write!(out, "{}", stats(r, wire));
    }
    let summary = std::io::stderr().is_terminal() || args.verbose > 0;
    if !args.quiet && !args.dry_run && !args.json && summary {
        eprintln!("accord mirror: {}", crate::summary::line(&figures(r)));
    }
    let _ = out.flush();
    if r.fatal.is_some() || r.refusal.is_some() {
        exit::FATAL
    } else if !r.errors.is_empty() || r.deletions_suspended {
        exit::PARTIAL
    } else {
        exit::OK
    }
}

/// What a dry run would do, in the summary's words (those of a sync's too).
fn dry_run_summary(s: &accord_engine::PlanSummary) -> String {
    use crate::summary::{bytes, count};
    let files = if s.files_total == 1 { "file" } else { "files" };
    let mut line = format!(
        "dry run, nothing was changed: {} of {} {files} would be written ({}), {} deleted",
        count(s.files_to_write as u64),
        count(s.files_total as u64),
        bytes(s.bytes_to_write),
        count(s.deletes as u64)
    );
    if s.extras_kept > 0 {
        line += &format!(", {} extra entries kept", count(s.extras_kept as u64));
    }
    line
}

fn figures(r: &Report) -> crate::summary::Figures {
    crate::summary::Figures {
        files_total: r.files_total,
        files_written: r.files_transferred,
        bytes_written: r.bytes_written,
        deleted: r.files_deleted,
        elapsed_s: r.elapsed_s,
    }
}

/// `--stats`: every figure of the run, one `Name: value` line each.
fn stats(r: &Report, wire: Option<(u64, u64)>) -> String {
    use crate::summary::{duration, stat_bytes, stat_count};
    let mut out = String::new();
    stat_count(&mut out, "Files in the source", r.files_total);
    stat_bytes(&mut out, "Bytes in the source", r.bytes_total);
    stat_count(&mut out, "Files written", r.files_transferred);
    stat_bytes(&mut out, "Bytes written", r.bytes_written);
    stat_bytes(&mut out, "Literal bytes", r.literal_bytes);
    stat_bytes(&mut out, "Matched bytes", r.matched_bytes);
    stat_count(&mut out, "Directories made", r.dirs_created);
    stat_count(&mut out, "Hard links made", r.links_created);
    stat_count(
        &mut out,
        "Symlinks and special files made",
        r.others_created,
    );
    stat_count(&mut out, "Metadata updated", r.metadata_updated);
    stat_count(&mut out, "Entries deleted", r.files_deleted);
    stat_count(&mut out, "Errors", r.errors.len() as u64);
    if let Some((sent, received)) = wire {
        stat_bytes(&mut out, "Bytes sent", sent);
        stat_bytes(&mut out, "Bytes received", received);
    }
    out += &format!(
        "Time: {} (scan {}, plan {}, transfer {})\n",
        duration(r.elapsed_s),
        duration(r.scan_s),
        duration(r.plan_s),
        duration(r.execute_s)
    );
    out
}

/// rsync's backup flags.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct BackupArgs {
    /// Keep what the run overwrites or deletes: beside it as NAME~ (see
    /// --suffix), or under --backup-dir. Such NAME~ left by a run are not
    /// deleted by the next (rsync's protect rule).
    #[arg(short = 'b', long = "backup")]
    on: bool,
    /// With -b (implied): keep them at DIR/PATH, a snapshot of what the
    /// run changed (a relative DIR is taken from DST, as in rsync). Inside
    /// DST, DIR is left out of the mirror.
    #[arg(long, value_name = "DIR")]
    pub(crate) backup_dir: Option<PathBuf>,
    /// Added to a backup's name (default "~"; none with --backup-dir).
    #[arg(long, value_name = "SUFFIX")]
    suffix: Option<String>,
}

impl BackupArgs {
    fn asked(&self) -> bool {
        self.on || self.backup_dir.is_some()
    }
}

/// The flags `-b` cannot go with.
fn check_backup(args: &MirrorArgs) -> Result<(), i32> {
    if !args.backup.asked() {
        return Ok(());
    }
    if args.inplace {
        return Err(usage(
            "-b cannot be used with --inplace: a backup is a hard link of the old version \
             (no copy), and --inplace rewrites that very file; drop one of them",
        ));
    }
    if args.tasks.asked() {
        return Err(usage(
            "-b and --backup-dir are not available with task runs (--executor tasks, \
             --cluster): run without them",
        ));
    }
    backup_config(args).map(|_| ())
}

/// `-b`, `--backup-dir`, `--suffix`, checked as rsync checks them.
fn backup_config(args: &MirrorArgs) -> Result<Option<accord_engine::Backup>, i32> {
    use accord_engine::{Backup, BackupPlace};
    let b = &args.backup;
    if !b.asked() {
        return Ok(None);
    }
    let default = if b.backup_dir.is_some() { "" } else { "~" };
    let suffix = b.suffix.clone().unwrap_or_else(|| default.into());
    if suffix.contains('/') || suffix.len() > 255 {
        return Err(usage(&format!(
            "bad --suffix {suffix:?}: it is added to a file name, so no '/' and at most 255 bytes"
        )));
    }
    let place = match &b.backup_dir {
        None if suffix.is_empty() => {
            return Err(usage(
                "--suffix cannot be empty without --backup-dir (the backup would be the file \
                 itself)",
            ))
        }
        None => BackupPlace::Beside,
        Some(dir) => backup_place(&args.dst, dir)?,
    };
    let suffix = suffix.into_bytes();
    Ok(Some(Backup { place, suffix }))
}

/// Where `--backup-dir DIR` is: inside DST (a path of it) or outside (this
/// host only). A relative DIR is taken from DST, as rsync does.
fn backup_place(dst: &Path, dir: &Path) -> Result<accord_engine::BackupPlace, i32> {
    use accord_engine::BackupPlace;
    use std::os::unix::ffi::OsStrExt;
    let bad = |why: &str| usage(&format!("--backup-dir {}: {why}", dir.display()));
    let inside = |rel: &Path| match accord_model::RelPath::new(rel.as_os_str().as_bytes()) {
        // Left out of the mirror by an exclude line, which is text.
        _ if rel.to_str().is_none_or(|t| t.contains(char::is_control)) => {
            Err(bad("inside DST, DIR's name must be UTF-8 text"))
        }
        Ok(p) if !p.is_root() => Ok(BackupPlace::Inside(p)),
        _ => Err(bad("it cannot be DST itself, nor hold DST")),
    };
    if remote_root(dst).ok().flatten().is_some() {
        // Only DST's own tree is reachable on its host.
        return match relative_inside(dir) {
            Some(rel) => inside(&rel),
            None => Err(bad(
                "with a remote DST, give a relative DIR inside DST (such as .backup/DATE)",
            )),
        };
    }
    let at = link_dest_dir(dst, dir);
    let (dst_real, at_real) = (real_path(dst), real_path(&at));
    if dst_real.starts_with(&at_real) {
        return Err(bad("it cannot be DST itself, nor hold DST"));
    }
    if let Ok(rel) = at_real.strip_prefix(&dst_real) {
        return inside(rel);
    }
    if at.exists() && !at.is_dir() {
        return Err(bad("it is not a directory"));
    }
    Ok(BackupPlace::Outside(at))
}

/// A relative `dir` with its `.` and `..` taken away, if it stays inside.
fn relative_inside(dir: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut at = PathBuf::new();
    for c in dir.components() {
        match c {
            Component::Normal(name) => at.push(name),
            Component::CurDir => {}
            Component::ParentDir if at.pop() => {}
            _ => return None,
        }
    }
    Some(at)
}

/// `p` with its symlinks resolved as far as it exists (the rest as given),
/// to tell whether one path lies inside another.
fn real_path(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p.to_path_buf();
    loop {
        let here = if at.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &at
        };
        if let Ok(mut real) = std::fs::canonicalize(here) {
            real.extend(rest.iter().rev());
            return real;
        }
        match (at.file_name(), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                at = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}
