//! `accord keygen`: make the key pair that identifies a client or a daemon
//! on `accord://` connections.

use crate::exit;
use accord_remote::keys::{self, KeyPair};
use std::path::PathBuf;

/// Make a key pair for accord:// connections: FILE (private, mode 0600)
/// and FILE.pub (one line: accord-x25519 BASE64 COMMENT). Existing files
/// are never overwritten.
#[derive(clap::Args, Debug)]
pub struct KeygenArgs {
    /// The private key file [default: $XDG_CONFIG_HOME/accord/key or ~/.config/accord/key].
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: Option<PathBuf>,
    /// The comment in FILE.pub (names the key in a server's log) [default: USER@HOST].
    #[arg(short = 'C', long, value_name = "TEXT")]
    comment: Option<String>,
}

pub fn run(args: KeygenArgs) -> i32 {
    let Some(path) = args.file.clone().or_else(keys::default_key_path) else {
        eprintln!("accord keygen: no HOME or XDG_CONFIG_HOME; give the file with -f");
        return exit::USAGE;
    };
    let comment = args.comment.clone().unwrap_or_else(default_comment);
    let saved = KeyPair::generate().and_then(|pair| {
        pair.save(&path, &comment)?;
        Ok(pair.public)
    });
    match saved {
        Ok(public) => {
            let pub_path = keys::public_path(&path);
            eprintln!(
                "accord keygen: wrote {} and {}",
                path.display(),
                pub_path.display()
            );
            println!("{} {comment}", public.to_line());
            exit::OK
        }
        Err(e) => {
            eprintln!("accord keygen: {e}");
            exit::FAILURE
        }
    }
}

/// `user@host`, as ssh-keygen names a key.
fn default_comment() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "accord".into());
    let mut buf = [0u8; 256];
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".into()
    };
    format!("{user}@{host}")
}
