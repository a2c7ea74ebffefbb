//! Remote roots written `[user@]host:path` or `ssh://[user@]host[:port]/path`,
//! reached through the user's own `ssh` (or `--rsh`), which starts
//! `accord server` on the far side and carries the protocol over its stdin
//! and stdout.

use crate::client::{ConnectError, RemoteReplica};
use accord_proto::{Refusal, RootMode};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A root on another host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSpec {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    /// The path on that host, as written (empty: the login directory).
    pub path: String,
    /// Written `accord://`: a daemon, not ssh.
    pub daemon: bool,
}

impl RemoteSpec {
    /// The root as the user wrote it, for messages.
    pub fn display(&self) -> String {
        let user = self
            .user
            .as_ref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        if self.daemon {
            let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
            return format!(
                "accord://{user}{}{port}/{}",
                self.host,
                self.path.trim_start_matches('/')
            );
        }
        match self.port {
            Some(p) => format!("ssh://{user}{}:{p}{}", self.host, self.path),
            None => format!("{user}{}:{}", self.host, self.path),
        }
    }
}

/// Is `root` a remote root? `None` for a local path. Like rsync, a colon
/// before the first slash makes a remote root (`./a:b` and `/x:y` are
/// local); `ssh://` and `accord://` URLs are remote.
pub fn parse_remote(root: &str) -> Result<Option<RemoteSpec>, String> {
    for (scheme, daemon) in [("ssh://", false), ("accord://", true)] {
        if let Some(rest) = root.strip_prefix(scheme) {
            return parse_url(rest, daemon).map(Some);
        }
    }
    // An IPv6 address is written in brackets, as for scp and rsync:
    // `[::1]:path`, `user@[fe80::1%eth0]:path`.
    let bracketed = root
        .find("]:")
        .filter(|&i| root[..i].contains('[') && !root[..i].contains('/'));
    let Some(colon) = bracketed.map(|i| i + 1).or_else(|| root.find(':')) else {
        return Ok(None);
    };
    if root[..colon].contains('/') || colon == 0 {
        return Ok(None);
    }
    let (user, host) = split_user(&root[..colon])?;
    Ok(Some(RemoteSpec {
        user,
        host,
        port: None,
        path: root[colon + 1..].to_string(),
        daemon: false,
    }))
}

fn split_user(s: &str) -> Result<(Option<String>, String), String> {
    let (user, host) = match s.rsplit_once('@') {
        Some((u, h)) => (Some(u.to_string()), h),
        None => (None, s),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ok = !host.is_empty()
        && !host.starts_with('-')
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:%".contains(&b));
    if !ok
        || user
            .as_deref()
            .is_some_and(|u| u.is_empty() || u.starts_with('-'))
    {
        return Err(format!("{s:?} is not a host name"));
    }
    Ok((user, host.to_string()))
}

fn parse_url(rest: &str, daemon: bool) -> Result<RemoteSpec, String> {
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (hostport_user, port) = match authority.rsplit_once(':') {
        // In `[v6]:port` the port follows the bracket; `[v6]` alone has none.
        Some((h, p)) if !authority.contains('[') || h.ends_with(']') => match p.parse::<u16>() {
            Ok(p) => (h, Some(p)),
            Err(_) => return Err(format!("{p:?} is not a port number")),
        },
        _ => (authority, None),
    };
    let (user, host) = split_user(hostport_user)?;
    Ok(RemoteSpec {
        user,
        host,
        port,
        path: path.to_string(),
        daemon,
    })
}

/// How to start the far side.
#[derive(Clone, Debug, Default)]
pub struct SshOptions {
    /// The command that replaces `ssh` (split into words like a shell
    /// would, quotes respected).
    pub rsh: Option<String>,
    /// The `accord` program on the far side.
    pub remote_accord: Option<String>,
    /// Ask for zstd compression at this level (`-z`).
    pub compress: Option<i32>,
}

/// Split a command line into words (single and double quotes, backslash).
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = s.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') | (None, '\\') => {
                let n = chars.next().ok_or("a backslash at the end of --rsh")?;
                cur.get_or_insert_with(String::new).push(n);
            }
            (Some(_), c) => cur.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                cur.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(cur.take()),
            (None, c) => cur.get_or_insert_with(String::new).push(c),
        }
    }
    if quote.is_some() {
        return Err("an unclosed quote in --rsh".into());
    }
    words.extend(cur);
    if words.is_empty() {
        return Err("--rsh is empty".into());
    }
    Ok(words)
}

/// Quote a word for the remote shell.
fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The ssh process: its stderr is kept (the last few KiB) for messages,
/// and it is waited for when the replica goes.
struct SshChild {
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The stderr reader saw the end of it.
    stderr_done: Arc<AtomicBool>,
}

impl SshChild {
    /// Wait up to `limit` for the process to end; its status code.
    fn wait_for(&mut self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s.code().unwrap_or(-1));
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last line ssh or the remote shell printed. Once ssh has ended
    /// its last words may still be in the pipe: they are waited for (a
    /// moment at most, since a process ssh started may hold the pipe).
    fn last_words(&self) -> String {
        let start = Instant::now();
        while !self.stderr_done.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(1)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let e = self.stderr.lock().unwrap();
        let text = String::from_utf8_lossy(&e);
        text.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| accord_model::escape_for_display(l.trim().as_bytes()))
            .unwrap_or_default()
    }
}

impl Drop for SshChild {
    fn drop(&mut self) {
        // The server ends when its stdin closes (the replica has gone);
        // give it a moment to finish, then stop it.
        if self.wait_for(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Start `accord server` on `spec`'s host over ssh and connect to it.
pub fn connect_ssh(
    spec: &RemoteSpec,
    opts: &SshOptions,
    mode: RootMode,
) -> Result<RemoteReplica, String> {
    let words = split_words(opts.rsh.as_deref().unwrap_or("ssh"))?;
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..]);
    if let Some(p) = spec.port {
        cmd.arg("-p").arg(p.to_string());
    }
    if let Some(u) = &spec.user {
        cmd.arg("-l").arg(u);
    }
    let accord = opts.remote_accord.as_deref().unwrap_or("accord");
    cmd.arg("-e").arg("none").arg("--").arg(&spec.host);
    cmd.arg(format!("{} server", shell_quote(accord)));
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", words[0]))?;
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let mut err_pipe = child.stderr.take().expect("piped stderr");
    let kept = stderr.clone();
    let stderr_done = Arc::new(AtomicBool::new(false));
    let done = stderr_done.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err_pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut k = kept.lock().unwrap();
            k.extend_from_slice(&buf[..n]);
            let excess = k.len().saturating_sub(8192);
            k.drain(..excess);
        }
        done.store(true, Ordering::Release);
    });
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut ssh = SshChild {
        child,
        stderr,
        stderr_done,
    };
    let root = spec.path.as_bytes();
    match RemoteReplica::connect(Box::new(stdout), Box::new(stdin), root, mode, opts.compress) {
        Ok(r) => {
            let r = r.with_name(spec.display());
            r.keep(Box::new(ssh));
            Ok(r)
        }
        Err(e) => Err(explain(spec, e, &mut ssh, &words[0], accord)),
    }
}

/// One line that says what went wrong, from what ssh and the far side said.
fn explain(
    spec: &RemoteSpec,
    e: ConnectError,
    ssh: &mut SshChild,
    program: &str,
    accord: &str,
) -> String {
    let host = &spec.host;
    match e {
        ConnectError::Refused { why: Refusal::Version, message } => message,
        ConnectError::Refused { message, .. } => format!("{}: {message}", spec.display()),
        ConnectError::NotAccord(said) if !said.is_empty() => format!(
            "{host} did not answer as accord server (is something printing from a shell start-up file?); it said: {}",
            accord_model::escape_for_display(said.trim_ascii())
        ),
        other => {
            let status = ssh.wait_for(Duration::from_secs(5));
            let said = ssh.last_words();
            let said = if said.is_empty() { other.to_string() } else { said };
            match status {
                Some(255) => format!("{program} could not connect to {host}: {said}"),
                Some(126 | 127) => format!(
                    "{accord} could not be started on {host} ({said}); install accord there or give its path with --remote-accord"
                ),
                Some(code) => format!("{program} to {host} ended with status {code}: {said}"),
                None => format!("no answer from {host}: {said}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(root: &str) -> (Option<String>, String, Option<u16>, String) {
        let s = parse_remote(root).unwrap().expect("remote");
        (s.user, s.host, s.port, s.path)
    }

    #[test]
    fn scp_form_and_urls() {
        assert_eq!(parts("h:p"), (None, "h".into(), None, "p".into()));
        assert_eq!(
            parts("u@h:a:b"),
            (Some("u".into()), "h".into(), None, "a:b".into())
        );
        assert_eq!(parts("[::1]:dir"), (None, "::1".into(), None, "dir".into()));
        assert_eq!(
            parts("u@[fe80::1%eth0]:/x"),
            (Some("u".into()), "fe80::1%eth0".into(), None, "/x".into())
        );
        assert_eq!(
            parts("ssh://u@[::1]:2222/x"),
            (Some("u".into()), "::1".into(), Some(2222), "/x".into())
        );
        assert_eq!(parts("host:"), (None, "host".into(), None, "".into()));
    }

    #[test]
    fn local_names_stay_local() {
        for local in ["./h:p", "a/b:c", ":x", "plain", "/abs/[x]:y"] {
            assert!(parse_remote(local).unwrap().is_none(), "{local}");
        }
    }

    #[test]
    fn bad_hosts_are_refused() {
        for bad in ["-oProxyCommand=x:p", "u@:p", "@h:p", "h h:p", "[]:p"] {
            assert!(parse_remote(bad).is_err(), "{bad}");
        }
    }
}
