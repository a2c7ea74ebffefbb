//! The end of each chunk and of the run: staged temps committed over their
//! targets (re-checked first), both replicas flushed, what succeeded on
//! both sides recorded in both archives; directories' properties set
//! deepest first once their contents are in place.

use super::*;
use accord_model::Time;

impl<'a> Propagation<'a> {
    /// `commit_chunk`, then `flush`, that flush started right behind the
    /// renames: a replica carries a flush out after the writes sent before
    /// it, so it covers them (and everything done before the chunk), and a
    /// remote side answers it with them, in one round trip. Where a commit
    /// then gives properties back to the side the contents came from (a
    /// write it would not cover), the flush comes after as usual.
    pub(super) fn commit_and_flush(
        &mut self,
        staged: Vec<Staged<'a>>,
        archives: &mut [Box<dyn SideSession + '_>; 2],
        report: &mut SyncReport,
    ) {
        let behind = self.commit_chunk(staged);
        self.flush_with(behind, archives, report);
    }

    /// Make the chunk's temps durable, then rename each over its target
    /// after its re-check (`flush` makes the renames durable before any is
    /// recorded). Everything is started before anything is waited for, a
    /// side at a time, a remote one first: the temps' stats, the flush, the
    /// renames, the flush behind them and the stats of the committed names,
    /// so a remote side answers the chunk's end in one round trip, while a
    /// local one flushes. A replica carries out each call after the writes
    /// sent before it (a stat of a committed name sees the commit; a temp's
    /// stat that came too late promises nothing, and its file is read next
    /// run), and one across a wire refuses to commit a temp made before a
    /// flush that failed; a local one flushes when the flush is started,
    /// and where that failed nothing is committed there. Returns the
    /// flushes started behind the renames, if they could be (see
    /// `commit_and_flush`).
    fn commit_chunk(&mut self, staged: Vec<Staged<'a>>) -> Option<StartedFlush> {
        if staged.is_empty() {
            return None;
        }
        // Backups are made durable with the temps, before any overwrite.
        let staged = self.back_up_staged(staged);
        let gives_back = staged.iter().any(|one| one.props_back.is_some());
        let mut slots: Vec<Option<StartedCommit>> = staged.iter().map(|_| None).collect();
        let mut flushes: [Option<Flush>; 2] = [None, None];
        let mut behind: [Option<Flush>; 2] = [None, None];
        for side in self.remote_first() {
            let mine: Vec<usize> = (0..staged.len())
                .filter(|&at| index(staged[at].to) == side)
                .collect();
            let temps: Vec<_> = mine
                .iter()
                .map(|&at| self.start_vouching_stat_of_temp(&staged[at]))
                .collect();
            let flush = (self.cfg.fsync && !mine.is_empty()).then(|| self.start_flush(side));
            let refused = matches!(flush, Some(Flush::Known(Err(_))));
            let commits: Vec<_> = mine
                .iter()
                .map(|&at| match refused {
                    true => Err(not_flushed()),
                    false => self.start_commit(&staged[at]),
                })
                .collect();
            if self.cfg.fsync && !gives_back {
                behind[side] = Some(self.start_flush(side));
            }
            for ((at, temp), commit) in mine.into_iter().zip(temps).zip(commits) {
                let stat = commit
                    .is_ok()
                    .then(|| self.start_stat_written(&staged[at], temp.started()));
                slots[at] = Some(StartedCommit { temp, commit, stat });
            }
            flushes[side] = flush;
        }
        self.flushed(flushes.map(|flush| flush.map_or(Ok(()), Flush::wait)));
        let mut committed = Vec::new();
        for (one, slot) in staged.into_iter().zip(slots) {
            let StartedCommit { temp, commit, stat } = slot.expect("every side's commits started");
            let temp = temp.wait();
            match commit.and_then(|pending| Ok(pending.wait()?)) {
                Ok(()) => committed.push((one, temp, stat.expect("started with its commit"))),
                Err(error) => {
                    self.discard(&one);
                    self.fail(&one.item.path, error);
                }
            }
        }
        self.record_written(committed);
        let [a, b] = behind;
        Some(Flushes([a?, b?]))
    }

    /// Record what was committed, with the ctime its stat vouched for.
    fn record_written(&mut self, committed: Vec<(Staged<'a>, Option<Found>, WrittenStat)>) {
        let mut unvouched = Vec::new();
        for (one, temp, stat) in committed {
            let vouching = matches!(stat, WrittenStat::Vouching(_));
            match stat.wait() {
                (None, None) if vouching && temp.is_none() => unvouched.push(one),
                (found, ctime) => self.written(&one, found, vouched_ctime(temp, found, ctime)),
            }
        }
        // A replica that could not vouch for a stat says nothing of what is
        // there: a plain stat, one round trip more where that happens.
        let stats: Vec<_> = unvouched.iter().map(|one| self.start_stat(one)).collect();
        for (one, stat) in unvouched.into_iter().zip(stats) {
            self.written(&one, stat.wait().ok().flatten(), UNKNOWN_CTIME);
        }
    }

    /// `staged` committed: `found` there now, to be recorded with `ctime`.
    fn written(&mut self, staged: &Staged, found: Option<Found>, ctime: Time) {
        self.leaders.written(staged.to, &staged.item.path, found);
        let mut recorded = changed_entry(&staged.taken, found, self.cfg);
        recorded.ctime = ctime;
        self.after_commit(staged, recorded);
    }

    /// The temp as written, with a ctime that vouches for it, where its
    /// replica can promise one (`ReplicaDir::start_vouching_stat`). Read
    /// before the rename: that read is what makes the file system stamp
    /// any later change of the file with a later time.
    fn start_vouching_stat_of_temp(&self, staged: &Staged) -> TempStat {
        let (parent, _) = split(&staged.item.path);
        match self.replicas[index(staged.to)].open_dir(&parent) {
            Ok(dir) => TempStat(Some(dir.start_vouching_stat_of_temp(&staged.temp))),
            Err(_) => TempStat(None),
        }
    }

    /// Stat what was committed: with a ctime that vouches where the temp's
    /// replica promised one (`vouching`), else as a plain stat.
    fn start_stat_written(&self, staged: &Staged, vouching: bool) -> WrittenStat {
        if !vouching {
            return WrittenStat::Plain(self.start_stat(staged));
        }
        let (parent, name) = split(&staged.item.path);
        match self.replicas[index(staged.to)].open_dir(&parent) {
            Ok(dir) => WrittenStat::Vouching(dir.start_vouching_stat(name)),
            Err(e) => WrittenStat::Plain(Pending::ready(Err(e))),
        }
    }

    /// Start renaming a staged temp over its target. A directory that the
    /// new entry replaces (its entries were deleted before) goes first.
    pub(super) fn start_commit(
        &self,
        staged: &Staged,
    ) -> Result<Pending<Result<(), crate::Error>>, SyncError> {
        let (parent, name) = split(&staged.item.path);
        let dir = self.dir(staged.to, &parent, accord_replica::Action::Replace)?;
        match staged.item.entry(staged.to) {
            Some(old) if old.kind == Kind::Dir => match dir.delete(name, &Expect::entry(old))? {
                Deleted::Done | Deleted::Gone => {
                    Ok(dir.start_commit(&staged.temp, name, &Expect::Absent))
                }
                Deleted::NotEmpty => Err(SyncError::DirectoryNotEmpty),
            },
            old => Ok(dir.start_commit(&staged.temp, name, &Expect::of(old))),
        }
    }

    pub(super) fn start_stat(&self, staged: &Staged) -> Pending<std::io::Result<Option<Found>>> {
        self.start_stat_at(staged.to, &staged.item.path)
    }

    pub(super) fn discard(&self, staged: &Staged) {
        let (parent, _) = split(&staged.item.path);
        if let Ok(dir) = self.replicas[index(staged.to)].open_dir(&parent) {
            dir.discard(&staged.temp);
        }
    }

    /// The sides, a remote one first: a local replica carries a call out
    /// before it returns, so what a remote one was sent overlaps it.
    fn remote_first(&self) -> [usize; 2] {
        match self.replicas[0].local_root() {
            Some(_) => [1, 0],
            None => [0, 1],
        }
    }

    /// Start `side`'s flush.
    fn start_flush(&self, side: usize) -> Flush {
        let pending = self.replicas[side].start_sync_all();
        match pending.is_ready() {
            true => Flush::Known(pending.wait()),
            false => Flush::Later(pending),
        }
    }

    /// Start both replicas' flushes, a remote one's first, so the two
    /// overlap.
    pub(super) fn start_flushes(&self) -> Flushes {
        let mut flushes = [None, None];
        for side in self.remote_first() {
            flushes[side] = Some(self.start_flush(side));
        }
        Flushes(flushes.map(|flush| flush.expect("both sides started")))
    }

    pub(super) fn flush_replicas(&mut self) {
        if !self.cfg.fsync {
            return;
        }
        let flushed = self.start_flushes().wait();
        self.flushed(flushed);
    }

    /// What the replicas' flushes gave: on a failure nothing done since the
    /// last flush is recorded.
    fn flushed(&mut self, results: [std::io::Result<()>; 2]) {
        for result in results {
            if let Err(e) = result {
                // Nothing may be recorded that might not survive a crash.
                let error = crate::Error::Io {
                    action: accord_replica::Action::Flush,
                    source: e,
                };
                self.fail(&RelPath::root(), SyncError::Replica(error));
                self.done.clear();
            }
        }
    }

    pub(super) fn after_commit(&mut self, staged: &Staged, recorded: Observed) {
        let item = staged.item;
        let from = staged.to.other();
        let Some(props_back) = &staged.props_back else {
            self.done_with(item, from, staged.to, recorded);
            return;
        };
        // The side the contents came from takes the other's permissions.
        let source = item.entry(from).expect("contents came from an entry");
        let (parent, name) = split(&item.path);
        let filter = accord_replica::side::xattr_filter(&self.cfg.synced_props());
        let mask = PropsMask {
            perms: true,
            owner: self.cfg.owner,
            times: false,
            xattrs: props_back.xattrs.is_some().then_some(filter),
        };
        let set_back = self.replicas[index(from)]
            .open_dir(&parent)
            .map_err(crate::Error::io(accord_replica::Action::SetProps))
            .and_then(|dir| {
                dir.set_props(name, &Expect::entry(source), Kind::File, props_back, mask)
            });
        match set_back {
            Ok(()) => {
                let taken = Entry {
                    props: Props {
                        mode: props_back.mode,
                        uid: props_back.uid,
                        gid: props_back.gid,
                        xattrs: props_back.xattrs.clone(),
                        ..source.props.clone()
                    },
                    ..source.clone()
                };
                let back = changed_entry(&taken, self.stat(from, &item.path), self.cfg);
                let mut records = [Record::Put(recorded), Record::Put(back)];
                if from == Side::A {
                    records.swap(0, 1);
                }
                self.done.push(Done {
                    path: item.path.clone(),
                    action: item.action,
                    records,
                    from: None,
                });
            }
            Err(e) => self.fail(&item.path, SyncError::Replica(e)),
        }
    }

    /// Every directory's properties, deepest first, each stat started
    /// right behind them (a replica carries out a call after the writes
    /// sent before it, so a remote side answers both in one round trip);
    /// recorded where they were set.
    pub(super) fn directory_props(&mut self, items: &'a [SyncItem]) {
        let started: Vec<_> = items
            .iter()
            .rev()
            .filter_map(|item| {
                let (from, to) = self.directory_props_of(item)?;
                Some((item, from, to, self.start_directory_props(item, from, to)))
            })
            .collect();
        let stats: Vec<_> = started
            .iter()
            .map(|(item, _, to, _)| self.start_stat_at(*to, &item.path))
            .collect();
        for ((item, from, to, pending), found) in started.into_iter().zip(stats) {
            match pending.and_then(|p| Ok(p.wait()?)) {
                Ok(()) => {
                    let source = item.entry(from).expect("a directory to copy");
                    let recorded = changed_entry(source, found.wait().ok().flatten(), self.cfg);
                    self.done_with(item, from, to, recorded);
                }
                Err(error) => self.fail(&item.path, error),
            }
        }
    }

    /// The sides of a directory whose properties go across, if `item` is one.
    pub(super) fn directory_props_of(&self, item: &SyncItem) -> Option<(Side, Side)> {
        let (from, to) = match item.action {
            Action::Copy { from, to } | Action::CopyProps { from, to }
                if is_dir(item.entry(from)) =>
            {
                (from, to)
            }
            _ => return None,
        };
        if matches!(item.action, Action::CopyProps { .. }) && !is_dir(item.entry(to)) {
            return None;
        }
        (!self.failed_paths.contains(&item.path)).then_some((from, to))
    }

    pub(super) fn start_directory_props(
        &self,
        item: &SyncItem,
        from: Side,
        to: Side,
    ) -> Result<Pending<Result<(), crate::Error>>, SyncError> {
        let source = item.entry(from).expect("a directory to copy");
        let dir = self.dir(to, &item.path, accord_replica::Action::SetProps)?;
        // A directory this run made has no scanned entry to expect.
        let expect = match item.entry(to) {
            Some(old) if old.kind == Kind::Dir => Expect::entry(old),
            _ => Expect::Made(Kind::Dir),
        };
        let (props, mask) = synced_props(source, self.cfg);
        Ok(dir.start_set_own_props(&expect, &props, mask))
    }

    /// Record every finished path in both archives (A's transaction, then
    /// B's). A crash between the two leaves one side recording the new
    /// state and the other the old: the next run sees the path changed on
    /// one side to what the other holds, and agrees.
    pub(super) fn flush(
        &mut self,
        archives: &mut [Box<dyn SideSession + '_>; 2],
        report: &mut SyncReport,
    ) {
        self.flush_with(None, archives, report);
    }

    /// `flush`, or where `behind` was started after everything this run
    /// has done since its last flush, that flush's outcome.
    fn flush_with(
        &mut self,
        behind: Option<StartedFlush>,
        archives: &mut [Box<dyn SideSession + '_>; 2],
        report: &mut SyncReport,
    ) {
        let flushed = behind.map(Flushes::wait);
        if self.done.is_empty() {
            return;
        }
        // Nothing is recorded that a crash could still take back.
        match flushed {
            Some(results) => self.flushed(results),
            None => self.flush_replicas(),
        }
        let done = std::mem::take(&mut self.done);
        for (side, archive) in archives.iter_mut().enumerate() {
            let mut records: Vec<Record> =
                done.iter().map(|one| one.records[side].clone()).collect();
            if let Some(case) = &self.scanned.case {
                // Each side's archive keeps its own spelling of a path.
                records = case.respell(side, records);
            }
            if let Err(e) = archive.record(&records) {
                let path = done[0].path.clone();
                self.fail(&path, SyncError::Archive(e));
                return;
            }
        }
        for one in done {
            match one.action {
                Action::Agree => report.agreed += 1,
                // A rename's source, and what moved with a directory: the
                // rename itself is the change reported.
                Action::Nothing | Action::MovedWith { .. } => {}
                action @ Action::KeepBoth { .. } => report.propagated.push(Propagated {
                    path: one.path,
                    action,
                    from: None,
                    linked_to: None,
                    kept_as: one.from,
                    merged: false,
                }),
                action => {
                    let (from, linked_to) = match action {
                        Action::Rename { .. } => (one.from, None),
                        _ => (None, one.from),
                    };
                    report.propagated.push(Propagated {
                        path: one.path,
                        action,
                        from,
                        linked_to,
                        kept_as: None,
                        // A conflict is carried out only by a merge.
                        merged: matches!(action, Action::Conflict(_)),
                    })
                }
            }
        }
    }
}

/// Both replicas' flushes, started (`Propagation::start_flushes`).
type StartedFlush = Flushes;

/// Both replicas' flushes, started; a local replica's is carried out when
/// it is started, and its outcome is known at once.
pub(super) struct Flushes([Flush; 2]);

enum Flush {
    Known(std::io::Result<()>),
    Later(Pending<std::io::Result<()>>),
}

impl Flushes {
    pub(super) fn wait(self) -> [std::io::Result<()>; 2] {
        self.0.map(Flush::wait)
    }
}

impl Flush {
    fn wait(self) -> std::io::Result<()> {
        match self {
            Flush::Known(result) => result,
            Flush::Later(pending) => pending.wait(),
        }
    }
}

/// A staged temp's commit on its way: the temp's stat, the rename, and
/// the stat of the name it was committed at.
struct StartedCommit {
    temp: TempStat,
    commit: Result<Pending<Result<(), crate::Error>>, SyncError>,
    stat: Option<WrittenStat>,
}

/// Why a temp was not committed where the flush after it failed (a remote
/// side refuses it in the same words).
fn not_flushed() -> SyncError {
    SyncError::Replica(crate::Error::Io {
        action: accord_replica::Action::Flush,
        source: std::io::Error::other("not committed: the flush after its temp was written failed"),
    })
}

/// A stat with the ctime that vouches for it, started.
type PendingVouched = Pending<std::io::Result<Option<(Found, Time)>>>;

/// A vouching stat of a temp, started (`None`: its directory could not be
/// opened, and nothing is promised).
struct TempStat(Option<PendingVouched>);

impl TempStat {
    /// Was a vouching stat asked for (its directory opened)?
    fn started(&self) -> bool {
        self.0.is_some()
    }

    /// The temp as written, where its ctime vouches for it.
    fn wait(self) -> Option<Found> {
        let (found, _) = self.0?.wait().ok()??;
        Some(found)
    }
}

/// A stat of a committed entry, started (`Propagation::start_stat_written`).
enum WrittenStat {
    Plain(Pending<std::io::Result<Option<Found>>>),
    Vouching(PendingVouched),
}

impl WrittenStat {
    /// What is there now, and its ctime where it vouches.
    fn wait(self) -> (Option<Found>, Option<Time>) {
        match self {
            WrittenStat::Plain(pending) => (pending.wait().ok().flatten(), None),
            WrittenStat::Vouching(pending) => match pending.wait().ok().flatten() {
                Some((found, ctime)) => (Some(found), Some(ctime)),
                None => (None, None),
            },
        }
    }
}

/// The ctime to record for an entry this run wrote: the one read after
/// the rename, when the entry there is the temp as it was read before the
/// rename (same inode, size and modification time). A write by anyone else
/// in between would have moved the modification time past the one read
/// (the temp's stat made the file system stamp later changes later);
/// otherwise unknown, and the next run reads the file.
fn vouched_ctime(temp: Option<Found>, found: Option<Found>, ctime: Option<Time>) -> Time {
    match (temp, found, ctime) {
        (Some(temp), Some(found), Some(ctime)) if temp == found => ctime,
        _ => UNKNOWN_CTIME,
    }
}
