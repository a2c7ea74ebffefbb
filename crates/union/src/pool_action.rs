//! The pool's action and search policies, as mergerfs 2.33 has them.
//!
//! An action (chmod, unlink, rename …) acts on copies of a name that exists: every policy
//! chooses among the branches that hold it, leaving out those of mode `ro` and those on a file
//! system mounted read-only (never by free space: `minfreespace` is for creates only). The
//! names of the create policies mean their `ep` form here (`mfs` is `epmfs`, `ff` is `epff`,
//! the `msp…` ones their `ep…`), `all` is `epall`, `rand` is `eprand`, `erofs` always fails.
//!
//! A search (getattr, open, readlink …) reads one copy. The pool shows the first branch's copy
//! (`ff`); `epff`, `all` and `epall` answer the same for a search in mergerfs, so those are taken
//! too. The others (`newest`, `mfs` …) are not built.

use std::fmt;

use crate::pool::{lookup, name_of, names, pick_proportional};

/// Which copies an action acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    All,
    Epall,
    Epff,
    Eplfs,
    Eplus,
    Epmfs,
    Eppfrd,
    Eprand,
    Erofs,
    Ff,
    Lfs,
    Lus,
    Mfs,
    Msplfs,
    Msplus,
    Mspmfs,
    Msppfrd,
    Newest,
    Pfrd,
    Rand,
}

const ACTION_NAMES: [(&str, Action); 20] = [
    ("all", Action::All),
    ("epall", Action::Epall),
    ("epff", Action::Epff),
    ("eplfs", Action::Eplfs),
    ("eplus", Action::Eplus),
    ("epmfs", Action::Epmfs),
    ("eppfrd", Action::Eppfrd),
    ("eprand", Action::Eprand),
    ("erofs", Action::Erofs),
    ("ff", Action::Ff),
    ("lfs", Action::Lfs),
    ("lus", Action::Lus),
    ("mfs", Action::Mfs),
    ("msplfs", Action::Msplfs),
    ("msplus", Action::Msplus),
    ("mspmfs", Action::Mspmfs),
    ("msppfrd", Action::Msppfrd),
    ("newest", Action::Newest),
    ("pfrd", Action::Pfrd),
    ("rand", Action::Rand),
];

/// What an action policy does with the copies it may act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Every,
    First,
    MostFree,
    LeastFree,
    LeastUsed,
    Proportional,
    Random,
    Newest,
    Refuse,
}

impl Action {
    pub fn parse(s: &str) -> Result<Action, String> {
        lookup(&ACTION_NAMES, s).ok_or_else(|| {
            format!(
                "category.action={s}: unknown action policy (known: {})",
                names(&ACTION_NAMES)
            )
        })
    }

    fn rule(self) -> Rule {
        use Action::*;
        match self {
            All | Epall => Rule::Every,
            Epff | Ff => Rule::First,
            Epmfs | Mfs | Mspmfs => Rule::MostFree,
            Eplfs | Lfs | Msplfs => Rule::LeastFree,
            Eplus | Lus | Msplus => Rule::LeastUsed,
            Eppfrd | Pfrd | Msppfrd => Rule::Proportional,
            Eprand | Rand => Rule::Random,
            Newest => Rule::Newest,
            Erofs => Rule::Refuse,
        }
    }

    /// The policy weighs the copies' free or used space (their branches' statvfs is needed).
    pub fn weighs_space(self) -> bool {
        matches!(
            self.rule(),
            Rule::MostFree | Rule::LeastFree | Rule::LeastUsed | Rule::Proportional
        )
    }

    /// The policy compares the copies' modification times (each copy's stat is needed).
    pub fn weighs_mtime(self) -> bool {
        self.rule() == Rule::Newest
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(name_of(&ACTION_NAMES, *self))
    }
}

/// Which copy a search reads. All of these read the first branch's copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Search {
    Ff,
    Epff,
    All,
    Epall,
}

const SEARCH_NAMES: [(&str, Search); 4] = [
    ("ff", Search::Ff),
    ("epff", Search::Epff),
    ("all", Search::All),
    ("epall", Search::Epall),
];

impl Search {
    pub fn parse(s: &str) -> Result<Search, String> {
        if let Some(p) = lookup(&SEARCH_NAMES, s) {
            return Ok(p);
        }
        Err(match lookup(&ACTION_NAMES, s) {
            Some(_) => format!(
                "category.search={s}: this search policy is not built; the built ones ({}) \
                 all read the first branch's copy",
                names(&SEARCH_NAMES)
            ),
            None => format!(
                "category.search={s}: unknown search policy (built: {})",
                names(&SEARCH_NAMES)
            ),
        })
    }
}

impl fmt::Display for Search {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(name_of(&SEARCH_NAMES, *self))
    }
}

/// One copy of a name as an action policy sees it (in branch order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub branch: u32,
    /// The branch's mode is not `ro`.
    pub writable: bool,
    /// The branch's file system is mounted read-only (or its state could not be read).
    pub fs_readonly: bool,
    /// Bytes available to unprivileged users on the branch (read only when the policy weighs
    /// space).
    pub avail: u64,
    /// Bytes used on the branch.
    pub used: u64,
    /// The copy's modification time in whole seconds, as mergerfs compares them (read only
    /// for `newest`).
    pub mtime: i64,
}

/// The copies `policy` acts on, from the copies of the name (in branch order). Without one
/// it may act on: EROFS if a copy was left out for being read-only, ENOENT if there is none.
/// `random` draws a number below its argument.
pub fn choose_action(
    policy: Action,
    holders: &[Holder],
    random: &mut dyn FnMut(u64) -> u64,
) -> Result<Vec<u32>, i32> {
    let rule = policy.rule();
    if rule == Rule::Refuse {
        return Err(libc::EROFS);
    }
    let ok: Vec<Holder> = (holders.iter())
        .filter(|h| h.writable && !h.fs_readonly)
        .copied()
        .collect();
    if ok.is_empty() {
        return Err(match holders.is_empty() {
            true => libc::ENOENT,
            false => libc::EROFS,
        });
    }
    let one = match rule {
        Rule::Every => return Ok(ok.iter().map(|h| h.branch).collect()),
        Rule::First => ok[0],
        // Ties go to the last copy for free space and age, to the first for used space, as
        // in mergerfs (`max_by_key` keeps the last of equals, `min_by_key` the first).
        Rule::MostFree => *ok.iter().max_by_key(|h| h.avail).unwrap(),
        Rule::LeastFree => *ok.iter().rev().min_by_key(|h| h.avail).unwrap(),
        Rule::LeastUsed => *ok.iter().min_by_key(|h| h.used).unwrap(),
        Rule::Newest => *ok.iter().max_by_key(|h| h.mtime).unwrap(),
        Rule::Random => ok[random(ok.len() as u64) as usize],
        Rule::Proportional => {
            let i = pick_proportional(&ok.iter().map(|h| h.avail).collect::<Vec<_>>(), random);
            ok[i]
        }
        Rule::Refuse => unreachable!("answered above"),
    };
    Ok(vec![one.branch])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(branch: u32, avail: u64, used: u64, mtime: i64) -> Holder {
        Holder {
            branch,
            writable: true,
            fs_readonly: false,
            avail,
            used,
            mtime,
        }
    }

    fn never(_: u64) -> u64 {
        unreachable!()
    }

    fn act(policy: &str, h: &[Holder]) -> Result<Vec<u32>, i32> {
        choose_action(Action::parse(policy).unwrap(), h, &mut never)
    }

    #[test]
    fn every_policy_chooses_among_the_writable_copies() {
        let mut h = [
            holder(0, 90, 1, 5),
            holder(1, 10, 50, 9),
            holder(2, 10, 50, 9),
            holder(3, 40, 1, 1),
        ];
        h[0].writable = false;
        assert_eq!(act("epall", &h), Ok(vec![1, 2, 3]));
        assert_eq!(act("all", &h), Ok(vec![1, 2, 3]));
        for p in ["ff", "epff"] {
            assert_eq!(act(p, &h), Ok(vec![1]), "{p}");
        }
        for p in ["mfs", "epmfs", "mspmfs"] {
            assert_eq!(
                act(p, &h),
                Ok(vec![3]),
                "{p}: the ro copy has more, but is left out"
            );
        }
        for p in ["lfs", "eplfs", "msplfs"] {
            assert_eq!(act(p, &h), Ok(vec![2]), "{p}: ties go to the last");
        }
        for p in ["lus", "eplus", "msplus"] {
            assert_eq!(act(p, &h), Ok(vec![3]), "{p}");
        }
        assert_eq!(act("newest", &h), Ok(vec![2]), "ties go to the last");
        assert_eq!(act("erofs", &h), Err(libc::EROFS));
        h[3].fs_readonly = true;
        assert_eq!(
            act("epall", &h),
            Ok(vec![1, 2]),
            "a read-only mount is left out"
        );
    }

    #[test]
    fn random_actions_draw_one_writable_copy() {
        let mut h = [holder(0, 10, 0, 0), holder(1, 30, 0, 0), holder(2, 5, 0, 0)];
        h[0].writable = false;
        let pol = |s: &str| Action::parse(s).unwrap();
        assert_eq!(choose_action(pol("rand"), &h, &mut |n| n - 1), Ok(vec![2]));
        assert_eq!(choose_action(pol("eprand"), &h, &mut |_| 0), Ok(vec![1]));
        assert_eq!(choose_action(pol("pfrd"), &h, &mut |_| 29), Ok(vec![1]));
        assert_eq!(choose_action(pol("eppfrd"), &h, &mut |_| 30), Ok(vec![2]));
    }

    #[test]
    fn no_copy_to_act_on() {
        let mut h = [holder(0, 1, 1, 1)];
        h[0].writable = false;
        assert_eq!(act("epff", &h), Err(libc::EROFS));
        assert_eq!(act("mfs", &[]), Err(libc::ENOENT));
    }

    #[test]
    fn names() {
        for (n, p) in ACTION_NAMES {
            assert_eq!(Action::parse(n), Ok(p));
            assert_eq!(p.to_string(), n);
        }
        assert!(Action::parse("most").unwrap_err().contains("newest"));
        assert_eq!(Search::parse("epall"), Ok(Search::Epall));
        let err = Search::parse("newest").unwrap_err();
        assert!(err.contains("not built") && err.contains("epff"), "{err}");
        assert!(Search::parse("x").unwrap_err().contains("unknown"));
    }
}
