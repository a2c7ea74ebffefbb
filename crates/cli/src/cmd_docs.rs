//! Documents generated from the same clap definitions the binary parses
//! with, so they cannot drift from it: `accord completions SHELL` prints a
//! completion script on stdout (as rustup and gh do), and the hidden
//! `accord man --out DIR` writes the man pages a package installs.

use crate::exit;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Print the completion script of SHELL on stdout.
#[derive(clap::Args, Debug)]
#[command(after_help = "Install it where the shell looks, for instance:\n  \
accord completions bash > ~/.local/share/bash-completion/completions/accord\n  \
accord completions zsh > ~/.zfunc/_accord   (with fpath+=~/.zfunc in ~/.zshrc)\n  \
accord completions fish > ~/.config/fish/completions/accord.fish\n\
The Debian package installs all three.")]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Write accord.1, accord-mirror.1, … (one page per command and
/// subcommand) into DIR.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The directory to write the pages into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> i32 {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "accord", &mut script);
    match std::io::stdout().write_all(&script) {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("accord completions: cannot write the script: {e}");
            exit::FAILURE
        }
    }
}

pub fn man(args: &ManArgs, cmd: clap::Command) -> i32 {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let written = std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("{}: {e}", args.out.display()))
        .and_then(|()| write_pages(&cmd, None, &args.out));
    match written {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("accord man: {e}");
            exit::FAILURE
        }
    }
}

/// The page of `cmd`, then those of its visible subcommands at any depth.
fn write_pages(cmd: &clap::Command, parent: Option<&str>, dir: &Path) -> Result<(), String> {
    let subs: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    let name = page_name(cmd);
    let mut related: Vec<String> = parent.map(str::to_string).into_iter().collect();
    related.extend(subs.iter().map(|s| page_name(s)));
    write_page(cmd, &related, dir)?;
    subs.iter()
        .try_for_each(|sub| write_pages(sub, Some(&name), dir))
}

/// `accord-union-mount`: the name clap gave the subcommand when built.
fn page_name(cmd: &clap::Command) -> String {
    cmd.get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string()
}

/// One page: clap_mangen's sections, then SEE ALSO naming the pages above
/// and below it.
fn write_page(cmd: &clap::Command, related: &[String], dir: &Path) -> Result<(), String> {
    let name = page_name(cmd);
    // The VERSION section shows the short version: the long one is a
    // paragraph for a terminal (`accord --version`).
    let cmd = cmd.clone().long_version(clap::builder::Resettable::Reset);
    let man = clap_mangen::Man::new(cmd)
        .title(name.to_uppercase())
        .source(format!("accord {}", env!("CARGO_PKG_VERSION")))
        .manual("Accord Manual");
    let mut text = Vec::new();
    man.render(&mut text).map_err(|e| e.to_string())?;
    let see: Vec<String> = related.iter().map(|n| format!("\\fB{n}\\fR(1)")).collect();
    writeln!(text, ".SH \"SEE ALSO\"\n{}", see.join(", ")).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}
