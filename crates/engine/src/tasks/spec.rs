//! A task run's settings, written once by whoever starts the run and read
//! by every worker (from a store anybody on the network may write to: the
//! decoder checks everything, as the tasks' does).

use crate::MirrorConfig;
use accord_fsys::XattrFilter;
use accord_plan::{DeltaMode, Kinds, MaxDelete, MirrorOptions, Selection, TransferOptions};
use accord_proto::{Dec, Enc, ProtoError};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The settings' format version: bump it with any layout change.
pub const SPEC_VERSION: u8 = 3;
const MAX_ROOT: usize = 4096;
const MAX_EXCLUDES: usize = 10_000;
const MAX_PATTERN: usize = 4096;
/// Files above this size are split into ranges of this size (512 MiB).
pub const DEFAULT_RANGE_SIZE: u64 = 512 << 20;
/// Smallest range accepted (a smaller one is only useful to tests).
pub const MIN_RANGE_SIZE: u64 = 4096;

/// What a task run does (see the module).
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The roots as the starter names them (a worker may map them).
    pub src: PathBuf,
    pub dst: PathBuf,
    pub plan: MirrorOptions,
    pub xattrs: XattrFilter,
    pub excludes: Vec<String>,
    /// Read `.accordignore` files in the source (`tasks/ignore_files.rs`).
    pub ignore_files: bool,
    pub fsync: bool,
    /// Files written whole above this size are split into ranges of it.
    pub range_size: u64,
    /// Re-read each written file by another worker and compare BLAKE3.
    pub verify: bool,
}

impl RunSpec {
    /// The settings of a run of `cfg` between two local roots.
    pub fn new(src: PathBuf, dst: PathBuf, cfg: &MirrorConfig) -> RunSpec {
        RunSpec {
            src,
            dst,
            plan: cfg.plan.clone(),
            xattrs: cfg.xattrs,
            excludes: cfg.excludes.clone(),
            ignore_files: cfg.ignore_files,
            fsync: cfg.fsync,
            range_size: DEFAULT_RANGE_SIZE,
            verify: false,
        }
    }

    /// The engine's configuration for one worker of this run (its listings
    /// read no `.accordignore` files: a worker planning one directory reads
    /// its ancestors' too, before listing it; see `tasks/ignore_files.rs`).
    pub fn config(&self) -> MirrorConfig {
        MirrorConfig {
            plan: self.plan.clone(),
            xattrs: self.xattrs,
            excludes: self.excludes.clone(),
            ignore_files: false,
            fsync: self.fsync,
            dry_run: false,
            ..MirrorConfig::default()
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u8(SPEC_VERSION);
        e.bytes(self.src.as_os_str().as_bytes());
        e.bytes(self.dst.as_os_str().as_bytes());
        put_options(&mut e, &self.plan);
        e.bool(self.xattrs.xattrs).bool(self.xattrs.acls);
        e.varint(self.excludes.len() as u64);
        for x in &self.excludes {
            e.str(x);
        }
        e.bool(self.ignore_files);
        e.bool(self.fsync).varint(self.range_size).bool(self.verify);
        e.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<RunSpec, ProtoError> {
        let mut d = Dec::new(bytes);
        let v = d.u8("settings version")?;
        if v != SPEC_VERSION {
            return Err(ProtoError::Invalid(format!(
                "run settings of format {v} (this accord reads {SPEC_VERSION})"
            )));
        }
        let src = get_root(&mut d, "source root")?;
        let dst = get_root(&mut d, "destination root")?;
        let plan = get_options(&mut d)?;
        let xattrs = XattrFilter {
            xattrs: d.bool("xattrs")?,
            acls: d.bool("acls")?,
            user_only: false,
        };
        let n = d.count(MAX_EXCLUDES as u64, 1, "excludes")?;
        let mut excludes = Vec::with_capacity(n);
        for _ in 0..n {
            excludes.push(d.string(MAX_PATTERN, "exclude")?);
        }
        let ignore_files = d.bool("ignore files")?;
        let fsync = d.bool("fsync")?;
        let range_size = d.varint("range size")?;
        if range_size < MIN_RANGE_SIZE {
            return Err(ProtoError::Invalid(format!(
                "a range size of {range_size} bytes (at least {MIN_RANGE_SIZE})"
            )));
        }
        let verify = d.bool("verify")?;
        if d.remaining() != 0 {
            return Err(ProtoError::Invalid("bytes after the run settings".into()));
        }
        Ok(RunSpec {
            src,
            dst,
            plan,
            xattrs,
            excludes,
            ignore_files,
            fsync,
            range_size,
            verify,
        })
    }
}

/// An absolute path without NUL bytes.
fn get_root(d: &mut Dec, what: &'static str) -> Result<PathBuf, ProtoError> {
    let b = d.bytes(MAX_ROOT, what)?;
    if !b.starts_with(b"/") || b.contains(&0) {
        return Err(ProtoError::Invalid(format!("{what}: not an absolute path")));
    }
    Ok(PathBuf::from(OsStr::from_bytes(b)))
}

fn put_options(e: &mut Enc, o: &MirrorOptions) {
    e.bool(o.delete);
    match o.max_delete {
        MaxDelete::Count(n) => e.u8(0).varint(n as u64),
        MaxDelete::Fraction(f) => e.u8(1).varint(f.to_bits()),
    };
    for b in [o.force, o.checksum, o.perms, o.owner, o.times, o.xattrs] {
        e.bool(b);
    }
    e.bool(o.hard_links);
    let k = o.kinds;
    e.bool(k.symlinks).bool(k.specials).bool(k.devices);
    let t = o.transfer;
    let delta = match t.delta {
        DeltaMode::Auto => 0,
        DeltaMode::Always => 1,
        DeltaMode::Never => 2,
    };
    e.u8(delta).bool(t.inplace);
    let x = o.select;
    e.bool(x.size_only).bool(x.ignore_existing);
    for bound in [x.min_size, x.max_size] {
        match bound {
            Some(n) => e.bool(true).varint(n),
            None => e.bool(false),
        };
    }
}

fn get_selection(d: &mut Dec) -> Result<Selection, ProtoError> {
    let size_only = d.bool("size-only")?;
    let ignore_existing = d.bool("ignore-existing")?;
    let mut bound = |what| -> Result<Option<u64>, ProtoError> {
        Ok(if d.bool(what)? {
            Some(d.varint(what)?)
        } else {
            None
        })
    };
    Ok(Selection {
        size_only,
        ignore_existing,
        min_size: bound("min-size")?,
        max_size: bound("max-size")?,
    })
}

fn get_options(d: &mut Dec) -> Result<MirrorOptions, ProtoError> {
    let delete = d.bool("delete")?;
    let max_delete = match d.u8("max-delete kind")? {
        0 => MaxDelete::Count(d.bounded(u32::MAX as u64, "max-delete")? as usize),
        1 => {
            let f = f64::from_bits(d.varint("max-delete fraction")?);
            if !(0.0..=1.0).contains(&f) {
                return Err(ProtoError::Invalid(format!("a max-delete fraction of {f}")));
            }
            MaxDelete::Fraction(f)
        }
        k => return Err(ProtoError::Invalid(format!("max-delete kind {k}"))),
    };
    let mut flags = [false; 7];
    for f in flags.iter_mut() {
        *f = d.bool("option")?;
    }
    let [force, checksum, perms, owner, times, xattrs, hard_links] = flags;
    let kinds = Kinds {
        symlinks: d.bool("symlinks")?,
        specials: d.bool("specials")?,
        devices: d.bool("devices")?,
    };
    let delta = match d.u8("delta mode")? {
        0 => DeltaMode::Auto,
        1 => DeltaMode::Always,
        2 => DeltaMode::Never,
        k => return Err(ProtoError::Invalid(format!("delta mode {k}"))),
    };
    let transfer = TransferOptions {
        delta,
        inplace: d.bool("inplace")?,
    };
    Ok(MirrorOptions {
        delete,
        max_delete,
        force,
        checksum,
        perms,
        owner,
        times,
        xattrs,
        hard_links,
        kinds,
        transfer,
        select: get_selection(d)?,
    })
}
