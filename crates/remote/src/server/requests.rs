//! What the server does for each kind of request: one function per kind
//! (the `Sync*` kinds share one), called by `Session::call`. A write's
//! refusal on a root not open for writing is made before, in
//! `Session::answer`; the checks here are each kind's own.

use super::{denied, io_error, protocol, to_wire, Reply, Session, MAX_IGNORE_FILE};
use super::{encode_found, put_failures, put_listing, ScanOptions, IGNORE_FILE};
use super::{Action, Error, Incoming, Replica};
use super::{Basis, Enc, IgnoreRules, Kind, ListOptions, RelPath, Request, WireError};
use accord_delta::packed::pack_memory;
use accord_fsys::PropsMask;
use accord_model::{Entry, Expect, Props};
use accord_proto::limits::{
    max_delta, MAX_DELTA, MAX_DELTA_FILE, MAX_SIGNATURE, MAX_STATE, MAX_SYNC,
};
use accord_proto::msg::{encode_vouched, StatOf};
use accord_replica::DeltaWire;
use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The bound of a delta body.
const DELTA: (u64, &str) = (MAX_DELTA, "a delta");

/// An engine error, for the wire (as the handlers' `map_err`).
fn w(e: Error) -> WireError {
    to_wire(&e)
}

impl Session<'_> {
    pub(super) fn lock(&self) -> Reply {
        let held = self
            .replica
            .try_lock()
            .map_err(|e| io_error(Action::OpenDestination, &e))?;
        if held {
            self.locked.store(true, Ordering::Relaxed);
        }
        Ok(vec![held as u8])
    }

    pub(super) fn fingerprint(&self, path: &RelPath) -> Reply {
        Ok(self.replica.fingerprint(path).map_err(w)?.to_vec())
    }

    pub(super) fn open_dir(&self, dir: &RelPath) -> Reply {
        self.dir(dir, Action::OpenDestination).map(|_| Vec::new())
    }

    pub(super) fn sync_all(&self, stream: u32) -> Reply {
        if let Err(e) = self.replica.sync_all() {
            let mut failed = self.failed_flush.lock().unwrap();
            *failed = Some(failed.map_or(stream, |f| f.max(stream)));
            return Err(io_error(Action::Flush, &e));
        }
        Ok(Vec::new())
    }

    pub(super) fn read_state(&self, name: &str) -> Reply {
        let mut out = Vec::new();
        match self.replica.read_state(name) {
            None => out.push(0),
            Some(data) => {
                out.push(1);
                out.extend_from_slice(&data);
            }
        }
        Ok(out)
    }

    pub(super) fn write_state(&self, stream: u32, name: &str, durable: bool) -> Reply {
        let data = self.body_bytes(stream, Action::WriteTemp, (MAX_STATE, "a state file"))?;
        self.replica
            .write_state(name, &data, durable)
            .map_err(|e| io_error(Action::WriteTemp, &e))?;
        Ok(Vec::new())
    }

    pub(super) fn stat(&self, dir: &RelPath, name: &[u8]) -> Reply {
        let found = self
            .dir(dir, Action::OpenDestination)?
            .stat(name)
            .map_err(|e| io_error(Action::OpenDestination, &e))?;
        Ok(encode_found(found.as_ref()))
    }

    /// A stat with a ctime that vouches, where this host's file system
    /// can promise one (`ReplicaDir::start_vouching_stat`).
    /// A temp is named by the stream that made it, and must be one this
    /// session made in `dir` and has not committed or discarded.
    pub(super) fn vouching_stat(&self, dir: &RelPath, of: &StatOf) -> Reply {
        let d = self.dir(dir, Action::OpenDestination)?;
        let name = match of {
            StatOf::Name(name) => name.clone(),
            StatOf::Temp(made_by) => self.temp_name(dir, *made_by)?,
        };
        let vouched = d
            .start_vouching_stat(&name)
            .wait()
            .map_err(|e| io_error(Action::OpenDestination, &e))?;
        Ok(encode_vouched(vouched.as_ref()))
    }

    pub(super) fn open_read(
        &self,
        stream: u32,
        dir: &RelPath,
        name: &[u8],
        expect: &Expect,
    ) -> Reply {
        let d = self.dir(dir, Action::OpenSource)?;
        let mut r = d.open_read(name, expect).map_err(w)?;
        self.stream_out(stream, &mut *r)?;
        Ok(Vec::new())
    }

    pub(super) fn partial_signature(&self, dir: &RelPath, name: &[u8]) -> Reply {
        let d = self.dir(dir, Action::OpenDestination)?;
        Ok(match d.partial_signature(name).map_err(w)? {
            Some(sig) => [&[1u8][..], &sig].concat(),
            None => vec![0],
        })
    }

    pub(super) fn signature(
        &self,
        dir: &RelPath,
        name: &[u8],
        expect: &Expect,
        in_place: bool,
    ) -> Reply {
        self.dir(dir, Action::OpenDestination)?
            .signature(name, expect, in_place)
            .map_err(w)
    }

    /// The second round of a delta: the body names the gaps of the file
    /// to sign in smaller blocks.
    pub(super) fn fine_signature(
        &self,
        stream: u32,
        dir: &RelPath,
        name: &[u8],
        expect: &Expect,
    ) -> Reply {
        let request = self.body_bytes(
            stream,
            Action::OpenDestination,
            (MAX_SIGNATURE, "a gap request"),
        )?;
        self.dir(dir, Action::OpenDestination)?
            .fine_signature(name, expect, &request)
            .map_err(w)?
            .ok_or_else(|| protocol("this server does not sign a delta's gaps"))
    }

    /// `pack_level`: the client reads delta format 2 (see
    /// `Request::MakeDelta`).
    pub(super) fn make_delta(
        &self,
        stream: u32,
        (dir, name, expect): (&RelPath, &[u8], &Expect),
        in_place: bool,
        pack_level: Option<i32>,
    ) -> Reply {
        let sig = self.body_bytes(stream, Action::ReadSource, (MAX_SIGNATURE, "a signature"))?;
        // The delta is made in memory: the most it can be is charged
        // first (the file's size is the one the client expects).
        let size = match expect {
            Expect::Entry(f) => f.size,
            _ => 0,
        };
        if size > MAX_DELTA_FILE {
            return Err(protocol("a delta asked for a file above the limit"));
        }
        let wire = DeltaWire {
            reads_packed: pack_level.is_some(),
            level: pack_level,
        };
        // Compressing the literals takes a few segments' worth more.
        let packing = match pack_level {
            Some(level) if !in_place => pack_memory(size, level),
            _ => 0,
        };
        let room = max_delta(size).saturating_add(packing);
        let _room = self.reserve(room, "the delta", Action::ReadSource)?;
        let d = self.dir(dir, Action::OpenSource)?;
        let (delta, stats) = d
            .make_delta(name, expect, &sig, in_place, wire)
            .map_err(w)?;
        let mut e = Enc::new();
        e.varint(stats.literal_bytes).varint(stats.matched_bytes);
        e.raw(&delta);
        Ok(e.finish())
    }

    /// `body`: a whole file's body held in memory (a small file's, by a
    /// writer thread); `None`: read it from the wire.
    #[allow(clippy::too_many_arguments)] // a Receive's fields, its stream and body
    pub(super) fn receive(
        &self,
        stream: u32,
        dir: &RelPath,
        name: &[u8],
        basis: &Basis,
        props: &Props,
        mask: PropsMask,
        body: Option<&mut dyn Read>,
    ) -> Reply {
        let d = self.dir(dir, Action::WriteTemp)?;
        let temp = match basis {
            Basis::Nothing => match body {
                Some(body) => d.receive(name, Incoming::Whole(body), props, mask),
                None => {
                    let mut body = self.body(stream);
                    d.receive(name, Incoming::Whole(&mut body), props, mask)
                }
            },
            Basis::Entry(basis) => {
                let delta = self.body_bytes(stream, Action::WriteTemp, DELTA)?;
                let incoming = Incoming::Delta {
                    basis: *basis,
                    delta: &delta,
                };
                d.receive(name, incoming, props, mask)
            }
            Basis::Partial => {
                let delta = self.body_bytes(stream, Action::WriteTemp, DELTA)?;
                d.receive(name, Incoming::Resume { delta: &delta }, props, mask)
            }
        }
        .map_err(w)?;
        Ok(self.issue_temp(stream, dir, temp))
    }

    pub(super) fn patch_in_place(
        &self,
        stream: u32,
        dir: &RelPath,
        name: &[u8],
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Reply {
        let delta = self.body_bytes(stream, Action::UpdateInPlace, DELTA)?;
        let d = self.dir(dir, Action::UpdateInPlace)?;
        d.patch_in_place(name, expect, &delta, props, mask)
            .map_err(w)?;
        Ok(Vec::new())
    }

    pub(super) fn make_node(
        &self,
        stream: u32,
        dir: &RelPath,
        name: &[u8],
        entry: &Entry,
        mask: PropsMask,
    ) -> Reply {
        if entry.kind == Kind::File {
            return Err(protocol("make node of a regular file"));
        }
        let d = self.dir(dir, Action::MakeNode)?;
        let temp = d.make_node(name, entry, mask).map_err(w)?;
        Ok(self.issue_temp(stream, dir, temp))
    }

    pub(super) fn rename_from(
        &self,
        dir: &RelPath,
        name: &[u8],
        from: &RelPath,
        expect: &Expect,
    ) -> Reply {
        let d = self.dir(dir, Action::Rename)?;
        d.rename_from(name, from, expect).map_err(w)?;
        Ok(Vec::new())
    }

    pub(super) fn wait_change(&self, timeout_ms: u32) -> Reply {
        let timeout = std::time::Duration::from_millis(u64::from(timeout_ms));
        Ok(self.watch.wait(timeout).encode())
    }

    pub(super) fn link_temp(
        &self,
        stream: u32,
        dir: &RelPath,
        name: &[u8],
        leader: &RelPath,
    ) -> Reply {
        let d = self.dir(dir, Action::MakeLink)?;
        let temp = d.link_temp(name, leader).map_err(w)?;
        Ok(self.issue_temp(stream, dir, temp))
    }

    pub(super) fn commit(
        &self,
        dir: &RelPath,
        made_by: u32,
        name: &[u8],
        expect: &Expect,
    ) -> Reply {
        let temp = self.take_temp(dir, made_by)?;
        let d = self.dir(dir, Action::Replace)?;
        let r = self
            .check_flushed(made_by)
            .and_then(|()| d.commit(&temp, name, expect).map_err(w));
        if r.is_err() {
            d.discard(&temp);
        }
        r?;
        Ok(Vec::new())
    }

    pub(super) fn discard(&self, dir: &RelPath, made_by: u32) -> Reply {
        let temp = self.take_temp(dir, made_by)?;
        self.dir(dir, Action::Replace)?.discard(&temp);
        Ok(Vec::new())
    }

    pub(super) fn set_props(
        &self,
        dir: &RelPath,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Reply {
        let d = self.dir(dir, Action::SetProps)?;
        d.set_props(name, expect, kind, props, mask).map_err(w)?;
        Ok(Vec::new())
    }

    pub(super) fn set_own_props(
        &self,
        dir: &RelPath,
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Reply {
        let d = self.dir(dir, Action::SetProps)?;
        d.set_own_props(expect, props, mask).map_err(w)?;
        Ok(Vec::new())
    }

    pub(super) fn mkdir(&self, dir: &RelPath, name: &[u8]) -> Reply {
        self.dir(dir, Action::MakeDir)?.mkdir(name).map_err(w)?;
        Ok(Vec::new())
    }

    pub(super) fn delete(&self, dir: &RelPath, name: &[u8], expect: &Expect) -> Reply {
        let d = self.dir(dir, Action::Delete)?;
        let done = d.delete(name, expect).map_err(w)?;
        Ok(vec![match done {
            accord_replica::Deleted::Done => 0,
            accord_replica::Deleted::Gone => 1,
            accord_replica::Deleted::NotEmpty => 2,
        }])
    }

    /// The `Sync*` kinds, answered by this root's `SyncServer`.
    pub(super) fn sync_request(&self, stream: u32, req: &Request) -> Reply {
        if let Request::SyncRules {
            excludes,
            ignore_files,
        } = req
        {
            // A watch connection sends them too, before its waits.
            self.watch.set_rules(excludes, *ignore_files);
        }
        let opens = matches!(req, Request::SyncOpen { .. } | Request::SyncOpenSet { .. });
        if opens && !self.locked.load(Ordering::Relaxed) {
            // A client sends the opening behind the lock without waiting:
            // where another run holds the lock, no archive is opened or made.
            return Err(denied(
                "opening a sync's archive without the root's lock (another run holds it)",
            ));
        }
        // Never pooled: a sync request's body is on the wire.
        let body = if req.has_body() {
            Some(self.body_bytes(
                stream,
                Action::OpenDestination,
                (MAX_SYNC, "a sync's paths or records"),
            )?)
        } else {
            None
        };
        self.sync.call(req, body.as_deref().unwrap_or_default())
    }

    pub(super) fn remove_stale_temp(&self, dir: &RelPath, name: &[u8]) -> Reply {
        if !accord_fsys::is_reserved_name(name) {
            return Err(denied("removing a name that is not a temp"));
        }
        self.dir(dir, Action::Delete)?.remove_stale_temp(name);
        Ok(Vec::new())
    }

    fn rules(&self, opts: &ListOptions) -> Result<Arc<IgnoreRules>, WireError> {
        let mut slot = self.rules.lock().unwrap();
        if let Some((patterns, rules)) = &*slot {
            if *patterns == opts.excludes {
                return Ok(rules.clone());
            }
        }
        let rules = Arc::new(
            IgnoreRules::new(&opts.excludes)
                .map_err(|e| protocol(format!("a bad exclude pattern: {e}")))?,
        );
        *slot = Some((opts.excludes.clone(), rules.clone()));
        Ok(rules)
    }

    /// A listing: present flag, the listing, the scan's failures, whether
    /// it is incomplete, and the directory's `.accordignore` (when read),
    /// so the client's rules exclude what this side's scan excluded.
    pub(super) fn list(&self, dir: &RelPath, opts: &ListOptions) -> Reply {
        let rules = self.rules(opts)?;
        let sopts = ScanOptions {
            xattrs: opts.xattrs,
            xattr_memo: None,
            listing_memo: None,
            read_ignore_files: opts.read_ignore_files,
            only_names: None,
            source: opts.source,
            same_fs: None,
            alone: false,
        };
        let (listing, found) = self.replica.list_dir(dir, &rules, &sopts);
        let mut e = Enc::new();
        match &listing {
            None => e.u8(0),
            Some(l) => {
                e.u8(1);
                put_listing(&mut e, l);
                &mut e
            }
        };
        put_failures(&mut e, &found.errors);
        e.bool(found.incomplete);
        let ignore = match &listing {
            Some(l) if opts.read_ignore_files => self.ignore_file(dir, l),
            _ => None,
        };
        match ignore {
            None => e.u8(0),
            Some(c) => e.u8(1).bytes(&c),
        };
        Ok(e.finish())
    }

    fn ignore_file(&self, dir: &RelPath, l: &accord_fsys::Listing) -> Option<Vec<u8>> {
        let f = l
            .entries
            .iter()
            .find(|x| x.path.file_name() == IGNORE_FILE && x.kind == Kind::File)?;
        let d = self.replica.open_dir(dir).ok()?;
        let mut out = Vec::new();
        let expect = accord_model::Expect::entry(f);
        d.open_read(IGNORE_FILE, &expect)
            .ok()?
            .take(MAX_IGNORE_FILE)
            .read_to_end(&mut out)
            .ok()?;
        Some(out)
    }

    /// Send a file's contents as reply chunks (the END follows).
    fn stream_out(&self, stream: u32, r: &mut dyn Read) -> Result<(), WireError> {
        let mut buf = vec![0u8; accord_proto::frame::CHUNK];
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error(Action::ReadSource, &e)),
            };
            self.conn
                .reply_part(stream, &buf[..n])
                .map_err(|e| io_error(Action::ReadSource, &e))?;
        }
    }
}
