//! The Debian package as a user gets it: `scripts/package` builds it from
//! the binary under test (ACCORD_BIN), and it is installed with `dpkg -i`
//! into a fresh container: a private mount, network and pid namespace
//! whose root is an overlay over this system's `/` with the changes in a
//! temp dir, so the host is not changed (checked). There the test reads
//! `man accord-mirror`, runs `accord --version`, measures the installed
//! binary, verifies the systemd units with `systemd-analyze verify`,
//! drives bash's completion of `accord`, and serves a mirror with the
//! example configuration as the package's user.
//!
//! Needs root (namespaces, overlayfs, chroot), dpkg-dev, binutils, man-db,
//! systemd, iproute2 and adduser; without them it skips loudly (fails in
//! strict mode: `ACCORD_TEST_STRICT`).

mod mirror_common;

use mirror_common::{bin, need, need_root, skip_or_fail};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The most the installed binary may weigh.
const MAX_BINARY: u64 = 15 << 20;

#[test]
fn the_package_installs_and_works_in_a_fresh_container() {
    if !can_run() {
        return;
    }
    let host_before = host_state();
    let debs = tempfile::tempdir().unwrap();
    let (main, dbgsym) = build_package(debs.path());
    let Some(c) = Container::new() else {
        return;
    };
    c.copy_in(&main, "accord.deb");
    c.copy_in(&dbgsym, "accord-dbgsym.deb");
    let out = c.run("dpkg -i /root/accord.deb /root/accord-dbgsym.deb");
    assert_ok(&out, "dpkg -i");

    version_runs(&c);
    binary_is_stripped_and_small(&c);
    man_page_renders(&c);
    units_verify(&c);
    bash_completes_subcommands_and_flags(&c);
    zsh_and_fish_completions_are_installed(&c);
    example_config_serves_as_the_accord_user(&c);

    drop(c);
    assert_eq!(
        host_before,
        host_state(),
        "the host's package database, users or /usr/bin/accord changed"
    );
}

fn can_run() -> bool {
    need_root("installing a package into a container")
        && need("dpkg-deb", "dpkg")
        && need("dpkg-shlibdeps", "dpkg-dev")
        && need("objcopy", "binutils")
        && need("man", "man-db")
        && need("systemd-analyze", "systemd")
        && need("unshare", "util-linux")
        && need("runuser", "util-linux")
        && need("ip", "iproute2")
        && need("adduser", "adduser")
        && need("cargo", "cargo (rustup)")
}

/// `scripts/package OUT` from the binary under test: (accord, accord-dbgsym).
fn build_package(out: &Path) -> (PathBuf, PathBuf) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/package");
    let built = Command::new(script)
        .arg(out)
        .env("ACCORD_BIN", bin())
        .output()
        .unwrap();
    assert_ok(&built, "scripts/package");
    let lines = String::from_utf8(built.stdout).unwrap();
    let debs: Vec<PathBuf> = lines.lines().map(PathBuf::from).collect();
    assert_eq!(debs.len(), 2, "scripts/package printed {lines:?}");
    assert!(debs.iter().all(|d| d.is_file()), "{debs:?}");
    (debs[0].clone(), debs[1].clone())
}

fn version_runs(c: &Container) {
    let out = c.run("accord --version");
    assert_ok(&out, "accord --version");
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("");
    let protocol = accord_proto::hello::VERSION;
    let want = format!("accord {} (protocol {protocol})", env!("CARGO_PKG_VERSION"));
    assert_eq!(first, want, "{text}");
    assert!(text.contains("features: remote roots over ssh"), "{text}");
    assert!(text.contains("union file system (FUSE)"), "{text}");
}

/// At most 15 MB, and its debug information in the dbgsym package where
/// its debug link points.
fn binary_is_stripped_and_small(c: &Container) {
    let out = c.run("stat -c %s /usr/bin/accord");
    assert_ok(&out, "stat");
    let size: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(size <= MAX_BINARY, "the installed binary is {size} bytes");
    eprintln!("installed /usr/bin/accord: {size} bytes");
    let out = c.run(
        "link=$(readelf --string-dump=.gnu_debuglink /usr/bin/accord | awk '/\\]/ { print $3; exit }'); \
         ls /usr/lib/debug/.build-id/*/\"$link\" && readelf -S /usr/bin/accord | grep -c debug_info || true",
    );
    assert_ok(&out, "the debug link");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(".debug\n"),
        "no debug file for the link: {text}"
    );
    assert!(
        text.ends_with("0\n"),
        "the binary still has debug sections: {text}"
    );
    let out = c.run("readlink /usr/sbin/mount.fuse.accord");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "../bin/accord\n");
}

fn man_page_renders(c: &Container) {
    let out = c.run("MANWIDTH=80 man -P cat accord-mirror");
    assert_ok(&out, "man accord-mirror");
    let page = String::from_utf8_lossy(&out.stdout);
    for want in [
        "ACCORD-MIRROR(1)",
        "accord-mirror - ",
        "SYNOPSIS",
        "--delete",
    ] {
        assert!(page.contains(want), "no {want:?} in the page:\n{page}");
    }
    for name in [
        "accord",
        "accord-sync",
        "accord-server",
        "accord-union-mount",
    ] {
        let out = c.run(&format!("man -w {name}"));
        assert_ok(&out, &format!("man -w {name}"));
    }
}

/// `systemd-analyze verify` says nothing, not even a warning.
fn units_verify(c: &Container) {
    let out = c.run(
        "mkdir -p /tmp/units && \
         ln -s /usr/lib/systemd/system/accord-worker@.service /tmp/units/accord-worker@main.service && \
         systemd-analyze verify /usr/lib/systemd/system/accord-server.service \
             /tmp/units/accord-worker@main.service",
    );
    assert_ok(&out, "systemd-analyze verify");
    assert!(
        out.stderr.is_empty(),
        "systemd-analyze verify warned:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c.run("getent passwd accord");
    assert_ok(&out, "the user accord (made by postinst)");
}

/// The installed completion file, sourced in bash: `complete -p accord`
/// names its function, which is called as bash calls it on TAB.
fn bash_completes_subcommands_and_flags(c: &Container) {
    let script = r#"
        source /usr/share/bash-completion/completions/accord
        spec=$(complete -p accord) || exit 1
        echo "spec: $spec"
        set -- $spec
        while [ $# -gt 0 ] && [ "$1" != -F ]; do shift; done
        fn=$2
        tab() {
            COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
            COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
            "$fn" accord "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            echo "$*<TAB>: ${COMPREPLY[*]}"
        }
        tab accord mi
        tab accord mirror --del
        tab accord union mo
    "#;
    c.write("complete.sh", script);
    let out = c.run("bash --norc --noprofile /root/complete.sh");
    assert_ok(&out, "bash completion");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    let line = |prefix: &str| -> Vec<String> {
        let found = text.lines().find_map(|l| l.strip_prefix(prefix));
        let found = found.unwrap_or_else(|| panic!("no {prefix:?} in:\n{text}"));
        found.split_whitespace().map(str::to_string).collect()
    };
    assert!(text.contains("spec: complete "), "{text}");
    assert_eq!(line("accord mi<TAB>:"), ["mirror"]);
    assert!(line("accord mirror --del<TAB>:").contains(&"--delete".to_string()));
    assert!(line("accord union mo<TAB>:").contains(&"mount".to_string()));
}

/// Where zsh and fish look for them, each for `accord` and its mirror
/// subcommand's flags.
fn zsh_and_fish_completions_are_installed(c: &Container) {
    let out = c.run(
        "head -1 /usr/share/zsh/vendor-completions/_accord; \
         grep -c -- 'delete' /usr/share/zsh/vendor-completions/_accord; \
         grep -c -- '-c accord .*-l delete' /usr/share/fish/vendor_completions.d/accord.fish",
    );
    assert_ok(&out, "the zsh and fish completions");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"#compdef accord"), "{text}");
    assert!(
        lines
            .iter()
            .skip(1)
            .all(|n| n.parse::<u32>().unwrap_or(0) > 0),
        "{text}"
    );
}

/// The commented example, copied to /etc/accord as its comments say, runs
/// the daemon as the user accord (as accord-server.service does), and a
/// client mirrors into its module.
fn example_config_serves_as_the_accord_user(c: &Container) {
    let script = r#"
        set -e
        cp /usr/share/doc/accord/examples/accord.toml /etc/accord/
        accord keygen -f /etc/accord/key -C daemon >/dev/null 2>&1
        chown accord: /etc/accord/key
        accord keygen -f /root/client -C client > /etc/accord/authorized_keys 2>/dev/null
        install -d -o accord -g accord /srv/accord/backups
        install -d -o accord -g accord -m 700 /var/lib/accord
        runuser -u accord -- env ACCORD_STATE_DIR=/var/lib/accord \
            accord server --config /etc/accord/accord.toml 2>/tmp/daemon.log &
        # The daemon's first line says it listens (or why it stopped).
        while ! grep -q 'listening on' /tmp/daemon.log; do
            kill -0 $! 2>/dev/null || { cat /tmp/daemon.log; exit 1; }
            sleep 0.05
        done
        # --no-owner: the daemon, not root, cannot give files the owners
        # of root's files.
        accord mirror -q --no-owner --key /root/client --server-key /etc/accord/key.pub \
            /usr/share/doc/accord accord://127.0.0.1/backups/doc
        diff -r /usr/share/doc/accord /srv/accord/backups/doc
        stat -c 'owner %U' /srv/accord/backups/doc/copyright
        cat /tmp/daemon.log
    "#;
    c.write("daemon.sh", script);
    let out = c.run("sh /root/daemon.sh");
    assert_ok(&out, "the example configuration");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("owner accord"), "{text}");
}

/// A root of its own: an overlay over `/`, its changes in a temp dir on
/// /dev/shm (another file system than `/`, as overlayfs needs).
struct Container {
    dir: tempfile::TempDir,
}

impl Container {
    fn new() -> Option<Container> {
        let dir = tempfile::Builder::new()
            .prefix("accord-package-")
            .tempdir_in("/dev/shm")
            .unwrap();
        for d in ["upper/root", "work", "merged"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let c = Container { dir };
        let out = c.run("true");
        if !out.status.success() {
            skip_or_fail(&format!(
                "cannot make a container (unshare, overlayfs over /, chroot): {}",
                String::from_utf8_lossy(&out.stderr)
            ));
            return None;
        }
        Some(c)
    }

    /// Put `bytes` at /root/NAME in the container.
    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join("upper/root").join(name), text).unwrap();
    }

    fn copy_in(&self, file: &Path, name: &str) {
        std::fs::copy(file, self.dir.path().join("upper/root").join(name)).unwrap();
    }

    /// `sh -c SCRIPT` chrooted into the container, in namespaces of its
    /// own (mount, network with loopback up, pid: whatever it starts ends
    /// with it). Changes stay in the container for the next call.
    fn run(&self, script: &str) -> Output {
        const ENTER: &str = r#"
            set -e
            c=$1
            mount --make-rprivate /
            mount -t overlay overlay -o "lowerdir=/,upperdir=$c/upper,workdir=$c/work" "$c/merged"
            mount --rbind /dev "$c/merged/dev"
            mount -t proc proc "$c/merged/proc"
            mount -t tmpfs tmpfs "$c/merged/run"
            mount -t tmpfs tmpfs "$c/merged/tmp"
            ip link set lo up
            exec chroot "$c/merged" /bin/sh -c "$2"
        "#;
        Command::new("unshare")
            .args([
                "--mount", "--net", "--pid", "--fork", "sh", "-c", ENTER, "sh",
            ])
            .arg(self.dir.path())
            .arg(script)
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/root")
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap()
    }
}

#[track_caller]
fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What installing the package would change on the host: the package
/// database, the users and groups, the binary, the units.
fn host_state() -> Vec<(String, Option<Vec<u8>>)> {
    let paths = [
        "/var/lib/dpkg/status",
        "/etc/passwd",
        "/etc/group",
        "/usr/bin/accord",
        "/usr/lib/systemd/system/accord-server.service",
    ];
    paths
        .iter()
        .map(|p| (p.to_string(), std::fs::read(p).ok()))
        .collect()
}
