//! Driving an interactive `accord sync` like a person would, through tmux:
//! the real binary in a 120x40 pane of a tmux server of the test's own
//! (its own socket, no configuration file), keys sent with `send-keys`,
//! the screen read with `capture-pane -p`, every wait on what the screen
//! shows or on the run's end. Skips loudly without tmux (fails in strict
//! mode: `ACCORD_TEST_STRICT`).

#![allow(dead_code)] // each test file uses its own part

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long any one wait (a screen to show, a run to end) may take.
pub const WAIT: Duration = Duration::from_secs(30);

/// A tmux server of our own (its own socket, no configuration file) with
/// one session; killed when dropped, whatever the test did.
pub struct Tmux {
    socket: String,
    pub session: &'static str,
}

pub fn have_tmux() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        crate::mirror_common::skip_or_fail(
            "tmux is not installed (apt-get install tmux); the terminal UI is not tested",
        );
    }
    found
}

/// Run a command, killing it if it outlives `WAIT`.
pub fn run_bounded(command: &mut Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tmux");
    let deadline = Instant::now() + WAIT;
    while child.try_wait().expect("wait for tmux").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tmux did not answer within {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("tmux output")
}

pub fn quoted(path: &std::path::Path) -> String {
    let text = path.to_str().expect("a UTF-8 temp path");
    assert!(!text.contains('\''), "{text}");
    format!("'{text}'")
}

impl Tmux {
    /// `shell` (a command line, as sh reads it) run in a new 120x40 pane
    /// of a tmux server of our own.
    pub fn start(shell: &str) -> Tmux {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let socket = format!(
            "accord-tui-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let tmux = Tmux {
            socket,
            session: "sync",
        };
        let out = tmux.tmux(&[
            "new-session",
            "-d",
            "-s",
            tmux.session,
            "-x",
            "120",
            "-y",
            "40",
            shell,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    pub fn tmux(&self, args: &[&str]) -> Output {
        run_bounded(
            Command::new("tmux")
                .args(["-L", &self.socket, "-f", "/dev/null"])
                .args(args),
        )
    }

    /// Keys by tmux's names (`Down`, `Escape`, ...).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", self.session];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status.success());
    }

    /// Characters typed as they are.
    pub fn type_text(&self, text: &str) {
        assert!(self
            .tmux(&["send-keys", "-t", self.session, "-l", text])
            .status
            .success());
    }

    pub fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-t", self.session]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until the screen satisfies `ready`; the screen then.
    pub fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; the screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until the line naming `path` contains `text`.
    pub fn wait_for_row(&self, path: &str, text: &str) -> String {
        self.wait_for(&format!("{path:?} with {text:?}"), |screen| {
            row(screen, path).is_some_and(|line| line.contains(text))
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The line of the list that names `path`.
pub fn row<'s>(screen: &'s str, path: &str) -> Option<&'s str> {
    screen
        .lines()
        .find(|line| line.trim_end().ends_with(&format!(" {path}")))
}

/// The exit status written by the pane's shell, once the run ended.
pub fn wait_for_status(file: &std::path::Path) -> i32 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Ok(code) = text.trim().parse() {
                return code;
            }
        }
        assert!(
            Instant::now() < deadline,
            "accord sync did not end within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
