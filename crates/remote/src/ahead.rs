//! Listings asked for ahead of the walk. When a listing's reply arrives,
//! the listings of its subdirectories are asked for at once, by a thread of
//! the connection's own: a tree then costs one round trip per level of
//! depth, whatever order the walk takes it in (a walk that asked only for
//! the children of the directory it had just taken would pay a round trip
//! each time it went down a branch whose listing nobody had asked for).
//!
//! At most `MAX_AHEAD` listings are asked for and not taken, and none
//! more once `MAX_HELD` bytes of them wait for the walk (which then asks
//! for what it needs itself). A directory the run's rules exclude is never
//! asked for: the prefetcher
//! keeps its own copy of each side's rules, built from the same patterns
//! and given every `.accordignore` a listing carries.

use crate::client::{CallError, ReplyReader};
use accord_fsys::{IgnoreRules, Listing, SameFs};
use accord_model::RelPath;
use accord_proto::codec::{get_failures, get_listing};
use accord_proto::msg::ListOptions;
use accord_proto::Dec;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

/// Most listings asked for ahead and not yet taken by the walk.
const MAX_AHEAD: usize = 1024;
/// Most bytes of listings arrived and not yet taken by the walk: above it,
/// nothing more is asked for ahead (the walk asks for what it needs).
const MAX_HELD: u64 = 64 << 20;

/// A directory, and whether it was listed as a source.
pub type Key = (RelPath, bool);

/// Sends a listing request; its reply as a stream.
pub type Asker = dyn Fn(&RelPath, &ListOptions) -> Result<ReplyReader, CallError> + Send + Sync;

/// One listing asked for ahead: its reply once it is in.
#[derive(Default)]
pub struct Slot {
    reply: Mutex<Option<Result<Vec<u8>, CallError>>>,
    filled: Condvar,
}

impl Slot {
    fn fill(&self, reply: Result<Vec<u8>, CallError>) {
        *self.reply.lock().unwrap() = Some(reply);
        self.filled.notify_all();
    }

    /// The reply, once the prefetcher has it.
    fn take(&self) -> Result<Vec<u8>, CallError> {
        let mut r = self.reply.lock().unwrap();
        loop {
            if let Some(reply) = r.take() {
                return reply;
            }
            r = self.filled.wait(r).unwrap();
        }
    }
}

/// A reply on its way, for the prefetcher to wait for.
struct Asked {
    key: Key,
    opts: ListOptions,
    reply: ReplyReader,
    slot: Arc<Slot>,
}

#[derive(Default)]
struct Queue {
    asked: VecDeque<Asked>,
    stop: bool,
}

/// The listings asked for ahead of one replica's walk.
pub struct Ahead {
    ask: Box<Asker>,
    /// Bytes of listings arrived and not yet taken.
    held: std::sync::atomic::AtomicU64,
    /// The rules of each side (source or not), once it asked for one.
    rules: Mutex<HashMap<bool, Arc<IgnoreRules>>>,
    /// `-x` per side (source: true): nothing across a mount point is
    /// asked for ahead.
    fences: Mutex<HashMap<bool, SameFs>>,
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    queue: Mutex<Queue>,
    more: Condvar,
}

impl Ahead {
    /// Start the prefetcher's thread; `ask` sends one listing request.
    pub fn start(ask: Box<Asker>) -> std::io::Result<Arc<Ahead>> {
        let ahead = Arc::new(Ahead {
            ask,
            held: std::sync::atomic::AtomicU64::new(0),
            rules: Mutex::new(HashMap::new()),
            fences: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
            queue: Mutex::new(Queue::default()),
            more: Condvar::new(),
        });
        let a = ahead.clone();
        std::thread::Builder::new()
            .name("accord-ahead".into())
            .spawn(move || a.run())?;
        Ok(ahead)
    }

    /// Ask for `dir`'s listing now (unless it is asked for already, or
    /// too many are waiting to be taken).
    pub fn ask(&self, dir: &RelPath, source: bool, opts: &ListOptions) {
        let key = (dir.clone(), source);
        let slot = {
            let mut slots = self.slots.lock().unwrap();
            let held = self.held.load(std::sync::atomic::Ordering::Relaxed);
            if slots.len() >= MAX_AHEAD || held > MAX_HELD || slots.contains_key(&key) {
                return;
            }
            let slot = Arc::new(Slot::default());
            slots.insert(key.clone(), slot.clone());
            slot
        };
        match (self.ask)(dir, opts) {
            Ok(reply) => {
                let mut q = self.queue.lock().unwrap();
                q.asked.push_back(Asked {
                    key,
                    opts: opts.clone(),
                    reply,
                    slot,
                });
                drop(q);
                self.more.notify_all();
            }
            Err(e) => slot.fill(Err(e)),
        }
    }

    /// `-x` on one side (see `SameFs`): set by the walk before it lists.
    pub fn fence(&self, source: bool, same_fs: Option<SameFs>) {
        let mut fences = self.fences.lock().unwrap();
        match same_fs {
            Some(f) => fences.insert(source, f),
            None => fences.remove(&source),
        };
    }

    /// The subdirectories of `listing` to ask for ahead: none below a mount
    /// point, and no mount point, under `-x`.
    pub fn below<'l>(&self, source: bool, listing: &'l Listing) -> Vec<&'l RelPath> {
        let fence = self.fences.lock().unwrap().get(&source).copied();
        let Some(f) = fence else {
            return listing.subdirs.iter().map(|e| &e.path).collect();
        };
        if listing.entries.first().is_some_and(|me| f.is_mount_dir(me)) {
            return Vec::new();
        }
        let on_fs = listing.subdirs.iter().filter(|e| !f.is_mount_dir(e));
        on_fs.map(|e| &e.path).collect()
    }

    /// Ask for the listings of these subdirectories (those the rules do
    /// not exclude).
    pub fn ask_all<'a>(
        &self,
        dirs: impl Iterator<Item = &'a RelPath>,
        source: bool,
        opts: &ListOptions,
    ) {
        let Some(rules) = self.rules_of(source, opts) else {
            return;
        };
        for d in dirs.filter(|d| !rules.is_excluded(d, true)) {
            self.ask(d, source, opts);
        }
    }

    /// An `.accordignore` found in `dir` (by the walk, in a listing it
    /// asked for itself): it rules what is asked for below.
    pub fn add_ignore_file(
        &self,
        dir: &RelPath,
        source: bool,
        opts: &ListOptions,
        contents: &[u8],
    ) {
        if let Some(rules) = self.rules_of(source, opts) {
            rules.add_dir_file(dir, contents);
        }
    }

    /// The prefetcher's rules of one side (`None`: the patterns do not
    /// build, and the walk will say so; nothing is asked for ahead).
    fn rules_of(&self, source: bool, opts: &ListOptions) -> Option<Arc<IgnoreRules>> {
        let mut all = self.rules.lock().unwrap();
        if let Some(r) = all.get(&source) {
            return Some(r.clone());
        }
        let rules = Arc::new(IgnoreRules::new(&opts.excludes).ok()?);
        all.insert(source, rules.clone());
        Some(rules)
    }

    /// The slot of `dir`'s listing, if it was asked for ahead (the walk
    /// takes each listing once).
    pub fn claim(&self, key: &Key) -> Option<Arc<Slot>> {
        self.slots.lock().unwrap().remove(key)
    }

    /// The reply of a claimed slot, once it is in.
    pub fn take(&self, slot: &Slot) -> Result<Vec<u8>, CallError> {
        let reply = slot.take();
        if let Ok(b) = &reply {
            self.held
                .fetch_sub(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        reply
    }

    fn stopped(&self) -> bool {
        self.queue.lock().unwrap().stop
    }

    /// No more listings: the thread ends once the replies on their way
    /// are in (or the connection is gone).
    pub fn stop(&self) {
        self.queue.lock().unwrap().stop = true;
        self.more.notify_all();
    }

    fn run(&self) {
        while let Some(asked) = self.next() {
            let reply = asked.reply.whole();
            if let Ok(bytes) = &reply {
                self.held
                    .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            if let (Ok(bytes), false) = (&reply, self.stopped()) {
                // The walk decodes and checks the whole listing when it
                // takes it; here only what says what to ask for next.
                let (dir, source) = &asked.key;
                let (listing, ignore_file) = read_ahead_of(dir, bytes);
                if let Some(contents) = ignore_file {
                    self.add_ignore_file(dir, *source, &asked.opts, &contents);
                }
                if let Some(l) = listing {
                    let subdirs = self.below(*source, &l);
                    self.ask_all(subdirs.into_iter(), *source, &asked.opts);
                }
            }
            asked.slot.fill(reply);
        }
    }

    fn next(&self) -> Option<Asked> {
        let mut q = self.queue.lock().unwrap();
        loop {
            if let Some(a) = q.asked.pop_front() {
                return Some(a);
            }
            if q.stop {
                return None;
            }
            q = self.more.wait(q).unwrap();
        }
    }
}

/// The subdirectories a listing reply names and the `.accordignore` it
/// carries (nothing when it does not decode: the walk will say why when it
/// takes it).
fn read_ahead_of(dir: &RelPath, reply: &[u8]) -> (Option<Listing>, Option<Vec<u8>>) {
    let mut d = Dec::new(reply);
    let mut read = || -> Result<_, accord_proto::ProtoError> {
        let listing = match d.bool("listing present")? {
            true => Some(get_listing(&mut d, dir)?),
            false => None,
        };
        get_failures(&mut d)?;
        d.bool("incomplete")?;
        let ignore_file = match d.bool("ignore file present")? {
            true => Some(d.bytes(1 << 20, "ignore file")?.to_vec()),
            false => None,
        };
        Ok((listing, ignore_file))
    };
    read().unwrap_or_default()
}
