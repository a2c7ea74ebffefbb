//! The tasks of a parallel or distributed mirror, and their encoding.
//!
//! A run is a queue of tasks (see `accord_queue`): `scan-dir` plans one
//! directory pair with the mirror's rules and pushes its children
//! (`scan-dirs`: several sibling directories, one after the other, so a
//! task is worth a round trip to a remote queue);
//! `files` writes a batch of one directory's small files; `big-file`
//! splits a large file into `range`s copied by several workers into one
//! temp file; `hardlink` copies or links one name of a hard-link group;
//! `dir-meta` sets a directory's properties once its subtree is done;
//! `verify` re-reads finished files and compares their BLAKE3.
//!
//! Everything decoded here may come from a shared store that anybody on
//! the network could write to: every length, count and path is checked
//! (paths through `RelPath`), the format carries a version byte, and
//! trailing bytes are refused.

pub(crate) mod big_file;
pub(crate) mod claims;
pub(crate) mod deferred_deletes;
pub(crate) mod error;
pub(crate) mod execute;
pub(crate) mod guard;
pub(crate) mod hard_links;
pub(crate) mod ignore_files;
pub(crate) mod leases;
pub(crate) mod leaves;
pub(crate) mod local_executor;
pub(crate) mod memos;
pub(crate) mod run;
pub(crate) mod scan_dir;
pub(crate) mod spec;
pub(crate) mod task_log;

pub use guard::{check_before_run, remember_source};
pub use run::{error_on_one_line, error_problems, keys, workers};
pub use spec::{DEFAULT_RANGE_SIZE, MIN_RANGE_SIZE};

use accord_model::{validate_name, Entry, Kind, RelPath};
use accord_plan::{Item, Method, Op};
use accord_proto::codec::{get_entry, get_path, put_entry, put_path};
use accord_proto::{Dec, Enc, ProtoError};

/// The task format's version: bump it with any layout change. 2: the
/// `scan-dirs` kind, and a parent counts each subdirectory on its own
/// (a worker of version 1 would count such a task once: workers of both
/// versions must not share a run).
pub const TASK_VERSION: u8 = 2;
/// Most items in one `files` task, and paths in one `verify` task.
pub const MAX_BATCH: usize = 1024;
/// Most ranges one file is split into.
pub const MAX_RANGES: u32 = 1 << 16;
/// Longest worker name.
pub const MAX_WORKER_NAME: usize = 256;
/// Most sibling directories in one `scan-dirs` task.
pub const MAX_SCAN_DIRS: usize = 64;

/// Why `name` cannot name a worker: empty, longer than `MAX_WORKER_NAME`
/// bytes, or holding a control character (a name is compared with the
/// worker's own and shown in `accord cluster`; it is never rewritten).
pub fn check_worker_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_WORKER_NAME {
        return Err(format!(
            "a worker name of 1 to {MAX_WORKER_NAME} bytes (got {})",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("a worker name without control characters".into());
    }
    Ok(())
}

/// One unit of work of a run (see the module).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Task {
    ScanDir {
        dir: RelPath,
    },
    /// Sibling directories (one parent, none the root, in increasing
    /// order), each scanned as `scan-dir` does; a leaf among them whose
    /// files fit one batch is finished in the task (files and properties).
    ScanDirs {
        dirs: Vec<RelPath>,
    },
    /// Items of `dir` (writes, new non-directories, property changes).
    Files {
        dir: RelPath,
        items: Vec<Item>,
    },
    /// A file written whole, too big for one worker: split it.
    BigFile {
        item: Item,
    },
    /// Bytes `index * range .. (index + 1) * range` of `item`'s file into
    /// the shared temp file `temp` beside it.
    Range {
        item: Item,
        temp: Vec<u8>,
        index: u32,
        count: u32,
    },
    /// One name of a source hard-link group.
    Hardlink {
        src: Box<Entry>,
        dst: Option<Box<Entry>>,
    },
    DirMeta {
        dir: RelPath,
    },
    /// The extras of `dir`, deleted once the whole destination is seen
    /// (`tasks/deferred_deletes.rs`).
    DeleteExtras {
        dir: RelPath,
    },
    /// Check these files, written by worker `by` (another worker reads
    /// them, so the check reads what reached the disk); `handed_back`: the
    /// copier had it once and gave it back.
    Verify {
        paths: Vec<RelPath>,
        by: String,
        handed_back: bool,
    },
}

impl Task {
    /// What the task was doing, in words that go before its paths in
    /// messages (`accord cluster errors`: "copying big0 (and 5 more)").
    pub fn kind(&self) -> &'static str {
        match self {
            Task::ScanDir { .. } | Task::ScanDirs { .. } => "listing",
            Task::Files { .. } => "copying",
            Task::BigFile { .. } => "copying the big file",
            Task::Range { .. } => "copying part of",
            Task::Hardlink { .. } => "linking",
            Task::DirMeta { .. } => "setting the properties of",
            Task::DeleteExtras { .. } => "deleting extra entries in",
            Task::Verify { .. } => "verifying",
        }
    }

    /// The task in words: what it does and its first path, with how many
    /// more ("copying big0 (and 5 more)").
    pub fn in_words(&self) -> String {
        let paths = self.paths();
        let first = paths.first().map(|p| p.display()).unwrap_or_default();
        match paths.len() {
            0 | 1 => format!("{} {first}", self.kind()),
            n => format!("{} {first} (and {} more)", self.kind(), n - 1),
        }
    }

    /// The paths the task is about, for messages.
    pub fn paths(&self) -> Vec<&RelPath> {
        match self {
            Task::ScanDir { dir } | Task::DirMeta { dir } | Task::DeleteExtras { dir } => {
                vec![dir]
            }
            Task::Files { items, .. } => items.iter().map(|i| &i.path).collect(),
            Task::BigFile { item } | Task::Range { item, .. } => vec![&item.path],
            Task::Hardlink { src, .. } => vec![&src.path],
            Task::Verify { paths, .. } => paths.iter().collect(),
            Task::ScanDirs { dirs } => dirs.iter().collect(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u8(TASK_VERSION);
        match self {
            Task::ScanDir { dir } => put_tagged_path(&mut e, 0, dir),
            Task::Files { dir, items } => {
                put_tagged_path(&mut e, 1, dir);
                e.varint(items.len() as u64);
                items.iter().for_each(|i| put_item(&mut e, i));
            }
            Task::BigFile { item } => {
                e.u8(2);
                put_item(&mut e, item);
            }
            Task::Range {
                item,
                temp,
                index,
                count,
            } => {
                e.u8(3);
                put_item(&mut e, item);
                e.bytes(temp).varint(*index as u64).varint(*count as u64);
            }
            Task::Hardlink { src, dst } => {
                e.u8(4);
                put_entry(&mut e, src);
                put_opt_entry(&mut e, dst.as_deref());
            }
            Task::DirMeta { dir } => put_tagged_path(&mut e, 5, dir),
            Task::Verify {
                paths,
                by,
                handed_back,
            } => {
                e.u8(6).varint(paths.len() as u64);
                paths.iter().for_each(|p| put_path(&mut e, p));
                e.str(by).bool(*handed_back);
            }
            Task::ScanDirs { dirs } => {
                e.u8(7).varint(dirs.len() as u64);
                dirs.iter().for_each(|p| put_path(&mut e, p));
            }
            Task::DeleteExtras { dir } => put_tagged_path(&mut e, 8, dir),
        }
        e.finish()
    }

    /// Decode and check a task (see the module: the bytes are hostile).
    pub fn decode(bytes: &[u8]) -> Result<Task, ProtoError> {
        let mut d = Dec::new(bytes);
        let version = d.u8("task version")?;
        if version != TASK_VERSION {
            return Err(invalid(format!(
                "task format {version} (this accord reads {TASK_VERSION})"
            )));
        }
        let task = match d.u8("task kind")? {
            0 => Task::ScanDir {
                dir: get_path(&mut d, "directory")?,
            },
            1 => get_files(&mut d)?,
            2 => Task::BigFile {
                item: get_item(&mut d)?,
            },
            3 => get_range(&mut d)?,
            4 => get_hardlink(&mut d)?,
            5 => Task::DirMeta {
                dir: get_path(&mut d, "directory")?,
            },
            6 => get_verify(&mut d)?,
            7 => get_scan_dirs(&mut d)?,
            8 => Task::DeleteExtras {
                dir: get_path(&mut d, "directory")?,
            },
            k => return Err(invalid(format!("unknown task kind {k}"))),
        };
        if d.remaining() != 0 {
            return Err(invalid(format!("{} bytes after the task", d.remaining())));
        }
        Ok(task)
    }
}

fn invalid(m: String) -> ProtoError {
    ProtoError::Invalid(m)
}

fn put_tagged_path(e: &mut Enc, tag: u8, p: &RelPath) {
    e.u8(tag);
    put_path(e, p);
}

fn put_opt_entry(e: &mut Enc, x: Option<&Entry>) {
    match x {
        None => {
            e.u8(0);
        }
        Some(x) => {
            e.u8(1);
            put_entry(e, x);
        }
    }
}

fn get_opt_entry(d: &mut Dec) -> Result<Option<Entry>, ProtoError> {
    match d.bool("entry present")? {
        false => Ok(None),
        true => get_entry(d).map(Some),
    }
}

/// An item of a `files`, `big-file` or `range` task: its operation, the
/// source's entry (which names the path) and the destination's, if any.
fn put_item(e: &mut Enc, it: &Item) {
    let tag = match it.op {
        Op::Write(m) => 10 + method_code(m),
        Op::Create => 1,
        Op::Meta => 2,
        // Only the three above are put in tasks (see `tasks/scan_dir.rs`).
        _ => unreachable!("a task item is a write, a creation or a property change"),
    };
    e.u8(tag);
    put_opt_entry(e, it.src.as_deref());
    put_opt_entry(e, it.dst.as_deref());
}

fn method_code(m: Method) -> u8 {
    match m {
        Method::Whole => 0,
        Method::Delta => 1,
        Method::InPlace => 2,
        Method::Resume => 3,
    }
}

fn get_item(d: &mut Dec) -> Result<Item, ProtoError> {
    let op = match d.u8("item operation")? {
        1 => Op::Create,
        2 => Op::Meta,
        10 => Op::Write(Method::Whole),
        11 => Op::Write(Method::Delta),
        12 => Op::Write(Method::InPlace),
        13 => Op::Write(Method::Resume),
        k => return Err(invalid(format!("unknown item operation {k}"))),
    };
    let src = get_opt_entry(d)?.ok_or_else(|| invalid("an item without a source".into()))?;
    let dst = get_opt_entry(d)?;
    check_item(&op, &src, dst.as_ref())?;
    Ok(Item {
        op,
        path: src.path.clone(),
        src: Some(Box::new(src)),
        dst: dst.map(Box::new),
        props_differ: false,
    })
}

/// An item names one non-root path, the same on both sides; a write is of
/// a regular file; nothing in a task is a directory.
fn check_item(op: &Op, src: &Entry, dst: Option<&Entry>) -> Result<(), ProtoError> {
    if src.path.is_root() || src.kind == Kind::Dir {
        return Err(invalid("an item that is the root or a directory".into()));
    }
    if matches!(op, Op::Write(_)) && src.kind != Kind::File {
        return Err(invalid("a write of something not a regular file".into()));
    }
    if let Some(d) = dst {
        if d.path != src.path {
            return Err(invalid("an item whose two sides name other paths".into()));
        }
    }
    Ok(())
}

fn get_files(d: &mut Dec) -> Result<Task, ProtoError> {
    let dir = get_path(d, "directory")?;
    let n = d.count(MAX_BATCH as u64, 4, "items")?;
    if n == 0 {
        return Err(invalid("a files task without files".into()));
    }
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        let it = get_item(d)?;
        if it.path.parent().as_ref() != Some(&dir) {
            return Err(invalid(format!(
                "{} is not in the task's directory",
                it.path.display()
            )));
        }
        items.push(it);
    }
    Ok(Task::Files { dir, items })
}

fn get_range(d: &mut Dec) -> Result<Task, ProtoError> {
    let item = get_item(d)?;
    let temp = d.bytes(accord_model::MAX_NAME_LEN, "temp name")?.to_vec();
    validate_name(&temp).map_err(|e| invalid(format!("temp name: {e}")))?;
    if !temp.starts_with(accord_fsys::TEMP_PREFIX) {
        return Err(invalid("a range's temp file is not one of ours".into()));
    }
    let index = d.u32("range index")?;
    let count = d.u32("range count")?;
    if !(2..=MAX_RANGES).contains(&count) || index >= count {
        return Err(invalid(format!("range {index} of {count}")));
    }
    if item.op != Op::Write(Method::Whole) {
        return Err(invalid("a range of something not written whole".into()));
    }
    Ok(Task::Range {
        item,
        temp,
        index,
        count,
    })
}

fn get_hardlink(d: &mut Dec) -> Result<Task, ProtoError> {
    let src = get_entry(d)?;
    let dst = get_opt_entry(d)?;
    if src.kind != Kind::File || src.path.is_root() {
        return Err(invalid("a hard link that is not a regular file".into()));
    }
    check_item(&Op::Meta, &src, dst.as_ref())?;
    Ok(Task::Hardlink {
        src: Box::new(src),
        dst: dst.map(Box::new),
    })
}

/// Sibling directories: one parent, none the root, strictly increasing
/// (so none twice: each is counted once in its parent).
fn get_scan_dirs(d: &mut Dec) -> Result<Task, ProtoError> {
    let n = d.count(MAX_SCAN_DIRS as u64, 1, "directories")?;
    if n == 0 {
        return Err(invalid("a scan-dirs task without directories".into()));
    }
    let mut dirs: Vec<RelPath> = Vec::with_capacity(n);
    for _ in 0..n {
        let p = get_path(d, "directory")?;
        if p.is_root() {
            return Err(invalid("the root in a scan-dirs task".into()));
        }
        if let Some(prev) = dirs.last() {
            if prev.parent() != p.parent() || *prev >= p {
                return Err(invalid(format!(
                    "{} after {} in a scan-dirs task (siblings, in increasing order)",
                    p.display(),
                    prev.display()
                )));
            }
        }
        dirs.push(p);
    }
    Ok(Task::ScanDirs { dirs })
}

fn get_verify(d: &mut Dec) -> Result<Task, ProtoError> {
    let n = d.count(MAX_BATCH as u64, 1, "paths")?;
    let mut paths = Vec::with_capacity(n);
    for _ in 0..n {
        paths.push(get_path(d, "path")?);
    }
    // Taken as it is or refused: an escaped copy would no longer be the
    // worker's name, nor fit its bound once encoded again.
    let by = d.string(MAX_WORKER_NAME, "worker")?;
    check_worker_name(&by).map_err(invalid)?;
    let handed_back = d.bool("handed back")?;
    Ok(Task::Verify {
        paths,
        by,
        handed_back,
    })
}
