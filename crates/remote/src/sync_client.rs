//! A remote replica's side of a two-way sync: each call of
//! `SideSession` carried to the `accord server` on the replica's host,
//! which keeps the archive there and detects updates against it
//! (`server.rs`, with a `LocalSide`).

use crate::client::{start_on, CallError, ReplyReader};
use crate::mux::Conn;
use crate::sync_set_wire::{encode_record_versions, get_vectors, get_versions};
use crate::sync_wire::{encode_paths, encode_records, flags_of, get_lookup, get_outcome};
use crate::sync_wire::{get_side_scan, AHEAD, TELLS_EXCLUDED};
use accord_model::RelPath;
use accord_plan::VersionVector;
use accord_proto::{Dec, ProtoError, Request};
use accord_replica::{ArchiveRecord, SideFailure, SideOptions, SideScan, SideSession, SyncRules};
use std::sync::{Arc, Mutex};

/// What the server of a remote side agreed to.
#[derive(Clone, Copy)]
pub(crate) struct SideCaps {
    /// `FEATURE_SYNC_IGNORE`: it applies ignore rules.
    pub ignore: bool,
    /// `FEATURE_SYNC_FOLLOW`.
    pub follow: bool,
    /// `FEATURE_ORDERED_RULES`: the rules need not be waited for one by one.
    pub ordered_rules: bool,
}

pub(crate) struct RemoteSide {
    conn: Arc<Conn>,
    /// The request that opens the archive, sent and not yet answered
    /// (where the server takes the rules in order, the rules follow it in
    /// the same round trip), then what it said.
    opening: Mutex<Opening>,
    /// The server carries out the rules in order (`FEATURE_ORDERED_RULES`).
    ordered_rules: bool,
    /// The server agreed to `FEATURE_SYNC_IGNORE`.
    can_ignore: bool,
    /// The rules were sent: lookups ask to be told what they exclude.
    rules_sent: bool,
    /// The server agreed to `FEATURE_SYNC_FOLLOW`.
    can_follow: bool,
    /// Rules sent together and not yet answered (their outcomes carry no
    /// value): checked before the next call is sent, so that they cost one
    /// round trip between them; a failed one fails that next call.
    unanswered: Vec<(ReplyReader, &'static str)>,
    /// A scan asked for ahead of its turn (`prefetch_scan`), with the flags
    /// it was asked with.
    scan_ahead: Option<(u8, ReplyReader)>,
    /// The rules sent ahead with the opening (`sent_ahead`): the same rules
    /// are not sent again.
    rules_ahead: Option<SyncRules>,
    /// Records sent and not yet answered (`record`).
    unrecorded: Vec<(ReplyReader, RecordsAbout)>,
}

/// Which records a `SyncRecord` carried, for its failure's message.
struct RecordsAbout {
    first: Option<RelPath>,
    count: usize,
}

impl RecordsAbout {
    fn of(records: &[ArchiveRecord]) -> RecordsAbout {
        let first = records.first().map(|record| match record {
            ArchiveRecord::Put(observed) => observed.entry.path.clone(),
            ArchiveRecord::Remove(path) => path.clone(),
        });
        RecordsAbout {
            first,
            count: records.len(),
        }
    }
}

impl std::fmt::Display for RecordsAbout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.first, self.count) {
            (Some(first), 1) => write!(f, "recording {}", first.display()),
            (Some(first), n) => write!(f, "recording {} and {} more paths", first.display(), n - 1),
            (None, _) => f.write_str("recording nothing"),
        }
    }
}

impl RemoteSide {
    /// Ask the server to open its archive of the pair with `other`
    /// (`can_ignore`: it applies ignore rules).
    pub(crate) fn open(
        conn: Arc<Conn>,
        other: &[u8],
        caps: SideCaps,
    ) -> Result<RemoteSide, SideFailure> {
        let req = Request::SyncOpen {
            other: other.to_vec(),
        };
        RemoteSide::opened_by(conn, &req, caps)
    }

    /// A side whose opening, rules and scan are sent at once, none waited
    /// for (`RemoteReplica::prefetch_sync_side`: to a server that opens an
    /// archive only under the root's lock and carries rules out in order).
    /// The scan asks to be left undone where the opening makes the archive
    /// (the run then scans without archives, with other options). `None`
    /// where the rules cannot go to this server (the run says why later).
    pub(crate) fn sent_ahead(
        conn: Arc<Conn>,
        other: &[u8],
        rules: &SyncRules,
        opts: &SideOptions,
        caps: SideCaps,
    ) -> Option<RemoteSide> {
        let req = Request::SyncOpen {
            other: other.to_vec(),
        };
        let mut side = RemoteSide::opened_by(conn, &req, caps).ok()?;
        side.set_rules(rules).ok()?;
        side.rules_ahead = Some(rules.clone());
        let flags = flags_of(opts);
        let scan = Request::SyncScan {
            flags: flags | AHEAD,
        };
        side.scan_ahead = Some((flags, send(&side.conn, &scan, None).ok()?));
        Some(side)
    }

    /// Send `req`, which opens an archive on the server, and make the side
    /// of what it opened.
    fn opened_by(
        conn: Arc<Conn>,
        req: &Request,
        caps: SideCaps,
    ) -> Result<RemoteSide, SideFailure> {
        let opening = if caps.ordered_rules {
            Opening::Sent(send(&conn, req, None)?, req.name())
        } else {
            Opening::Created(call(&conn, req, None, |d| d.bool("created"))?)
        };
        Ok(RemoteSide {
            conn,
            opening: Mutex::new(opening),
            ordered_rules: caps.ordered_rules,
            can_ignore: caps.ignore,
            rules_sent: false,
            can_follow: caps.follow,
            unanswered: Vec::new(),
            scan_ahead: None,
            rules_ahead: None,
            unrecorded: Vec::new(),
        })
    }
}

impl RemoteSide {
    /// Ask the server to open its archive of the set named `set` (it
    /// agreed to `FEATURE_SYNC_SET`).
    pub(crate) fn open_set(
        conn: Arc<Conn>,
        set: &[u8],
        caps: SideCaps,
    ) -> Result<RemoteSide, SideFailure> {
        let req = Request::SyncOpenSet { set: set.to_vec() };
        RemoteSide::opened_by(conn, &req, caps)
    }
}

/// An older server leaves out its backup directory only. The rules of
/// this host (patterns and its own `.accordignore` files) still hold on
/// both sides through this side's lookups, but that server would walk and
/// count what the patterns exclude there (the deletion guard among them):
/// refused. Without patterns it runs, its `.accordignore` files unread.
fn too_old_for(rules: &SyncRules) -> Result<(), SideFailure> {
    if rules.excludes.is_empty() {
        return Ok(());
    }
    Err(SideFailure::said(
        "its accord server is too old to apply --exclude to a sync; upgrade accord there, \
         or sync without --exclude",
    ))
}

/// A server that did not agree to `FEATURE_SYNC_FOLLOW` would walk its
/// followed links as links (and their targets' copies on the other side
/// would look like updates): a run with `--follow` is refused.
fn too_old_to_follow(rules: &SyncRules, server_follows: bool) -> Result<(), SideFailure> {
    if rules.follow.is_empty() || server_follows {
        return Ok(());
    }
    Err(SideFailure::said(
        "its accord server is too old to follow links for --follow; upgrade accord there, \
         or sync without --follow",
    ))
}

/// Send `req` (with `body`), and decode its outcome with `get`.
fn call<T>(
    conn: &Arc<Conn>,
    req: &Request,
    body: Option<Vec<u8>>,
    get: impl FnOnce(&mut Dec) -> Result<T, ProtoError>,
) -> Result<T, SideFailure> {
    answer(conn, send(conn, req, body)?, req.name(), get)
}

/// Send `req` (with `body`) without waiting for its reply.
fn send(
    conn: &Arc<Conn>,
    req: &Request,
    body: Option<Vec<u8>>,
) -> Result<ReplyReader, SideFailure> {
    let mut body = body.map(std::io::Cursor::new);
    start_on(
        conn,
        req,
        body.as_mut().map(|b| b as &mut dyn std::io::Read),
    )
    .map_err(|e| SideFailure::said(call_failure(e)))
}

/// Wait for the reply of the call named `name`, and decode its outcome
/// with `get`.
fn answer<T>(
    conn: &Arc<Conn>,
    reply: ReplyReader,
    name: &str,
    get: impl FnOnce(&mut Dec) -> Result<T, ProtoError>,
) -> Result<T, SideFailure> {
    let reply = reply
        .whole()
        .map_err(|e| SideFailure::said(call_failure(e)))?;
    match get_outcome(&reply, get) {
        Ok(outcome) => outcome,
        Err(e) => {
            let why = format!("a {name} reply that does not decode: {e}");
            conn.close(&why);
            Err(SideFailure::said(why))
        }
    }
}

pub(crate) fn call_failure(e: CallError) -> String {
    match e {
        CallError::Failed(w) => w.message,
        CallError::Lost(e) => format!("the connection failed: {e}"),
    }
}

/// Where the opening of a remote side's archive stands.
enum Opening {
    Sent(ReplyReader, &'static str),
    /// Opened; the archive was new or set aside as damaged.
    Created(bool),
    /// It failed (the failure was returned once; later calls say so).
    Failed(String),
}

impl RemoteSide {
    /// Wait for the archive's opening, where it was sent without waiting.
    fn opened(&self) -> Result<bool, SideFailure> {
        let mut opening = self.opening.lock().unwrap();
        match &*opening {
            Opening::Created(created) => return Ok(*created),
            Opening::Failed(why) => {
                return Err(SideFailure::said(format!(
                    "its archive could not be opened: {why}"
                )))
            }
            Opening::Sent(..) => {}
        }
        let Opening::Sent(reply, name) = std::mem::replace(&mut *opening, Opening::Created(false))
        else {
            unreachable!("matched above")
        };
        match answer(&self.conn, reply, name, |d| d.bool("created")) {
            Ok(created) => {
                *opening = Opening::Created(created);
                Ok(created)
            }
            Err(failure) => {
                *opening = Opening::Failed(failure.to_string());
                Err(failure)
            }
        }
    }

    /// The outcomes of the calls sent and not yet answered: the rules, a
    /// forget, the records (whose failure says which records it was).
    fn check_unanswered(&mut self) -> Result<(), SideFailure> {
        for (earlier, name) in std::mem::take(&mut self.unanswered) {
            answer(&self.conn, earlier, name, |_| Ok(()))?;
        }
        for (earlier, about) in std::mem::take(&mut self.unrecorded) {
            answer(&self.conn, earlier, "record", |_| Ok(()))
                .map_err(|failure| SideFailure::said(format!("{about}: {failure}")))?;
        }
        Ok(())
    }

    /// `call`, once the archive is open; the calls sent before it and not
    /// yet answered (rules, a forget) have their outcomes checked first. A
    /// server that carries those out in order gets `req` at once, so both
    /// take one round trip: where one of them failed, the run stops with
    /// its failure, and `req`'s reply is left unread.
    fn call<T>(
        &mut self,
        req: &Request,
        body: Option<Vec<u8>>,
        get: impl FnOnce(&mut Dec) -> Result<T, ProtoError>,
    ) -> Result<T, SideFailure> {
        self.opened()?;
        let reply = send(&self.conn, req, body)?;
        self.check_unanswered()?;
        answer(&self.conn, reply, req.name(), get)
    }

    /// Send a rule, whose outcome carries no value: checked before the
    /// next call is sent where the server carries rules out in order,
    /// else at once (an older server answers them beside each other).
    fn send_rule(&mut self, req: &Request) -> Result<(), SideFailure> {
        if !self.ordered_rules {
            return self.call(req, None, |_| Ok(()));
        }
        let reply = send(&self.conn, req, None)?;
        self.unanswered.push((reply, req.name()));
        Ok(())
    }
}

impl SideSession for RemoteSide {
    /// A failed opening reads as not created here: the next call returns
    /// the failure.
    fn created(&self) -> bool {
        self.opened().unwrap_or(false)
    }

    fn forget(&mut self) -> Result<(), SideFailure> {
        if !self.ordered_rules {
            return self.call(&Request::SyncForget, None, |_| Ok(()));
        }
        // Carried out in order, before the scan that follows: its outcome
        // is checked with that scan's, in the same round trip.
        self.opened()?;
        let reply = send(&self.conn, &Request::SyncForget, None)?;
        self.unanswered.push((reply, Request::SyncForget.name()));
        Ok(())
    }

    fn set_rules(&mut self, rules: &SyncRules) -> Result<(), SideFailure> {
        match self.rules_ahead.take() {
            Some(sent) if sent == *rules => return Ok(()),
            // A scan asked for under other rules is of no use.
            Some(_) => self.scan_ahead = None,
            None => {}
        }
        too_old_to_follow(rules, self.can_ignore && self.can_follow)?;
        if !self.can_ignore {
            return too_old_for(rules);
        }
        let req = Request::SyncRules {
            excludes: rules.excludes.clone(),
            ignore_files: rules.ignore_files,
        };
        self.send_rule(&req)?;
        self.rules_sent = true;
        if self.can_follow {
            let req = Request::SyncFollow {
                patterns: rules.follow.clone(),
            };
            self.send_rule(&req)?;
        }
        // The rules travel with the opening: its answer comes with them,
        // and is waited for by the next call (`created` among them).
        Ok(())
    }

    fn scan(&mut self, opts: &SideOptions) -> Result<SideScan, SideFailure> {
        let flags = flags_of(opts);
        if let Some((asked, reply)) = self.scan_ahead.take() {
            if asked == flags {
                self.opened()?;
                self.check_unanswered()?;
                return answer(&self.conn, reply, "detect updates", get_side_scan);
            }
            // Asked with other options (the archive was new): dropped, its
            // reply left unread.
        }
        self.call(&Request::SyncScan { flags }, None, get_side_scan)
    }

    fn prefetch_scan(&mut self, opts: &SideOptions) {
        // Only a server that carries the rules out in order scans after
        // them; an older one would answer them beside each other.
        if !self.ordered_rules || self.scan_ahead.is_some() {
            return;
        }
        let flags = flags_of(opts);
        if let Ok(reply) = send(&self.conn, &Request::SyncScan { flags }, None) {
            self.scan_ahead = Some((flags, reply));
        }
    }

    fn lookup(&mut self, paths: &[RelPath], opts: &SideOptions) -> Result<SideScan, SideFailure> {
        let body = Some(encode_paths(paths));
        if self.rules_sent {
            let req = Request::SyncLookup {
                flags: flags_of(opts) | TELLS_EXCLUDED,
            };
            return self.call(&req, body, get_lookup);
        }
        let req = Request::SyncLookup {
            flags: flags_of(opts),
        };
        self.call(&req, body, get_side_scan)
    }

    fn record(&mut self, records: &[ArchiveRecord]) -> Result<(), SideFailure> {
        let body = encode_records(records);
        if !self.ordered_rules {
            return self.call(&Request::SyncRecord, Some(body), |_| Ok(()));
        }
        // Sent and not waited for: the server carries records out in
        // order, and the outcome is checked with the next call (by then
        // it has come) or at `finish`, in the closing's round trip. The
        // earlier ones are checked first: where one failed, these are not
        // sent, and the engine reports them unrecorded.
        self.opened()?;
        self.check_unanswered()?;
        let reply = send(&self.conn, &Request::SyncRecord, Some(body))?;
        self.unrecorded.push((reply, RecordsAbout::of(records)));
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SideFailure> {
        if self.unrecorded.is_empty() {
            return Ok(());
        }
        // No request follows: the server answers what it was sent, then
        // closes its side (a server older than the ordered rules is never
        // sent records unanswered, and closes at once).
        self.conn.shutdown_write();
        self.check_unanswered()
    }

    fn count_run(&mut self) -> Result<u64, SideFailure> {
        self.call(&Request::SyncCountRun, None, |d| d.varint("count of runs"))
    }

    fn versions(&mut self) -> Result<Vec<(RelPath, VersionVector)>, SideFailure> {
        self.call(&Request::SyncVersions, None, get_versions)
    }

    fn versions_digest(&mut self) -> Result<[u8; 32], SideFailure> {
        self.call(&Request::SyncVersionsDigest, None, |d| {
            let raw = d.raw(32, "digest")?;
            Ok(raw.try_into().expect("32 bytes read"))
        })
    }

    fn versions_at(&mut self, paths: &[RelPath]) -> Result<Vec<VersionVector>, SideFailure> {
        let body = Some(encode_paths(paths));
        self.call(&Request::SyncVersionsAt, body, |d| {
            get_vectors(d, paths.len())
        })
    }

    fn record_versions(
        &mut self,
        records: &[ArchiveRecord],
        versions: &[(RelPath, VersionVector)],
    ) -> Result<(), SideFailure> {
        let body = encode_record_versions(records, versions);
        let req = Request::SyncRecordVersions;
        self.call(&req, Some(body), |_| Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_server_is_refused_only_for_patterns() {
        let mut rules = SyncRules::default();
        assert!(too_old_for(&rules).is_ok());
        rules.excludes.push("*.o".into());
        let refused = too_old_for(&rules).unwrap_err().to_string();
        assert!(refused.contains("too old to apply --exclude"), "{refused}");
    }

    #[test]
    fn a_server_that_does_not_follow_is_refused_only_for_follow_patterns() {
        let mut rules = SyncRules::default();
        assert!(too_old_to_follow(&rules, false).is_ok());
        rules.follow.push("notes".into());
        assert!(too_old_to_follow(&rules, true).is_ok());
        let refused = too_old_to_follow(&rules, false).unwrap_err().to_string();
        assert!(refused.contains("too old to follow links"), "{refused}");
    }
}
