//! Finding the examples in a Markdown page.
//!
//! The convention, for whoever writes docs:
//!
//! - A fenced block of language `sh` is an example: the suite runs it. A
//!   synopsis, a usage line or output is a `text` block and is not run.
//! - An HTML comment on the line before a block (blank lines between are
//!   allowed) says how: `<!-- example: fixture=photos,disk needs=ssh -->`.
//!   `fixture=` names the trees to make first (`fixtures.rs`), `needs=`
//!   what the machine must have (`root`, `fuse`, `ssh`, `redis`), `then`
//!   runs the block in the sandbox of the block before it (same page),
//!   `background=port:N`, `mount:PATH` or `file:PATH` starts a command
//!   that does not return (a daemon, a mount in the foreground, a
//!   `--watch`), waits until the port takes connections, the path is a
//!   mount point or exists, and stops it when the sandbox goes; and `file=PATH` on a block of any other language writes
//!   its text to PATH in the sandbox instead of running it.
//! - Without a comment, a `sh` block runs on its own, in an empty sandbox.
//! - `<!-- example: not-run -->` is for the few commands that build or test
//!   this project itself (`cargo install`, `./scripts/test`): they stay
//!   `sh` for whoever copies them, and the suite does not run itself.

use std::path::Path;

/// What a block is for.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A `sh` block: run it.
    Run,
    /// A block whose text becomes the file at this path.
    File(String),
}

/// How long a started command is waited on before the next block runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Ready {
    /// The block returns: run it to its end.
    Returns,
    /// It keeps running; ready once this TCP port of localhost takes
    /// connections.
    Port(u16),
    /// It keeps running; ready once this path is a mount point.
    Mount(String),
    /// It keeps running; ready once this path exists (what its first
    /// pass makes, for a `--watch`).
    File(String),
}

#[derive(Clone, Debug)]
pub struct Example {
    pub file: String,
    /// Line of the opening fence, from 1.
    pub line: usize,
    pub kind: Kind,
    pub text: String,
    pub fixtures: Vec<String>,
    pub needs: Vec<String>,
    /// Runs in the sandbox of the example before it.
    pub then: bool,
    pub ready: Ready,
}

impl Example {
    pub fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

const NEEDS: [&str; 4] = ["root", "fuse", "ssh", "redis"];

/// The examples of the page at `path` (named `name` in messages), or what
/// is wrong with its comments.
pub fn examples(path: &Path, name: &str) -> Result<Vec<Example>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_end() == "```")
            .ok_or_else(|| format!("{name}:{}: a code block that is never closed", start + 1))?;
        let body = lines[start + 1..end].join("\n") + "\n";
        let comment = comment_before(&lines, start);
        let at = format!("{name}:{}", start + 1);
        if let Some(ex) = example(lang.trim(), body, comment, &at)? {
            out.push(Example {
                file: name.to_string(),
                line: start + 1,
                ..ex
            });
        }
        i = end + 1;
    }
    if out.first().is_some_and(|e| e.then) {
        return Err(format!(
            "{}: `then` on a page's first example",
            out[0].place()
        ));
    }
    Ok(out)
}

/// The `example:` comment on the lines just above line `fence`, if any.
fn comment_before<'a>(lines: &[&'a str], fence: usize) -> Option<&'a str> {
    let above = lines[..fence].iter().rev().find(|l| !l.trim().is_empty())?;
    above
        .trim()
        .strip_prefix("<!-- example:")?
        .strip_suffix("-->")
        .map(str::trim)
}

/// The example a block of language `lang` makes, or `None` for a block
/// that is not one.
fn example(
    lang: &str,
    text: String,
    comment: Option<&str>,
    at: &str,
) -> Result<Option<Example>, String> {
    if comment == Some("not-run") && lang == "sh" {
        return Ok(None);
    }
    let mut ex = Example {
        file: String::new(),
        line: 0,
        kind: Kind::Run,
        text,
        fixtures: Vec::new(),
        needs: Vec::new(),
        then: false,
        ready: Ready::Returns,
    };
    for word in comment.unwrap_or("").split_whitespace() {
        let (key, value) = word.split_once('=').unwrap_or((word, ""));
        let list = || value.split(',').map(String::from).collect::<Vec<_>>();
        match key {
            "fixture" => ex.fixtures = list(),
            "needs" => ex.needs = list(),
            "then" if value.is_empty() => ex.then = true,
            "file" => ex.kind = Kind::File(value.to_string()),
            "background" => ex.ready = ready(value, at)?,
            _ => {
                return Err(format!(
                    "{at}: unknown word `{word}` in the example comment"
                ))
            }
        }
    }
    if let Some(n) = ex.needs.iter().find(|n| !NEEDS.contains(&n.as_str())) {
        return Err(format!("{at}: needs={n} is none of {NEEDS:?}"));
    }
    match (&ex.kind, lang) {
        (Kind::File(_), "sh") => Err(format!("{at}: `file=` is for blocks that are not run")),
        (Kind::File(_), _) | (Kind::Run, "sh") => Ok(Some(ex)),
        (Kind::Run, _) if comment.is_some() => Err(format!(
            "{at}: an example comment on a `{lang}` block (examples are `sh` blocks, or say file=)"
        )),
        (Kind::Run, _) => Ok(None),
    }
}

fn ready(value: &str, at: &str) -> Result<Ready, String> {
    match value.split_once(':') {
        Some(("port", n)) => n
            .parse()
            .map(Ready::Port)
            .map_err(|_| format!("{at}: background=port:{n} is not a port")),
        Some(("mount", p)) => Ok(Ready::Mount(p.to_string())),
        Some(("file", p)) => Ok(Ready::File(p.to_string())),
        _ => Err(format!(
            "{at}: background={value}: say port:N, mount:PATH or file:PATH"
        )),
    }
}
