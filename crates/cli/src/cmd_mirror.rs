//! `accord mirror SRC DST`: arguments → `MirrorConfig`, progress, output,
//! exit codes. The work is in `accord_engine::mirror`.

use crate::exit;
use accord_engine::{
    DeltaMode, Kinds, MaxDelete, MirrorConfig, MirrorOptions, Progress, Reflink, Report,
    TransferOptions, XattrFilter,
};
use accord_remote::{parse_remote, RemoteSpec, RootMode};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum When {
    Auto,
    Always,
    Never,
}

/// Make DST an exact copy of SRC (SRC's contents go into DST, which is
/// created if missing). Extra entries in DST are deleted, guarded.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 all done, 2 some paths failed, 3 the run stopped \
(fatal error or deletion guard, a lost connection), 64 usage error, 69 a remote root that \
could not be reached or refused the session (ssh failed, no accord on the far side, another \
protocol version, an unknown or wrong key, a read-only module)."
)]
pub struct MirrorArgs {
    /// Source directory: a local path, [USER@]HOST:PATH,
    /// ssh://[USER@]HOST[:PORT]/PATH or accord://HOST[:PORT]/MODULE/PATH
    /// (for a local path with a colon before its first slash, write
    /// ./NAME:REST).
    src: PathBuf,
    /// Destination directory (created if missing), local or remote like SRC.
    dst: PathBuf,

    /// Print the plan and change nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// List each change (created, updated, metadata, deleted), one per line.
    #[arg(short = 'i', long)]
    itemize: bool,
    /// Print one JSON object with the run's figures on stdout at the end.
    #[arg(long)]
    json: bool,
    /// No progress display and no summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Compare contents (BLAKE3) instead of size and modification time.
    #[arg(short = 'c', long)]
    checksum: bool,

    /// Keep entries of DST that are not in SRC.
    #[arg(long)]
    keep_extra: bool,
    /// Delete extra entries in DST (the default).
    #[arg(long, conflicts_with = "keep_extra")]
    delete: bool,
    /// Most deletions allowed: a count, or a percentage of DST's entries ("50%").
    #[arg(long, value_name = "N|P%", default_value = "50%")]
    max_delete: String,
    /// Override the deletion guard (empty source, changed source root, --max-delete).
    #[arg(long)]
    force: bool,

    /// Whole-file copies share extents with the source when the file system can.
    #[arg(long, value_enum, default_value = "auto")]
    reflink: When,
    /// Delta transfer against the old version (auto: when it writes fewer bytes).
    #[arg(long, value_enum, default_value = "auto")]
    delta: When,
    /// Rebuild changed files in their own storage instead of temp + rename
    /// (a delta against the old version; not with --delta never).
    #[arg(long)]
    inplace: bool,
    /// Skip the fsyncs (faster; a crash may lose the latest writes).
    #[arg(long)]
    no_fsync: bool,
    /// Worker threads (0 or unset: twice the cores, at least 4). At most
    /// 1024: each is an OS thread with its own stack and buffers, and more
    /// than that only adds memory and contention on any one machine.
    #[arg(short = 'j', long, default_value_t = 0, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=MAX_JOBS))]
    jobs: usize,

    /// Keep owner and group even when not root.
    #[arg(long)]
    owner: bool,
    /// Do not keep owner and group.
    #[arg(long, conflicts_with = "owner")]
    no_owner: bool,
    /// Do not keep permissions.
    #[arg(long)]
    no_perms: bool,
    /// Do not keep modification times.
    #[arg(long)]
    no_times: bool,
    /// Do not keep extended attributes.
    #[arg(long)]
    no_xattrs: bool,
    /// Do not keep POSIX ACLs.
    #[arg(long)]
    no_acls: bool,
    /// Copy hard-linked files separately.
    #[arg(long)]
    no_hard_links: bool,
    /// Skip symlinks.
    #[arg(long)]
    no_symlinks: bool,
    /// Skip fifos and sockets.
    #[arg(long)]
    no_specials: bool,
    /// Skip device nodes (the default when not root).
    #[arg(long)]
    no_devices: bool,

    /// Exclude entries matching PATTERN (gitignore syntax; repeatable).
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Read exclude patterns from FILE (gitignore syntax).
    #[arg(long, value_name = "FILE")]
    exclude_from: Vec<PathBuf>,
    /// Ignore .accordignore files.
    #[arg(long)]
    no_ignore_files: bool,

    #[command(flatten)]
    remote: crate::remote_args::RemoteArgs,

    #[command(flatten)]
    tasks: crate::cmd_tasks::TaskArgs,
    #[command(flatten)]
    queue: crate::cmd_tasks::QueueArgs,

    /// Where the deletion guard remembers the source root.
    #[arg(long, hide = true)]
    state_dir: Option<PathBuf>,
}

/// Most worker threads `--jobs` accepts (see its help).
pub const MAX_JOBS: u64 = 1024;

/// The remote root `p` names, if any (`Err`: it looks remote but is not
/// a valid one). A root that is not UTF-8 is a local path.
fn remote_root(p: &std::path::Path) -> Result<Option<RemoteSpec>, String> {
    match p.to_str() {
        Some(s) => parse_remote(s),
        None => Ok(None),
    }
}

fn usage(msg: &str) -> i32 {
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

pub fn run(args: MirrorArgs) -> i32 {
    let is_root = unsafe { libc::geteuid() } == 0;
    let remote = match check_roots_and_flags(&args) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let cfg = match mirror_config(&args, is_root) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    if args.tasks.chosen() {
        let shown = !args.quiet && std::io::stderr().is_terminal();
        return crate::cmd_tasks::mirror(
            &args.src,
            &args.dst,
            &cfg,
            &args.tasks,
            &args.queue,
            shown,
        );
    }
    let progress = Progress::default();
    let show_progress = !args.quiet && !args.dry_run && std::io::stderr().is_terminal();
    let shown = show_progress.then_some(&progress);
    let (report, wire) = match crate::progress::while_showing(shown, true, || match remote {
        (None, None) => Ok((
            accord_engine::mirror(&args.src, &args.dst, &cfg, &progress),
            None,
        )),
        (src, dst) => mirror_remote(&args, src, dst, &cfg, &progress),
    }) {
        Ok(r) => r,
        Err(code) => return code,
    };
    output(&args, &report, wire)
}

/// The roots (at most one remote) and the flags that cannot go together;
/// a usage error's exit status otherwise.
fn check_roots_and_flags(
    args: &MirrorArgs,
) -> Result<(Option<RemoteSpec>, Option<RemoteSpec>), i32> {
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
    if args.tasks.asked() {
        if remote.0.is_some() || remote.1.is_some() {
            return Err(usage(
                "task runs (--executor tasks, --cluster) take local roots only",
            ));
        }
        if args.itemize || args.json || args.dry_run {
            return Err(usage(
                "task runs (--executor tasks, --cluster) have no --itemize, --json or --dry-run",
            ));
        }
    }
    Ok(remote)
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

/// `--exclude` patterns, then the lines of each `--exclude-from` file.
fn excludes(args: &MirrorArgs) -> Result<Vec<String>, i32> {
    let mut excludes = args.exclude.clone();
    for f in &args.exclude_from {
        match std::fs::read(f) {
            Ok(b) => excludes.extend(String::from_utf8_lossy(&b).lines().map(|l| l.to_string())),
            Err(e) => {
                return Err(usage(&format!(
                    "cannot read --exclude-from {}: {e}",
                    f.display()
                )))
            }
        }
    }
    Ok(excludes)
}

/// What the engine is told, from the arguments.
fn mirror_config(args: &MirrorArgs, is_root: bool) -> Result<MirrorConfig, i32> {
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
    };
    Ok(MirrorConfig {
        plan,
        xattrs: XattrFilter {
            xattrs: !args.no_xattrs,
            acls: !args.no_acls,
            user_only: false,
        },
        excludes: excludes(args)?,
        ignore_files: !args.no_ignore_files,
        reflink: match args.reflink {
            When::Auto => Reflink::Auto,
            When::Always => Reflink::Always,
            When::Never => Reflink::Never,
        },
        fsync: !args.no_fsync,
        dry_run: args.dry_run,
        jobs: args.jobs,
        state_dir: args
            .state_dir
            .clone()
            .or_else(|| std::env::var_os("ACCORD_STATE_DIR").map(PathBuf::from))
            .or_else(default_state_dir),
    })
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
        Ok(r) => Some(r),
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
    Ok((report, remote.as_ref().map(|r| r.wire_bytes())))
}

/// One path's failure in `--json`.
#[derive(serde::Serialize)]
struct JsonError {
    path: String,
    message: String,
}

/// The `--json` report: what each figure counts is in the README.
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
fn dry_run_line(it: &accord_engine::PlanItem) -> Option<String> {
    let c = it.change()?;
    let how = match it.op {
        accord_engine::Op::Write(m) if m != accord_engine::Method::Whole => {
            format!(" ({})", m.name())
        }
        _ => String::new(),
    };
    Some(format!("{:<9} {}{how}", c.name(), it.path.display()))
}

fn output(args: &MirrorArgs, r: &Report, wire: Option<(u64, u64)>) -> i32 {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.dry_run {
        if let Some(plan) = &r.plan {
            if !args.json {
                for line in plan.items().filter_map(dry_run_line) {
                    let _ = writeln!(out, "{line}");
                }
                let s = &plan.summary;
                let _ = writeln!(
                    out,
                    "dry run: {} files to write ({} bytes), {} to delete{}; nothing was changed",
                    s.files_to_write,
                    s.bytes_to_write,
                    s.deletes,
                    if s.extras_kept > 0 {
                        format!(", {} extra entries kept", s.extras_kept)
                    } else {
                        String::new()
                    }
                );
            }
        }
    } else if args.itemize {
        for (c, p) in &r.changes {
            let _ = writeln!(out, "{:<9} {}", c.name(), p.display());
        }
    }
    for e in &r.errors {
        eprintln!("accord mirror: {e}");
    }
    if r.deletions_suspended {
        eprintln!(
            "accord mirror: some source directories could not be read; no deletions were made"
        );
    }
    if let Some(refusal) = &r.refusal {
        eprintln!("accord mirror: {refusal}");
    }
    if let Some(f) = &r.fatal {
        eprintln!("accord mirror: {f}");
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
    } else if !args.quiet && !args.dry_run && std::io::stderr().is_terminal() {
        eprintln!(
            "accord mirror: {} files, {} transferred, {} deleted, {} bytes written in {:.2}s",
            r.files_total, r.files_transferred, r.files_deleted, r.bytes_written, r.elapsed_s
        );
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
