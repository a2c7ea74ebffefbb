//! The pool model's policies, as mergerfs names them: where a new name goes (*create*), which
//! copies a change acts on (*action*) and which copy a lookup shows (*search*).
//!
//! Pure: the FUSE layer (`fs/pool.rs`) gathers each candidate branch's state and asks here
//! which to use. The rules follow mergerfs 2.33: a create policy considers only branches of
//! mode `rw` (never `ro` or `nc`) on a file system mounted read-write with at least
//! `minfreespace` available; the path-preserving ones (`ep…`) only those that already hold the
//! new name's parent directory. Among equals, `mfs`/`lfs` take the last branch, `lus` the
//! first, as mergerfs does.

use std::fmt;

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

/// Which copies a change (chmod, chown, utimens, truncate, xattrs, unlink, rmdir, rename)
/// acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Every copy on a branch that is not `ro` (`all` is the same for changes).
    Epall,
    /// The first such copy only.
    Epff,
}

const ACTION_NAMES: [(&str, Action); 4] = [
    ("epall", Action::Epall),
    ("all", Action::Epall),
    ("epff", Action::Epff),
    ("ff", Action::Epff),
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

impl Action {
    pub fn parse(s: &str) -> Result<Action, String> {
        lookup(&ACTION_NAMES, s).ok_or_else(|| {
            format!(
                "category.action={s}: unknown or unbuilt action policy (built: {})",
                names(&ACTION_NAMES)
            )
        })
    }
}

impl fmt::Display for Create {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(name_of(&CREATE_NAMES, *self))
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(name_of(&ACTION_NAMES, *self))
    }
}

fn lookup<T: Copy>(table: &[(&str, T)], s: &str) -> Option<T> {
    table.iter().find(|(n, _)| *n == s).map(|(_, p)| *p)
}

fn name_of<T: Copy + PartialEq>(table: &[(&'static str, T)], p: T) -> &'static str {
    table.iter().find(|(_, x)| *x == p).map_or("?", |(n, _)| n)
}

fn names<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// mergerfs's default `minfreespace`: 4 GiB.
pub const DEFAULT_MIN_FREE: u64 = 4 << 30;

/// The pool's settings (`-o category.create=…,minfreespace=…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policies {
    pub create: Create,
    pub action: Action,
    /// Bytes a branch must have available to be chosen for a create.
    pub min_free: u64,
    /// mergerfs's `moveonenospc`: a write that finds its branch full moves the file to the
    /// branch this policy chooses (among the others) and goes on; None: the write fails.
    pub move_on_enospc: Option<Create>,
}

impl Default for Policies {
    /// mergerfs's defaults: create `epmfs`, action `epall`, search `ff`, 4G.
    fn default() -> Self {
        Policies {
            create: Create::Epmfs,
            action: Action::Epall,
            min_free: DEFAULT_MIN_FREE,
            move_on_enospc: None,
        }
    }
}

impl Policies {
    /// Set one pool option (`category.create`, `func.create`, `category.action`,
    /// `category.search`, `func.NAME`, `minfreespace`); Ok(false) if `key` is not one.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        match key {
            "category.create" | "func.create" | "func.mkdir" | "func.mknod" | "func.symlink" => {
                self.create =
                    Create::parse(value).map_err(|e| e.replacen("category.create", key, 1))?
            }
            "category.action" => self.action = Action::parse(value)?,
            "category.search" | "func.getattr" | "func.open" => {
                if value != "ff" {
                    return Err(format!(
                        "{key}={value}: the only search policy built is ff (first found)"
                    ));
                }
            }
            "minfreespace" => self.min_free = parse_size(value)?,
            "moveonenospc" => self.move_on_enospc = parse_move(value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The options that give these settings back (for a daemon started with them).
    pub fn to_options(&self) -> Vec<String> {
        let moving = self
            .move_on_enospc
            .map_or("false".into(), |c| c.to_string());
        vec![
            format!("category.create={}", self.create),
            format!("category.action={}", self.action),
            format!("minfreespace={}", self.min_free),
            format!("moveonenospc={moving}"),
        ]
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
fn eligible(p: &Policies, cands: &[Candidate], err: &mut i32) -> Vec<Candidate> {
    let mut out = Vec::new();
    for c in cands {
        let why = if !c.creatable {
            libc::EROFS
        } else if p.create.path_preserving() && !c.has_parent {
            libc::ENOENT
        } else if c.fs_readonly {
            libc::EROFS
        } else if c.avail < p.min_free {
            libc::ENOSPC
        } else {
            out.push(*c);
            continue;
        };
        *err = worse(*err, why);
    }
    out
}

/// The branch a new name goes to. `levels` holds the candidates as seen from the new name's
/// parent directory (`has_parent`: the branch holds it), then, for the most-shared-path
/// policies only, from each ancestor up to the root. `random` draws a number below its
/// argument (for `rand`, `pfrd` and their forms).
pub fn choose_create(
    p: &Policies,
    levels: &[Vec<Candidate>],
    random: &mut dyn FnMut(u64) -> u64,
) -> Result<u32, i32> {
    let mut err = libc::ENOENT;
    for level in levels {
        let ok = eligible(p, level, &mut err);
        if !ok.is_empty() {
            return Ok(pick(p.create, &ok, random).branch);
        }
        if !p.create.most_shared_path() {
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
    let sum: u64 = ok.iter().map(|c| c.avail).fold(0, u64::saturating_add);
    if sum == 0 {
        return ok[0];
    }
    let mut left = random(sum);
    for c in ok {
        if left < c.avail {
            return *c;
        }
        left -= c.avail;
    }
    ok[ok.len() - 1]
}

/// The copies an action acts on, from the branches holding the name (highest first) and
/// whether each is writable (not `ro`); EROFS when none is.
pub fn choose_action(p: &Policies, holders: &[(u32, bool)]) -> Result<Vec<u32>, i32> {
    let writable: Vec<u32> = holders.iter().filter(|h| h.1).map(|h| h.0).collect();
    if writable.is_empty() {
        return Err(if holders.is_empty() {
            libc::ENOENT
        } else {
            libc::EROFS
        });
    }
    Ok(match p.action {
        Action::Epall => writable,
        Action::Epff => writable[..1].to_vec(),
    })
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
        }
    }

    fn policy(create: &str, min_free: u64) -> Policies {
        Policies {
            create: Create::parse(create).unwrap(),
            action: Action::Epall,
            min_free,
            move_on_enospc: None,
        }
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
        let pick = |p: &str| choose_create(&policy(p, 0), &[c.to_vec()], &mut never).unwrap();
        assert_eq!(pick("ff"), 0);
        assert_eq!(pick("mfs"), 2, "ties go to the last");
        assert_eq!(pick("lfs"), 3);
        assert_eq!(pick("lus"), 1, "ties go to the first");
        let floor = choose_create(&policy("lfs", 8), &[c.to_vec()], &mut never).unwrap();
        assert_eq!(floor, 0, "below minfreespace is not chosen");
    }

    #[test]
    fn path_preserving_and_modes() {
        let mut c = [cand(0, 50, 0), cand(1, 10, 0), cand(2, 20, 0)];
        c[0].has_parent = false;
        c[2].creatable = false;
        assert_eq!(
            choose_create(&policy("epmfs", 0), &[c.to_vec()], &mut never),
            Ok(1)
        );
        assert_eq!(
            choose_create(&policy("mfs", 0), &[c.to_vec()], &mut never),
            Ok(0)
        );
        c[1].has_parent = false;
        assert_eq!(
            choose_create(&policy("epff", 0), &[c.to_vec()], &mut never),
            Err(libc::EROFS),
            "the weightiest reason: branch 2 is nc"
        );
        let full = [cand(0, 1, 0)];
        assert_eq!(
            choose_create(&policy("ff", 2), &[full.to_vec()], &mut never),
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
        assert_eq!(
            choose_create(&policy("mspmfs", 0), &levels, &mut never),
            Ok(0)
        );
        assert_eq!(
            choose_create(&policy("msplfs", 0), &levels, &mut never),
            Ok(1)
        );
        assert_eq!(
            choose_create(&policy("epmfs", 0), &levels, &mut never),
            Err(libc::ENOENT),
            "ep policies look at the parent only"
        );
        parent[1].has_parent = true;
        let levels = [parent.to_vec(), root.to_vec()];
        assert_eq!(
            choose_create(&policy("mspmfs", 0), &levels, &mut never),
            Ok(1)
        );
    }

    #[test]
    fn random_policies_draw_among_the_eligible() {
        let c = [cand(0, 10, 0), cand(1, 30, 0)];
        assert_eq!(
            choose_create(&policy("rand", 0), &[c.to_vec()], &mut |_| 1),
            Ok(1)
        );
        assert_eq!(
            choose_create(&policy("pfrd", 0), &[c.to_vec()], &mut |_| 9),
            Ok(0)
        );
        assert_eq!(
            choose_create(&policy("pfrd", 0), &[c.to_vec()], &mut |_| 10),
            Ok(1)
        );
    }

    #[test]
    fn options_and_sizes() {
        let mut p = Policies::default();
        assert_eq!(p.set("func.create", "lus"), Ok(true));
        assert_eq!(p.create, Create::Lus);
        assert_eq!(p.set("minfreespace", "1M"), Ok(true));
        assert_eq!(p.min_free, 1 << 20);
        assert_eq!(p.set("allow_other", ""), Ok(false));
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
        assert!(p
            .set("minfreespace", "4Q")
            .unwrap_err()
            .contains("minfreespace"));
        assert!(p.set("category.search", "epmfs").is_err());
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
    fn actions() {
        let p = Policies::default();
        assert_eq!(
            choose_action(&p, &[(0, false), (1, true), (2, true)]),
            Ok(vec![1, 2])
        );
        assert_eq!(choose_action(&p, &[(0, false)]), Err(libc::EROFS));
        let ff = Policies {
            action: Action::Epff,
            ..p
        };
        assert_eq!(choose_action(&ff, &[(1, true), (2, true)]), Ok(vec![1]));
    }
}
