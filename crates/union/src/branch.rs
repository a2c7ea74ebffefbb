//! Branches and the branch table.
//!
//! The table is immutable once built: a live change (add, remove, mode, snapshot) builds a new
//! table with a higher generation and swaps it in. Every directory view remembers the generation
//! it was built from, so a swap invalidates all cached merges at once, while open files keep the
//! descriptors they already hold and keep working.

use std::fmt;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ro,
    Rw,
    /// Writable, but never chosen for a new name (mergerfs's `NC`, no create): a pool only.
    Nc,
}

impl Mode {
    /// `ro`, `rw` or `nc`, also in mergerfs's capitals (`RO`, `RW`, `NC`).
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "ro" | "RO" => Ok(Mode::Ro),
            "rw" | "RW" => Ok(Mode::Rw),
            "nc" | "NC" => Ok(Mode::Nc),
            _ => Err(format!("branch mode must be ro, rw or nc, not {s:?}")),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Ro => "ro",
            Mode::Rw => "rw",
            Mode::Nc => "nc",
        })
    }
}

/// A branch as the user named it: `DIR`, `DIR=MODE`, or (as mergerfs spells a branch with a
/// `minfreespace` of its own) `DIR=MODE,SIZE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchSpec {
    pub path: PathBuf,
    pub mode: Option<Mode>,
    /// Bytes a create policy needs the branch to have available (a pool only).
    pub min_free: Option<u64>,
}

pub fn parse_spec(s: &str) -> Result<BranchSpec, String> {
    if s.is_empty() {
        return Err("empty branch".into());
    }
    let whole = BranchSpec {
        path: PathBuf::from(s),
        mode: None,
        min_free: None,
    };
    // Only a trailing mode is a mode, so a directory named `a=b` still works.
    let Some((dir, opts)) = s.rsplit_once('=') else {
        return Ok(whole);
    };
    let (word, size) = match opts.split_once(',') {
        Some((w, size)) => (w, Some(size)),
        None => (opts, None),
    };
    let Ok(mode) = Mode::parse(word) else {
        return Ok(whole);
    };
    if dir.is_empty() {
        return Err(format!("branch {s:?} has no directory"));
    }
    let min_free = match size {
        Some(v) => Some(crate::pool::parse_size(v).map_err(|_| {
            format!(
                "branch {s:?}: {v:?} is not a size (DIR=MODE,SIZE takes bytes, or a number \
                 followed by K, M, G or T, as /mnt/disk=RW,10G)"
            )
        })?),
        None => None,
    };
    Ok(BranchSpec {
        path: PathBuf::from(dir),
        mode: Some(mode),
        min_free,
    })
}

/// A branch to mount: its directory, its mode, and its own `minfreespace` if it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchConfig {
    pub path: PathBuf,
    pub mode: Mode,
    pub min_free: Option<u64>,
}

impl BranchConfig {
    /// The branch as a command-line argument gives it back: `DIR=MODE[,SIZE]`.
    pub fn to_arg(&self) -> std::ffi::OsString {
        let mut s = self.path.clone().into_os_string();
        s.push(format!("={}", self.mode));
        if let Some(n) = self.min_free {
            s.push(format!(",{n}"));
        }
        s
    }
}

/// For a branch given without a valid mode: the word after its last `=`, if it looks like a
/// mode that was mistyped (`DIR=xx`) rather than part of a directory's name (no `/`). Only
/// worth telling the user when no directory of that whole name exists.
pub fn mistyped_mode(spec: &BranchSpec) -> Option<String> {
    if spec.mode.is_some() {
        return None;
    }
    let s = spec.path.to_str()?;
    let (dir, word) = s.rsplit_once('=')?;
    (!dir.is_empty() && !word.is_empty() && !word.contains('/')).then(|| word.to_string())
}

/// Fill in modes the user left out the way Unionfs did: the first branch is writable, the
/// others read-only; in a pool (`pool`), every branch is writable, as in mergerfs.
pub fn default_modes(specs: &[BranchSpec], pool: bool) -> Vec<BranchConfig> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let m = s
                .mode
                .unwrap_or(if i == 0 || pool { Mode::Rw } else { Mode::Ro });
            BranchConfig {
                path: s.path.clone(),
                mode: m,
                min_free: s.min_free,
            }
        })
        .collect()
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One opened branch. The directory handle is taken once, so every operation resolves names
/// from it with the *at() calls and a branch that is renamed elsewhere keeps working.
#[derive(Debug)]
pub struct Branch {
    pub id: u64,
    pub path: PathBuf,
    pub mode: Mode,
    /// Its own `minfreespace` (a pool's create policies), if given.
    pub min_free: Option<u64>,
    fd: Arc<OwnedFd>,
}

impl Branch {
    pub fn open(path: &Path, mode: Mode) -> std::io::Result<Branch> {
        let path = path.canonicalize()?;
        let f = File::open(&path)?;
        if !f.metadata()?.is_dir() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(Branch {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path,
            mode,
            min_free: None,
            fd: Arc::new(OwnedFd::from(f)),
        })
    }

    /// The same branch with its own `minfreespace` (None: the pool's).
    pub fn with_min_free(mut self, min_free: Option<u64>) -> Branch {
        self.min_free = min_free;
        self
    }

    /// `DIR=MODE[,SIZE]`, mergerfs's spelling of a branch (its mode in capitals, its own
    /// `minfreespace` as mergerfs shows sizes).
    pub fn mergerfs_spec(&self) -> String {
        let mode = self.mode.to_string().to_uppercase();
        let size = self.min_free.map(|n| format!(",{}", humanize(n)));
        format!("{}={mode}{}", self.path.display(), size.unwrap_or_default())
    }

    /// Same directory and handle, another mode and own `minfreespace` (keeps the id so open
    /// files stay attributed).
    pub fn with_settings(&self, mode: Mode, min_free: Option<u64>) -> Branch {
        Branch {
            min_free,
            ..self.with_mode(mode)
        }
    }

    /// Same directory and handle, another mode (keeps the id so open files stay attributed).
    pub fn with_mode(&self, mode: Mode) -> Branch {
        Branch {
            id: self.id,
            path: self.path.clone(),
            mode,
            min_free: self.min_free,
            fd: self.fd.clone(),
        }
    }

    /// The device and inode of the branch directory (of its handle).
    pub fn dev_ino(&self) -> std::io::Result<(u64, u64)> {
        let st = crate::sys::fstat(self.fd())?;
        Ok((st.st_dev, st.st_ino))
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Its files may be changed (`rw`, or `nc` in a pool).
    pub fn writable(&self) -> bool {
        self.mode != Mode::Ro
    }

    /// A pool's create policies may put new names here (`rw` only).
    pub fn creatable(&self) -> bool {
        self.mode == Mode::Rw
    }
}

/// A size as mergerfs shows one: in the largest unit of T, G, M, K that divides it, else in
/// bytes.
pub fn humanize(n: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[derive(Debug, Default)]
pub struct Table {
    pub generation: u64,
    pub branches: Vec<Arc<Branch>>,
}

impl Table {
    pub fn new(branches: Vec<Branch>) -> Table {
        Table {
            generation: 1,
            branches: branches.into_iter().map(Arc::new).collect(),
        }
    }

    /// The branch that receives new files, copy-ups and whiteouts: the highest writable one.
    pub fn upper(&self) -> Option<u32> {
        self.branches
            .iter()
            .position(|b| b.writable())
            .map(|i| i as u32)
    }

    pub fn get(&self, i: u32) -> &Branch {
        &self.branches[i as usize]
    }

    pub fn by_id(&self, id: u64) -> Option<&Arc<Branch>> {
        self.branches.iter().find(|b| b.id == id)
    }

    pub fn find(&self, path: &Path) -> Option<usize> {
        self.branches.iter().position(|b| b.path == path)
    }

    fn next(&self, branches: Vec<Arc<Branch>>) -> Table {
        Table {
            generation: self.generation + 1,
            branches,
        }
    }

    /// Where `add` puts a branch of `mode` when not told. A read-only branch goes directly
    /// below the highest writable one, as Unionfs's paper adds a live CD's modules
    /// (`unionctl --add --after 0 --mode ro`): its names show ahead of the older read-only
    /// branches, but it never hides the writable branch, so every name that was writable stays
    /// writable (on top it would shadow the writable branch's copies with read-only ones). A
    /// writable branch goes on top and takes the writes from then on, as Unionfs's `--add`
    /// does; with no writable branch at all, a read-only one goes on top too.
    pub fn default_position(&self, mode: Mode) -> usize {
        match (mode, self.upper()) {
            (Mode::Ro, Some(u)) => u as usize + 1,
            _ => 0,
        }
    }

    /// Insert `b` below branch `after` (as `describe` numbers them), or where
    /// `default_position` says when `after` is None.
    pub fn with_added_after(&self, b: Branch, after: Option<usize>) -> Result<Table, String> {
        let at = match after {
            None => self.default_position(b.mode),
            Some(n) if n < self.branches.len() => n + 1,
            Some(n) => {
                return Err(format!(
                    "there is no branch {n} to add below: the branches are numbered 0 to {} \
                     (see accord union list)",
                    self.branches.len() - 1
                ))
            }
        };
        self.with_added(b, at)
    }

    /// Insert `b` at index `at` (0 = top). Refuses a directory that is already a branch.
    pub fn with_added(&self, b: Branch, at: usize) -> Result<Table, String> {
        if self.find(&b.path).is_some() {
            return Err(format!("{} is already a branch", b.path.display()));
        }
        if at > self.branches.len() {
            return Err(format!(
                "position {at} is past the last branch ({} branches)",
                self.branches.len()
            ));
        }
        let mut v = self.branches.clone();
        v.insert(at, Arc::new(b));
        Ok(self.next(v))
    }

    pub fn with_removed(&self, path: &Path) -> Result<Table, String> {
        let i = self
            .find(path)
            .ok_or_else(|| format!("{} is not a branch", path.display()))?;
        if self.branches.len() == 1 {
            return Err("cannot remove the last branch".into());
        }
        let mut v = self.branches.clone();
        v.remove(i);
        Ok(self.next(v))
    }

    pub fn with_mode(&self, path: &Path, mode: Mode) -> Result<Table, String> {
        let i = self
            .find(path)
            .ok_or_else(|| format!("{} is not a branch", path.display()))?;
        let mut v = self.branches.clone();
        v[i] = Arc::new(v[i].with_mode(mode));
        Ok(self.next(v))
    }

    /// The table with exactly `v` as its branches (highest first): none twice, not empty.
    pub fn with_list(&self, v: Vec<Arc<Branch>>) -> Result<Table, String> {
        if v.is_empty() {
            return Err("cannot remove the last branch".into());
        }
        for (i, b) in v.iter().enumerate() {
            if v[..i].iter().any(|x| x.path == b.path) {
                return Err(format!("{} is already a branch", b.path.display()));
            }
        }
        Ok(self.next(v))
    }

    /// The paper's snapshot: `b` goes on top as the only writable branch; every branch that was
    /// writable becomes read-only, so the state at this instant is frozen below.
    pub fn with_snapshot(&self, b: Branch) -> Result<Table, String> {
        if self.find(&b.path).is_some() {
            return Err(format!("{} is already a branch", b.path.display()));
        }
        let mut v: Vec<Arc<Branch>> = Vec::with_capacity(self.branches.len() + 1);
        v.push(Arc::new(b.with_mode(Mode::Rw)));
        for old in &self.branches {
            v.push(if old.writable() {
                Arc::new(old.with_mode(Mode::Ro))
            } else {
                old.clone()
            });
        }
        Ok(self.next(v))
    }

    /// One line per branch, `INDEX<TAB>MODE<TAB>PATH`, as `accord union list` prints it.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (i, b) in self.branches.iter().enumerate() {
            s.push_str(&format!("{i}\t{}\t{}\n", b.mode, b.path.display()));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(
            parse_spec("/a=ro").unwrap(),
            BranchSpec {
                path: "/a".into(),
                mode: Some(Mode::Ro),
                min_free: None,
            }
        );
        let own = parse_spec("/mnt/d1=RW,10G").unwrap();
        assert_eq!(
            (own.path.to_str(), own.mode),
            (Some("/mnt/d1"), Some(Mode::Rw))
        );
        assert_eq!(own.min_free, Some(10 << 30));
        assert_eq!(parse_spec("/a=nc,123").unwrap().min_free, Some(123));
        let err = parse_spec("/a=RW,4Q").unwrap_err();
        assert!(err.contains("4Q") && err.contains("10G"), "{err}");
        assert_eq!(
            parse_spec("/a=b,1G").unwrap().path,
            PathBuf::from("/a=b,1G")
        );
        let cfg = &default_modes(&[own], true)[0];
        assert_eq!(cfg.to_arg(), "/mnt/d1=rw,10737418240");
        assert_eq!(
            parse_spec(cfg.to_arg().to_str().unwrap()).unwrap().min_free,
            Some(10 << 30)
        );
        assert_eq!(
            (humanize(10 << 30), humanize(1536), humanize(1000)),
            ("10G".into(), "1536".into(), "1000".into())
        );
        assert_eq!(parse_spec("/a=b").unwrap().path, PathBuf::from("/a=b"));
        assert_eq!(parse_spec("/a=NC").unwrap().mode, Some(Mode::Nc));
        assert_eq!(parse_spec("/a=RW").unwrap().mode, Some(Mode::Rw));
        assert_eq!(parse_spec("/arw").unwrap().mode, None);
        assert_eq!(parse_spec("/a").unwrap().mode, None);
        assert!(parse_spec("=rw").is_err());
        let mode = |s| mistyped_mode(&parse_spec(s).unwrap());
        assert_eq!(mode("/a=xx").as_deref(), Some("xx"));
        assert_eq!(mode("ro=xx").as_deref(), Some("xx"));
        assert_eq!(mode("/a=ro"), None);
        assert_eq!(mode("/a"), None);
        assert_eq!(mode("/a=b/c"), None);
        let v: Vec<BranchSpec> = ["/a=rw", "/b=ro", "/c"]
            .iter()
            .map(|s| parse_spec(s).unwrap())
            .collect();
        let d = default_modes(&v, false);
        assert_eq!(default_modes(&v, true)[2].mode, Mode::Rw);
        assert_eq!(d[2].mode, Mode::Ro);
        let d = default_modes(
            &[parse_spec("/x").unwrap(), parse_spec("/y").unwrap()],
            false,
        );
        assert_eq!((d[0].mode, d[1].mode), (Mode::Rw, Mode::Ro));
    }

    fn dirs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let t = tempfile::tempdir().unwrap();
        let v = (0..n)
            .map(|i| {
                let p = t.path().join(format!("b{i}"));
                std::fs::create_dir(&p).unwrap();
                p.canonicalize().unwrap()
            })
            .collect();
        (t, v)
    }

    #[test]
    fn table_changes() {
        let (_t, d) = dirs(4);
        let t = Table::new(vec![
            Branch::open(&d[0], Mode::Ro).unwrap(),
            Branch::open(&d[1], Mode::Rw).unwrap(),
        ]);
        assert_eq!(t.upper(), Some(1));
        let t2 = t
            .with_added(Branch::open(&d[2], Mode::Ro).unwrap(), 2)
            .unwrap();
        assert_eq!(t2.generation, 2);
        assert_eq!(t2.find(&d[2]), Some(2));
        assert!(t2
            .with_added(Branch::open(&d[2], Mode::Ro).unwrap(), 0)
            .is_err());
        assert!(t2
            .with_added(Branch::open(&d[3], Mode::Ro).unwrap(), 9)
            .is_err());
        let t3 = t2.with_mode(&d[0], Mode::Rw).unwrap();
        assert_eq!(t3.upper(), Some(0));
        assert_eq!(t3.branches[0].id, t2.branches[0].id);
        let t4 = t3.with_removed(&d[0]).unwrap();
        assert_eq!(t4.upper(), Some(0));
        assert_eq!(t4.branches[0].path, d[1]);
        assert!(t4.with_removed(&d[3]).is_err());
        let t5 = t4
            .with_snapshot(Branch::open(&d[3], Mode::Ro).unwrap())
            .unwrap();
        assert_eq!(t5.upper(), Some(0));
        assert_eq!(t5.branches[0].path, d[3]);
        assert!(t5.branches[1..].iter().all(|b| !b.writable()));
        assert!(t5
            .describe()
            .starts_with(&format!("0\trw\t{}\n", d[3].display())));
    }

    #[test]
    fn added_branches_never_hide_the_writable_one() {
        let (_t, d) = dirs(5);
        let t = Table::new(vec![
            Branch::open(&d[0], Mode::Rw).unwrap(),
            Branch::open(&d[1], Mode::Ro).unwrap(),
        ]);
        let t = t
            .with_added_after(Branch::open(&d[2], Mode::Ro).unwrap(), None)
            .unwrap();
        assert_eq!((t.find(&d[2]), t.upper()), (Some(1), Some(0)));
        let t = t
            .with_added_after(Branch::open(&d[3], Mode::Ro).unwrap(), Some(2))
            .unwrap();
        assert_eq!(t.find(&d[3]), Some(3));
        let err = t
            .with_added_after(Branch::open(&d[4], Mode::Ro).unwrap(), Some(4))
            .unwrap_err();
        assert!(
            err.contains("no branch 4") && err.contains("0 to 3"),
            "{err}"
        );
        let t = t
            .with_added_after(Branch::open(&d[4], Mode::Rw).unwrap(), None)
            .unwrap();
        assert_eq!((t.find(&d[4]), t.upper()), (Some(0), Some(0)));
    }

    #[test]
    fn last_branch_stays() {
        let (_t, d) = dirs(1);
        let t = Table::new(vec![Branch::open(&d[0], Mode::Rw).unwrap()]);
        assert!(t.with_removed(&d[0]).is_err());
    }
}
