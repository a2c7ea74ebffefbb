//! The pool model's policies, as mergerfs names them: where a new name goes (*create*), which
//! copies a change acts on (*action*, `pool_action`) and which copy a lookup shows (*search*),
//! each set for a whole category (`category.action=`) or for one function (`func.chmod=`).
//!
//! Pure: the FUSE layer (`fs/pool.rs`) gathers each candidate branch's state and asks here
//! which to use. The rules follow mergerfs 2.33: a create policy considers only branches of
//! mode `rw` (never `ro` or `nc`) on a file system mounted read-write with at least
//! `minfreespace` available (the branch's own value, `DIR=RW,SIZE`, else the pool's); the
//! path-preserving ones (`ep…`) only those that already hold the new name's parent directory.
//! Among equals, `mfs`/`lfs` take the last branch, `lus` the first, as mergerfs does.

use std::fmt;

pub use crate::pool_action::{choose_action, Action, Holder, Search};

/// Where a new file, directory, symlink or device node goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Create {
    Ff,
    Epff,
    Mfs,
    Epmfs,
    Lfs,
    Eplfs,
    Lus,
    Eplus,
    Rand,
    Eprand,
    Pfrd,
    Eppfrd,
    /// "Most shared path": as the `ep` form on the deepest ancestor of the new name that some
    /// eligible branch holds (the parent first, then its parent …).
    Mspmfs,
    Msplfs,
    Msplus,
    Msppfrd,
}

const CREATE_NAMES: [(&str, Create); 16] = [
    ("ff", Create::Ff),
    ("epff", Create::Epff),
    ("mfs", Create::Mfs),
    ("epmfs", Create::Epmfs),
    ("lfs", Create::Lfs),
    ("eplfs", Create::Eplfs),
    ("lus", Create::Lus),
    ("eplus", Create::Eplus),
    ("rand", Create::Rand),
    ("eprand", Create::Eprand),
    ("pfrd", Create::Pfrd),
    ("eppfrd", Create::Eppfrd),
    ("mspmfs", Create::Mspmfs),
    ("msplfs", Create::Msplfs),
    ("msplus", Create::Msplus),
    ("msppfrd", Create::Msppfrd),
];

impl Create {
    pub fn parse(s: &str) -> Result<Create, String> {
        lookup(&CREATE_NAMES, s).ok_or_else(|| {
            format!(
                "category.create={s}: unknown create policy (known: {})",
                names(&CREATE_NAMES)
            )
        })
    }

    /// Path-preserving: only branches that hold the parent directory are chosen, and a
    /// rename keeps a file on its branch (EXDEV where it cannot).
    pub fn path_preserving(self) -> bool {
        !matches!(
            self,
            Create::Ff | Create::Mfs | Create::Lfs | Create::Lus | Create::Rand | Create::Pfrd
        )
    }

    /// A most-shared-path policy: it looks further up when no branch holds the parent.
    pub fn most_shared_path(self) -> bool {
        matches!(
            self,
            Create::Mspmfs | Create::Msplfs | Create::Msplus | Create::Msppfrd
        )
    }
}

impl fmt::Display for Create {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(name_of(&CREATE_NAMES, *self))
    }
}

pub(crate) fn lookup<T: Copy>(table: &[(&str, T)], s: &str) -> Option<T> {
    table.iter().find(|(n, _)| *n == s).map(|(_, p)| *p)
}

pub(crate) fn name_of<T: Copy + PartialEq>(table: &[(&'static str, T)], p: T) -> &'static str {
    table.iter().find(|(_, x)| *x == p).map_or("?", |(n, _)| n)
}

pub(crate) fn names<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// mergerfs's default `minfreespace`: 4 GiB.
pub const DEFAULT_MIN_FREE: u64 = 4 << 30;

/// The functions mergerfs gives a policy each, by category: `category.KIND=` sets all of a
/// category's, `func.NAME=` one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionFn {
    Chmod,
    Chown,
    Link,
    Removexattr,
    Rename,
    Rmdir,
    Setxattr,
    Truncate,
    Unlink,
    Utimens,
}

pub const ACTION_FNS: [(&str, ActionFn); 10] = [
    ("chmod", ActionFn::Chmod),
    ("chown", ActionFn::Chown),
    ("link", ActionFn::Link),
    ("removexattr", ActionFn::Removexattr),
    ("rename", ActionFn::Rename),
    ("rmdir", ActionFn::Rmdir),
    ("setxattr", ActionFn::Setxattr),
    ("truncate", ActionFn::Truncate),
    ("unlink", ActionFn::Unlink),
    ("utimens", ActionFn::Utimens),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateFn {
    Create,
    Mkdir,
    Mknod,
    Symlink,
}

pub const CREATE_FNS: [(&str, CreateFn); 4] = [
    ("create", CreateFn::Create),
    ("mkdir", CreateFn::Mkdir),
    ("mknod", CreateFn::Mknod),
    ("symlink", CreateFn::Symlink),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchFn {
    Access,
    Getattr,
    Getxattr,
    Listxattr,
    Open,
    Readlink,
}

pub const SEARCH_FNS: [(&str, SearchFn); 6] = [
    ("access", SearchFn::Access),
    ("getattr", SearchFn::Getattr),
    ("getxattr", SearchFn::Getxattr),
    ("listxattr", SearchFn::Listxattr),
    ("open", SearchFn::Open),
    ("readlink", SearchFn::Readlink),
];

/// Every `func.NAME` key, category by category (for the control file's listing).
pub fn func_keys() -> impl Iterator<Item = String> {
    let action = ACTION_FNS.iter().map(|(n, _)| *n);
    let create = CREATE_FNS.iter().map(|(n, _)| *n);
    let search = SEARCH_FNS.iter().map(|(n, _)| *n);
    (action.chain(create).chain(search)).map(|n| format!("func.{n}"))
}

/// The pool's settings (`-o category.create=…,func.chmod=…,minfreespace=…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policies {
    /// Indexed by `CreateFn`, `ActionFn`, `SearchFn`.
    create: [Create; 4],
    action: [Action; 10],
    search: [Search; 6],
    /// Bytes a branch must have available to be chosen for a create, unless the branch has
    /// a value of its own (`DIR=RW,SIZE`).
    pub min_free: u64,
    /// mergerfs's `moveonenospc`: a write that finds its branch full moves the file to the
    /// branch this policy chooses (among the others) and goes on; None: the write fails.
    pub move_on_enospc: Option<Create>,
}

impl Default for Policies {
    /// mergerfs's defaults: create `epmfs`, action `epall`, search `ff`, 4G.
    fn default() -> Self {
        Policies {
            create: [Create::Epmfs; 4],
            action: [Action::Epall; 10],
            search: [Search::Ff; 6],
            min_free: DEFAULT_MIN_FREE,
            move_on_enospc: None,
        }
    }
}

impl Policies {
    /// The create policy of `f`.
    pub fn create(&self, f: CreateFn) -> Create {
        self.create[f as usize]
    }

    /// The action policy of `f`.
    pub fn action(&self, f: ActionFn) -> Action {
        self.action[f as usize]
    }

    /// The search policy of `f`.
    pub fn search(&self, f: SearchFn) -> Search {
        self.search[f as usize]
    }

    /// Set one pool option (`category.KIND`, `func.NAME`, `minfreespace`, `moveonenospc`);
    /// Ok(false) if `key` is not one.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let named = |e: String, category: &str| e.replacen(category, key, 1);
        match key {
            "category.create" => {
                self.create = [Create::parse(value).map_err(|e| named(e, "category.create"))?; 4]
            }
            "category.action" => self.action = [Action::parse(value)?; 10],
            "category.search" => self.search = [Search::parse(value)?; 6],
            "minfreespace" => self.min_free = parse_size(value)?,
            "moveonenospc" => self.move_on_enospc = parse_move(value)?,
            _ => {
                let Some(func) = key.strip_prefix("func.") else {
                    return Ok(false);
                };
                if let Some(f) = lookup(&CREATE_FNS, func) {
                    let c = Create::parse(value).map_err(|e| named(e, "category.create"))?;
                    self.create[f as usize] = c;
                } else if let Some(f) = lookup(&ACTION_FNS, func) {
                    let a = Action::parse(value).map_err(|e| named(e, "category.action"))?;
                    self.action[f as usize] = a;
                } else if let Some(f) = lookup(&SEARCH_FNS, func) {
                    let s = Search::parse(value).map_err(|e| named(e, "category.search"))?;
                    self.search[f as usize] = s;
                } else {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The value of option `key` as mergerfs shows it: a category's is its functions'
    /// policies, each once, sorted and joined by commas. None for a key that is not one.
    pub fn get(&self, key: &str) -> Option<String> {
        let category = |v: Vec<String>| {
            let set: std::collections::BTreeSet<String> = v.into_iter().collect();
            set.into_iter().collect::<Vec<_>>().join(",")
        };
        Some(match key {
            "category.create" => category(self.create.iter().map(|p| p.to_string()).collect()),
            "category.action" => category(self.action.iter().map(|p| p.to_string()).collect()),
            "category.search" => category(self.search.iter().map(|p| p.to_string()).collect()),
            "minfreespace" => self.min_free.to_string(),
            "moveonenospc" => (self.move_on_enospc).map_or("false".into(), |c| c.to_string()),
            _ => {
                let func = key.strip_prefix("func.")?;
                if let Some(f) = lookup(&CREATE_FNS, func) {
                    self.create(f).to_string()
                } else if let Some(f) = lookup(&ACTION_FNS, func) {
                    self.action(f).to_string()
                } else {
                    self.search(lookup(&SEARCH_FNS, func)?).to_string()
                }
            }
        })
    }

    /// The options that give these settings back (for a daemon started with them): a
    /// category whose functions share one policy as `category.KIND=`, else each function's.
    pub fn to_options(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut category = |kind: &str, funcs: Vec<&str>| {
            let key = format!("category.{kind}");
            let value = self.get(&key).unwrap_or_default();
            match value.contains(',') {
                false => out.push(format!("{key}={value}")),
                true => {
                    for f in funcs {
                        let k = format!("func.{f}");
                        out.push(format!("{k}={}", self.get(&k).unwrap_or_default()));
                    }
                }
            }
        };
        category("create", CREATE_FNS.iter().map(|f| f.0).collect());
        category("action", ACTION_FNS.iter().map(|f| f.0).collect());
        category("search", SEARCH_FNS.iter().map(|f| f.0).collect());
        for key in ["minfreespace", "moveonenospc"] {
            out.push(format!("{key}={}", self.get(key).unwrap_or_default()));
        }
        out
    }
}

/// `moveonenospc=`: true (the branch with the most free space, as mergerfs), false, or a
/// create policy that is not path-preserving.
fn parse_move(value: &str) -> Result<Option<Create>, String> {
    match value {
        "true" => Ok(Some(Create::Mfs)),
        "false" => Ok(None),
        v => match Create::parse(v) {
            Ok(c) if !c.path_preserving() => Ok(Some(c)),
            _ => Err(format!(
                "moveonenospc={v}: true, false, or one of ff, mfs, lfs, lus, rand, pfrd"
            )),
        },
    }
}

/// A size as mergerfs spells it: bytes, or a number with K, M, G or T (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad =
        || format!("minfreespace={s}: a size in bytes, or a number followed by K, M, G or T (4G)");
    let (digits, shift) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(bad()),
            };
            (&s[..i], shift)
        }
        _ => (s, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// One branch as a create policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub branch: u32,
    /// Mode `rw` (not `ro`, not `nc`).
    pub creatable: bool,
    /// Holds the new name's parent directory.
    pub has_parent: bool,
    /// The branch's file system is mounted read-only.
    pub fs_readonly: bool,
    /// Bytes available to unprivileged users (f_bavail × f_frsize).
    pub avail: u64,
    /// Bytes used (f_blocks − f_bavail) × f_frsize.
    pub used: u64,
    /// Bytes it must have available to be chosen: its own `minfreespace`, else the pool's.
    pub min_free: u64,
}

/// Why no branch was chosen, mergerfs's way: the weightiest reason met (no parent < full <
/// read-only).
fn worse(cur: i32, new: i32) -> i32 {
    let rank = |e: i32| match e {
        libc::ENOENT => 0,
        libc::ENOSPC => 1,
        libc::EROFS => 2,
        _ => 3,
    };
    if rank(new) >= rank(cur) {
        new
    } else {
        cur
    }
}

/// The branches `policy` may choose from (in branch order); `err` keeps the weightiest
/// reason a branch was passed over.
fn eligible(create: Create, cands: &[Candidate], err: &mut i32) -> Vec<Candidate> {
    let mut out = Vec::new();
    for c in cands {
        let why = if !c.creatable {
            libc::EROFS
        } else if create.path_preserving() && !c.has_parent {
            libc::ENOENT
        } else if c.fs_readonly {
            libc::EROFS
        } else if c.avail < c.min_free {
            libc::ENOSPC
        } else {
            out.push(*c);
            continue;
        };
        *err = worse(*err, why);
    }
    out
}

/// The branch a new name goes to by policy `create`. `levels` holds the candidates as seen from the new name's
/// parent directory (`has_parent`: the branch holds it), then, for the most-shared-path
/// policies only, from each ancestor up to the root. `random` draws a number below its
/// argument (for `rand`, `pfrd` and their forms).
pub fn choose_create(
    create: Create,
    levels: &[Vec<Candidate>],
    random: &mut dyn FnMut(u64) -> u64,
) -> Result<u32, i32> {
    let mut err = libc::ENOENT;
    for level in levels {
        let ok = eligible(create, level, &mut err);
        if !ok.is_empty() {
            return Ok(pick(create, &ok, random).branch);
        }
        if !create.most_shared_path() {
            break;
        }
    }
    Err(err)
}

/// `create`'s choice among the eligible branches `ok` (not empty).
fn pick(create: Create, ok: &[Candidate], random: &mut dyn FnMut(u64) -> u64) -> Candidate {
    use Create::*;
    match create {
        Ff | Epff => ok[0],
        // Ties go to the last branch (mergerfs replaces on equal; `max_by_key` keeps the
        // last of equals, `min_by_key` the first).
        Mfs | Epmfs | Mspmfs => *ok.iter().max_by_key(|c| c.avail).unwrap(),
        Lfs | Eplfs | Msplfs => *ok.iter().rev().min_by_key(|c| c.avail).unwrap(),
        // Ties go to the first.
        Lus | Eplus | Msplus => *ok.iter().min_by_key(|c| c.used).unwrap(),
        Rand | Eprand => ok[random(ok.len() as u64) as usize],
        Pfrd | Eppfrd | Msppfrd => proportional(ok, random),
    }
}

/// A branch drawn with a chance proportional to its available space.
fn proportional(ok: &[Candidate], random: &mut dyn FnMut(u64) -> u64) -> Candidate {
    ok[pick_proportional(&ok.iter().map(|c| c.avail).collect::<Vec<_>>(), random)]
}

/// The index of one of `avail` (not empty) drawn with a chance proportional to its value;
/// the first when all are 0.
pub(crate) fn pick_proportional(avail: &[u64], random: &mut dyn FnMut(u64) -> u64) -> usize {
    let sum: u64 = avail.iter().fold(0, |s, a| s.saturating_add(*a));
    if sum == 0 {
        return 0;
    }
    let mut left = random(sum);
    for (i, a) in avail.iter().enumerate() {
        if left < *a {
            return i;
        }
        left -= a;
    }
    avail.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(branch: u32, avail: u64, used: u64) -> Candidate {
        Candidate {
            branch,
            creatable: true,
            has_parent: true,
            fs_readonly: false,
            avail,
            used,
            min_free: 0,
        }
    }

    /// `choose_create` with `create` named and every candidate needing `min_free`.
    fn choose(
        create: &str,
        min_free: u64,
        levels: &[Vec<Candidate>],
        random: &mut dyn FnMut(u64) -> u64,
    ) -> Result<u32, i32> {
        let levels: Vec<Vec<Candidate>> = (levels.iter())
            .map(|l| l.iter().map(|c| Candidate { min_free, ..*c }).collect())
            .collect();
        choose_create(Create::parse(create).unwrap(), &levels, random)
    }

    fn never(_: u64) -> u64 {
        unreachable!()
    }

    #[test]
    fn space_policies_and_their_ties() {
        let c = [
            cand(0, 10, 5),
            cand(1, 30, 1),
            cand(2, 30, 1),
            cand(3, 5, 90),
        ];
        let pick = |p: &str| choose(p, 0, &[c.to_vec()], &mut never).unwrap();
        assert_eq!(pick("ff"), 0);
        assert_eq!(pick("mfs"), 2, "ties go to the last");
        assert_eq!(pick("lfs"), 3);
        assert_eq!(pick("lus"), 1, "ties go to the first");
        let floor = choose("lfs", 8, &[c.to_vec()], &mut never).unwrap();
        assert_eq!(floor, 0, "below minfreespace is not chosen");
    }

    #[test]
    fn path_preserving_and_modes() {
        let mut c = [cand(0, 50, 0), cand(1, 10, 0), cand(2, 20, 0)];
        c[0].has_parent = false;
        c[2].creatable = false;
        assert_eq!(choose("epmfs", 0, &[c.to_vec()], &mut never), Ok(1));
        assert_eq!(choose("mfs", 0, &[c.to_vec()], &mut never), Ok(0));
        c[1].has_parent = false;
        assert_eq!(
            choose("epff", 0, &[c.to_vec()], &mut never),
            Err(libc::EROFS),
            "the weightiest reason: branch 2 is nc"
        );
        let full = [cand(0, 1, 0)];
        assert_eq!(
            choose("ff", 2, &[full.to_vec()], &mut never),
            Err(libc::ENOSPC)
        );
    }

    #[test]
    fn most_shared_path_looks_up_the_tree() {
        let mut parent = [cand(0, 50, 0), cand(1, 10, 0)];
        parent[0].has_parent = false;
        parent[1].has_parent = false;
        let root = [cand(0, 50, 0), cand(1, 10, 0)];
        let levels = [parent.to_vec(), root.to_vec()];
        assert_eq!(choose("mspmfs", 0, &levels, &mut never), Ok(0));
        assert_eq!(choose("msplfs", 0, &levels, &mut never), Ok(1));
        assert_eq!(
            choose("epmfs", 0, &levels, &mut never),
            Err(libc::ENOENT),
            "ep policies look at the parent only"
        );
        parent[1].has_parent = true;
        let levels = [parent.to_vec(), root.to_vec()];
        assert_eq!(choose("mspmfs", 0, &levels, &mut never), Ok(1));
    }

    #[test]
    fn random_policies_draw_among_the_eligible() {
        let c = [cand(0, 10, 0), cand(1, 30, 0)];
        assert_eq!(choose("rand", 0, &[c.to_vec()], &mut |_| 1), Ok(1));
        assert_eq!(choose("pfrd", 0, &[c.to_vec()], &mut |_| 9), Ok(0));
        assert_eq!(choose("pfrd", 0, &[c.to_vec()], &mut |_| 10), Ok(1));
    }

    #[test]
    fn a_branch_of_its_own_minfreespace() {
        let mut c = [cand(0, 10, 0), cand(1, 30, 0), cand(2, 20, 0)];
        c[1].min_free = 31;
        let pick = |p: &str| choose_create(Create::parse(p).unwrap(), &[c.to_vec()], &mut never);
        assert_eq!(pick("mfs"), Ok(2), "branch 1 is below its own minfreespace");
        c[0].min_free = 11;
        c[2].min_free = 21;
        let pick = |p: &str| choose_create(Create::parse(p).unwrap(), &[c.to_vec()], &mut never);
        assert_eq!(pick("ff"), Err(libc::ENOSPC));
    }

    #[test]
    fn options_and_sizes() {
        let mut p = Policies::default();
        assert_eq!(p.set("func.create", "lus"), Ok(true));
        assert_eq!(p.create(CreateFn::Create), Create::Lus);
        assert_eq!(p.create(CreateFn::Mkdir), Create::Epmfs);
        assert_eq!(p.get("category.create").as_deref(), Some("epmfs,lus"));
        assert_eq!(p.set("minfreespace", "1M"), Ok(true));
        assert_eq!(p.min_free, 1 << 20);
        assert_eq!(p.set("allow_other", ""), Ok(false));
        assert_eq!(p.set("func.frobnicate", "ff"), Ok(false));
        assert_eq!(p.set("moveonenospc", "true"), Ok(true));
        assert_eq!(p.move_on_enospc, Some(Create::Mfs));
        assert!(p
            .set("moveonenospc", "epmfs")
            .unwrap_err()
            .contains("moveonenospc"));
        let err = p.set("category.create", "most").unwrap_err();
        assert!(
            err.contains("category.create=most") && err.contains("epmfs"),
            "{err}"
        );
        let err = p.set("func.chmod", "most").unwrap_err();
        assert!(
            err.contains("func.chmod=most") && err.contains("newest"),
            "{err}"
        );
        assert!(p
            .set("minfreespace", "4Q")
            .unwrap_err()
            .contains("minfreespace"));
        assert!(p.set("category.search", "newest").is_err());
        assert!(p
            .set("func.getattr", "mfs")
            .unwrap_err()
            .contains("func.getattr=mfs"));
        assert_eq!(p.set("func.open", "epff"), Ok(true));
        assert_eq!(p.get("func.open").as_deref(), Some("epff"));
        assert_eq!(parse_size("4G"), Ok(DEFAULT_MIN_FREE));
        assert_eq!(parse_size("123"), Ok(123));
        let mut back = Policies::default();
        for o in p.to_options() {
            let (k, v) = o.split_once('=').unwrap();
            back.set(k, v).unwrap();
        }
        assert_eq!(back, p);
    }

    #[test]
    fn categories_and_functions() {
        let mut p = Policies::default();
        p.set("func.chmod", "epff").unwrap();
        p.set("func.unlink", "newest").unwrap();
        assert_eq!(p.action(ActionFn::Chmod), Action::Epff);
        assert_eq!(p.action(ActionFn::Unlink), Action::Newest);
        assert_eq!(p.action(ActionFn::Rename), Action::Epall);
        assert_eq!(
            p.get("category.action").as_deref(),
            Some("epall,epff,newest")
        );
        assert_eq!(p.get("func.unlink").as_deref(), Some("newest"));
        let opts = p.to_options();
        assert!(opts.contains(&"func.chmod=epff".to_string()), "{opts:?}");
        assert!(
            opts.contains(&"category.create=epmfs".to_string()),
            "{opts:?}"
        );
        // As in mergerfs, the later option wins: a category overrides its functions.
        p.set("category.action", "ff").unwrap();
        assert_eq!(p.action(ActionFn::Chmod), Action::Ff);
        assert_eq!(p.get("category.action").as_deref(), Some("ff"));
        assert_eq!(func_keys().count(), 20);
        assert!(
            func_keys().all(|k| p.get(&k).is_some()),
            "every function reads back"
        );
    }
}
