//! The server's half of a two-way sync: the side of its root, with the
//! archive kept on this host (in `ServerConfig::archive_dir`), answering
//! the client's `Sync*` requests (`sync_client.rs` is the other end).

use crate::errors::protocol;
use crate::sync_set_wire::{decode_record_versions, decode_versions_at, put_vectors, put_versions};
use crate::sync_wire::{decode_paths, decode_records, lookup_options_of, options_of};
use crate::sync_wire::{put_lookup, put_outcome, put_side_scan, AHEAD};
use accord_proto::{Enc, Request, WireError};
use accord_replica::side::scratch::Scratch;
use accord_replica::{LocalReplica, LocalSide, Replica, SideFailure, SideSession, SyncRules};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Most sync archives a server keeps (one for each pair of roots synced
/// with one of its roots).
const MAX_ARCHIVES: usize = 4096;

/// The sync side of one session (at most one archive open at a time).
pub(crate) struct SyncServer<'a> {
    replica: &'a LocalReplica,
    archive_dir: Option<PathBuf>,
    /// A dry run's session (one opened to inspect the root): the archive
    /// opened is a scratch copy of this host's, dropped with the session.
    dry_run: bool,
    scratch: Mutex<Option<Scratch>>,
    side: Mutex<Option<LocalSide<'a>>>,
    /// The client's ignore rules, for every side this session opens.
    rules: Mutex<Option<SyncRules>>,
}

impl<'a> SyncServer<'a> {
    /// `dry_run`: the session inspects its root; a sync in it reads a
    /// scratch copy of the archive (made when the side is opened).
    pub(crate) fn new(
        replica: &'a LocalReplica,
        archive_dir: Option<PathBuf>,
        dry_run: bool,
    ) -> Self {
        SyncServer {
            replica,
            archive_dir,
            dry_run,
            scratch: Mutex::new(None),
            side: Mutex::new(None),
            rules: Mutex::new(None),
        }
    }

    /// Is this a dry run's session (its archive a scratch copy)?
    pub(crate) fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Answer one `Sync*` request (`body`: its body, when it has one).
    pub(crate) fn call(&self, req: &Request, body: &[u8]) -> Result<Vec<u8>, WireError> {
        let mut e = Enc::new();
        match req {
            Request::SyncIdentity => {
                let identity = self.replica.sync_identity().map_err(|e| {
                    crate::errors::io_error(accord_replica::Action::OpenDestination, &e)
                })?;
                return Ok(identity);
            }
            Request::SyncOpen { other } => {
                let opened = self.open(other);
                put_outcome(&mut e, &opened, |e, created| {
                    e.bool(*created);
                });
            }
            Request::SyncForget => {
                let done = self.with_side(|side| side.forget());
                put_outcome(&mut e, &done, |_, _| {});
            }
            Request::SyncScan { flags } => {
                let opts = options_of(*flags & !AHEAD).map_err(|e| protocol(e.to_string()))?;
                let scan = self.with_side(|side| match *flags & AHEAD != 0 && side.created() {
                    // Asked ahead, and the run will scan without archives.
                    true => Err(SideFailure::said("not scanned ahead: the archive is new")),
                    false => side.scan(&opts),
                });
                put_outcome(&mut e, &scan, put_side_scan);
            }
            Request::SyncLookup { flags } => {
                let (opts, tells_excluded) =
                    lookup_options_of(*flags).map_err(|e| protocol(e.to_string()))?;
                let paths = decode_paths(body).map_err(|e| protocol(e.to_string()))?;
                let found = self.with_side(|side| side.lookup(&paths, &opts));
                put_outcome(&mut e, &found, |e, scan| {
                    put_lookup(e, scan, tells_excluded)
                });
            }
            Request::SyncRules {
                excludes,
                ignore_files,
            } => {
                let follow = self
                    .rules
                    .lock()
                    .unwrap()
                    .as_ref()
                    .map(|r| r.follow.clone());
                let rules = SyncRules {
                    excludes: excludes.clone(),
                    ignore_files: *ignore_files,
                    follow: follow.unwrap_or_default(),
                };
                let done = self.set_rules(rules);
                put_outcome(&mut e, &done, |_, _| {});
            }
            Request::SyncFollow { patterns } => {
                let done = self.set_follow(patterns);
                put_outcome(&mut e, &done, |_, _| {});
            }
            Request::SyncRecord => {
                let records = decode_records(body).map_err(|e| protocol(e.to_string()))?;
                let done = self.with_side(|side| side.record(&records));
                put_outcome(&mut e, &done, |_, _| {});
            }
            Request::SyncOpenSet { set } => {
                let opened = self.open_set(set);
                put_outcome(&mut e, &opened, |e, created| {
                    e.bool(*created);
                });
            }
            Request::SyncCountRun => {
                let count = self.with_side(|side| side.count_run());
                put_outcome(&mut e, &count, |e, count| {
                    e.varint(*count);
                });
            }
            Request::SyncVersions => {
                let versions = self.with_side(|side| side.versions());
                put_outcome(&mut e, &versions, |e, versions| put_versions(e, versions));
            }
            Request::SyncVersionsDigest => {
                let digest = self.with_side(|side| side.versions_digest());
                put_outcome(&mut e, &digest, |e, digest| {
                    e.raw(digest);
                });
            }
            Request::SyncVersionsAt => {
                let paths = decode_versions_at(body).map_err(|e| protocol(e.to_string()))?;
                let vectors = self.with_side(|side| side.versions_at(&paths));
                put_outcome(&mut e, &vectors, |e, vectors| put_vectors(e, vectors));
            }
            Request::SyncRecordVersions => {
                let (records, versions) =
                    decode_record_versions(body).map_err(|e| protocol(e.to_string()))?;
                let done = self.with_side(|side| side.record_versions(&records, &versions));
                put_outcome(&mut e, &done, |_, _| {});
            }
            _ => unreachable!("only sync requests come here"),
        }
        Ok(e.finish())
    }

    /// Open (and lock) the archive of this root's pair with `other`,
    /// replacing one this session opened before.
    fn open(&self, other: &[u8]) -> Result<bool, SideFailure> {
        self.open_with(other, LocalSide::open)
    }

    /// Open (and lock) this root's archive of the set named `set`.
    fn open_set(&self, set: &[u8]) -> Result<bool, SideFailure> {
        self.open_with(set, LocalSide::open_set)
    }

    /// Open an archive named by `other` (the other root of a pair, or a
    /// set) with `open`, replacing the one open.
    fn open_with(
        &self,
        other: &[u8],
        open: impl FnOnce(&'a LocalReplica, &[u8], &Path) -> Result<LocalSide<'a>, SideFailure>,
    ) -> Result<bool, SideFailure> {
        let Some(dir) = &self.archive_dir else {
            return Err(SideFailure::said(
                "the server has no directory for archives (no HOME, XDG_DATA_HOME or ACCORD_STATE_DIR)"
            ));
        };
        self.room_for_archive(dir, other)?;
        let mut slot = self.side.lock().unwrap();
        // The old archive's lock goes first: it may be this very pair's.
        *slot = None;
        let dir = self.scratch_copy(dir, other)?;
        let mut side = open(self.replica, other, &dir)?;
        if let Some(rules) = self.rules.lock().unwrap().as_ref() {
            side.set_rules(rules)?;
        }
        let created = side.created();
        *slot = Some(side);
        Ok(created)
    }

    /// The directory to open the pair's archive in: this host's, or for a
    /// dry run a scratch copy of the archive there.
    fn scratch_copy(&self, dir: &Path, other: &[u8]) -> Result<PathBuf, SideFailure> {
        if !self.dry_run {
            return Ok(dir.to_path_buf());
        }
        let failed = |e: std::io::Error| {
            SideFailure::said(format!(
                "cannot copy the archive for the dry run: {}",
                accord_fsys::io_words(&e)
            ))
        };
        let mut slot = self.scratch.lock().unwrap();
        if slot.is_none() {
            *slot = Some(Scratch::new().map_err(failed)?);
        }
        let scratch = slot.as_ref().expect("made above");
        let this = accord_replica::local_identity(self.replica.root().path());
        scratch.copy_archive(dir, &this, other).map_err(failed)?;
        Ok(scratch.dir().to_path_buf())
    }

    /// A client names the other root of its pair, so it could have this
    /// host keep an archive for every name it makes up: a new archive is
    /// made only while the directory holds fewer than `MAX_ARCHIVES`.
    fn room_for_archive(&self, dir: &Path, other: &[u8]) -> Result<(), SideFailure> {
        let this = self
            .replica
            .sync_identity()
            .map_err(|e| SideFailure::said(format!("cannot name this root: {e}")))?;
        if accord_archive::pair_files(dir, &this, other)
            .archive
            .exists()
        {
            return Ok(());
        }
        let kept = std::fs::read_dir(dir).map_or(0, |entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.starts_with("archive-") && name.ends_with(".sqlite")
                })
                .count()
        });
        if kept >= MAX_ARCHIVES {
            return Err(SideFailure::said(format!(
                "the server keeps {kept} sync archives, its limit, so it cannot start a new pair; \
                 its administrator can remove those of pairs no longer synced"
            )));
        }
        Ok(())
    }

    /// Keep the rules for this session (a watch connection opens no
    /// archive) and give them to the side open now, if any.
    fn set_rules(&self, rules: SyncRules) -> Result<(), SideFailure> {
        let mut slot = self.side.lock().unwrap();
        if let Some(side) = slot.as_mut() {
            side.set_rules(&rules)?;
        }
        *self.rules.lock().unwrap() = Some(rules);
        Ok(())
    }

    /// Follow the links `patterns` name from now on, kept with the rules
    /// (a server confined to a tree follows only links that stay in it:
    /// `LocalReplica::with_follow_fence`).
    fn set_follow(&self, patterns: &[String]) -> Result<(), SideFailure> {
        let mut rules = self.rules.lock().unwrap().clone().unwrap_or_default();
        rules.follow = patterns.to_vec();
        self.set_rules(rules)
    }

    fn with_side<T>(
        &self,
        f: impl FnOnce(&mut LocalSide<'a>) -> Result<T, SideFailure>,
    ) -> Result<T, SideFailure> {
        match self.side.lock().unwrap().as_mut() {
            Some(side) => f(side),
            None => Err(SideFailure::said("no archive is open in this session")),
        }
    }
}
