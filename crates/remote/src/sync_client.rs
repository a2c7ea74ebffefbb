//! A remote replica's side of a two-way sync: each call of
//! `SideSession` carried to the `accord server` on the replica's host,
//! which keeps the archive there and detects updates against it
//! (`server.rs`, with a `LocalSide`).

use crate::client::{start_on, CallError};
use crate::mux::Conn;
use crate::sync_set_wire::{encode_record_versions, get_vectors, get_versions};
use crate::sync_wire::{encode_paths, encode_records, flags_of, get_lookup, get_outcome};
use crate::sync_wire::{get_side_scan, TELLS_EXCLUDED};
use accord_model::RelPath;
use accord_plan::VersionVector;
use accord_proto::{Dec, ProtoError, Request};
use accord_replica::{ArchiveRecord, SideFailure, SideOptions, SideScan, SideSession, SyncRules};
use std::sync::Arc;

pub(crate) struct RemoteSide {
    conn: Arc<Conn>,
    created: bool,
    /// The server agreed to `FEATURE_SYNC_IGNORE`.
    can_ignore: bool,
    /// The rules were sent: lookups ask to be told what they exclude.
    rules_sent: bool,
    /// The server agreed to `FEATURE_SYNC_FOLLOW`.
    can_follow: bool,
}

impl RemoteSide {
    /// Ask the server to open its archive of the pair with `other`
    /// (`can_ignore`: it applies ignore rules).
    pub(crate) fn open(
        conn: Arc<Conn>,
        other: &[u8],
        can_ignore: bool,
        can_follow: bool,
    ) -> Result<RemoteSide, SideFailure> {
        let req = Request::SyncOpen {
            other: other.to_vec(),
        };
        RemoteSide::opened_by(conn, &req, can_ignore, can_follow)
    }

    /// Send `req`, which opens an archive on the server, and make the side
    /// of what it opened.
    fn opened_by(
        conn: Arc<Conn>,
        req: &Request,
        can_ignore: bool,
        can_follow: bool,
    ) -> Result<RemoteSide, SideFailure> {
        let created = call(&conn, req, None, |d| d.bool("created"))?;
        Ok(RemoteSide {
            conn,
            created,
            can_ignore,
            rules_sent: false,
            can_follow,
        })
    }
}

impl RemoteSide {
    /// Ask the server to open its archive of the set named `set` (it
    /// agreed to `FEATURE_SYNC_SET`).
    pub(crate) fn open_set(
        conn: Arc<Conn>,
        set: &[u8],
        can_ignore: bool,
        can_follow: bool,
    ) -> Result<RemoteSide, SideFailure> {
        let req = Request::SyncOpenSet { set: set.to_vec() };
        RemoteSide::opened_by(conn, &req, can_ignore, can_follow)
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
    let mut body = body.map(std::io::Cursor::new);
    let reply = start_on(
        conn,
        req,
        body.as_mut().map(|b| b as &mut dyn std::io::Read),
    )
    .and_then(|r| r.whole())
    .map_err(|e| SideFailure::said(call_failure(e)))?;
    match get_outcome(&reply, get) {
        Ok(outcome) => outcome,
        Err(e) => {
            let why = format!("a {} reply that does not decode: {e}", req.name());
            conn.close(&why);
            Err(SideFailure::said(why))
        }
    }
}

fn call_failure(e: CallError) -> String {
    match e {
        CallError::Failed(w) => w.message,
        CallError::Lost(e) => format!("the connection failed: {e}"),
    }
}

impl SideSession for RemoteSide {
    fn created(&self) -> bool {
        self.created
    }

    fn forget(&mut self) -> Result<(), SideFailure> {
        call(&self.conn, &Request::SyncForget, None, |_| Ok(()))
    }

    fn set_rules(&mut self, rules: &SyncRules) -> Result<(), SideFailure> {
        too_old_to_follow(rules, self.can_ignore && self.can_follow)?;
        if !self.can_ignore {
            return too_old_for(rules);
        }
        let req = Request::SyncRules {
            excludes: rules.excludes.clone(),
            ignore_files: rules.ignore_files,
        };
        call(&self.conn, &req, None, |_| Ok(()))?;
        self.rules_sent = true;
        if self.can_follow {
            let req = Request::SyncFollow {
                patterns: rules.follow.clone(),
            };
            call(&self.conn, &req, None, |_| Ok(()))?;
        }
        Ok(())
    }

    fn scan(&mut self, opts: &SideOptions) -> Result<SideScan, SideFailure> {
        let req = Request::SyncScan {
            flags: flags_of(opts),
        };
        call(&self.conn, &req, None, get_side_scan)
    }

    fn lookup(&mut self, paths: &[RelPath], opts: &SideOptions) -> Result<SideScan, SideFailure> {
        let body = Some(encode_paths(paths));
        if self.rules_sent {
            let req = Request::SyncLookup {
                flags: flags_of(opts) | TELLS_EXCLUDED,
            };
            return call(&self.conn, &req, body, get_lookup);
        }
        let req = Request::SyncLookup {
            flags: flags_of(opts),
        };
        call(&self.conn, &req, body, get_side_scan)
    }

    fn record(&mut self, records: &[ArchiveRecord]) -> Result<(), SideFailure> {
        let body = encode_records(records);
        call(&self.conn, &Request::SyncRecord, Some(body), |_| Ok(()))
    }

    fn count_run(&mut self) -> Result<u64, SideFailure> {
        call(&self.conn, &Request::SyncCountRun, None, |d| {
            d.varint("count of runs")
        })
    }

    fn versions(&mut self) -> Result<Vec<(RelPath, VersionVector)>, SideFailure> {
        call(&self.conn, &Request::SyncVersions, None, get_versions)
    }

    fn versions_digest(&mut self) -> Result<[u8; 32], SideFailure> {
        call(&self.conn, &Request::SyncVersionsDigest, None, |d| {
            let raw = d.raw(32, "digest")?;
            Ok(raw.try_into().expect("32 bytes read"))
        })
    }

    fn versions_at(&mut self, paths: &[RelPath]) -> Result<Vec<VersionVector>, SideFailure> {
        let body = Some(encode_paths(paths));
        call(&self.conn, &Request::SyncVersionsAt, body, |d| {
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
        call(&self.conn, &req, Some(body), |_| Ok(()))
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
