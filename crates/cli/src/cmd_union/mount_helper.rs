//! `mount.fuse.accord`: what mount(8) runs for `mount -t fuse.accord` and for an fstab line of
//! type `fuse.accord`, as `mount.fuse.accord SOURCE MOUNTPOINT [-sfnv] [-N NS] [-o OPTIONS]
//! [-t TYPE]`. The package installs it as a link to `accord`; `main` comes here when the
//! program's name is `mount.fuse.accord`.
//!
//! SOURCE is the branch list in the spelling of `-o dirs=`: `/a=rw:/b=ro` (first = highest
//! priority). With `-o dirs=…`, SOURCE is only a name for the mount table (`none`, as
//! Unionfs's paper suggests). The options are those of `accord union mount -o`; the words
//! mount(8) and fstab keep for themselves (`defaults`, `noauto`, `_netdev`, `nofail`,
//! `x-systemd.…`) are dropped, as mount.fuse3 does.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use accord_union::options::is_fstab_only;

use crate::exit;

/// The name this program answers to as mount(8)'s helper.
const HELPER: &str = "mount.fuse.accord";

static AS_HELPER: AtomicBool = AtomicBool::new(false);

/// The name to start messages with: `mount.fuse.accord` when run as the helper (mount(8)
/// shows the message as it is), else `accord union`.
pub(super) fn program() -> &'static str {
    if AS_HELPER.load(Ordering::Relaxed) {
        HELPER
    } else {
        "accord union"
    }
}

/// When this program was started as `mount.fuse.accord`: mount as mount(8) asked and return
/// the exit status (mount(8)'s numbers: 1 for a wrong invocation, 32 for a mount that
/// failed). None otherwise.
pub fn run_as_mount_helper() -> Option<i32> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let name = Path::new(args.first()?).file_name()?;
    if name != HELPER {
        return None;
    }
    AS_HELPER.store(true, Ordering::Relaxed);
    Some(match run(&args[1..]) {
        exit::OK => exit::OK,
        exit::USAGE => 1,
        _ => 32,
    })
}

/// What mount(8) passed.
#[derive(Debug, Default, PartialEq)]
struct Call {
    source: OsString,
    mountpoint: PathBuf,
    options: Vec<String>,
    /// `-f`: check everything, mount nothing.
    fake: bool,
    /// `-v`: say what was mounted.
    verbose: bool,
}

fn run(args: &[OsString]) -> i32 {
    let call = match parse(args) {
        Ok(c) => c,
        Err(e) => return super::usage(&e),
    };
    let (branches, options) = match branches_and_options(&call) {
        Ok(x) => x,
        Err(e) => return super::usage(&e),
    };
    let cfg = match super::mount_config(call.mountpoint.clone(), &branches, &options) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    if call.fake {
        return exit::OK;
    }
    let code = super::daemonize(&cfg);
    if code == exit::OK && call.verbose {
        println!(
            "{HELPER}: {} mounted on {}",
            call.source.to_string_lossy(),
            call.mountpoint.display()
        );
    }
    code
}

/// `SOURCE MOUNTPOINT [-sfnv] [-N NS] [-o OPTIONS]... [-t TYPE]`, options anywhere.
fn parse(args: &[OsString]) -> Result<Call, String> {
    let mut call = Call::default();
    let mut positional: Vec<OsString> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(flags) = a.to_str().and_then(|s| s.strip_prefix('-')) else {
            positional.push(a.clone());
            continue;
        };
        match flags {
            "o" | "t" | "N" => {
                let value = it
                    .next()
                    .ok_or_else(|| format!("-{flags} needs a value"))?
                    .to_str()
                    .ok_or_else(|| format!("the value of -{flags} is not UTF-8"))?;
                match flags {
                    "o" => call.options.extend(split_options(value)),
                    "t" => check_type(value)?,
                    _ => {
                        return Err(format!(
                            "-N {value}: mounting in another namespace is not supported; run \
                             mount inside it (nsenter)"
                        ))
                    }
                }
            }
            _ => {
                for f in flags.chars() {
                    match f {
                        'f' => call.fake = true,
                        'v' => call.verbose = true,
                        // Sloppy (unknown options are errors all the same: naming one is
                        // kinder than ignoring it) and no mtab (there is none to write).
                        's' | 'n' => {}
                        _ => return Err(format!("unknown flag -{f} (known: -s -f -n -v -o -t)")),
                    }
                }
            }
        }
    }
    match <[OsString; 2]>::try_from(positional) {
        Ok([source, mountpoint]) => {
            call.source = source;
            call.mountpoint = PathBuf::from(mountpoint);
            Ok(call)
        }
        Err(_) => Err(format!(
            "usage: {HELPER} BRANCHES MOUNTPOINT [-o OPTIONS] (BRANCHES as /a=rw:/b=ro; \
             mount(8) runs this for type fuse.accord)"
        )),
    }
}

/// The options of one `-o`, without those meant for mount(8) and fstab alone.
fn split_options(value: &str) -> impl Iterator<Item = String> + '_ {
    value
        .split(',')
        .filter(|o| !o.is_empty() && !is_fstab_only(o))
        .map(str::to_string)
}

fn check_type(t: &str) -> Result<(), String> {
    match t {
        "fuse.accord" | "fuse" | "accord" => Ok(()),
        _ => Err(format!("-t {t}: this helper mounts type fuse.accord only")),
    }
}

/// The branches SOURCE names (none when `-o dirs=` gives them) and the options for `accord
/// union mount`; the mount table shows SOURCE as the union's name unless `fsname=` says
/// otherwise.
fn branches_and_options(call: &Call) -> Result<(Vec<String>, String), String> {
    let source = call
        .source
        .to_str()
        .ok_or("the branch list is not UTF-8: name the branches with -o dirs= instead")?;
    let has_dirs = call.options.iter().any(|o| o.starts_with("dirs="));
    let branches = if has_dirs {
        Vec::new()
    } else {
        source.split(':').map(str::to_string).collect()
    };
    let mut options = call.options.clone();
    let named = options.iter().any(|o| o.starts_with("fsname="));
    if !named && !source.is_empty() && !source.contains(',') && !has_whitespace(source) {
        options.insert(0, format!("fsname={source}"));
    }
    Ok((branches, options.join(",")))
}

fn has_whitespace(s: &str) -> bool {
    s.chars().any(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn mount_8_calling_convention() {
        let c = parse(&args(&[
            "/a=rw:/b=ro",
            "/mnt",
            "-nv",
            "-o",
            "defaults,noauto,_netdev,x-systemd.automount,allow_other,nofail",
            "-t",
            "fuse.accord",
        ]))
        .unwrap();
        assert_eq!(c.source, OsStr::new("/a=rw:/b=ro"));
        assert_eq!(c.mountpoint, Path::new("/mnt"));
        assert_eq!(c.options, ["allow_other"]);
        assert!(c.verbose && !c.fake);
        let (b, o) = branches_and_options(&c).unwrap();
        assert_eq!(b, ["/a=rw", "/b=ro"]);
        assert_eq!(o, "fsname=/a=rw:/b=ro,allow_other");
    }

    #[test]
    fn source_is_a_name_when_dirs_are_given() {
        let c = parse(&args(&["none", "/mnt", "-o", "dirs=/a:/b,fsname=pool"])).unwrap();
        let (b, o) = branches_and_options(&c).unwrap();
        assert!(b.is_empty());
        assert_eq!(o, "dirs=/a:/b,fsname=pool");
    }

    #[test]
    fn wrong_calls_are_named() {
        assert!(parse(&args(&["/a"])).unwrap_err().contains("usage"));
        assert!(parse(&args(&["/a", "/m", "-t", "ext4"]))
            .unwrap_err()
            .contains("ext4"));
        assert!(parse(&args(&["/a", "/m", "-x"]))
            .unwrap_err()
            .contains("-x"));
        assert!(parse(&args(&["/a", "/m", "-o"]))
            .unwrap_err()
            .contains("-o"));
    }
}
