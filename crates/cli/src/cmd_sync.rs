//! `accord sync A B`: arguments → `SyncConfig`, output, exit codes. The
//! work is in `accord_engine::sync_local` (two local roots) and
//! `sync_with_local` (one remote root, reached here). `--watch` repeats
//! the run whenever the roots change (`sync_watch`).

use crate::exit;
use accord_engine::sync_plan;
use accord_engine::{
    ConflictReason, MaxDelete, MergeProgram, PlanEdit, Preference, SyncConfig, SyncFatal,
    SyncHooks, SyncReport,
};
use accord_model::RelPath;
use accord_remote::{RemoteSpec, RootMode};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `--ignorecase`'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IgnoreCaseArg {
    True,
    False,
    Auto,
}

/// Bring two directories into agreement both ways (the Unison paper's
/// semantics): what changed on one side since the last sync is carried to
/// the other; what changed on both sides differently is a conflict, left
/// alone and listed.
#[derive(clap::Args, Debug)]
#[command(
    args_override_self = true,
    after_help = "Exit status: 0 all agreed, 1 conflicts were left, 2 some paths \
failed, 3 the run stopped or was refused (a root missing or unreadable, the deletion guard, \
another sync of the same roots running, a remote root unreachable), 64 usage error.\n\n\
A root is a local directory, or (one of the two at most) a remote one: [USER@]HOST:PATH or \
ssh://[USER@]HOST[:PORT]/PATH over ssh, accord://HOST[:PORT]/MODULE/PATH from an accord \
server daemon. A remote root's archive is kept on its own host.\n\n\
Profiles: accord sync NAME reads the roots and options of $XDG_CONFIG_HOME/accord/NAME.toml \
(or ~/.config/accord/NAME.toml): roots = [\"A\", \"B\"], and any long option as a key \
(prefer = \"newer\", times = true, max-delete = \"20%\", exclude = [\"*.o\", \"cache/\"]). \
Options on the command line win (a list adds to the profile's).\n\n\
Ignore rules: --exclude, --exclude-from and .accordignore files (gitignore syntax, as for \
accord mirror) leave paths out of the sync on both sides; a path excluded by either side's \
rules is left alone on both.\n\n\
Symlinks are synced as links unless --follow names them (as Unison's follow preference).\n\n\
Unison's single-dash options are taken where they mean the same (-batch, -auto, -path P, \
-prefer ROOT, -force ROOT, -ignore 'Name P' or 'Path P', -times, -root R, ...); the others \
are refused with what to use instead.\n\n\
Both roots must exist, local or remote: Unison makes a missing root on a first sync, accord \
deliberately does not (a disk not mounted would be filled); create it with mkdir."
)]
pub struct SyncArgs {
    /// The first root (A): an existing directory, local or remote (alone:
    /// the name of a profile).
    a: PathBuf,
    /// The second root (B): an existing directory, local or remote.
    b: PathBuf,
    /// More roots (C, D …): all the roots are synced in one run, with the
    /// semantics of two generalised (see the sync semantics document).
    /// On a terminal the plan is shown first, a column per root, and a
    /// root's version can be chosen for a path (as --force does there).
    #[arg(value_name = "ROOT")]
    pub(crate) more: Vec<PathBuf>,

    /// Ask nothing: conflicts are skipped and listed (without a terminal a
    /// run is always batch; on one, the plan is shown to be edited first).
    /// Unison's -batch.
    #[arg(long)]
    pub(crate) batch: bool,
    /// Unison's -auto: on a terminal, carry out the changes that are not
    /// conflicts without showing them, and show only the conflicts to be
    /// resolved (none: nothing is shown). The changes are listed as they
    /// are made, as in batch mode. With --batch (Unison's -batch -auto),
    /// nothing is shown.
    #[arg(long)]
    pub(crate) auto: bool,
    /// Show what would be propagated and change nothing: no file, no
    /// archive (the archives are read from scratch copies), no lock left.
    /// On a terminal the plan can still be edited first. Two local roots
    /// only.
    #[arg(short = 'n', long)]
    pub(crate) dry_run: bool,
    /// Sync only PATH (relative to the roots; repeatable), as Unison's
    /// -path: what lies outside every PATH is left alone on both sides;
    /// the directories on the way to one are synced, not their other
    /// entries. A profile's key: path = ["docs", "src/lib"].
    #[arg(long, value_name = "PATH")]
    path: Vec<String>,
    /// Resolve conflicts: the side A or B, the newer or the older mtime,
    /// or one of the two roots as written (as Unison's -prefer).
    #[arg(long, value_name = "A|B|newer|older|ROOT")]
    pub(crate) prefer: Option<String>,
    /// Make the other side equal to this one everywhere, this run only:
    /// A, B, or one of the two roots as written (as Unison's -force).
    #[arg(long, value_name = "A|B|ROOT")]
    pub(crate) force: Option<String>,
    /// Fingerprint (BLAKE3) every file instead of trusting size, mtime,
    /// ctime and inode.
    #[arg(short = 'c', long)]
    checksum: bool,
    /// Keep files' modification times in agreement too.
    #[arg(long)]
    times: bool,
    /// Most deletions allowed on either side: a count, or a percentage of
    /// its entries ("50%").
    #[arg(long, value_name = "N|P%", default_value = "50%")]
    max_delete: String,
    /// Resolve a conflict between two changed files (or links, or other
    /// non-directories) by keeping both: the winner (--prefer's, else the
    /// newer mtime) keeps the name on both sides, the other version is
    /// kept beside it on both as NAME.conflict-HOST-DATE (HOST: its side's
    /// host; DATE: its mtime, UTC).
    #[arg(long)]
    pub(crate) keep_both: bool,
    /// Keep every version a sync overwrites or deletes on a side in
    /// .accord-backup/ at the top of that root, as RELPATH.~N~ (the
    /// highest N the newest; a hard link, no data copied).
    /// .accord-backup is never synced.
    #[arg(long)]
    pub(crate) backup: bool,
    /// Give each conflict between two regular files (changed on both
    /// sides, permissions and other synced properties alike) to the
    /// program CMD, run here by sh -c with these words replaced by
    /// shell-quoted paths: CURRENT1 (a read-only copy of A's version),
    /// CURRENT2 (of B's), NEW (the file CMD must write) and PATH (the
    /// path in the roots, for messages). A word is replaced only where
    /// it stands alone. CMD runs unattended: stdin /dev/null, in a
    /// private temp directory. Exit 0 with NEW written: NEW becomes the
    /// file on both sides; anything else leaves the conflict. Unison's
    /// CURRENTARCH is not offered. In the interactive mode only the
    /// conflicts marked with 'm' are merged.
    #[arg(long, value_name = "CMD")]
    pub(crate) merge: Option<String>,
    /// With --merge: kill the program (and what it started) after this
    /// many seconds; the conflict stays. 0: no limit.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 600,
        requires = "merge",
        value_parser = clap::value_parser!(u64).range(0..=604_800)
    )]
    merge_timeout: u64,
    /// With --backup: how many backups to keep per path (the newest).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    max_backups: u32,
    /// Propagate a path deleted on one side and an equal one created there
    /// as a deletion and a copy, not as a rename of the other side's entry.
    #[arg(long)]
    no_renames: bool,
    /// Copy each name of a hard-link group as a separate file, instead of
    /// keeping the group one file with several names on both sides.
    #[arg(long)]
    no_hard_links: bool,
    /// Keep owners and groups in agreement, by number (giving a file to
    /// another user needs root). Without it each side's files belong to
    /// whoever made them there.
    #[arg(long)]
    owner: bool,
    /// Leave extended attributes (user.*) out: not compared, not copied.
    #[arg(long)]
    no_xattrs: bool,
    /// Leave POSIX ACLs out: not compared, not copied.
    #[arg(long)]
    no_acls: bool,
    /// Leave out of the sync, on both sides, the paths matching PATTERN
    /// (gitignore syntax; repeatable). An excluded path is never scanned,
    /// copied or deleted; adding a rule deletes nothing anywhere.
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Read exclude patterns from FILE, one a line (gitignore syntax).
    #[arg(long, value_name = "FILE")]
    exclude_from: Vec<PathBuf>,
    /// Do not read .accordignore files (by default each side's, in
    /// gitignore syntax, exclude on both sides what they match).
    #[arg(long)]
    no_ignore_files: bool,
    /// Treat the symlinks whose paths match PATTERN (gitignore syntax, as
    /// --exclude; repeatable) as what they point to: a link to a file is
    /// synced as that file (an update is written through the link into
    /// its target), a link to a directory is walked as a directory. Other
    /// links stay links. A followed link that dangles or loops is an
    /// error for its path, never a deletion.
    #[arg(long, value_name = "PATTERN")]
    follow: Vec<String>,
    /// Match names ignoring case (true), exactly (false), or ignoring case
    /// when either root is on a case-insensitive file system (auto, found
    /// by a probe in each root). Ignoring case, `Readme` and `README` are
    /// one path; names on one side that differ only by case are refused
    /// (left alone, nothing deleted) until all but one are renamed; a
    /// change of case only is not propagated (as Unison does).
    #[arg(
        long,
        value_enum,
        value_name = "true|false|auto",
        default_value = "auto"
    )]
    ignorecase: IgnoreCaseArg,
    /// Print one JSON object with the run's results on stdout at the end.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print only conflicts and errors.
    #[arg(short = 'q', long)]
    pub(crate) quiet: bool,
    /// Keep the pair in sync: after this run, watch both roots and sync
    /// again whenever something changes, until SIGINT or SIGTERM.
    #[arg(long)]
    pub(crate) watch: bool,
    /// With --watch: seconds between syncs when a root cannot be watched
    /// (the kernel's inotify watch limit reached, or a remote root whose
    /// host cannot watch it or whose watch connection failed).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 5,
        requires = "watch",
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    watch_interval: u64,
    /// Where the archives are kept.
    #[arg(long, hide = true)]
    state_dir: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) remote: crate::remote_args::RemoteArgs,
}

/// `$XDG_DATA_HOME/accord`, or `~/.local/share/accord`.
pub(crate) fn default_archive_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("accord"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/accord"))
}

pub(crate) fn usage(msg: &str) -> i32 {
    eprintln!("accord sync: {msg}\nFor more information, try 'accord sync --help'.");
    exit::USAGE
}

fn parse_max_delete(text: &str) -> Option<MaxDelete> {
    let text = text.trim();
    match text.strip_suffix('%') {
        Some(percent) => percent
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
            .map(|p| MaxDelete::Fraction(p / 100.0)),
        None => text.parse::<usize>().ok().map(MaxDelete::Count),
    }
}

/// A root's remote address, if it is one (`Err`: a malformed one).
pub(crate) fn remote_spec(root: &Path) -> Result<Option<RemoteSpec>, String> {
    match root.to_str() {
        Some(text) => accord_remote::parse_remote(text),
        // Not UTF-8: a local path (no host name is written so).
        None => Ok(None),
    }
}

/// The side a `--prefer`/`--force` value names: A or B (either case), or
/// one of the roots as written on the command line (Unison's way).
fn side_named(args: &SyncArgs, value: &str) -> Option<sync_plan::Side> {
    match value {
        "A" | "a" => Some(sync_plan::Side::A),
        "B" | "b" => Some(sync_plan::Side::B),
        _ if Path::new(value) == args.a => Some(sync_plan::Side::A),
        _ if Path::new(value) == args.b => Some(sync_plan::Side::B),
        _ => None,
    }
}

fn preference(args: &SyncArgs, value: &str) -> Option<Preference> {
    match value {
        "newer" => Some(Preference::Newer),
        "older" => Some(Preference::Older),
        _ => side_named(args, value).map(Preference::Side),
    }
}

pub(crate) fn config(args: &SyncArgs) -> Result<SyncConfig, i32> {
    let Some(max_delete) = parse_max_delete(&args.max_delete) else {
        return Err(usage(&format!(
            "bad --max-delete value {:?}: use N or P%",
            args.max_delete
        )));
    };
    let state_dir = args
        .state_dir
        .clone()
        .or_else(|| std::env::var_os("ACCORD_STATE_DIR").map(PathBuf::from))
        .or_else(default_archive_dir);
    let Some(state_dir) = state_dir else {
        eprintln!(
            "accord sync: no HOME, XDG_DATA_HOME or ACCORD_STATE_DIR to keep the archives in"
        );
        return Err(exit::FATAL);
    };
    let mut cfg = SyncConfig::new(state_dir);
    cfg.rules =
        crate::sync_rules::rules_of(&args.exclude, &args.exclude_from, args.no_ignore_files)
            .map_err(|e| usage(&e))?;
    // The paths' patterns first: an --exclude still leaves out what it
    // matches inside them.
    let mut excludes = crate::sync_rules::paths_of(&args.path).map_err(|e| usage(&e))?;
    excludes.append(&mut cfg.rules.excludes);
    cfg.rules.excludes = excludes;
    cfg.rules.follow = crate::sync_rules::follow_of(&args.follow).map_err(|e| usage(&e))?;
    cfg.checksum = args.checksum;
    cfg.times = args.times;
    cfg.max_delete = max_delete;
    cfg.renames = !args.no_renames;
    cfg.hard_links = !args.no_hard_links;
    cfg.owner = args.owner;
    cfg.xattrs = !args.no_xattrs;
    cfg.acls = !args.no_acls;
    cfg.keep_both = args.keep_both;
    cfg.ignorecase = match args.ignorecase {
        IgnoreCaseArg::True => Some(true),
        IgnoreCaseArg::False => Some(false),
        IgnoreCaseArg::Auto => None,
    };
    cfg.backups = args.backup.then_some(args.max_backups);
    if let Some(command) = &args.merge {
        let limit =
            (args.merge_timeout > 0).then(|| std::time::Duration::from_secs(args.merge_timeout));
        cfg.merge = Some(MergeProgram::new(command, limit).map_err(|e| usage(&e))?);
    }
    // A set's policies name its roots otherwise (`cmd_sync_set.rs`).
    if let Some(force) = args.force.as_ref().filter(|_| args.more.is_empty()) {
        cfg.force = Some(side_named(args, force).ok_or_else(|| {
            usage(&format!(
                "--force {force:?}: name a side, A or B, or one of the two roots as written"
            ))
        })?);
    }
    if let Some(prefer) = args.prefer.as_ref().filter(|_| args.more.is_empty()) {
        cfg.prefer = Some(preference(args, prefer).ok_or_else(|| {
            usage(&format!(
                "--prefer {prefer:?}: A or B, newer or older, or one of the two roots as written"
            ))
        })?);
    }
    cfg.dry_run = args.dry_run;
    Ok(cfg)
}

impl SyncArgs {
    /// Every root, in the order written.
    pub(crate) fn roots(&self) -> Vec<PathBuf> {
        let mut roots = vec![self.a.clone(), self.b.clone()];
        roots.extend(self.more.iter().cloned());
        roots
    }
}

pub fn run(args: SyncArgs) -> i32 {
    // The scans' change lists, a plan's tables and the lists of changes
    // made go back to the system when dropped: a first sync of three roots
    // of 100,000 files peaked at 125 MB resident with glibc's moving
    // threshold, 113 MB with it fixed; two roots 69 MB, 66 MB.
    accord_fsys::map_large_buffers_apart();
    if !args.more.is_empty() {
        return crate::cmd_sync_set::run(&args);
    }
    let specs = match (remote_spec(&args.a), remote_spec(&args.b)) {
        (Ok(a), Ok(b)) => [a, b],
        (Err(e), _) | (_, Err(e)) => return usage(&e),
    };
    if specs.iter().all(Option::is_some) {
        return usage("at most one root may be remote: run accord on one of the two hosts");
    }
    let cfg = match config(&args) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    let remote = [specs[0].is_some(), specs[1].is_some()];
    // A watch asks nothing: it runs unattended, as --batch.
    let interactive = crate::sync_tui::Interactive::for_run(
        crate::sync_tui::Asked {
            batch: args.batch || args.watch || args.json,
            auto: args.auto,
            merge: args.merge.is_some(),
        },
        [&args.a, &args.b],
        remote,
    );
    let counters = Arc::new(accord_engine::Progress::default());
    let display = crate::progress::Display::for_run(counters.clone(), args.quiet || args.json);
    let pause_plan = test_pause_hook("ACCORD_TEST_SYNC_PAUSE_PLAN");
    let edit_plan = interactive.as_ref().map(|ui| {
        |edit: &mut PlanEdit<'_>, merger: &dyn accord_engine::MergeNow| {
            if let Some(pause) = &pause_plan {
                pause();
            }
            // The list takes the screen: the progress line is erased
            // first, and drawn again once the plan is confirmed.
            if let Some(display) = &display {
                display.stop();
            }
            ui.edit(edit, merger);
            if let Some(display) = &display {
                display.start();
            }
        }
    });
    let merge_chosen = interactive
        .as_ref()
        .map(|ui| move |path: &RelPath| ui.merge_chosen(path));
    let pause = test_pause_hook("ACCORD_TEST_SYNC_PAUSE");
    let pause_links = test_pause_hook("ACCORD_TEST_SYNC_PAUSE_LINKS");
    let hooks = SyncHooks {
        before_propagating: pause.as_ref().map(|hook| hook as &(dyn Fn() + Sync)),
        edit_plan: None,
        edit_plan_merging: edit_plan
            .as_ref()
            .map(|hook| hook as &accord_engine::EditPlanMerging),
        before_links: pause_links.as_ref().map(|hook| hook as &(dyn Fn() + Sync)),
        // Counted always: the summary says what was copied.
        progress: Some(&*counters),
        merge_chosen: merge_chosen
            .as_ref()
            .map(|hook| hook as &(dyn Fn(&RelPath) -> bool + Sync)),
    };
    let mut cycle = || {
        reset(&counters);
        if let Some(display) = &display {
            display.start();
        }
        let run = || sync_once(&args, &specs, &cfg, &hooks);
        let report = run_shown(display.as_ref(), run);
        print_report(&args, &report, &counters);
        let code = exit_code(&report.0);
        crate::sync_watch::Cycle {
            code: interactive.as_ref().map_or(code, |ui| ui.finish(code)),
            refused: report.0.refusal.is_some(),
            fatal: report.0.fatal.is_some(),
        }
    };
    if args.watch {
        let roots = [args.a.clone(), args.b.clone()];
        let opts = watch_options(&args, &roots, specs.as_slice(), &cfg);
        return crate::sync_watch::watch(&opts, &mut cycle);
    }
    cycle().code
}

/// Run `work`, then stop the progress line (erased) before anything is
/// printed.
fn run_shown<T>(display: Option<&crate::progress::Display>, work: impl FnOnce() -> T) -> T {
    let result = work();
    if let Some(display) = display {
        display.stop();
    }
    result
}

/// The counters zeroed for another run (`--watch`).
fn reset(p: &accord_engine::Progress) {
    use std::sync::atomic::Ordering::Relaxed;
    p.planned.store(false, Relaxed);
    for counter in [&p.files_total, &p.bytes_total, &p.files_done, &p.bytes_done] {
        counter.store(0, Relaxed);
    }
}

fn print_report(
    args: &SyncArgs,
    (report, wire): &(SyncReport, Option<(u64, u64)>),
    counters: &accord_engine::Progress,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let copied = (
        counters.files_done.load(Relaxed),
        counters.bytes_done.load(Relaxed),
    );
    if args.json {
        print_json(report, *wire, copied);
    } else {
        print_text(report, args.quiet, copied);
    }
}

/// One run of the pair: its report, and the bytes sent and received with
/// a remote root.
fn sync_once(
    args: &SyncArgs,
    specs: &[Option<RemoteSpec>; 2],
    cfg: &SyncConfig,
    hooks: &SyncHooks,
) -> (SyncReport, Option<(u64, u64)>) {
    match specs {
        [Some(spec), None] => sync_remote(args, spec, &args.b, false, cfg, hooks),
        [None, Some(spec)] => sync_remote(args, spec, &args.a, true, cfg, hooks),
        _ => (
            accord_engine::sync_local(&args.a, &args.b, cfg, hooks),
            None,
        ),
    }
}

/// What `--watch` watches: each root, local or remote (a remote one on its
/// own host, through a connection of its own).
pub(crate) fn watch_options(
    args: &SyncArgs,
    roots: &[PathBuf],
    specs: &[Option<RemoteSpec>],
    cfg: &SyncConfig,
) -> crate::sync_watch::WatchOptions {
    use crate::sync_watch::WatchRoot;
    let root = |path: &PathBuf, spec: &Option<RemoteSpec>| match spec {
        Some(spec) => {
            let (remote, spec) = (args.remote.clone(), spec.clone());
            WatchRoot::Remote {
                address: path.display().to_string(),
                connect: Box::new(move || remote.connect(&spec, RootMode::Read)),
            }
        }
        None => WatchRoot::Local(path.clone()),
    };
    crate::sync_watch::WatchOptions {
        roots: roots
            .iter()
            .zip(specs)
            .map(|(path, spec)| root(path, spec))
            .collect(),
        interval: std::time::Duration::from_secs(args.watch_interval),
        state_dir: cfg.state_dir.clone(),
        rules: cfg.rules.clone(),
    }
}

/// A sync with one remote root: reach it (the far side opens its root for
/// writing and keeps its archive there), then run. Also returns the bytes
/// sent and received on the wire.
fn sync_remote(
    args: &SyncArgs,
    spec: &RemoteSpec,
    local: &Path,
    local_is_a: bool,
    cfg: &SyncConfig,
    hooks: &SyncHooks,
) -> (SyncReport, Option<(u64, u64)>) {
    // A dry run's session only inspects the root: its host refuses every
    // change, and opens a scratch copy of its archive.
    let mode = match cfg.dry_run {
        true => RootMode::Inspect,
        false => RootMode::WriteExisting,
    };
    let remote = match args.remote.connect(spec, mode) {
        Ok(remote) => remote,
        Err(e) => {
            let report = SyncReport {
                fatal: Some(SyncFatal::Unreachable(e)),
                ..SyncReport::default()
            };
            return (report, None);
        }
    };
    let report = accord_engine::sync_with_local(local, &remote, local_is_a, cfg, hooks);
    (report, Some(remote.wire_bytes()))
}

/// A test hook, built only with the `test-hooks` feature (no user
/// feature): with `ACCORD_TEST_SYNC_PAUSE=FILE`, a
/// run that has made its plan creates FILE and waits (up to a minute) for
/// it to be removed before it changes anything, so a test can change a
/// file between update detection and propagation
/// (`ACCORD_TEST_SYNC_PAUSE_LINKS`: the same once the files are in place,
/// before the hard links are made). A run of more than two roots pauses
/// where its plan would be shown (`cmd_sync_set`).
#[cfg(feature = "test-hooks")]
pub(crate) fn test_pause_hook(variable: &str) -> Option<impl Fn() + Sync> {
    let file = std::env::var_os(variable).map(PathBuf::from)?;
    Some(move || {
        if std::fs::write(&file, b"paused\n").is_err() {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while file.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    })
}

#[cfg(not(feature = "test-hooks"))]
pub(crate) fn test_pause_hook(_variable: &str) -> Option<fn()> {
    None
}

fn exit_code(report: &SyncReport) -> i32 {
    if report.fatal.is_some() || report.refusal.is_some() {
        exit::FATAL
    } else if !report.errors.is_empty() {
        exit::PARTIAL
    } else if !report.conflicts.is_empty() {
        exit::CONFLICTS
    } else {
        exit::OK
    }
}

fn side_name(side: sync_plan::Side) -> &'static str {
    match side {
        sync_plan::Side::A => "A",
        sync_plan::Side::B => "B",
    }
}

/// What was done at a changed path.
fn change_text(change: &accord_engine::Propagated) -> String {
    if change.merged {
        "merged".into()
    } else {
        action_text(change.action)
    }
}

/// A short word for a plan's action, with its direction.
fn action_text(action: sync_plan::Action) -> String {
    match action {
        sync_plan::Action::Copy { from, to } => format!("{} -> {}", side_name(from), side_name(to)),
        sync_plan::Action::Delete { on } => format!("deleted on {}", side_name(on)),
        sync_plan::Action::CopyProps { from, to } => {
            format!("props {} -> {}", side_name(from), side_name(to))
        }
        sync_plan::Action::CopyContentsAndPropsBack { from, to } => format!(
            "{} -> {}, props {} -> {}",
            side_name(from),
            side_name(to),
            side_name(to),
            side_name(from)
        ),
        sync_plan::Action::Agree => "agreed".into(),
        sync_plan::Action::Nothing => "nothing".into(),
        sync_plan::Action::Conflict(reason) => format!("conflict: {}", reason_text(reason)),
        sync_plan::Action::Rename { on } => format!("renamed on {}", side_name(on)),
        sync_plan::Action::MovedWith { on } => format!("moved on {}", side_name(on)),
        sync_plan::Action::KeepBoth { winner } => format!(
            "kept both, {} -> {}",
            side_name(winner),
            side_name(winner.other())
        ),
    }
}

/// A change's path; a rename's as `old -> new`, a hard link's as
/// `new => the name it was linked to`, a keep-both's with where the other
/// version was kept.
fn change_path(change: &accord_engine::Propagated) -> String {
    if change.merged {
        return change.path.display();
    }
    match (&change.from, &change.linked_to, &change.kept_as) {
        (Some(from), _, _) => format!("{} -> {}", from.display(), change.path.display()),
        (None, Some(leader), _) => {
            format!("{} => {}", change.path.display(), leader.display())
        }
        (None, None, Some(kept)) => format!(
            "{} (other version: {})",
            change.path.display(),
            kept.display()
        ),
        (None, None, None) => change.path.display(),
    }
}

fn linked(report: &SyncReport) -> usize {
    report
        .propagated
        .iter()
        .filter(|change| change.linked_to.is_some())
        .count()
}

fn kept_both(report: &SyncReport) -> usize {
    report
        .propagated
        .iter()
        .filter(|change| change.kept_as.is_some())
        .count()
}

fn merged(report: &SyncReport) -> usize {
    report
        .propagated
        .iter()
        .filter(|change| change.merged)
        .count()
}

/// Why `--merge` left the conflict at `path`, if it was given to it.
fn not_merged<'r>(report: &'r SyncReport, path: &RelPath) -> Option<&'r str> {
    report
        .not_merged
        .iter()
        .find(|(at, _)| at == path)
        .map(|(_, why)| why.as_str())
}

fn deleted(report: &SyncReport) -> usize {
    report
        .propagated
        .iter()
        .filter(|change| matches!(change.action, sync_plan::Action::Delete { .. }))
        .count()
}

fn renamed(report: &SyncReport) -> usize {
    report
        .propagated
        .iter()
        .filter(|change| matches!(change.action, sync_plan::Action::Rename { .. }))
        .count()
}

/// A stable name for a conflict's reason (the JSON field).
fn reason_code(reason: ConflictReason) -> &'static str {
    match reason {
        ConflictReason::BothChanged => "both_changed",
        ConflictReason::DeletedAndChanged { .. } => "deleted_and_changed",
        ConflictReason::BothChangedProps => "both_changed_props",
        ConflictReason::ChangedBeneathRemovedDirectory { .. } => {
            "changed_beneath_removed_directory"
        }
    }
}

fn reason_text(reason: ConflictReason) -> String {
    match reason {
        ConflictReason::BothChanged => "changed on both sides".into(),
        ConflictReason::DeletedAndChanged { deleted_on } => format!(
            "deleted on {}, changed on {}",
            side_name(deleted_on),
            side_name(deleted_on.other())
        ),
        ConflictReason::BothChangedProps => "properties changed on both sides".into(),
        ConflictReason::ChangedBeneathRemovedDirectory { removed_on } => format!(
            "directory removed on {}, changed beneath on {}",
            side_name(removed_on),
            side_name(removed_on.other())
        ),
    }
}

fn print_text(report: &SyncReport, quiet: bool, copied: (u64, u64)) {
    if let Some(fatal) = &report.fatal {
        eprintln!("accord sync: {fatal}");
        return;
    }
    if let Some(refusal) = &report.refusal {
        eprintln!("accord sync: refused: {refusal}");
        return;
    }
    if report.archives_lost && !quiet {
        eprintln!(
            "accord sync: no agreement on record (a first sync, or an archive lost): \
             paths that differ on the two sides are conflicts"
        );
    }
    if !quiet {
        for change in &report.propagated {
            println!("{:<14} {}", change_text(change), change_path(change));
        }
    }
    for (path, reason) in &report.conflicts {
        let merge = not_merged(report, path).map_or(String::new(), |why| format!("; {why}"));
        println!(
            "conflict       {} ({}{merge})",
            path.display(),
            reason_text(*reason)
        );
    }
    for failure in &report.errors {
        eprintln!("accord sync: {}: {}", failure.path.display(), failure.error);
    }
    if !quiet {
        eprintln!("{}", summary(report, copied));
    }
}

/// The last line (`summary::sync_line`).
fn summary(report: &SyncReport, (files, bytes): (u64, u64)) -> String {
    let written = if report.dry_run {
        (0, 0)
    } else {
        (files, bytes)
    };
    crate::summary::sync_line(&crate::summary::SyncFigures {
        dry_run: report.dry_run,
        changes: report.propagated.len() as u64,
        written,
        kinds: &[
            (deleted(report) as u64, "deleted"),
            (renamed(report) as u64, "renamed"),
            (linked(report) as u64, "linked"),
            (kept_both(report) as u64, "kept both"),
            (merged(report) as u64, "merged"),
        ],
        agreed: report.agreed,
        conflicts: report.conflicts.len() as u64,
        errors: report.errors.len() as u64,
        unreached: None,
        elapsed_s: report.elapsed_s,
    })
}

#[derive(Serialize)]
struct JsonReport {
    /// A dry run: `changes` are what a real run would make; nothing was.
    dry_run: bool,
    /// Regular files whose contents were written, and their bytes.
    files_copied: u64,
    bytes_copied: u64,
    /// Paths changed on either side (a rename counts once, with whatever
    /// moved with it).
    propagated: usize,
    /// Of those, renames (a moved directory counts once).
    renamed: usize,
    /// Of those, copies made as hard links to another name of their
    /// group (no contents sent).
    linked: usize,
    /// Of those, conflicts resolved by --keep-both.
    kept_both: usize,
    /// Of those, conflicts resolved by --merge's program.
    merged: usize,
    changes: Vec<JsonChange>,
    conflicts: Vec<JsonConflict>,
    errors: Vec<JsonError>,
    agreed: u64,
    archives_lost: bool,
    /// Names were matched ignoring case.
    ignorecase: bool,
    /// Each root (A, B) was found case-insensitive by its probe.
    case_insensitive: [bool; 2],
    refused: Option<String>,
    fatal: Option<String>,
    elapsed_s: f64,
    /// Bytes on the wire (with a remote root).
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_sent: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_received: Option<u64>,
}

#[derive(Serialize)]
struct JsonChange {
    path: String,
    action: String,
    /// A rename's old path.
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<String>,
    /// A copy made as a hard link: the name it was linked to.
    #[serde(skip_serializing_if = "Option::is_none")]
    linked_to: Option<String>,
    /// --keep-both: where the losing version was kept (on both sides).
    #[serde(skip_serializing_if = "Option::is_none")]
    kept_as: Option<String>,
}

#[derive(Serialize)]
struct JsonConflict {
    path: String,
    reason: &'static str,
    detail: String,
    /// Why --merge did not merge it (given to the program, or tried).
    #[serde(skip_serializing_if = "Option::is_none")]
    not_merged: Option<String>,
}

#[derive(Serialize)]
struct JsonError {
    path: String,
    error: String,
}

fn print_json(report: &SyncReport, wire: Option<(u64, u64)>, copied: (u64, u64)) {
    let json = JsonReport {
        dry_run: report.dry_run,
        files_copied: copied.0,
        bytes_copied: copied.1,
        propagated: report.propagated.len(),
        renamed: renamed(report),
        linked: linked(report),
        kept_both: kept_both(report),
        merged: merged(report),
        changes: report
            .propagated
            .iter()
            .map(|change| JsonChange {
                path: change.path.display(),
                action: change_text(change),
                from: change.from.as_ref().map(RelPath::display),
                linked_to: change.linked_to.as_ref().map(RelPath::display),
                kept_as: change.kept_as.as_ref().map(RelPath::display),
            })
            .collect(),
        conflicts: report
            .conflicts
            .iter()
            .map(|(path, reason)| JsonConflict {
                path: path.display(),
                reason: reason_code(*reason),
                detail: reason_text(*reason),
                not_merged: not_merged(report, path).map(str::to_owned),
            })
            .collect(),
        errors: report
            .errors
            .iter()
            .map(|failure| JsonError {
                path: failure.path.display(),
                error: failure.error.to_string(),
            })
            .collect(),
        agreed: report.agreed,
        archives_lost: report.archives_lost,
        ignorecase: report.ignore_case,
        case_insensitive: report.case_insensitive,
        refused: report.refusal.as_ref().map(|r| r.to_string()),
        fatal: report.fatal.as_ref().map(|f| f.to_string()),
        elapsed_s: report.elapsed_s,
        bytes_sent: wire.map(|w| w.0),
        bytes_received: wire.map(|w| w.1),
    };
    println!(
        "{}",
        serde_json::to_string(&json).expect("a report always serializes")
    );
}
