//! This host's side of a sync ([`LocalSide`]): its archive opened and
//! locked here, the walk of its tree against that archive, the lookups the
//! other side's updates ask for, and the archive's writes.

use super::LocalReplica;
use crate::seam::Replica;
use crate::side::follow;
use crate::side::rules::{child_excluded, side_matcher, LookupRules, SyncRules};
use crate::side::SideCause;
use crate::side::{ctime_to_record, local_identity, xattr_filter, xattr_scope};
use crate::side::{ArchiveRecord, SideChange, SideFailure, SideOptions, SideScan, SideSession};
use crate::side::{UNKNOWN_CTIME, UNSEEN_CTIME};
use accord_archive::{Archive, ArchiveError, Cursor};
use accord_fsys::{IgnoreRules, ScanOptions, XattrFilter};
use accord_model::{Kind, Observed, PathFailure, RelPath, Time};
use accord_plan::{detect, DetectOptions, Detection, Update, VersionVector};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A replica of this host's side of a sync.
pub struct LocalSide<'a> {
    replica: &'a LocalReplica,
    pub(super) archive: Archive,
    created: bool,
    rules: Option<SyncRules>,
    /// The last scan's matcher, with the `.accordignore` files it read:
    /// the lookups that follow the scan judge by it.
    matcher: IgnoreRules,
    /// Links the last scan found no longer followed where the archive
    /// recorded what they led to (the replica crate's side/follow.rs): the lookups fail the
    /// paths beneath them.
    unfollowed: std::cell::RefCell<Vec<RelPath>>,
    /// The archive is a set's, with version vectors.
    pub(super) set: bool,
}

impl<'a> LocalSide<'a> {
    /// Open (and lock) the archive `replica` keeps of its pair with the
    /// root named `other`, in `archive_dir`. A damaged archive is set aside
    /// and replaced by an empty one (the pair's agreement is then lost).
    pub fn open(
        replica: &'a LocalReplica,
        other: &[u8],
        archive_dir: &Path,
    ) -> Result<LocalSide<'a>, SideFailure> {
        let this = local_identity(replica.root().path());
        let archive = match Archive::open(archive_dir, &this, other) {
            Err(e) if e.is_damaged() => Archive::recreate(archive_dir, &this, other)?,
            result => result?,
        };
        LocalSide::with_archive(replica, archive, false)
    }

    pub(super) fn with_archive(
        replica: &'a LocalReplica,
        archive: Archive,
        set: bool,
    ) -> Result<LocalSide<'a>, SideFailure> {
        Ok(LocalSide {
            replica,
            created: archive.was_created(),
            archive,
            rules: None,
            matcher: side_matcher(None)?,
            unfollowed: Default::default(),
            set,
        })
    }
}

impl SideSession for LocalSide<'_> {
    fn created(&self) -> bool {
        self.created
    }

    fn forget(&mut self) -> Result<(), SideFailure> {
        let mut batch = self.archive.batch()?;
        batch.remove(&RelPath::root())?;
        batch.remove_subtree(&RelPath::root())?;
        if self.set {
            batch.clear_versions()?;
        }
        Ok(batch.commit()?)
    }

    fn set_rules(&mut self, rules: &SyncRules) -> Result<(), SideFailure> {
        self.replica
            .set_follow(&rules.follow)
            .map_err(|e| SideFailure::Failed(SideCause::FollowPattern(e)))?;
        self.matcher = side_matcher(Some(rules))?;
        self.rules = Some(rules.clone());
        Ok(())
    }

    fn scan(&mut self, opts: &SideOptions) -> Result<SideScan, SideFailure> {
        self.scope_xattrs(opts)?;
        // Afresh: the walk reads the `.accordignore` files as they are now.
        self.matcher = side_matcher(self.rules.as_ref())?;
        let mut walker = Walker::new(
            self.replica,
            opts.use_archive.then_some(&self.archive),
            opts,
            self.walk_rules(),
        );
        walker.stream = walker.archive.map(ArchiveStream::new);
        self.unfollowed.borrow_mut().clear();
        walker.unfollowed = Some(&self.unfollowed);
        walker.walk()
    }

    fn lookup(&mut self, paths: &[RelPath], opts: &SideOptions) -> Result<SideScan, SideFailure> {
        self.scope_xattrs(opts)?;
        let mut walker = Walker::new(
            self.replica,
            opts.use_archive.then_some(&self.archive),
            opts,
            self.walk_rules(),
        );
        let mut lookups = Lookups::new(paths);
        let mut excluded = LookupRules::new(&self.matcher, self.replica);
        for (index, path) in paths.iter().enumerate() {
            let archived = match walker.archive {
                Some(archive) => archive.get(path)?,
                None => None,
            };
            if self.beneath_unfollowed(path) {
                // As the archive recorded it: this run cannot see it.
                walker.judge(path, archived.clone(), archived, true);
                continue;
            }
            // Paths come in order: one beneath `path` follows it at once,
            // and then `path` is a directory on the other side.
            let asked_beneath = paths
                .get(index + 1)
                .is_some_and(|next| next.starts_with(path) && next != path);
            let other = asked_beneath.then_some(Kind::Dir);
            if excluded.excluded(path, archived.as_ref(), other) {
                walker.out.excluded.push(path.clone());
                continue;
            }
            let current = walker.current_at(path, &mut lookups)?;
            if walker.fails_followed(path) {
                continue;
            }
            if current.is_none() && excluded.hidden(path) {
                walker.out.excluded.push(path.clone());
                continue;
            }
            walker.judge(path, archived, current, true);
        }
        Ok(walker.out)
    }

    fn record(&mut self, records: &[ArchiveRecord]) -> Result<(), SideFailure> {
        self.record_versions_unchecked(records, &[])
    }

    fn count_run(&mut self) -> Result<u64, SideFailure> {
        self.require_set()?;
        Ok(self.archive.count_run()?)
    }

    fn versions(&mut self) -> Result<Vec<(RelPath, VersionVector)>, SideFailure> {
        self.require_set()?;
        self.checked_versions()
    }

    fn versions_digest(&mut self) -> Result<[u8; 32], SideFailure> {
        self.require_set()?;
        Ok(self.archive.versions_digest()?)
    }

    fn versions_at(&mut self, paths: &[RelPath]) -> Result<Vec<VersionVector>, SideFailure> {
        self.require_set()?;
        paths
            .iter()
            .map(|path| self.checked_version(path))
            .collect()
    }

    fn record_versions(
        &mut self,
        records: &[ArchiveRecord],
        versions: &[(RelPath, VersionVector)],
    ) -> Result<(), SideFailure> {
        self.require_set()?;
        self.record_versions_unchecked(records, versions)
    }
}

impl LocalSide<'_> {
    /// Where the archive's lists of extended attributes were read under
    /// another selection than this run's, forget them before they are
    /// taken for unchanged files (`accord_archive`'s xattr_scope.rs).
    fn scope_xattrs(&mut self, opts: &SideOptions) -> Result<(), SideFailure> {
        let scope = xattr_scope(&xattr_filter(&opts.detect.props));
        self.archive.set_xattr_scope(&scope)?;
        Ok(())
    }

    /// Does `path` lie beneath a link no longer followed?
    fn beneath_unfollowed(&self, path: &RelPath) -> bool {
        let unfollowed = self.unfollowed.borrow();
        unfollowed
            .iter()
            .any(|link| path.starts_with(link) && path != link)
    }

    fn walk_rules(&self) -> WalkRules<'_> {
        WalkRules {
            matcher: &self.matcher,
            read_ignore_files: self.rules.as_ref().is_some_and(|r| r.ignore_files),
        }
    }
}

/// What a walk leaves out: the side's matcher, and whether it reads the
/// `.accordignore` files it meets into it.
#[derive(Clone, Copy)]
struct WalkRules<'a> {
    matcher: &'a IgnoreRules,
    read_ignore_files: bool,
}

/// The listings of the parents of looked-up paths, kept while the lookups
/// stay in one part of the tree (`None`: not a directory on this side).
#[derive(Default)]
struct Lookups {
    listed: HashMap<RelPath, Option<BTreeMap<Vec<u8>, Observed>>>,
    /// The names looked up in each parent, sorted: only those are stat'ed
    /// (a lookup of a few files does not stat their whole directories).
    asked: HashMap<RelPath, Vec<Vec<u8>>>,
}

impl Lookups {
    fn new(paths: &[RelPath]) -> Lookups {
        let mut asked: HashMap<RelPath, Vec<Vec<u8>>> = HashMap::new();
        for path in paths {
            if let Some(parent) = path.parent() {
                asked
                    .entry(parent)
                    .or_default()
                    .push(path.file_name().to_vec());
            }
        }
        for names in asked.values_mut() {
            names.sort_unstable();
            names.dedup();
        }
        Lookups {
            listed: HashMap::new(),
            asked,
        }
    }
}

/// Parents' listings kept at most (a lookup's paths come in tree order,
/// so older ones are rarely asked again).
const MAX_LISTINGS_KEPT: usize = 256;

/// The archive read in key order beside the walk, which visits paths in
/// that same order (a directory, then each child's subtree in name order):
/// one sequential read of the archive, a page at a time, instead of a seek
/// per child.
struct ArchiveStream<'a> {
    archive: &'a Archive,
    cursor: Cursor,
    peeked: Option<Observed>,
}

impl<'a> ArchiveStream<'a> {
    fn new(archive: &'a Archive) -> Self {
        ArchiveStream {
            archive,
            cursor: Cursor::all(),
            peeked: None,
        }
    }

    fn peek(&mut self) -> Result<Option<&Observed>, ArchiveError> {
        if self.peeked.is_none() {
            self.peeked = self.cursor.next(self.archive)?;
        }
        Ok(self.peeked.as_ref())
    }

    /// The entry recorded at `path`, when it is the next one.
    fn take_at(&mut self, path: &RelPath) -> Result<Option<Observed>, ArchiveError> {
        if self.peek()?.is_some_and(|o| o.entry.path == *path) {
            return Ok(self.peeked.take());
        }
        Ok(None)
    }

    /// The child of `dir` that holds the next entry (that entry's own path
    /// when it is the child, which is the rule), or None when the next
    /// entry lies outside `dir`. The child itself need not be recorded: a
    /// directory left in conflict is not, while the entries beneath it
    /// that were synced are.
    fn next_child_of(&mut self, dir: &RelPath) -> Result<Option<RelPath>, ArchiveError> {
        let Some(next) = self.peek()? else {
            return Ok(None);
        };
        let path = &next.entry.path;
        if !path.starts_with(dir) || path == dir {
            return Ok(None);
        }
        let skip = if dir.is_root() {
            0
        } else {
            dir.as_bytes().len() + 1
        };
        let rest = &path.as_bytes()[skip..];
        Ok(Some(match rest.iter().position(|b| *b == b'/') {
            None => path.clone(),
            Some(end) => dir
                .join(&rest[..end])
                .expect("a component of a valid path is a valid name"),
        }))
    }

    /// Does the next entry lie strictly beneath `dir`? (`next_child_of`
    /// without its name.)
    fn holds_beneath(&mut self, dir: &RelPath) -> Result<bool, ArchiveError> {
        Ok(self
            .peek()?
            .is_some_and(|next| next.entry.path.starts_with(dir) && next.entry.path != *dir))
    }

    /// Pass over every entry strictly beneath `path` (a subtree the walk
    /// did not go into, or an archive entry under a file).
    fn skip_beneath(&mut self, path: &RelPath) -> Result<(), ArchiveError> {
        while let Some(next) = self.peek()? {
            if !next.entry.path.starts_with(path) || next.entry.path == *path {
                return Ok(());
            }
            self.peeked = None;
        }
        Ok(())
    }
}

/// One side's walk against its archive, or its lookups.
struct Walker<'a> {
    replica: &'a LocalReplica,
    archive: Option<&'a Archive>,
    /// The walk's read of the archive (lookups use `archive` directly).
    stream: Option<ArchiveStream<'a>>,
    detect: DetectOptions,
    rules: WalkRules<'a>,
    scan_start_s: i64,
    out: SideScan,
    /// The directory whose entries' extended attributes were read last
    /// (entries of one directory come one after another).
    xattr_dir: Option<(RelPath, accord_fsys::Dir)>,
    /// Followed links found leading nowhere, by path, until the walk or a
    /// lookup meets them (the replica crate's side/follow.rs).
    broken: std::cell::RefCell<HashMap<RelPath, String>>,
    /// Where the walk notes the links no longer followed (see `LocalSide`).
    unfollowed: Option<&'a std::cell::RefCell<Vec<RelPath>>>,
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Is `now` the very entry `was` recorded, unchanged in any property
/// (same inode, same ctime; a recorded ctime of ours matches none)?
fn ctime_vouches(was: &Observed, now: &Observed) -> bool {
    was.ctime == now.ctime
        && was.entry.ino == now.entry.ino
        && was.entry.dev == now.entry.dev
        && was.entry.kind == now.entry.kind
}

fn is_dir(observed: &Option<Observed>) -> bool {
    observed.as_ref().is_some_and(|o| o.entry.kind == Kind::Dir)
}

impl<'a> Walker<'a> {
    fn new(
        replica: &'a LocalReplica,
        archive: Option<&'a Archive>,
        opts: &SideOptions,
        rules: WalkRules<'a>,
    ) -> Self {
        Walker {
            replica,
            archive,
            stream: None,
            detect: opts.detect,
            rules,
            scan_start_s: now_s(),
            out: SideScan::default(),
            xattr_dir: None,
            broken: Default::default(),
            unfollowed: None,
        }
    }

    fn walk(mut self) -> Result<SideScan, SideFailure> {
        let root = RelPath::root();
        let current = Some(self.root_entry()?);
        let archived = match self.stream.as_mut() {
            Some(stream) => stream.take_at(&root)?,
            None => None,
        };
        self.visit(&root, archived, current)?;
        Ok(self.out)
    }

    fn scan_options(&self) -> ScanOptions<'static> {
        ScanOptions {
            read_ignore_files: self.rules.read_ignore_files,
            // Not a source: our temp names are listed as stale temps, not
            // as entries.
            ..ScanOptions::plain(XattrFilter::NONE, false)
        }
    }

    /// The root, which must be a readable directory.
    fn root_entry(&self) -> Result<Observed, SideFailure> {
        let listed = self.replica.list_dir_for_sync(
            &RelPath::root(),
            self.rules.matcher,
            &self.scan_options(),
        );
        let (listing, scan) = self.keep_broken(listed);
        match listing.map(observed_children) {
            Some(mut all) if scan.errors.is_empty() => Ok(all.swap_remove(0)),
            _ => Err(self.unreadable(scan_detail(&scan))),
        }
    }

    fn unreadable(&self, detail: String) -> SideFailure {
        SideFailure::Unreadable(SideCause::Unreadable {
            root: self.replica.describe(),
            detail,
        })
    }

    /// Judge `path`, then go down into it when it is a directory here or
    /// in the archive.
    fn visit(
        &mut self,
        path: &RelPath,
        archived: Option<Observed>,
        current: Option<Observed>,
    ) -> Result<(), SideFailure> {
        if !path.is_root() {
            self.out.counts.scanned += current.is_some() as usize;
            self.out.counts.archived += archived.is_some() as usize;
        }
        if follow::unfollowed(archived.as_ref(), current.as_ref()) {
            // Unchanged as seen before; what the archive holds beneath it
            // is kept, not taken as deleted.
            if let Some(unfollowed) = self.unfollowed {
                unfollowed.borrow_mut().push(path.clone());
            }
            self.judge(path, archived, current, false);
            return Ok(());
        }
        let current_dir = is_dir(&current);
        let descend = current_dir || is_dir(&archived) || self.archived_beneath(path)?;
        if !self.judge(path, archived, current, false) {
            // Left out of the run whole: nothing beneath is planned on a
            // state that could not be read.
            return Ok(());
        }
        if descend {
            self.descend(path, current_dir)?;
        }
        Ok(())
    }

    /// Detect this side's update at `path` (fingerprinting the file when
    /// metadata cannot decide) and note it when it is one, or always
    /// (`always`: a lookup). False when the file could not be judged.
    fn judge(
        &mut self,
        path: &RelPath,
        archived: Option<Observed>,
        current: Option<Observed>,
        always: bool,
    ) -> bool {
        let mut current = follow::seen_either_way(archived.as_ref(), current);
        if let Some(now) = current.as_mut() {
            self.read_xattrs(path, archived.as_ref(), now);
        }
        let update = loop {
            match detect(archived.as_ref(), current.as_ref(), &self.detect) {
                Detection::Decided(update) => break update,
                Detection::NeedsFingerprint => match self.replica.fingerprint(path) {
                    Ok(fingerprint) => {
                        let file = current
                            .as_mut()
                            .expect("only a present file is fingerprinted");
                        file.entry.hash = Some(fingerprint);
                    }
                    Err(e) => {
                        self.out.failures.push(PathFailure {
                            path: path.clone(),
                            message: e.to_string(),
                        });
                        return false;
                    }
                },
            }
        };
        if always || update != Update::Unchanged {
            let record_ctime =
                (current.as_ref()).map_or(UNKNOWN_CTIME, |o| ctime_to_record(o, self.scan_start_s));
            self.out.changes.push(SideChange {
                path: path.clone(),
                archived: archived.map(Box::new),
                current: current.map(Box::new),
                record_ctime,
            });
        }
        true
    }

    /// Set the entry's extended attributes and ACLs, as the sync selects
    /// them. Setting one moves the ctime, so where the entry is the one the
    /// archive recorded (same inode, same ctime) the archive's are taken
    /// without a read: a sync with nothing new reads none. Left unset (not
    /// compared, not replaced) where they cannot be read; a file system
    /// without them has none.
    fn read_xattrs(&mut self, path: &RelPath, archived: Option<&Observed>, now: &mut Observed) {
        let filter = xattr_filter(&self.detect.props);
        if !filter.any() || path.is_root() || now.entry.link_target.is_some() {
            return;
        }
        if let Some(was) = archived.filter(|was| ctime_vouches(was, now)) {
            if was.entry.props.xattrs.is_some() {
                now.entry.props.xattrs = was.entry.props.xattrs.clone();
                return;
            }
        }
        let parent = path.parent().unwrap_or_default();
        if self.xattr_dir.as_ref().map(|(at, _)| at) != Some(&parent) {
            self.xattr_dir = None;
            match self.replica.open_dir_following(&parent) {
                Ok(dir) => self.xattr_dir = Some((parent, dir)),
                Err(_) => return,
            }
        }
        let Some((_, dir)) = &self.xattr_dir else {
            return;
        };
        now.entry.props.xattrs = match dir.xattrs_at(path.file_name(), filter) {
            Ok(list) => Some(list),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Some(Vec::new()),
            Err(_) => None,
        };
    }

    /// Does the archive hold entries beneath `path`? (Then they are walked
    /// even where `path` is no directory now nor in the archive.)
    fn archived_beneath(&mut self, path: &RelPath) -> Result<bool, SideFailure> {
        match self.stream.as_mut() {
            Some(stream) => Ok(stream.holds_beneath(path)?),
            None => Ok(false),
        }
    }

    /// Visit the children of `path`: the union of its listing and its
    /// archived children, in name order (which is `RelPath` order, the
    /// archive stream's), each child's subtree before the next child.
    fn descend(&mut self, path: &RelPath, current_dir: bool) -> Result<(), SideFailure> {
        let listed = if current_dir {
            self.list_children(path)?
        } else {
            Vec::new()
        };
        let mut listed = listed.into_iter().peekable();
        loop {
            let archived_child = match self.stream.as_mut() {
                Some(stream) => stream.next_child_of(path)?,
                None => None,
            };
            // Children of one directory: path order is name order.
            let child = match (archived_child, listed.peek()) {
                (None, None) => return Ok(()),
                (Some(a), Some(l)) if l.entry.path < a => l.entry.path.clone(),
                (Some(a), _) => a,
                (None, Some(l)) => l.entry.path.clone(),
            };
            let archived = match self.stream.as_mut() {
                Some(stream) => stream.take_at(&child)?,
                None => None,
            };
            let current = listed.next_if(|o| o.entry.path == child);
            if self.fails_followed(&child)
                || self.excluded(&child, current.as_ref(), archived.as_ref())?
            {
                // Left alone, and its archive entries kept for the day
                // the rule goes.
                if let Some(stream) = self.stream.as_mut() {
                    stream.skip_beneath(&child)?;
                }
                continue;
            }
            self.visit(&child, archived, current)?;
            if let Some(stream) = self.stream.as_mut() {
                stream.skip_beneath(&child)?;
            }
        }
    }

    /// Is `child` left out by the rules? (The listing left out the entries
    /// it excludes; this judges what the archive holds there.)
    fn excluded(
        &mut self,
        child: &RelPath,
        current: Option<&Observed>,
        archived: Option<&Observed>,
    ) -> Result<bool, SideFailure> {
        let beneath = self.archived_beneath(child)?;
        Ok(child_excluded(
            self.rules.matcher,
            self.replica,
            child,
            current,
            archived,
            beneath,
        ))
    }

    /// The entries directly in `path`, with their ctimes, in order; stale
    /// temps of an interrupted run there are removed (we hold the lock).
    fn list_children(&self, path: &RelPath) -> Result<Vec<Observed>, SideFailure> {
        match self.listing(path, None)? {
            Some(children) => Ok(children),
            // Listed by its parent a moment ago: something is moving the
            // tree under us, and its entries must not look deleted.
            None => Err(self.unreadable(format!("{} vanished during the scan", path.display()))),
        }
    }

    /// The entries directly in `path` (None: it is not a directory), or
    /// those of them named in `only` (sorted).
    fn listing(
        &self,
        path: &RelPath,
        only: Option<&[Vec<u8>]>,
    ) -> Result<Option<Vec<Observed>>, SideFailure> {
        let opts = ScanOptions {
            only_names: only,
            ..self.scan_options()
        };
        let listed = self
            .replica
            .list_dir_for_sync(path, self.rules.matcher, &opts);
        let (listing, scan) = self.keep_broken(listed);
        if !scan.errors.is_empty() || scan.incomplete {
            return Err(self.unreadable(scan_detail(&scan)));
        }
        let Some(listing) = listing else {
            return Ok(None);
        };
        if !listing.stale_temps.is_empty() {
            if let Ok(dir) = self.replica.open_dir(path) {
                for temp in &listing.stale_temps {
                    dir.remove_stale_temp(temp.file_name());
                }
            }
        }
        let mut observed = observed_children(listing);
        observed.remove(0);
        observed.sort_by(|x, y| x.entry.path.cmp(&y.entry.path));
        Ok(Some(observed))
    }

    /// What this side holds at `path` now, found in its parent's listing.
    fn current_at(
        &self,
        path: &RelPath,
        lookups: &mut Lookups,
    ) -> Result<Option<Observed>, SideFailure> {
        let Some(parent) = path.parent() else {
            return self.root_entry().map(Some);
        };
        if !lookups.listed.contains_key(&parent) {
            if lookups.listed.len() >= MAX_LISTINGS_KEPT {
                lookups.listed.clear();
            }
            let only = lookups.asked.get(&parent).map(Vec::as_slice);
            let children = self.parent_listing(&parent, only)?;
            lookups.listed.insert(parent.clone(), children);
        }
        Ok(lookups.listed[&parent]
            .as_ref()
            .and_then(|children| children.get(path.file_name()).cloned()))
    }

    /// `parent`'s entries by name; None when it is not a directory here
    /// (or one of its ancestors is not).
    fn parent_listing(
        &self,
        parent: &RelPath,
        only: Option<&[Vec<u8>]>,
    ) -> Result<Option<BTreeMap<Vec<u8>, Observed>>, SideFailure> {
        let listed = match self.listing(parent, only) {
            Ok(listed) => listed,
            // A missing ancestor fails the open with ENOENT or ENOTDIR,
            // which the listing reports as an error: nothing is there.
            Err(_) if !self.is_dir_here(parent) => None,
            Err(e) => return Err(e),
        };
        Ok(listed.map(|children| {
            children
                .into_iter()
                .map(|o| (o.entry.path.file_name().to_vec(), o))
                .collect()
        }))
    }

    /// Keep the followed links a listing found leading nowhere, for the
    /// walk or the lookup that meets them.
    fn keep_broken(
        &self,
        listed: accord_fsys::FollowListing,
    ) -> (Option<accord_fsys::Listing>, accord_fsys::Scan) {
        let mut broken = self.broken.borrow_mut();
        for failure in listed.broken {
            broken.insert(failure.path, failure.message);
        }
        (listed.listing, listed.scan)
    }

    /// Is `path` a followed link that leads nowhere? Then it fails (with
    /// its subtree: never taken as deleted) and the caller passes it over.
    fn fails_followed(&mut self, path: &RelPath) -> bool {
        // Most walks meet none: no path is hashed for them.
        if self.broken.borrow().is_empty() {
            return false;
        }
        let Some(message) = self.broken.borrow_mut().remove(path) else {
            return false;
        };
        self.out.failures.push(PathFailure {
            path: path.clone(),
            message,
        });
        true
    }

    fn is_dir_here(&self, path: &RelPath) -> bool {
        self.replica.open_dir_following(path).is_ok()
    }
}

/// A listing's entries with their ctimes, the directory's own first. A
/// listing of this host carries the ctime of each entry from the stat that
/// made it; one without them (never from a `LocalReplica`) leaves every
/// ctime unseen, so metadata vouches for nothing and files are fingerprinted.
fn observed_children(listing: accord_fsys::Listing) -> Vec<Observed> {
    let ctimes = listing.ctimes().map(<[Time]>::to_vec);
    let entries = listing.entries.into_iter().chain(listing.subdirs);
    match ctimes {
        Some(ctimes) => entries
            .zip(ctimes)
            .map(|(entry, ctime)| Observed { entry, ctime })
            .collect(),
        None => entries
            .map(|entry| Observed {
                entry,
                ctime: UNSEEN_CTIME,
            })
            .collect(),
    }
}

fn scan_detail(scan: &accord_fsys::Scan) -> String {
    scan.errors
        .first()
        .map(|e| format!("{}: {}", e.path.display(), e.message))
        .unwrap_or_else(|| "cannot be listed".into())
}
