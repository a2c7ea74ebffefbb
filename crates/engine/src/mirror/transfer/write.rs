//! One file's new contents written: into a temp beside the target (whole,
//! as a delta against the destination's version, or resumed from a
//! partial file), or in place; re-checked against the source once read.

use super::*;

/// A file whose temp is on its way.
pub(super) struct Started {
    pub(super) temp: PendingTemp,
    pub(super) xfer: Xfer,
    /// What the source holds after it was read, and what it must hold:
    /// if it changed meanwhile, the temp is thrown away.
    pub(super) src_check: Option<(Pending<io::Result<Option<Found>>>, Expect)>,
    /// Its commit, started before the temp was confirmed (`start_early`).
    pub(super) early: Option<PendingCommit>,
}

pub(super) type PendingCommit = Pending<Result<(), Error>>;

impl Started {
    pub(super) fn new(temp: PendingTemp, xfer: Xfer) -> Started {
        Started {
            temp,
            xfer,
            src_check: None,
            early: None,
        }
    }

    pub(super) fn ready(temp: Vec<u8>, xfer: Xfer) -> Started {
        Started::new(PendingTemp::ready(Ok(temp)), xfer)
    }

    /// Start the commit now, behind the receive and the batch's flush,
    /// when the destination names its temps before making them (it then
    /// refuses the commit if the temp was not made or not flushed) and
    /// the source check is already known to hold: the batch's commits
    /// then cost no round trip of their own.
    pub(super) fn start_early(&mut self, x: &Exec, ddir: &dyn ReplicaDir, it: &Item) {
        let Some(handle) = self.temp.handle() else {
            return;
        };
        if x.stopped() {
            return;
        }
        if let Some((now, _)) = &self.src_check {
            if !now.is_ready() {
                return;
            }
            let (now, expect) = self.src_check.take().expect("checked above");
            let now = now.wait();
            let holds = now.as_ref().is_ok_and(|f| expect.still_holds(f.as_ref()));
            // Kept for `finish`, which reports it.
            self.src_check = Some((Pending::ready(now), expect));
            if !holds {
                return;
            }
        }
        let name = it.path.file_name();
        self.early = Some(ddir.start_commit(handle, name, &it.expect_dst()));
    }

    /// Wait for the temp; the staged temp, its bytes and its commit if it
    /// was started early.
    pub(super) fn finish(self, ddir: &dyn ReplicaDir) -> Result<Made, Error> {
        let Started {
            temp,
            xfer,
            src_check,
            early,
        } = self;
        let temp = match temp.wait() {
            Ok(t) => t,
            Err(e) => {
                // Refused by the replica: no temp was made.
                if let Some(c) = early {
                    let _ = c.wait();
                }
                return Err(e);
            }
        };
        if let Some((now, expect)) = src_check {
            let holds = match now.wait() {
                Ok(found) => expect.still_holds(found.as_ref()),
                Err(e) => {
                    ddir.discard(&temp);
                    return Err(Error::io(Action::ReadSource)(e));
                }
            };
            if !holds {
                ddir.discard(&temp);
                return Err(Error::Changed(End::Read));
            }
        }
        Ok(Made { temp, xfer, early })
    }
}

/// A temp that exists, and its commit if that was started early.
pub(super) struct Made {
    pub(super) temp: Vec<u8>,
    pub(super) xfer: Xfer,
    pub(super) early: Option<PendingCommit>,
}

pub(crate) fn clone_io(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(n) => io::Error::from_raw_os_error(n),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// Start writing one file's new contents into a temp file (to be
/// committed), or write it in place (`None`: already done and counted).
pub(super) fn write(
    x: &Exec,
    sdir: &dyn ReplicaDir,
    ddir: &dyn ReplicaDir,
    it: &Item,
    method: Method,
    pre: (Option<PendingBytes>, Ahead<'_>),
) -> Result<Option<Started>, Error> {
    if !ddir.takes_contents() {
        let s = it.src.as_deref().expect("a write has a source");
        let nothing = Incoming::Whole(&mut io::empty());
        let temp = ddir.start_receive(it.path.file_name(), nothing, &s.props, x.mask());
        return Ok(Some(Started::new(temp, Xfer::default())));
    }
    let r = match (sdir.local(), ddir.local()) {
        (Some(s), Some(d)) => crate::mirror::transfer_local::write(x, s, d, it, method)
            .map(|r| r.map(|(temp, xfer)| Started::ready(temp, xfer))),
        _ => write_generic(x, sdir, ddir, it, method, pre),
    };
    if let Ok(Some(_)) = &r {
        x.data_written(it.src.as_deref().map_or(0, |s| s.size));
    }
    // A delta error is mapped to a change of a side by the caller.
    r
}

/// Send a file whole after its delta failed its check (the temp of the
/// failed attempt is gone already).
pub(super) fn redo_whole(
    x: &Exec,
    sdir: &dyn ReplicaDir,
    ddir: &dyn ReplicaDir,
    it: &Item,
) -> Result<Option<Made>, Error> {
    match write(x, sdir, ddir, it, Method::Whole, (None, None))? {
        Some(started) => started.finish(ddir).map(Some),
        None => Ok(None),
    }
}

/// `Some(Changed(side))` when one side no longer holds what was planned.
pub(super) fn changed_side(
    sdir: &dyn ReplicaDir,
    ddir: &dyn ReplicaDir,
    it: &Item,
) -> Option<Error> {
    let name = it.path.file_name();
    let (src, dst) = (it.expect_src(), it.expect_dst());
    accord_replica::recheck(sdir, name, &src, End::Read)
        .and_then(|()| accord_replica::recheck(ddir, name, &dst, End::Written))
        .err()
}

/// Counts the bytes read through it.
pub(super) struct Counting<'a> {
    inner: &'a mut dyn Read,
    n: u64,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        Ok(n)
    }
}

/// The transfer between replicas that are not both on this host: the whole
/// file as a stream, or a delta made where the new version is from the
/// receiver's signature (`sig`: asked for already).
pub(super) fn write_generic(
    x: &Exec,
    sdir: &dyn ReplicaDir,
    ddir: &dyn ReplicaDir,
    it: &Item,
    method: Method,
    (mut sig, ahead): (Option<PendingBytes>, Ahead<'_>),
) -> Result<Option<Started>, Error> {
    let s = it.src.as_deref().expect("a write has a source");
    let name = it.path.file_name();
    let expect_src = it.expect_src();
    let expect_dst = it.expect_dst();
    let method = if method != Method::Whole && s.size > STREAM_DELTA_MAX {
        Method::Whole
    } else {
        method
    };
    let resume_from = match method {
        Method::Resume => {
            let sig = match sig.take() {
                Some(p) => p.wait()?,
                None => partial_signature(ddir, name).wait()?,
            };
            // The partial file went away since the listing: send it whole.
            Some(sig).filter(|s| !s.is_empty())
        }
        _ => None,
    };
    let method = match (method, &resume_from) {
        (Method::Resume, None) => Method::Whole,
        (m, _) => m,
    };
    let mut started = match method {
        Method::Resume => {
            let sig = resume_from.expect("a resumed transfer has its signature");
            let (delta, stats) =
                sdir.make_delta(name, &expect_src, &sig, false, ddir.delta_wire())?;
            let xfer = Xfer {
                written: stats.literal_bytes,
                literal: stats.literal_bytes,
                matched: stats.matched_bytes,
                linked: false,
            };
            let incoming = Incoming::Resume { delta: &delta };
            Started::new(ddir.start_receive(name, incoming, &s.props, x.mask()), xfer)
        }
        Method::Whole => {
            let mut reader = match ahead {
                Some(r) => r?,
                None => sdir.open_read(name, &expect_src)?,
            };
            let mut counting = Counting {
                inner: &mut *reader,
                n: 0,
            };
            let temp = ddir.start_receive(name, Incoming::Whole(&mut counting), &s.props, x.mask());
            let n = counting.n;
            let xfer = Xfer {
                written: n,
                literal: n,
                matched: 0,
                linked: false,
            };
            Started::new(temp, xfer)
        }
        Method::Delta | Method::InPlace => {
            let sig = match sig {
                Some(p) => p.wait()?,
                None => ddir.signature(name, &expect_dst, method == Method::InPlace)?,
            };
            let in_place = method == Method::InPlace;
            let (delta, stats) =
                sdir.make_delta(name, &expect_src, &sig, in_place, ddir.delta_wire())?;
            let (delta, stats) = if in_place {
                (delta, stats)
            } else {
                second_round(sdir, ddir, name, (&expect_src, &expect_dst), (delta, stats))?
            };
            let xfer = Xfer {
                written: stats.literal_bytes,
                literal: stats.literal_bytes,
                matched: stats.matched_bytes,
                linked: false,
            };
            if in_place {
                ddir.patch_in_place(name, &expect_dst, &delta, &s.props, x.mask())?;
                accord_replica::recheck(sdir, name, &expect_src, End::Read)?;
                x.count_done(it, xfer);
                x.data_written(s.size);
                return Ok(None);
            }
            let incoming = Incoming::Delta {
                basis: expect_dst,
                delta: &delta,
            };
            Started::new(ddir.start_receive(name, incoming, &s.props, x.mask()), xfer)
        }
    };
    // The source must not have changed while it was read (asked now,
    // checked with the temp's reply).
    started.src_check = Some((sdir.start_stat(name), expect_src));
    Ok(Some(started))
}

/// A delta's second, finer round over its first round's literal runs
/// (`accord_delta::fine`), where the literals are many, the source makes
/// it where the file is, the destination is across a link (a local one
/// has no bytes on a wire to save) and signs the gaps: the smaller of the
/// two deltas.
fn second_round(
    sdir: &dyn ReplicaDir,
    ddir: &dyn ReplicaDir,
    name: &[u8],
    (expect_src, expect_dst): (&Expect, &Expect),
    (first, stats): (Vec<u8>, accord_delta::DeltaStats),
) -> Result<(Vec<u8>, accord_delta::DeltaStats), Error> {
    let across_a_link = sdir.refines_deltas() && !ddir.refines_deltas();
    if stats.literal_bytes < accord_delta::fine::MIN_LITERAL || !across_a_link {
        return Ok((first, stats));
    }
    let request = accord_delta::Delta::parse(&first)
        .ok()
        .and_then(|d| accord_delta::fine::GapRequest::for_delta(&d));
    let Some(request) = request else {
        return Ok((first, stats));
    };
    let Some(fine) = ddir.fine_signature(name, expect_dst, &request.encode())? else {
        return Ok((first, stats));
    };
    let parts = (&first[..], &request, &fine[..]);
    let (refined, refined_stats) = sdir.refine_delta(name, expect_src, parts, ddir.delta_wire())?;
    Ok(if refined.len() < first.len() {
        (refined, refined_stats)
    } else {
        (first, stats)
    })
}
