//! A differential test of `accord sync A B C` against Unison run in a star
//! (Debian's `unison` 2.52, `-batch -auto -times=false`, as in
//! `sync_unison.rs`): hub B, spokes A and C, each sync a round of pair runs
//! A–B then C–B, repeated until a round changes nothing (at most
//! [`MAX_ROUNDS`]). Accord syncs the three roots in one run each time.
//!
//! Each tool has its own copy of three replicas, synced from the same base
//! tree, then given the same history: steps of changes on one, two or all
//! three replicas, each followed by a sync. A step may leave a replica out:
//! for accord its root is moved away for that run (the run says it was not
//! reached, exit 4) and back after it; for Unison the pair runs that need
//! it are skipped (a hub left out stops the star). The last step syncs all.
//!
//! The scenarios are named ones (changes on one, two and three replicas,
//! replicas left out of several runs), judged after their last sync, and
//! random histories (seed printed, fixed unless `ACCORD_TEST_SEED` is set)
//! whose runs leave out only spokes, judged after the first sync that leaves
//! the tools' replicas different (what follows is history they no longer
//! share).
//!
//! Per scenario, either the two tools end alike (the same three replicas,
//! contents and modes, and the same conflicts in the last sync), or they
//! differ in the way the scenario names, one of the differences the sync
//! semantics document names as deliberate ("Deliberate differences from
//! Unison in a star"), judged path by path where either tool reports a
//! conflict:
//!
//! - [`Deliberate::HubCarriesConflict`]: a conflict both tools report, where
//!   Unison's star has already carried one side's version through the hub
//!   to another replica (the pair that sees the conflict runs after the pair
//!   that carried it); Accord leaves every replica's version as it was. (A
//!   later change on a replica that received the carried version may then
//!   settle the path in the star; Accord's conflict stays.)
//! - [`Deliberate::DeletionBeneathDeletedDirectory`]: a directory deleted on
//!   one replica, a path beneath it deleted on another: Unison calls it a
//!   conflict, Accord deletes the directory everywhere (as with two
//!   replicas, `sync_unison.rs`);
//! - [`Deliberate::NoFalseConflict`]: a replica that missed runs while the
//!   hub was away changed a path after the others' change reached it (the
//!   spokes synced without the hub), or a spoke made while away the same
//!   change the others agreed on meanwhile and a later change followed;
//!   Unison's star calls the two changes a conflict, Accord carries the
//!   later one;
//! - [`Deliberate::NoResurrection`]: likewise, a path created and then
//!   deleted after the spokes synced without the hub; Unison's star brings it
//!   back everywhere, Accord keeps it deleted.
//!
//! And always: Accord reports no conflict Unison's star would not also have
//! (a path Unison skipped in a pair run, or left differing). A scenario whose
//! outcome is not the one it names fails; the table printed (`--nocapture`)
//! gives the counts. Skipped loudly when `unison` is not installed (fails in
//! strict mode: `ACCORD_TEST_STRICT`).

mod mirror_common;
mod sync_common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use sync_common::{bin, conflict_paths, snapshot, Node};

/// Replica indices: A, B (Unison's hub), C.
const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const HUB: usize = B;
const LETTERS: [&str; 3] = ["A", "B", "C"];
/// Rounds of Unison's star in one sync before the test gives up on it.
const MAX_ROUNDS: usize = 6;

type Tree = BTreeMap<String, Node>;
type Trees = [Tree; 3];

/// One change a person makes on one replica. Each does nothing where what
/// it acts on is not there (the replicas of the two tools may differ by
/// then: a step after a run that left a replica out).
#[derive(Clone, Debug)]
enum Op {
    /// Write a file (making its parents).
    Write(&'static str, String),
    /// Remove a file or a symlink.
    Remove(&'static str),
    /// Remove a directory and all beneath it.
    RemoveDir(&'static str),
    Chmod(&'static str, u32),
    /// Make `.0` a symlink to `.1`, replacing what is there.
    Symlink(&'static str, &'static str),
}

impl Op {
    fn apply(&self, root: &Path) {
        match self {
            Op::Write(rel, contents) => {
                let path = root.join(rel);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(path, contents).unwrap();
            }
            Op::Remove(rel) => {
                if fs::symlink_metadata(root.join(rel)).is_ok() {
                    fs::remove_file(root.join(rel)).unwrap();
                }
            }
            Op::RemoveDir(rel) => {
                if root.join(rel).is_dir() {
                    fs::remove_dir_all(root.join(rel)).unwrap();
                }
            }
            Op::Chmod(rel, mode) => {
                if root.join(rel).exists() {
                    fs::set_permissions(root.join(rel), fs::Permissions::from_mode(*mode)).unwrap();
                }
            }
            Op::Symlink(rel, target) => {
                Op::Remove(rel).apply(root);
                symlink(target, root.join(rel)).unwrap();
            }
        }
    }
}

/// Changes on the replicas, then a sync that leaves out `away`.
#[derive(Clone, Debug, Default)]
struct Step {
    changes: Vec<(usize, Op)>,
    away: Option<usize>,
}

/// How Accord's result may differ from Unison's star (the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Deliberate {
    HubCarriesConflict,
    DeletionBeneathDeletedDirectory,
    NoFalseConflict,
    /// The paths Unison's star brings back.
    NoResurrection(&'static [&'static str]),
}

impl Deliberate {
    fn name(self) -> &'static str {
        match self {
            Deliberate::HubCarriesConflict => "Unison's hub carries one side of a conflict",
            Deliberate::DeletionBeneathDeletedDirectory => {
                "a deletion beneath a deleted directory is no conflict"
            }
            Deliberate::NoFalseConflict => "a false conflict in Unison after missed rounds",
            Deliberate::NoResurrection(_) => "Unison resurrects a deleted path after missed rounds",
        }
    }
}

struct Scenario {
    name: String,
    steps: Vec<Step>,
    /// The differences from Unison's star that may show; empty: both tools
    /// must end alike.
    deliberate: Vec<Deliberate>,
    /// Exactly these must show (a named scenario); else any of them, or
    /// none (a random history may or may not make them).
    exact: bool,
}

fn base_tree(root: &Path) {
    for (rel, contents) in [
        ("f", "base f"),
        ("g", "base g"),
        ("h", "base h"),
        ("dir/x", "base x"),
        ("dir/sub/y", "base y"),
        ("keep/k", "keep this so no replica is ever emptied"),
    ] {
        Op::Write(rel, contents.into()).apply(root);
    }
    symlink("f", root.join("link")).unwrap();
}

// ---- the scenarios -----------------------------------------------------------

fn scenario(name: String, steps: Vec<Step>, deliberate: Option<Deliberate>) -> Scenario {
    Scenario {
        name,
        steps,
        deliberate: deliberate.into_iter().collect(),
        exact: true,
    }
}

/// One step with every replica synced.
fn changes(changes: Vec<(usize, Op)>) -> Vec<Step> {
    vec![Step {
        changes,
        away: None,
    }]
}

fn away(replica: usize, changes: Vec<(usize, Op)>) -> Step {
    Step {
        changes,
        away: Some(replica),
    }
}

fn edit(rel: &'static str, on: usize) -> Op {
    Op::Write(rel, format!("{rel} edited on {}", LETTERS[on]))
}

/// What one replica alone does, on each replica in turn.
fn one_replica() -> Vec<Scenario> {
    type Make = fn(usize) -> Vec<Op>;
    let templates: [(&str, Make); 7] = [
        ("a file created", |r| {
            vec![Op::Write("new", format!("created on {}", LETTERS[r]))]
        }),
        ("a new directory with files", |r| {
            vec![
                Op::Write("nd/deep/n1", format!("n1 from {}", LETTERS[r])),
                Op::Write("nd/n2", "n2".into()),
            ]
        }),
        ("a file edited", |r| vec![edit("f", r)]),
        ("a file deleted", |_| vec![Op::Remove("g")]),
        ("a directory deleted", |_| vec![Op::RemoveDir("dir")]),
        ("a chmod", |_| vec![Op::Chmod("f", 0o600)]),
        ("a symlink retargeted, a file made a directory", |_| {
            vec![
                Op::Symlink("link", "g"),
                Op::Remove("h"),
                Op::Write("h/now", "a directory".into()),
            ]
        }),
    ];
    let mut out = Vec::new();
    for (what, make) in templates {
        for r in [A, B, C] {
            let ops = make(r).into_iter().map(|op| (r, op)).collect();
            out.push(scenario(
                format!("{what} on {}", LETTERS[r]),
                changes(ops),
                None,
            ));
        }
    }
    out
}

/// Changes on two replicas.
fn two_replicas() -> Vec<Scenario> {
    let carried = Some(Deliberate::HubCarriesConflict);
    let mut out = Vec::new();
    for (x, y) in [(A, B), (A, C), (B, C)] {
        let (lx, ly) = (LETTERS[x], LETTERS[y]);
        out.push(scenario(
            format!("the same edit on {lx} and {ly}"),
            changes(vec![
                (x, Op::Write("f", "the same edit".into())),
                (y, Op::Write("f", "the same edit".into())),
            ]),
            None,
        ));
        out.push(scenario(
            format!("different edits on {lx} and {ly}"),
            changes(vec![(x, edit("f", x)), (y, edit("f", y))]),
            carried,
        ));
    }
    for (x, y) in [(A, C), (B, A), (C, B)] {
        let (lx, ly) = (LETTERS[x], LETTERS[y]);
        out.push(scenario(
            format!("an edit on {lx}, a deletion on {ly}"),
            changes(vec![(x, edit("g", x)), (y, Op::Remove("g"))]),
            carried,
        ));
    }
    for (x, y) in [(A, C), (C, B), (A, B)] {
        let (lx, ly) = (LETTERS[x], LETTERS[y]);
        out.push(scenario(
            format!("an edit on {lx}, a chmod on {ly}"),
            changes(vec![(x, edit("f", x)), (y, Op::Chmod("f", 0o600))]),
            carried,
        ));
    }
    for (x, y) in [(A, C), (B, A)] {
        let (lx, ly) = (LETTERS[x], LETTERS[y]);
        out.push(scenario(
            format!("a directory deleted on {lx}, a file beneath edited on {ly}"),
            changes(vec![(x, Op::RemoveDir("dir")), (y, edit("dir/sub/y", y))]),
            carried,
        ));
    }
    out.extend([
        scenario(
            "a directory deleted on A, a file beneath it deleted on C".into(),
            changes(vec![(A, Op::RemoveDir("dir")), (C, Op::Remove("dir/x"))]),
            Some(Deliberate::DeletionBeneathDeletedDirectory),
        ),
        scenario(
            "the same file deleted on A and C".into(),
            changes(vec![(A, Op::Remove("g")), (C, Op::Remove("g"))]),
            None,
        ),
        scenario(
            "the same directory deleted on B and C".into(),
            changes(vec![(B, Op::RemoveDir("dir")), (C, Op::RemoveDir("dir"))]),
            None,
        ),
        scenario(
            "different files in one new directory on A and C".into(),
            changes(vec![
                (A, Op::Write("shared/from-a", "a".into())),
                (C, Op::Write("shared/from-c", "c".into())),
            ]),
            None,
        ),
        scenario(
            "a file created apart on A and C".into(),
            changes(vec![
                (A, Op::Write("clash", "from A".into())),
                (C, Op::Write("clash", "from C, longer".into())),
            ]),
            carried,
        ),
    ]);
    out
}

/// Changes on all three replicas.
fn three_replicas() -> Vec<Scenario> {
    let every = |op: fn(usize) -> Op| [A, B, C].map(|r| (r, op(r))).to_vec();
    vec![
        scenario(
            "different edits on all three".into(),
            changes(every(|r| edit("f", r))),
            None,
        ),
        scenario(
            "the same edit on all three".into(),
            changes(every(|_| Op::Write("f", "one edit".into()))),
            None,
        ),
        scenario(
            "a file created on each".into(),
            changes(every(|r| Op::Write(["na", "nb", "nc"][r], "new".into()))),
            None,
        ),
        scenario(
            "the same edit on A and C, a deletion on B".into(),
            changes(vec![
                (A, Op::Write("g", "A's and C's".into())),
                (B, Op::Remove("g")),
                (C, Op::Write("g", "A's and C's".into())),
            ]),
            None,
        ),
        scenario(
            "an edit on A, an edit of another file on B, a deletion on C".into(),
            changes(vec![
                (A, edit("f", A)),
                (B, edit("g", B)),
                (C, Op::Remove("h")),
            ]),
            None,
        ),
        scenario(
            "the same edit on A and C, a chmod on B".into(),
            changes(vec![
                (A, Op::Write("f", "A's and C's".into())),
                (B, Op::Chmod("f", 0o600)),
                (C, Op::Write("f", "A's and C's".into())),
            ]),
            None,
        ),
    ]
}

/// Steps with a replica left out of several runs, then a run of all.
fn missed_rounds() -> Vec<Scenario> {
    let last = Step::default();
    let no_false = Some(Deliberate::NoFalseConflict);
    vec![
        scenario(
            "C misses two rounds of edits, deletions and a new directory".into(),
            vec![
                away(C, vec![(A, edit("f", A))]),
                away(
                    C,
                    vec![(B, Op::Remove("g")), (A, Op::Write("nd/n", "new".into()))],
                ),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "C misses three rounds and edits a file of its own meanwhile".into(),
            vec![
                away(C, vec![(A, edit("f", A))]),
                away(C, vec![(C, edit("h", C))]),
                away(C, vec![(B, Op::RemoveDir("dir"))]),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "C misses rounds and edits what the others changed: a real conflict".into(),
            vec![
                away(C, vec![(A, edit("f", A))]),
                away(C, vec![(C, edit("f", C))]),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "A misses rounds of C's deletion and edits, B edits after C".into(),
            vec![
                away(A, vec![(C, Op::Remove("g")), (C, edit("f", C))]),
                away(A, vec![(B, edit("f", B))]),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "A misses rounds, having deleted a directory the others change beneath".into(),
            vec![
                away(A, vec![(A, Op::RemoveDir("dir")), (C, edit("dir/x", C))]),
                away(A, vec![(B, edit("dir/sub/y", B))]),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "A misses a deletion beneath a directory it deletes meanwhile".into(),
            vec![
                away(A, vec![(C, Op::Remove("dir/x"))]),
                away(
                    A,
                    vec![(A, Op::RemoveDir("dir")), (B, Op::Chmod("g", 0o600))],
                ),
                last.clone(),
            ],
            Some(Deliberate::DeletionBeneathDeletedDirectory),
        ),
        scenario(
            "a conflict carried by the hub, then a deletion on A settles it in Unison".into(),
            vec![
                changes(vec![(B, edit("g", B)), (C, Op::Remove("g"))]).remove(0),
                changes(vec![(A, Op::Remove("g"))]).remove(0),
            ],
            Some(Deliberate::HubCarriesConflict),
        ),
        scenario(
            "the same deletion on A and B in runs apart, then C creates the path".into(),
            vec![
                away(A, vec![(B, Op::Remove("g"))]),
                away(C, vec![(A, Op::Remove("g"))]),
                changes(vec![(C, Op::Write("g", "g made again on C".into()))]).remove(0),
            ],
            None,
        ),
        scenario(
            "the same edit on A and B in runs apart, then C edits again".into(),
            vec![
                away(A, vec![(B, Op::Write("g", "v2".into()))]),
                away(C, vec![(A, Op::Write("g", "v2".into()))]),
                changes(vec![(C, edit("g", C))]).remove(0),
            ],
            None,
        ),
        scenario(
            "A misses a file created and deleted by the others".into(),
            vec![
                away(A, vec![(B, Op::Write("brief", "short-lived".into()))]),
                away(A, vec![(C, Op::Remove("brief"))]),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "C misses a deletion and a re-creation with new contents".into(),
            vec![
                away(C, vec![(A, Op::Remove("g"))]),
                away(C, vec![(B, Op::Write("g", "g made again".into()))]),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "A misses one round, C the next, both edit g apart".into(),
            vec![
                away(A, vec![(B, edit("f", B)), (A, edit("g", A))]),
                away(C, vec![(C, edit("g", C))]),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "B (the hub) misses rounds of changes to different paths".into(),
            vec![
                away(
                    B,
                    vec![(A, edit("f", A)), (C, Op::Write("nd/n", "new".into()))],
                ),
                away(B, vec![(C, Op::RemoveDir("dir")), (A, Op::Remove("g"))]),
                away(C, vec![(B, edit("h", B))]),
                last.clone(),
            ],
            None,
        ),
        scenario(
            "B away: A and C edit a file apart: a real conflict".into(),
            vec![
                away(B, vec![(A, edit("f", A)), (C, edit("f", C))]),
                away(B, vec![]),
                last.clone(),
            ],
            Some(Deliberate::HubCarriesConflict),
        ),
        scenario(
            "B away: A edits, C edits again after the edit reached it".into(),
            vec![
                away(B, vec![(A, edit("f", A))]),
                away(B, vec![(C, edit("f", C))]),
                last.clone(),
            ],
            no_false,
        ),
        scenario(
            "B away: A edits, C chmods after the edit reached it".into(),
            vec![
                away(B, vec![(A, edit("f", A))]),
                away(B, vec![(C, Op::Chmod("f", 0o600))]),
                last.clone(),
            ],
            no_false,
        ),
        scenario(
            "B away: A deletes, C creates the path again after the deletion".into(),
            vec![
                away(B, vec![(A, Op::Remove("g"))]),
                away(B, vec![(C, Op::Write("g", "g made again on C".into()))]),
                last.clone(),
            ],
            no_false,
        ),
        scenario(
            "B away: A creates a file, C deletes it after it arrived".into(),
            vec![
                away(B, vec![(A, Op::Write("n", "new on A".into()))]),
                away(B, vec![(C, Op::Remove("n"))]),
                last.clone(),
            ],
            Some(Deliberate::NoResurrection(&["n"])),
        ),
        scenario(
            "B away: A makes a directory, C deletes it after it arrived".into(),
            vec![
                away(
                    B,
                    vec![
                        (A, Op::Write("nd/one", "1".into())),
                        (A, Op::Write("nd/sub/two", "2".into())),
                    ],
                ),
                away(B, vec![(C, Op::RemoveDir("nd"))]),
                last.clone(),
            ],
            Some(Deliberate::NoResurrection(&["nd"])),
        ),
        scenario(
            "C away, then B away twice: C edits after A's edit reached it".into(),
            vec![
                away(C, vec![(A, edit("f", A))]),
                away(B, vec![]),
                away(B, vec![(C, edit("f", C))]),
                last.clone(),
            ],
            no_false,
        ),
        scenario(
            "C misses rounds: an edit on A and a chmod on B reach it".into(),
            vec![
                away(C, vec![(A, edit("f", A))]),
                away(C, vec![(B, Op::Chmod("f", 0o600))]),
                away(C, vec![(A, Op::Chmod("dir", 0o700))]),
                last,
            ],
            None,
        ),
    ]
}

/// The seed of the random histories: `ACCORD_TEST_SEED`, else a fixed
/// one (so that the suite is the same from run to run).
fn seed() -> u64 {
    std::env::var("ACCORD_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0029)
}

/// A small generator (xorshift64*): enough to pick ops, no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// A random change on replica `r` in step `step` (its contents name both,
/// so that no two changes write the same bytes by chance).
fn random_op(rng: &mut Rng, r: usize, step: usize) -> Op {
    const FILES: [&str; 5] = ["f", "g", "dir/x", "dir/sub/y", "n"];
    let file = FILES[rng.below(FILES.len())];
    let contents = format!("{file} from {} in step {step}", LETTERS[r]);
    match rng.below(6) {
        0 | 1 => Op::Write(file, contents),
        2 => Op::Remove(file),
        3 => Op::RemoveDir(["dir", "dir/sub"][rng.below(2)]),
        4 => Op::Chmod(file, [0o600, 0o640][rng.below(2)]),
        _ => Op::Write("nd/m", contents),
    }
}

/// Random histories: two or three steps of one to three changes on random
/// replicas, each step's sync leaving out nothing or a spoke, then a sync
/// of all. With only spokes left out, both tools see the same runs, so
/// they must end alike, or differ only as a conflict carried by the hub,
/// or where a spoke left out made the same change the others agreed on
/// meanwhile (Accord sees the two are one; Unison's pair of that spoke and
/// the hub cannot, and a later change there is its false conflict).
fn random_histories(seed: u64, count: usize) -> Vec<Scenario> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    (0..count)
        .map(|n| {
            let mut steps: Vec<Step> = (0..2 + rng.below(2))
                .map(|step| Step {
                    changes: (0..1 + rng.below(3))
                        .map(|_| {
                            let r = rng.below(3);
                            (r, random_op(&mut rng, r, step))
                        })
                        .collect(),
                    away: [None, None, Some(A), Some(C)][rng.below(4)],
                })
                .collect();
            steps.push(Step::default());
            Scenario {
                name: format!("random history {n} of seed {seed}"),
                steps,
                deliberate: vec![
                    Deliberate::HubCarriesConflict,
                    Deliberate::DeletionBeneathDeletedDirectory,
                    Deliberate::NoFalseConflict,
                ],
                exact: false,
            }
        })
        .collect()
}

/// How many random histories run after the named scenarios.
const RANDOM_HISTORIES: usize = 30;

fn scenarios() -> Vec<Scenario> {
    let mut all = one_replica();
    all.extend(two_replicas());
    all.extend(three_replicas());
    all.extend(missed_rounds());
    all.extend(random_histories(seed(), RANDOM_HISTORIES));
    all
}

// ---- the three replicas of one tool ------------------------------------------

/// Three roots and the tool's state directory, in a temp dir.
struct Trio {
    tmp: tempfile::TempDir,
    roots: [PathBuf; 3],
    state: PathBuf,
}

impl Trio {
    fn new() -> Trio {
        let tmp = tempfile::tempdir().unwrap();
        let roots = ["a", "b", "c"].map(|name| tmp.path().join(name));
        for root in &roots {
            fs::create_dir(root).unwrap();
        }
        let state = tmp.path().join("state");
        fs::create_dir(&state).unwrap();
        Trio { tmp, roots, state }
    }

    fn trees(&self) -> Trees {
        [0, 1, 2].map(|r| snapshot(&self.roots[r]))
    }

    fn apply(&self, changes: &[(usize, Op)]) {
        for (replica, op) in changes {
            op.apply(&self.roots[*replica]);
        }
    }

    /// Where a root left out of a run waits.
    fn moved_away(&self, replica: usize) -> PathBuf {
        self.tmp.path().join(format!("{}.away", LETTERS[replica]))
    }
}

/// What one sync of the set reported: the paths in conflict.
type Conflicts = BTreeSet<String>;

/// `accord sync --json --max-delete 100% A B C`, with `away` moved out of
/// the way for the run.
fn accord(trio: &Trio, away: Option<usize>) -> Result<Conflicts, String> {
    if let Some(r) = away {
        fs::rename(&trio.roots[r], trio.moved_away(r)).unwrap();
    }
    let out = Command::new(bin())
        .args(["sync", "--json", "--max-delete", "100%"])
        .args(&trio.roots)
        .env("ACCORD_STATE_DIR", &trio.state)
        .stdin(Stdio::null())
        .output()
        .expect("run accord");
    if let Some(r) = away {
        fs::rename(trio.moved_away(r), &trio.roots[r]).unwrap();
    }
    let said = || {
        format!(
            "accord exited {:?}: {}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|_| said())?;
    let conflicts: Conflicts = conflict_paths(&report).into_iter().collect();
    let unreached: Vec<&str> = report["unreached"]
        .as_array()
        .ok_or_else(said)?
        .iter()
        .filter_map(|letter| letter.as_str())
        .collect();
    let expected_code = match (away, conflicts.is_empty()) {
        (Some(_), _) => 4,
        (None, true) => 0,
        (None, false) => 1,
    };
    let expected_unreached: Vec<&str> = away.iter().map(|&r| LETTERS[r]).collect();
    let clean = report["errors"].as_array().is_some_and(|e| e.is_empty())
        && report["refused"].is_null()
        && report["fatal"].is_null();
    if out.status.code() != Some(expected_code) || unreached != expected_unreached || !clean {
        return Err(said());
    }
    Ok(conflicts)
}

/// One pair run of Unison (a spoke, then the hub); the paths it skipped.
fn unison_pair(trio: &Trio, spoke: usize) -> Result<Conflicts, String> {
    let out = Command::new("unison")
        .args(["-batch", "-auto", "-times=false", "-confirmbigdel=false"])
        .arg(&trio.roots[spoke])
        .arg(&trio.roots[HUB])
        .env("UNISON", &trio.state)
        .env("HOME", trio.tmp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let failed = text.lines().any(|l| l.trim_start().starts_with("failed: "));
    if !matches!(out.status.code(), Some(0) | Some(1)) || failed {
        return Err(format!(
            "unison {}-{} exited {:?}: {text}",
            LETTERS[spoke],
            LETTERS[HUB],
            out.status.code()
        ));
    }
    Ok(text
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("skipped: "))
        .map(|rest| rest.split(" (").next().unwrap().to_string())
        .collect())
}

/// One sync of Unison's star: rounds of A–B then C–B until a round changes
/// nothing, leaving out the runs that need `away`; every path skipped.
fn unison_star(trio: &Trio, away: Option<usize>) -> Result<Conflicts, String> {
    let mut skipped = Conflicts::new();
    for _ in 0..MAX_ROUNDS {
        let before = trio.trees();
        for spoke in [A, C] {
            if away != Some(spoke) && away != Some(HUB) {
                skipped.extend(unison_pair(trio, spoke)?);
            }
        }
        if trio.trees() == before {
            return Ok(skipped);
        }
    }
    Err(format!(
        "Unison's star still changed after {MAX_ROUNDS} rounds"
    ))
}

// ---- comparing ---------------------------------------------------------------

/// How one tool's history ended.
#[derive(Clone)]
struct Ended {
    trees: Trees,
    /// The conflicts of the last sync.
    last: Conflicts,
    /// Every conflict of every sync after the first.
    all: Conflicts,
    /// The trees before the last sync.
    before_last: Trees,
    /// The replica the last sync left out.
    away: Option<usize>,
}

impl Ended {
    fn converged(&self) -> bool {
        self.last.is_empty() && self.trees[0] == self.trees[1] && self.trees[1] == self.trees[2]
    }

    fn summary(&self) -> String {
        if self.converged() {
            return "converged".into();
        }
        let mut parts = Vec::new();
        if !self.last.is_empty() {
            parts.push(format!("conflicts {}", join(&self.last)));
        }
        let differing = differing_paths(&self.trees);
        if !differing.is_empty() {
            parts.push(format!("differ at {}", join(&differing)));
        }
        parts.join("; ")
    }
}

fn join(paths: &BTreeSet<String>) -> String {
    paths.iter().cloned().collect::<Vec<_>>().join(",")
}

/// Paths whose entries are not the same on all three replicas.
fn differing_paths(trees: &Trees) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for tree in trees {
        paths.extend(tree.keys().cloned());
    }
    paths.retain(|p| !(trees[0].get(p) == trees[1].get(p) && trees[1].get(p) == trees[2].get(p)));
    paths
}

/// `path` is `zone` or beneath it.
fn beneath(path: &str, zone: &str) -> bool {
    path == zone
        || path
            .strip_prefix(zone)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn in_zones(path: &str, zones: &Conflicts) -> bool {
    zones.iter().any(|zone| beneath(path, zone))
}

/// Either path is the other or beneath it: the same conflict, as one tool
/// names a directory where the other names a path in it.
fn covered(path: &str, by: &Conflicts) -> bool {
    by.iter()
        .any(|other| beneath(path, other) || beneath(other, path))
}

/// The part of a tree inside (or outside) the zones.
fn part(tree: &Tree, zones: &Conflicts, inside: bool) -> Tree {
    tree.iter()
        .filter(|(path, _)| in_zones(path, zones) == inside)
        .map(|(path, node)| (path.clone(), node.clone()))
        .collect()
}

fn describe(node: Option<&Node>) -> String {
    match node {
        None => "absent".into(),
        Some(Node::File { contents, mode }) => {
            format!("file {mode:o} {:?}", String::from_utf8_lossy(contents))
        }
        Some(Node::Dir { mode }) => format!("dir {mode:o}"),
        Some(Node::Symlink(target)) => format!("symlink -> {}", target.display()),
        Some(Node::Other) => "other".into(),
    }
}

/// Where two sets of trees differ, replica by replica.
fn tree_diff(ours: &Trees, theirs: &Trees) -> Vec<String> {
    let mut lines = Vec::new();
    for r in [A, B, C] {
        let paths: BTreeSet<&String> = ours[r].keys().chain(theirs[r].keys()).collect();
        for path in paths {
            let (o, t) = (ours[r].get(path), theirs[r].get(path));
            if o != t {
                lines.push(format!(
                    "  {} {path}: accord {}, unison {}",
                    LETTERS[r],
                    describe(o),
                    describe(t)
                ));
            }
        }
    }
    lines
}

/// Accord's conflicts must all be Unison's star's too: a path it skipped
/// in a pair run, or left differing.
fn no_extra_conflicts(ours: &Ended, theirs: &Ended) -> Result<(), String> {
    let mut unisons = theirs.all.clone();
    unisons.extend(differing_paths(&theirs.trees));
    let extra: Vec<&String> = ours.all.iter().filter(|p| !covered(p, &unisons)).collect();
    if extra.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "accord reported conflicts Unison's star does not have: {extra:?}"
        ))
    }
}

fn same(ours: &Ended, theirs: &Ended) -> bool {
    ours.trees == theirs.trees && ours.last == theirs.last
}

/// The outermost of `paths` (none beneath another).
fn outermost(paths: &Conflicts) -> Conflicts {
    paths
        .iter()
        .filter(|p| !paths.iter().any(|q| q != *p && beneath(p, q)))
        .cloned()
        .collect()
}

/// The deliberate differences the results show: the replicas must be
/// alike outside the paths either tool reports in conflict (and those a
/// scenario names as brought back by Unison); each such path is the same in
/// both, or differs in one of the ways named.
fn differences(s: &Scenario, ours: &Ended, theirs: &Ended) -> Result<BTreeSet<Deliberate>, String> {
    let mut zones: Conflicts = ours.last.union(&theirs.last).cloned().collect();
    let resurrected = s.deliberate.iter().find_map(|kind| match kind {
        Deliberate::NoResurrection(paths) => Some((*kind, *paths)),
        _ => None,
    });
    if let Some((_, paths)) = resurrected {
        zones.extend(paths.iter().map(|p| p.to_string()));
    }
    for r in [A, B, C] {
        if part(&ours.trees[r], &zones, false) != part(&theirs.trees[r], &zones, false) {
            return Err(format!("{} differs outside the conflicts", LETTERS[r]));
        }
    }
    let mut found = BTreeSet::new();
    for zone in outermost(&zones) {
        if let Some(kind) = zone_difference(&zone, ours, theirs, resurrected.map(|r| r.0))? {
            found.insert(kind);
        }
    }
    Ok(found)
}

/// How the tools' results differ at one path in conflict (None: alike).
fn zone_difference(
    zone: &str,
    ours: &Ended,
    theirs: &Ended,
    resurrection: Option<Deliberate>,
) -> Result<Option<Deliberate>, String> {
    let only = Conflicts::from([zone.to_string()]);
    let inside = |trees: &Trees| trees.clone().map(|tree| part(&tree, &only, true));
    let (here, there) = (inside(&ours.trees), inside(&theirs.trees));
    let ours_conflict = covered(zone, &ours.last);
    let theirs_conflict = covered(zone, &theirs.last);
    let alike_everywhere = |t: &Trees| t[A] == t[B] && t[B] == t[C];
    let empty_everywhere = |t: &Trees| t.iter().all(|tree| tree.is_empty());
    // Empty on every replica of the last sync; the one it left out, if
    // any, as Unison's.
    let deleted_in_the_run = |t: &Trees| {
        [A, B, C].iter().all(|&r| {
            if ours.away == Some(r) {
                t[r] == there[r]
            } else {
                t[r].is_empty()
            }
        })
    };
    let why = |what: &str| Err(format!("{zone}: {what}"));
    match (ours_conflict, theirs_conflict) {
        _ if here == there && ours_conflict == theirs_conflict => Ok(None),
        (true, true) if here == inside(&ours.before_last) => {
            Ok(Some(Deliberate::HubCarriesConflict))
        }
        (true, true) => why("accord changed a path in conflict"),
        // Unison's star settled in a later sync a conflict whose one side it
        // had carried through the hub (from the carried version); Accord's
        // replicas never received it, and the conflict stays.
        (true, false) if covered(zone, &theirs.all) && here == inside(&ours.before_last) => {
            Ok(Some(Deliberate::HubCarriesConflict))
        }
        (false, true) if deleted_in_the_run(&here) && unison_deleted_a_directory(&there) => {
            Ok(Some(Deliberate::DeletionBeneathDeletedDirectory))
        }
        (false, true) if alike_everywhere(&here) && versions_of(&here[A], &there) => {
            Ok(Some(Deliberate::NoFalseConflict))
        }
        (false, false) if empty_everywhere(&here) && alike_everywhere(&there) => resurrection
            .map(Some)
            .ok_or_else(|| format!("{zone}: Unison keeps it, accord not")),
        (true, false) => why("a conflict in accord only"),
        _ => why("the tools differ here"),
    }
}

/// Unison's star holds the zone, a directory, on some replica and nothing
/// there on another: a directory deleted on one replica.
fn unison_deleted_a_directory(there: &Trees) -> bool {
    let is_dir = |tree: &Tree| tree.values().any(|node| matches!(node, Node::Dir { .. }));
    there.iter().any(is_dir) && there.iter().any(|tree| tree.is_empty())
}

/// Each of accord's entries in the zone has the contents (or the kind) and
/// the mode of versions some replica of Unison's holds; nothing at all is
/// a version too (a deletion).
fn versions_of(ours: &Tree, there: &Trees) -> bool {
    if ours.is_empty() {
        return there.iter().any(|tree| tree.is_empty());
    }
    ours.iter().all(|(path, node)| {
        let held: Vec<&Node> = there.iter().filter_map(|t| t.get(path)).collect();
        match node {
            Node::File { contents, mode } => {
                held.iter()
                    .any(|n| matches!(n, Node::File { contents: c, .. } if c == contents))
                    && held
                        .iter()
                        .any(|n| matches!(n, Node::File { mode: m, .. } if m == mode))
            }
            other => held.contains(&other),
        }
    })
}

/// The verdict on a scenario's results: "same", or the deliberate
/// differences it shows, which must be what the scenario names.
fn verdict(s: &Scenario, ours: &Ended, theirs: &Ended) -> Result<BTreeSet<Deliberate>, String> {
    no_extra_conflicts(ours, theirs)?;
    let found = if same(ours, theirs) {
        BTreeSet::new()
    } else {
        differences(s, ours, theirs)?
    };
    let named: BTreeSet<Deliberate> = s.deliberate.iter().copied().collect();
    let fits = if s.exact {
        found == named
    } else {
        found.is_subset(&named)
    };
    if fits {
        Ok(found)
    } else {
        let names =
            |set: &BTreeSet<Deliberate>| -> Vec<&str> { set.iter().map(|k| k.name()).collect() };
        Err(format!(
            "differences from Unison {:?}, where the scenario names {:?}",
            names(&found),
            names(&named)
        ))
    }
}

// ---- running -----------------------------------------------------------------

/// Sync the base tree, then each step; how each tool stood after each
/// step's sync.
fn run_histories(s: &Scenario) -> Result<Vec<(Ended, Ended)>, String> {
    let (ours, theirs) = (Trio::new(), Trio::new());
    base_tree(&ours.roots[A]);
    base_tree(&theirs.roots[A]);
    let first = (accord(&ours, None)?, unison_star(&theirs, None)?);
    if !first.0.is_empty() || !first.1.is_empty() || ours.trees() != theirs.trees() {
        return Err("the first sync of the base tree did not agree".into());
    }
    let mut ended = [&ours, &theirs].map(|trio| Ended {
        trees: trio.trees(),
        last: Conflicts::new(),
        all: Conflicts::new(),
        before_last: trio.trees(),
        away: None,
    });
    let mut after_each = Vec::new();
    for step in &s.steps {
        for (trio, end) in [&ours, &theirs].into_iter().zip(ended.iter_mut()) {
            trio.apply(&step.changes);
            end.before_last = trio.trees();
        }
        ended[0].last = accord(&ours, step.away)?;
        ended[1].last = unison_star(&theirs, step.away)?;
        for (trio, end) in [&ours, &theirs].into_iter().zip(ended.iter_mut()) {
            end.all.extend(end.last.iter().cloned());
            end.trees = trio.trees();
            end.away = step.away;
        }
        after_each.push((ended[0].clone(), ended[1].clone()));
    }
    Ok(after_each)
}

/// The step whose results are judged: the last for a named scenario;
/// for a random one, the first after which the tools differ (what follows
/// a deliberate difference is history the tools no longer share).
fn judged(s: &Scenario, after_each: Vec<(Ended, Ended)>) -> (Ended, Ended) {
    let first_difference = after_each
        .iter()
        .position(|(ours, theirs)| !same(ours, theirs));
    let at = match first_difference {
        Some(step) if !s.exact => step,
        _ => after_each.len() - 1,
    };
    after_each.into_iter().nth(at).expect("a step")
}

/// One row of the table: (unison's result, accord's result, verdict).
fn run_scenario(s: &Scenario) -> (String, String, Result<BTreeSet<Deliberate>, String>) {
    assert!(
        s.steps.last().is_some_and(|step| step.away.is_none()),
        "{}: the last step syncs every replica",
        s.name
    );
    let (ours, theirs) = match run_histories(s) {
        Ok(after_each) => judged(s, after_each),
        Err(why) => return ("-".into(), "-".into(), Err(why)),
    };
    let verdict = verdict(s, &ours, &theirs);
    let verdict = verdict.map_err(|why| {
        let mut lines = vec![why];
        if ours.last != theirs.last {
            lines.push(format!(
                "  conflicts: accord {:?}, unison {:?}",
                ours.last, theirs.last
            ));
        }
        lines.extend(tree_diff(&ours.trees, &theirs.trees));
        lines.join("\n")
    });
    (theirs.summary(), ours.summary(), verdict)
}

#[test]
fn accord_sync_of_three_ends_where_unisons_star_does() {
    if !mirror_common::need("unison", "unison") {
        return;
    }
    let all = scenarios();
    assert!(all.len() >= 40, "{} scenarios", all.len());
    let mut failures = Vec::new();
    let mut deliberate: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut same, mut differing) = (0, 0);
    eprintln!(
        "{:<72} | {:<28} | {:<28} | verdict",
        "scenario", "unison's star", "accord"
    );
    for s in &all {
        let (unison, ours, verdict) = run_scenario(s);
        let shown = match &verdict {
            Ok(found) if found.is_empty() => "same".to_string(),
            Ok(found) => {
                let names: Vec<&str> = found.iter().map(|k| k.name()).collect();
                format!("deliberate: {}", names.join(", "))
            }
            Err(_) => "FAILED".into(),
        };
        eprintln!("{:<72} | {unison:<28} | {ours:<28} | {shown}", s.name);
        match verdict {
            Ok(found) if found.is_empty() => same += 1,
            Ok(found) => {
                differing += 1;
                for kind in found {
                    *deliberate.entry(kind.name()).or_default() += 1;
                }
            }
            Err(why) => failures.push(format!("{}: {why}\n  history: {:?}", s.name, s.steps)),
        }
    }
    let named: Vec<String> = deliberate
        .iter()
        .map(|(name, n)| format!("{n} {name}"))
        .collect();
    eprintln!(
        "{} scenarios: {same} same, {differing} with deliberate differences ({}), {} failed",
        all.len(),
        named.join("; "),
        failures.len()
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}
