//! An initial copy carried out while the walk plans it.
//!
//! A walk into a destination that held nothing when it was listed can
//! hand its new directories and files to the executor as it goes, instead
//! of holding an item per entry of the tree until the plan is whole (an
//! initial copy of `/usr` held 109 MB of plan that way). It is safe there,
//! and only there: nothing is to be deleted, so the deletion guard cannot
//! refuse the run; no file has an old version; and the destination is not
//! listed again below its root (each subdirectory is missing there as the
//! root's listing found it), so the walk never meets what it made. What
//! waits for the whole tree still waits (`MirrorPlanner::take_creations`).
//!
//! A visit that finds a part's worth waiting takes it and carries it out
//! before it walks on, so memory holds a few parts, not the tree: the
//! walk's threads copy as much as they plan. A part runs on a pool of its
//! own while the walk's thread that took it waits, blocked: waiting in the
//! walk's pool, it would walk (and plan) on meanwhile, and under load the
//! plan ran ahead of the copy (an initial copy of `/usr` peaked at 93 MB
//! with another build running, 39 MB on an idle machine). At most
//! `PARTS_AT_ONCE` parts run; a thread with another part to carry out
//! waits, blocked too, so the walk goes as fast as the copy. The parts'
//! pool never waits for the walk's, so blocking cannot deadlock. Parts run side
//! by side, but each part's new directories are made before the part is
//! let go (under `turn`, one part after the other), so a directory is made
//! before any file planned into it is written: its parent's visit planned
//! it, before its own visit began.

use super::exec::{make_dirs_now, run_plan, Exec};
use super::MirrorConfig;
use crate::Progress;
use accord_fsys::{DirVisit, Listing};
use accord_model::RelPath;
use accord_plan::{MirrorPlan, MirrorPlanner};
use accord_replica::Replica;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

/// Files carried out together: half a commit batch (its items and its
/// batch are held until it is done: two parts of 2,048 files took 3.5 MB
/// more at the peak of an initial copy of `/usr` than two of 1,024).
const PART: usize = 1024;

/// Parts carried out at once: two overlap one's wait for the disk with
/// the other's copying. A part holds its files' items and its batches
/// until it is done: with a part per walk thread (four here), parts made
/// half of an initial copy's peak heap.
const PARTS_AT_ONCE: usize = 2;

pub(crate) struct Streamed<'a> {
    exec: Exec<'a>,
    /// Where parts are carried out (see the module).
    pool: rayon::ThreadPool,
    /// The walk found the destination's root empty too.
    on: AtomicBool,
    /// Held while a part is taken and its directories are made: plain
    /// system calls on this thread (no rayon work, which could wait for a
    /// thread waiting here).
    turn: Mutex<()>,
    /// No part is to be carried out any more (one root nested in the
    /// other: the run stops).
    halted: AtomicBool,
    /// Some part was carried out.
    ran: AtomicBool,
    /// Parts being carried out, at most `PARTS_AT_ONCE`; `freed` tells a
    /// walk's thread waiting for a part to end.
    running: Mutex<usize>,
    freed: Condvar,
}

/// One of the `PARTS_AT_ONCE` parts: given back when dropped.
struct PartSlot<'s> {
    running: &'s Mutex<usize>,
    freed: &'s Condvar,
}

impl Drop for PartSlot<'_> {
    fn drop(&mut self) {
        *self.running.lock().unwrap() -= 1;
        self.freed.notify_one();
    }
}

impl<'a> Streamed<'a> {
    /// For a run of two roots of this host (the walk lists a destination
    /// directory once, from its parent's listing), not a dry run, into a
    /// destination whose root holds nothing. (Only then is the executor
    /// made before the walk: making one may make `--backup-dir`, which a
    /// run the deletion guard refuses must not have done.)
    pub fn new(
        src: &'a dyn Replica,
        dst: &'a dyn Replica,
        cfg: &'a MirrorConfig,
        progress: &'a Progress,
    ) -> Option<Streamed<'a>> {
        if src.local_root().is_none() || cfg.dry_run || !empty_root(dst) {
            return None;
        }
        // As many threads as the walk's (`--jobs`); without them the plan
        // is carried out whole, after the walk.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .thread_name(|i| format!("accord-copy-{i}"))
            .build()
            .ok()?;
        let mut exec = Exec::new(src, dst, cfg, progress);
        // Each part's files are flushed before their renames, batch by
        // batch; the run's end flushes the rest once, as for a whole plan,
        // and says which files did not fit on the disk.
        exec.final_flush = false;
        exec.space_report = false;
        Some(Streamed {
            exec,
            pool,
            on: AtomicBool::new(false),
            turn: Mutex::new(()),
            halted: AtomicBool::new(false),
            ran: AtomicBool::new(false),
            running: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    /// At the root's visit: start if the walk finds the destination's root
    /// empty too.
    pub fn root_visited(&self, v: &DirVisit) {
        // A slice holds part of the root's names: their count says.
        let empty = |l: &Listing| match v.slice {
            Some(slice) => slice.names.1 == 0,
            None => {
                l.entries.len() == 1
                    && l.subdirs.is_empty()
                    && l.stale_temps.is_empty()
                    && l.markers.is_empty()
            }
        };
        if v.path.is_root() && v.src.is_some() && v.dst.is_some_and(empty) {
            self.on.store(true, Ordering::Relaxed);
        }
    }

    /// Stop carrying out parts: what waits stays in the plan.
    pub fn halt(&self) {
        self.halted.store(true, Ordering::SeqCst);
    }

    /// After a directory was planned: carry out a part if one waits (see
    /// the module).
    pub fn planned(&self, planner: &MirrorPlanner) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let exec = &self.exec;
        while planner.creations_waiting() >= PART {
            // The walk waits here while the copy is behind (see the module).
            let _slot = self.slot();
            let part = {
                let _turn = self.turn.lock().unwrap();
                if self.halted.load(Ordering::SeqCst) {
                    return;
                }
                // Another thread may have taken them meanwhile.
                if planner.creations_waiting() < PART {
                    break;
                }
                let mut part = planner.take_creations(PART);
                if exec.stopped() {
                    // A fatal error: nothing more is made, and what was
                    // planned is not kept either (its memory would grow
                    // with the rest of the walk).
                    continue;
                }
                make_dirs_now(exec, &part.mkdirs);
                part.mkdirs.clear();
                part
            };
            self.carry_out(&part);
            self.ran.store(true, Ordering::Relaxed);
        }
    }

    /// Wait until fewer than `PARTS_AT_ONCE` parts are being carried out,
    /// and count one more.
    fn slot(&self) -> PartSlot<'_> {
        let mut running = self.running.lock().unwrap();
        while *running >= PARTS_AT_ONCE {
            running = self.freed.wait(running).unwrap();
        }
        *running += 1;
        PartSlot {
            running: &self.running,
            freed: &self.freed,
        }
    }

    /// Carry out a part on the parts' pool, this thread blocked until it
    /// is done (see the module): a thread of no pool waits for it.
    fn carry_out(&self, part: &MirrorPlan) {
        std::thread::scope(|s| {
            let run = s.spawn(|| self.pool.install(|| run_plan(&self.exec, part)));
            if let Err(panic) = run.join() {
                std::panic::resume_unwind(panic);
            }
        });
    }

    /// The executor, for the rest of the plan, and whether it carried out
    /// any part (the end flushes then, even with nothing left to do).
    pub fn into_exec(self) -> (Exec<'a>, bool) {
        let mut exec = self.exec;
        exec.final_flush = true;
        exec.space_report = true;
        (exec, self.ran.into_inner())
    }
}

/// Whether a local replica's root holds no entry.
fn empty_root(r: &dyn Replica) -> bool {
    r.local_root()
        .and_then(|root| root.open_dir(&RelPath::root()).ok())
        .and_then(|d| d.list().ok())
        .is_some_and(|names| names.is_empty())
}
