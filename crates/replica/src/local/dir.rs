//! A directory of a [`LocalReplica`] and the `ReplicaDir` calls on it:
//! every name resolved from the directory's handle, new contents written
//! to temps beside their targets, deltas applied in a temp or in place.

use super::{check_open, guarded_in_place, map, LocalReplica};
use crate::error::{Action, End, Error};
use crate::pending::{Deleted, Incoming, Pending, PendingTemp};
use crate::seam::{recheck, DeltaWire, ReplicaDir};
use accord_delta::fine::{FineSignature, GapRequest};
use accord_delta::{Delta, PatchOptions, Signature, SignatureOptions};
use accord_fsys::{fstat, Dir, Mapped, PropsMask};
use accord_model::{Entry, Expect, Found, Kind, Props, RelPath, Time};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;

/// A directory of a [`LocalReplica`].
pub struct LocalDir<'a> {
    pub(crate) dir: Dir,
    pub(crate) replica: &'a LocalReplica,
    /// The directory's path (for the links a replica follows, see the
    /// replica crate's local/follow.rs, and `LocalReplica::made_dirs`);
    /// None for a followed link's target directory.
    pub(crate) rel: Option<RelPath>,
    /// A followed link's target directory (`LocalDir::beyond`), where no
    /// partial file of ours is kept.
    pub(crate) beyond_link: bool,
}

fn stat_now(dir: &Dir, name: &[u8]) -> io::Result<Option<Found>> {
    match dir.stat(name) {
        Ok(st) => Ok(Some(st.found())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}
impl LocalDir<'_> {
    fn open_checked(&self, name: &[u8], expect: &Expect, end: End) -> Result<File, Error> {
        let action = match end {
            End::Read => Action::OpenSource,
            End::Written => Action::OpenDestination,
        };
        if let Some((target, name)) = self.beyond(name).map_err(Error::io(action))? {
            return target.open_checked(&name, expect, end);
        }
        let f = match self.dir.open_read(name) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(Error::Changed(end)),
            Err(e) => return Err(Error::Io { action, source: e }),
        };
        check_open(&f, expect, end)?;
        Ok(f)
    }

    /// A new temp file for `name`, filled by `fill`, with `props`; removed
    /// again on any failure.
    fn temp_with(
        &self,
        name: &[u8],
        props: &Props,
        mask: PropsMask,
        fill: impl FnOnce(&File) -> Result<(), Error>,
    ) -> Result<Vec<u8>, Error> {
        self.temp_or_partial(name, props, mask, fill, || false)
    }

    /// `temp_with`, but on a failure the temp becomes `name`'s partial file
    /// when `keep` says what arrived is worth resuming from.
    fn temp_or_partial(
        &self,
        name: &[u8],
        props: &Props,
        mask: PropsMask,
        fill: impl FnOnce(&File) -> Result<(), Error>,
        keep: impl FnOnce() -> bool,
    ) -> Result<Vec<u8>, Error> {
        let (temp, tf) = self
            .dir
            .create_temp(name)
            .map_err(Error::io(Action::WriteTemp))?;
        // No partial file beside a followed link's target: nothing of ours
        // lingers outside the root.
        let keep = || !self.beyond_link && keep();
        let r = fill(&tf).and_then(|()| {
            accord_fsys::set_props_fd(tf.as_fd(), props, mask).map_err(Error::io(Action::SetProps))
        });
        match r {
            Ok(()) => Ok(temp),
            Err(e) => {
                let kept = keep()
                    && accord_model::partial_name(name)
                        .is_some_and(|p| self.dir.rename(&temp, &p).is_ok());
                if !kept {
                    let _ = self.dir.unlink(&temp);
                } else if let Some(rel) = &self.rel {
                    // A partial file is here now.
                    self.replica.made_dirs.lock().unwrap().remove(rel);
                }
                Err(e)
            }
        }
    }

    /// Receive a whole file; if its source is cut off after `PARTIAL_MIN`
    /// bytes, what arrived stays as the name's partial file.
    fn receive_whole(
        &self,
        name: &[u8],
        data: &mut dyn Read,
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        let arrived = std::cell::Cell::new((0, false));
        let fill = |tf: &File| {
            let mut src = Watched {
                inner: data,
                arrived: &arrived,
            };
            accord_fsys::write_sparse(&mut src, tf)
                .map(|_| ())
                .map_err(Error::io(Action::WriteTemp))
        };
        let keep = || {
            let (n, cut_off) = arrived.get();
            cut_off && n >= PARTIAL_MIN
        };
        let temp = self.temp_or_partial(name, props, mask, fill, keep)?;
        if !self.made_here() {
            self.remove_partial(name);
        }
        Ok(temp)
    }

    /// Whether this replica made this directory (`LocalReplica::made_dirs`).
    fn made_here(&self) -> bool {
        self.rel
            .as_ref()
            .is_some_and(|rel| self.replica.made_dirs.lock().unwrap().contains(rel))
    }

    /// Forget which directories this replica made (a directory is moved
    /// or removed: what is at their paths is no longer known).
    fn forget_made_dirs(&self) {
        self.replica.made_dirs.lock().unwrap().clear();
    }

    /// Whether this replica made the directory temp `temp` here, which is
    /// forgotten (no path is joined while it made none: a file's commit).
    fn take_made(&self, temp: &[u8]) -> bool {
        let mut made = self.replica.made_dirs.lock().unwrap();
        !made.is_empty()
            && self
                .rel
                .as_ref()
                .and_then(|rel| rel.join(temp).ok())
                .is_some_and(|t| made.remove(&t))
    }

    /// Note that this replica made `name` here (a directory, or a
    /// directory temp), unless it remembers as many as it may.
    fn note_made(&self, name: &[u8]) {
        if !self.replica.opts.receives {
            return;
        }
        let mut made = self.replica.made_dirs.lock().unwrap();
        if made.len() >= super::MADE_DIRS_MAX {
            return;
        }
        if let Some(path) = self.rel.as_ref().and_then(|rel| rel.join(name).ok()) {
            made.insert(path);
        }
    }

    /// The temp of `name`, rebuilt from its partial file and `delta`; the
    /// partial file is removed once the result checked out.
    fn receive_resumed(
        &self,
        name: &[u8],
        delta: &[u8],
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        let delta = Delta::parse(delta).map_err(delta_err(Action::WriteTemp))?;
        let partial = accord_model::partial_name(name).ok_or(Error::Changed(End::Written))?;
        let f = match self.dir.open_read(&partial) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(Error::Changed(End::Written))
            }
            Err(e) => return Err(Error::io(Action::OpenDestination)(e)),
        };
        let len = fstat(f.as_fd())
            .map_err(Error::io(Action::OpenDestination))?
            .size;
        if len != delta.old_len {
            return Err(Error::Changed(End::Written));
        }
        let m = map(&f, len).map_err(Error::io(Action::OpenDestination))?;
        let temp = self.temp_with(name, props, mask, |tf| {
            let mut w = io::BufWriter::with_capacity(1 << 20, tf);
            accord_delta::patch_to(m.as_deref().unwrap_or(&[]), &delta, &mut w)
                .map_err(delta_err(Action::WriteTemp))?;
            w.flush().map_err(Error::io(Action::WriteTemp))?;
            if m.as_ref().is_some_and(Mapped::damaged) {
                return Err(Error::Changed(End::Written));
            }
            Ok(())
        })?;
        self.remove_partial(name);
        Ok(temp)
    }

    fn remove_partial(&self, name: &[u8]) {
        if let Some(p) = accord_model::partial_name(name) {
            let _ = self.dir.unlink(&p);
        }
    }
}

/// The encoded signature of an open file (`verified`: see
/// `SignatureOptions::verified`).
fn signature_of(f: &File, verified: bool) -> Result<Vec<u8>, Error> {
    let len = fstat(f.as_fd())
        .map_err(Error::io(Action::OpenDestination))?
        .size;
    let m = map(f, len).map_err(Error::io(Action::OpenDestination))?;
    let opts = SignatureOptions {
        verified,
        ..SignatureOptions::default()
    };
    let sig = Signature::generate(m.as_deref().unwrap_or(&[]), &opts)
        .map_err(delta_err(Action::OpenDestination))?;
    if m.as_ref().is_some_and(Mapped::damaged) {
        return Err(Error::Changed(End::Written));
    }
    Ok(sig.encode())
}

/// The fine signature of the gaps `request` names in `f` (the second
/// round of a delta checked whole, as the first's signature is).
fn fine_signature_of(f: &File, request: &[u8]) -> Result<Vec<u8>, Error> {
    let bad = delta_err(Action::OpenDestination);
    let request = GapRequest::decode(request).map_err(&bad)?;
    let len = fstat(f.as_fd())
        .map_err(Error::io(Action::OpenDestination))?
        .size;
    let m = map(f, len).map_err(Error::io(Action::OpenDestination))?;
    let fine = FineSignature::generate(m.as_deref().unwrap_or(&[]), &request).map_err(bad)?;
    if m.as_ref().is_some_and(Mapped::damaged) {
        return Err(Error::Changed(End::Written));
    }
    Ok(fine.encode())
}

/// The checks of `accord_delta::patch_in_place` that come before any
/// write (layout, the target's length, the scratch budget).
fn refuse_in_place(target: &File, delta: &Delta<'_>, opts: &PatchOptions) -> Result<(), Error> {
    let refuse = |msg: String| {
        Err(Error::Delta {
            action: Action::UpdateInPlace,
            source: accord_delta::DeltaError::Usage(msg),
        })
    };
    if delta.layout != accord_delta::Layout::InPlace {
        return refuse("an in-place update needs a delta of the in-place layout".into());
    }
    if delta.scratch_len > opts.max_scratch {
        return refuse(format!(
            "the delta needs {} bytes of scratch memory, more than the {} allowed",
            delta.scratch_len, opts.max_scratch
        ));
    }
    let len = fstat(target.as_fd())
        .map_err(Error::io(Action::UpdateInPlace))?
        .size;
    if len != delta.old_len {
        return Err(Error::Delta {
            action: Action::UpdateInPlace,
            source: accord_delta::DeltaError::WrongBasis {
                expected: delta.old_len,
                actual: len,
            },
        });
    }
    Ok(())
}

/// Least of a cut-off transfer worth keeping as a partial file.
const PARTIAL_MIN: u64 = 1 << 20;

/// A whole file's incoming bytes, noting how many arrived and whether
/// reading them failed (the source was cut off; a failed write is not).
struct Watched<'a, 'c> {
    inner: &'a mut dyn Read,
    arrived: &'c std::cell::Cell<(u64, bool)>,
}

impl Read for Watched<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, _) = self.arrived.get();
        match self.inner.read(buf) {
            Ok(k) => {
                self.arrived.set((n + k as u64, false));
                Ok(k)
            }
            Err(e) => {
                self.arrived
                    .set((n, e.kind() != io::ErrorKind::Interrupted));
                Err(e)
            }
        }
    }
}

fn delta_err(action: Action) -> impl Fn(accord_delta::DeltaError) -> Error {
    move |source| Error::Delta { action, source }
}

/// The calls of [`ReplicaDir`] that have a `start_*` form, done now: a
/// local directory's results are ready when its `start_*` calls return.
impl LocalDir<'_> {
    fn do_stat(&self, name: &[u8]) -> io::Result<Option<Found>> {
        if let Some(target) = self.through(name)? {
            return Ok(Some(target.stat.found()));
        }
        stat_now(&self.dir, name)
    }

    /// See `ReplicaDir::start_vouching_stat`. Nothing is promised for a
    /// replica that follows links (the entry may be a link's target).
    fn do_vouching_stat(&self, name: &[u8]) -> io::Result<Option<(Found, Time)>> {
        if self.replica.follows() {
            return Ok(None);
        }
        match self.dir.stat(name) {
            Ok(st) if accord_fsys::ctime_moves_after_stat(st.dev) => {
                Ok(Some((st.found(), st.ctime)))
            }
            Ok(_) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn do_signature(&self, name: &[u8], expect: &Expect, in_place: bool) -> Result<Vec<u8>, Error> {
        let f = self.open_checked(name, expect, End::Written)?;
        signature_of(&f, !in_place)
    }

    fn do_partial_signature(&self, name: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        if self.beyond_link || self.follows(name) {
            return Ok(None);
        }
        let Some(partial) = accord_model::partial_name(name) else {
            return Ok(None);
        };
        match self.dir.open_read(&partial) {
            // A delta against it is applied to a temp and checked whole.
            Ok(f) => signature_of(&f, true).map(Some),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(Error::io(Action::OpenDestination)(e)),
        }
    }

    fn do_receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        if let Some((target, name)) = self.beyond(name).map_err(Error::io(Action::WriteTemp))? {
            return self.receive_through(target, &name, incoming, props, mask);
        }
        match incoming {
            // Zero blocks become holes: a sparse file that comes as a
            // stream (from a replica across a wire) stays sparse.
            Incoming::Whole(data) => self.receive_whole(name, data, props, mask),
            Incoming::Resume { delta } => self.receive_resumed(name, delta, props, mask),
            Incoming::Delta { basis, delta } => {
                let delta = Delta::parse(delta).map_err(delta_err(Action::WriteTemp))?;
                if let Expect::Entry(old) = basis {
                    if old.size != delta.old_len {
                        return Err(Error::Delta {
                            action: Action::WriteTemp,
                            source: accord_delta::DeltaError::WrongBasis {
                                expected: delta.old_len,
                                actual: old.size,
                            },
                        });
                    }
                }
                let old = self.open_checked(name, &basis, End::Written)?;
                let m = map(&old, delta.old_len).map_err(Error::io(Action::OpenDestination))?;
                self.temp_with(name, props, mask, |tf| {
                    let mut w = io::BufWriter::with_capacity(1 << 20, tf);
                    accord_delta::patch_to(m.as_deref().unwrap_or(&[]), &delta, &mut w)
                        .map_err(delta_err(Action::WriteTemp))?;
                    w.flush().map_err(Error::io(Action::WriteTemp))?;
                    if m.as_ref().is_some_and(Mapped::damaged) {
                        return Err(Error::Changed(End::Written));
                    }
                    Ok(())
                })
            }
        }
    }

    fn do_make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> Result<Vec<u8>, Error> {
        let temp = match entry.kind {
            Kind::Symlink => self
                .dir
                .symlink_temp(entry.link_target.as_deref().unwrap_or_default(), name),
            Kind::Dir => self.dir.mkdir_temp(name),
            kind => self.dir.mknod_temp(kind, entry.rdev, name),
        }
        .map_err(Error::io(Action::MakeNode))?;
        if let Err(e) = self.dir.set_props_at(&temp, entry.kind, &entry.props, mask) {
            let _ = self.dir.remove_temp(&temp);
            return Err(Error::io(Action::SetProps)(e));
        }
        if entry.kind == Kind::Dir {
            self.note_made(&temp);
        }
        Ok(temp)
    }

    fn do_link_temp(&self, name: &[u8], leader: &RelPath) -> Result<Vec<u8>, Error> {
        let ldir = self
            .replica
            .open_dir_following(&leader.parent().unwrap_or_default())
            .map_err(Error::io(Action::MakeLink))?;
        let lst = ldir
            .stat(leader.file_name())
            .map_err(Error::io(Action::MakeLink))?;
        if lst.kind != Kind::File {
            return Err(Error::LeaderNotFile(leader.clone()));
        }
        self.dir
            .link_temp(&ldir, leader.file_name(), name)
            .map_err(Error::io(Action::MakeLink))
    }

    fn do_commit(&self, temp: &[u8], name: &[u8], expect: &Expect) -> Result<(), Error> {
        if let Some(dir) = self.replica.follow.take_temp(temp) {
            return self.commit_through(dir, temp, name, expect);
        }
        let made_dir = self.take_made(temp);
        self.rename_temp(temp, name, expect)?;
        if made_dir {
            self.note_made(name);
        }
        Ok(())
    }

    /// Rename `temp` over `name` if `name` is still what `expect` says.
    fn rename_temp(&self, temp: &[u8], name: &[u8], expect: &Expect) -> Result<(), Error> {
        if *expect == Expect::Absent {
            // The rename itself refuses to replace anything: one call
            // instead of a stat and a rename, and no moment between them.
            match self.dir.rename_noreplace(temp, name) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    return Err(Error::Changed(End::Written))
                }
                // A file system without RENAME_NOREPLACE: checked, then
                // renamed, as below.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {}
                Err(e) => return Err(Error::io(Action::Replace)(e)),
            }
        }
        recheck(self, name, expect, End::Written)?;
        self.dir
            .rename(temp, name)
            .map_err(Error::io(Action::Replace))
    }

    fn do_set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        recheck(self, name, expect, End::Written)?;
        if let Some(target) = self.through(name).map_err(Error::io(Action::SetProps))? {
            return target
                .set_props(props, mask)
                .map_err(Error::io(Action::SetProps));
        }
        self.dir
            .set_props_at(name, kind, props, mask)
            .map_err(Error::io(Action::SetProps))
    }

    fn do_set_own_props(
        &self,
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        let st = self.dir.stat_self().map_err(Error::io(Action::SetProps))?;
        if !expect.still_holds(Some(&st.found())) {
            return Err(Error::Changed(End::Written));
        }
        accord_fsys::set_props_fd(self.dir.as_fd(), props, mask)
            .map_err(Error::io(Action::SetProps))
    }

    fn do_mkdir(&self, name: &[u8]) -> Result<(), Error> {
        match self.dir.mkdir(name, 0o700) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => match self.do_stat(name) {
                Ok(Some(st)) if st.kind == Kind::Dir => Ok(()),
                _ => Err(Error::io(Action::MakeDir)(e)),
            },
            Ok(()) => {
                self.note_made(name);
                Ok(())
            }
            Err(e) => Err(Error::io(Action::MakeDir)(e)),
        }
    }

    fn do_delete(&self, name: &[u8], expect: &Expect) -> Result<Deleted, Error> {
        if let Some(target) = self.through(name).map_err(Error::io(Action::Delete))? {
            return self.delete_link(name, &target, expect);
        }
        let now = match stat_now(&self.dir, name).map_err(Error::io(Action::Delete))? {
            None => return Ok(Deleted::Gone),
            Some(f) => f,
        };
        if !expect.still_holds(Some(&now)) {
            return Err(Error::Changed(End::Written));
        }
        let r = if now.kind == Kind::Dir {
            self.forget_made_dirs();
            self.dir.rmdir(name)
        } else {
            self.dir.unlink(name)
        };
        match r {
            Ok(()) => Ok(Deleted::Done),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY) | Some(libc::EEXIST)) => {
                Ok(Deleted::NotEmpty)
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Deleted::Gone),
            Err(e) => Err(Error::io(Action::Delete)(e)),
        }
    }

    fn do_rename_from(&self, name: &[u8], from: &RelPath, expect: &Expect) -> Result<(), Error> {
        let (parent, from_name) = (from.parent().unwrap_or_default(), from.file_name());
        let source = self
            .replica
            .open_dir_following(&parent)
            .map_err(Error::io(Action::Rename))?;
        let now = stat_now(&source, from_name).map_err(Error::io(Action::Rename))?;
        if !expect.still_holds(now.as_ref()) {
            return Err(Error::Changed(End::Read));
        }
        // A directory moved in may hold partial files, and one moved away
        // leaves its path free for another.
        self.forget_made_dirs();
        match source.rename_into_noreplace(from_name, &self.dir, name) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Err(Error::Changed(End::Written)),
            r => r.map_err(Error::io(Action::Rename)),
        }
    }
}

impl ReplicaDir for LocalDir<'_> {
    fn start_stat(&self, name: &[u8]) -> Pending<io::Result<Option<Found>>> {
        Pending::ready(self.do_stat(name))
    }

    fn start_vouching_stat(&self, name: &[u8]) -> Pending<io::Result<Option<(Found, Time)>>> {
        Pending::ready(self.do_vouching_stat(name))
    }

    fn open_read(&self, name: &[u8], expect: &Expect) -> Result<Box<dyn Read + Send + '_>, Error> {
        Ok(Box::new(self.open_checked(name, expect, End::Read)?))
    }

    fn start_signature(
        &self,
        name: &[u8],
        expect: &Expect,
        in_place: bool,
    ) -> Pending<Result<Vec<u8>, Error>> {
        Pending::ready(self.do_signature(name, expect, in_place))
    }

    fn start_partial_signature(&self, name: &[u8]) -> Pending<Result<Option<Vec<u8>>, Error>> {
        Pending::ready(self.do_partial_signature(name))
    }

    fn fine_signature(
        &self,
        name: &[u8],
        expect: &Expect,
        request: &[u8],
    ) -> Result<Option<Vec<u8>>, Error> {
        let f = self.open_checked(name, expect, End::Written)?;
        fine_signature_of(&f, request).map(Some)
    }

    fn refines_deltas(&self) -> bool {
        true
    }

    fn delta_wire(&self) -> DeltaWire {
        DeltaWire::LOCAL
    }

    fn start_receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> PendingTemp {
        PendingTemp::ready(self.do_receive(name, incoming, props, mask))
    }

    fn patch_in_place(
        &self,
        name: &[u8],
        expect: &Expect,
        delta: &[u8],
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        if let Some((target, name)) = self
            .beyond(name)
            .map_err(Error::io(Action::UpdateInPlace))?
        {
            return target.patch_in_place(&name, expect, delta, props, mask);
        }
        let delta = Delta::parse(delta).map_err(delta_err(Action::UpdateInPlace))?;
        let mut target = self
            .dir
            .open_rw(name)
            .map_err(Error::io(Action::UpdateInPlace))?;
        check_open(&target, expect, End::Written)?;
        let fsync = self.replica.opts.fsync;
        let opts = PatchOptions {
            max_scratch: self.replica.opts.max_scratch,
            sync: false,
        };
        // What `patch_in_place` refuses before it writes is refused here,
        // before the guard: a delta that never touched the file must not
        // move it to a recovery name.
        refuse_in_place(&target, &delta, &opts)?;
        guarded_in_place(&self.dir, name, fsync, || {
            accord_delta::patch_in_place(&mut target, &delta, &opts).map_err(|e| Error::Delta {
                action: Action::UpdateInPlace,
                source: e.error,
            })?;
            accord_fsys::set_props_fd(target.as_fd(), props, mask)
                .map_err(Error::io(Action::SetProps))?;
            if fsync {
                accord_fsys::fsync(&target).map_err(Error::io(Action::Flush))?;
            }
            Ok(())
        })
    }

    fn start_make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> PendingTemp {
        PendingTemp::ready(self.do_make_node(name, entry, mask))
    }

    fn start_link_temp(&self, name: &[u8], leader: &RelPath) -> PendingTemp {
        PendingTemp::ready(self.do_link_temp(name, leader))
    }

    fn start_commit(
        &self,
        temp: &[u8],
        name: &[u8],
        expect: &Expect,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_commit(temp, name, expect))
    }

    fn discard(&self, temp: &[u8]) {
        if let Some(dir) = self.replica.follow.take_temp(temp) {
            let _ = dir.unlink(temp);
            return;
        }
        let _ = self.dir.remove_temp(temp);
    }

    fn start_set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_set_props(name, expect, kind, props, mask))
    }

    fn start_set_own_props(
        &self,
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_set_own_props(expect, props, mask))
    }

    fn start_mkdir(&self, name: &[u8]) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_mkdir(name))
    }

    fn start_delete(&self, name: &[u8], expect: &Expect) -> Pending<Result<Deleted, Error>> {
        Pending::ready(self.do_delete(name, expect))
    }

    fn start_rename_from(
        &self,
        name: &[u8],
        from: &RelPath,
        expect: &Expect,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_rename_from(name, from, expect))
    }

    fn remove_stale_temp(&self, name: &[u8]) {
        if name.starts_with(accord_fsys::TEMP_PREFIX)
            || name.starts_with(accord_fsys::PARTIAL_PREFIX)
        {
            let _ = self.dir.remove_temp(name);
        }
    }

    fn local(&self) -> Option<&Dir> {
        Some(&self.dir)
    }
}

#[cfg(test)]
#[path = "dir_tests.rs"]
mod tests;
