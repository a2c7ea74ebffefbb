//! The control channel of a live union: a Unix socket in the abstract namespace named after
//! the mount point, one request line in, one answer out.
//!
//! Requests (tab-separated): `ping`, `list`, `stats`, `add PATH AFTER MODE` (AFTER: a branch
//! number, or `-` for the default place), `remove PATH`, `mode PATH MODE`, `snapshot PATH`,
//! `policy [KEY=VALUE…]` (a pool's policies, changed and listed).
//! Answers: `ok\n` followed by data, or `err MSG\n`.
//! Only root and the user who mounted may talk to it (checked with SO_PEERCRED): anyone able to
//! add a branch could otherwise show arbitrary files under the mount.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::branch::{parse_spec, Branch, BranchSpec, Mode, Table};
use crate::fs::Shared;
use crate::guard;

fn addr(mountpoint: &Path) -> io::Result<SocketAddr> {
    let mut name = b"accord-union:".to_vec();
    name.extend_from_slice(mountpoint.as_os_str().as_bytes());
    SocketAddr::from_abstract_name(&name)
}

pub(crate) fn listen(mountpoint: &Path) -> io::Result<UnixListener> {
    UnixListener::bind_addr(&addr(mountpoint)?)
}

fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid socket and out buffer of the stated length.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Serve requests until the process ends. `after_change` runs after every table swap (the
/// daemon uses it to make the kernel drop names it cached from the old table).
pub(crate) fn serve(listener: UnixListener, shared: Arc<Shared>, after_change: impl Fn()) {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let allowed = matches!(peer_uid(&conn), Ok(u) if u == 0 || u == me);
        let mut line = String::new();
        if BufReader::new(&conn).read_line(&mut line).is_err() {
            continue;
        }
        let answer = if !allowed {
            Err("permission denied".to_string())
        } else {
            handle(&shared, line.trim_end_matches('\n'))
        };
        let changed = matches!(&answer, Ok((_, true)));
        let text = match answer {
            Ok((data, _)) => format!("ok\n{data}"),
            Err(e) => format!("err {e}\n"),
        };
        if changed {
            after_change();
        }
        let _ = conn.write_all(text.as_bytes());
    }
}

/// Apply one request. Returns the answer data and whether the table changed.
fn handle(shared: &Shared, line: &str) -> Result<(String, bool), String> {
    let parts: Vec<&str> = line.split('\t').collect();
    let current = shared.table.lock().unwrap().clone();
    let open = |p: &str, m: Mode| open_checked(Path::new(p), m, &shared.mountpoint);
    let canon = |p: &str| -> PathBuf {
        Path::new(p)
            .canonicalize()
            .unwrap_or_else(|_| PathBuf::from(p))
    };
    let nc_refused = |path: &str, mode: &str| {
        let nc = Mode::parse(mode) == Ok(Mode::Nc) && shared.pool.is_none();
        match nc {
            true => Err(crate::nc_needs_pool(Path::new(path))),
            false => Ok(()),
        }
    };
    if let ["add", path, _, mode] | ["mode", path, mode] = parts.as_slice() {
        nc_refused(path, mode)?;
    }
    if let ["policy", pairs @ ..] = parts.as_slice() {
        return Ok((policy(shared, pairs)?, false));
    }
    let new: Table = match parts.as_slice() {
        ["ping"] => return Ok((String::new(), false)),
        ["list"] => return Ok((current.describe(), false)),
        // Internal figures (for tests and diagnosis).
        ["stats"] => {
            let inodes = shared
                .nodes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .count();
            return Ok((format!("inodes\t{inodes}\n"), false));
        }
        ["add", path, after, mode] => {
            let mode = Mode::parse(mode)?;
            let after = match *after {
                "-" => None,
                n => Some(n.parse().map_err(|_| format!("bad branch number {n:?}"))?),
            };
            current.with_added_after(open(path, mode)?, after)?
        }
        ["remove", path] => current.with_removed(&canon(path))?,
        ["mode", path, mode] => current.with_mode(&canon(path), Mode::parse(mode)?)?,
        ["snapshot", path] => current.with_snapshot(open(path, Mode::Rw)?)?,
        _ => return Err(format!("unknown request {line:?}")),
    };
    let desc = new.describe();
    *shared.table.lock().unwrap() = Arc::new(new);
    Ok((desc, true))
}

/// `policy KEY=VALUE…`: change a pool's policies (all or none), then list them, one
/// `KEY=VALUE` a line.
fn policy(shared: &Shared, pairs: &[&str]) -> Result<String, String> {
    let pool = shared.pool.as_ref().ok_or(
        "this union is an overlay, not a pool: its policies are fixed (a pool is mounted with \
         -o category.create=POLICY)",
    )?;
    let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
    let mut changed = *p;
    for pair in pairs {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?}: give KEY=VALUE, as category.create=mfs"))?;
        if !changed.set(key, value)? {
            return Err(format!(
                "{key}: not a pool option (category.create, category.action, category.search, \
                 func.NAME as func.chmod, minfreespace, moveonenospc)"
            ));
        }
    }
    *p = changed;
    Ok(p.to_options().iter().map(|o| format!("{o}\n")).collect())
}

/// A change to the branch list as mergerfs's control file takes it (`user.mergerfs.branches`):
/// `LIST` or `=LIST` replaces the list, `+LIST` or `+>LIST` appends, `+<LIST` prepends,
/// `-LIST` removes the branches named, `-<` the first and `->` the last. LIST is
/// `DIR[=MODE[,SIZE]]:…` (a branch without a mode is `rw`, as in mergerfs). Applied at once
/// (all or nothing); the caller makes the kernel forget what it cached.
pub(crate) fn change_branches(shared: &Shared, value: &str) -> Result<(), String> {
    let (op, list) = match value.as_bytes() {
        [b'+' | b'-', b'<' | b'>', ..] => value.split_at(2),
        [b'+' | b'-' | b'=', ..] => value.split_at(1),
        _ => ("=", value),
    };
    let current = shared
        .table
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut v = current.branches.clone();
    let named = || -> Result<Vec<Arc<Branch>>, String> {
        let specs = list.split(':').filter(|s| !s.is_empty()).map(parse_spec);
        let specs: Vec<BranchSpec> = specs.collect::<Result<_, _>>()?;
        specs
            .iter()
            .map(|s| branch_for(&current, s, &shared.mountpoint))
            .collect()
    };
    match op {
        "=" => v = named()?,
        "+" | "+>" => v.extend(named()?),
        "+<" => v.splice(0..0, named()?).for_each(drop),
        "-" => {
            // (The paths as the list shows them: nothing is looked up, so a path inside the
            // union is never resolved by the thread that serves it.)
            let gone: Vec<&Path> = list.split(':').map(Path::new).collect();
            v.retain(|b| !gone.contains(&b.path.as_path()));
        }
        "-<" if list.is_empty() && !v.is_empty() => drop(v.remove(0)),
        "->" if list.is_empty() => drop(v.pop()),
        _ => return Err(format!("{value:?}: not a change of the branch list")),
    }
    let new = current.with_list(v)?;
    *shared.table.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
    Ok(())
}

/// The branch `spec` names: a branch of `current` with the mode and `minfreespace` given, or a
/// directory opened as a new one (checked as `add` checks it).
fn branch_for(
    current: &Table,
    spec: &BranchSpec,
    mountpoint: &Path,
) -> Result<Arc<Branch>, String> {
    let mode = spec.mode.unwrap_or(Mode::Rw);
    // Judged by its components before anything is looked up (see `open_checked`).
    let mounts = guard::our_mounts()
        .map_err(|e| format!("cannot read the mount table: {}", crate::io_words(&e)))?;
    guard::check_lexically(&spec.path, &mounts)?;
    let canon = spec
        .path
        .canonicalize()
        .unwrap_or_else(|_| spec.path.clone());
    if let Some(i) = current.find(&canon) {
        return Ok(Arc::new(
            current.branches[i].with_settings(mode, spec.min_free),
        ));
    }
    let b = open_checked(&spec.path, mode, mountpoint)?;
    Ok(Arc::new(b.with_min_free(spec.min_free)))
}

/// Open `path` as a new branch of the live union, unless it lies inside a union of ours (see
/// `guard`). The path is first judged by its components alone, so a path in a union (this one
/// included) is refused before anything is looked up there; opening it (on this thread, never
/// one that serves the union) then gives the device that settles the cases the path hides
/// (symlinks, bind mounts).
fn open_checked(path: &Path, mode: Mode, mountpoint: &Path) -> Result<Branch, String> {
    let mounts = guard::our_mounts()
        .map_err(|e| format!("cannot read the mount table: {}", crate::io_words(&e)))?;
    guard::check_lexically(path, &mounts)?;
    let fail = |e: io::Error| {
        format!(
            "cannot use {} as a branch: {}",
            path.display(),
            crate::io_words(&e)
        )
    };
    let b = Branch::open(path, mode).map_err(fail)?;
    let id = b.dev_ino().map_err(fail)?;
    guard::check_lexically(&b.path, &mounts)?;
    guard::check_dev(&b.path, id.0, &mounts)?;
    guard::check_not_above(&b.path, id, mountpoint)?;
    Ok(b)
}

/// Send one request to the union mounted at `mountpoint` and return its answer data.
pub fn request(mountpoint: &Path, fields: &[&OsStr]) -> Result<String, String> {
    let words = |e: io::Error| crate::io_words(&e);
    let mp = mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {}", mountpoint.display(), words(e)))?;
    let mut s = UnixStream::connect_addr(&addr(&mp).map_err(words)?).map_err(|e| {
        // Nothing listens: no union of ours is mounted there.
        match e.kind() {
            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => {
                format!("{} is not an accord union mount", mp.display())
            }
            _ => format!("cannot reach the union at {}: {}", mp.display(), words(e)),
        }
    })?;
    let mut line = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        if f.as_bytes().contains(&b'\t') || f.as_bytes().contains(&b'\n') {
            return Err("paths with tabs or newlines are not supported here".into());
        }
        if i > 0 {
            line.push(b'\t');
        }
        line.extend_from_slice(f.as_bytes());
    }
    line.push(b'\n');
    s.write_all(&line).map_err(words)?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(words)?;
    if let Some(data) = out.strip_prefix("ok\n") {
        Ok(data.to_string())
    } else if let Some(msg) = out.strip_prefix("err ") {
        Err(msg.trim_end().to_string())
    } else {
        Err(format!("unexpected answer {out:?}"))
    }
}
