//! The handshake: each side sends a magic string and one bounded message
//! before any frame. The client says which protocol version it speaks,
//! which features it would use and which root it asks for; the server
//! answers with what was agreed, or why it refuses.

use crate::wire::{Dec, Enc, ProtoError};
use std::io::{self, Read, Write};

/// Sent first by both sides. The NUL bytes make it unlike anything a shell
/// start-up file might print.
pub const MAGIC: &[u8; 8] = b"\0ACCORD\0";
/// The protocol version this build speaks.
pub const VERSION: u32 = 2;
/// Feature bit: zstd-compressed bulk data (`-z`).
pub const FEATURE_ZSTD: u64 = 1;
/// Feature bit: the server carries out a sync's renames (request 30).
pub const FEATURE_RENAME: u64 = 2;
/// Feature bit: the server watches its root for a sync's `--watch`
/// (request 31, `WaitChange`).
pub const FEATURE_WATCH: u64 = 4;
/// Feature bit: the server applies a sync's ignore rules to its side
/// (request 32, `SyncRules`, and lookups that answer "excluded").
pub const FEATURE_SYNC_IGNORE: u64 = 8;
/// Feature bit: the server follows the links a sync's `--follow` patterns
/// name on its side (request 33, `SyncFollow`).
pub const FEATURE_SYNC_FOLLOW: u64 = 16;
/// Feature bit: the server does not run as root, so it keeps no owners
/// it is sent (groups only where its user belongs to them); asked for by
/// a client that would tell its user so.
pub const FEATURE_NO_OWNERS: u64 = 32;
/// Feature bit: the server keeps a sync's side of more than two roots: the
/// set's archive with its version vectors (requests 34 to 39).
pub const FEATURE_SYNC_SET: u64 = 64;
/// Feature bit: both sides read delta format 2 (literals compressed
/// against the matched bytes), and `MakeDelta` may ask for it.
pub const FEATURE_PACKED_DELTA: u64 = 128;
/// Feature bit: the server signs the gaps of a delta's first round in
/// smaller blocks (`FineSignature`), for a second round over them.
pub const FEATURE_FINE_SIGNATURE: u64 = 256;
/// Feature bit: the server answers `VouchingStat`, so that a sync records
/// what it wrote there with a ctime the next run trusts.
pub const FEATURE_VOUCHING_STAT: u64 = 512;
/// Feature bit: the server probes whether its root is case-insensitive in
/// one call (`ProbeCase`).
pub const FEATURE_CASE_PROBE: u64 = 1024;
/// Feature bit: the server carries out a sync's rules (`SyncRules`,
/// `SyncFollow`) in the order they were sent, with its writes: a client
/// may send them together and the scan after them without waiting.
pub const FEATURE_ORDERED_RULES: u64 = 2048;
/// Feature bit: the server copies a file from another root of its host
/// into a temp (`CopySibling`). Not offered by a session with a
/// restriction (a forced command's tree, a daemon's module).
pub const FEATURE_SIBLING_COPY: u64 = 4096;
/// Feature bit: the server opens a sync's archive (`SyncOpen`,
/// `SyncOpenSet`) only for a session that holds its root's lock, so a
/// client may send the opening right behind the lock without waiting for
/// it: a lock another run holds then opens (or makes) no archive.
pub const FEATURE_OPEN_AFTER_LOCK: u64 = 8192;
/// Every feature this build knows.
pub const FEATURES: u64 = FEATURE_ZSTD
    | FEATURE_RENAME
    | FEATURE_WATCH
    | FEATURE_SYNC_IGNORE
    | FEATURE_SYNC_FOLLOW
    | FEATURE_NO_OWNERS
    | FEATURE_SYNC_SET
    | FEATURE_PACKED_DELTA
    | FEATURE_FINE_SIGNATURE
    | FEATURE_VOUCHING_STAT
    | FEATURE_CASE_PROBE
    | FEATURE_ORDERED_RULES
    | FEATURE_SIBLING_COPY
    | FEATURE_OPEN_AFTER_LOCK;
/// Largest handshake message.
const MAX_HELLO: usize = 64 << 10;
/// Longest root path asked for.
pub const MAX_ROOT: usize = 4096;

/// How the client will use the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootMode {
    /// Read it (a source).
    Read,
    /// Write it, creating the directory if it is missing.
    Write,
    /// Look at it as a destination without changing it (a dry run): it need
    /// not exist.
    Inspect,
    /// Write it; it must exist already (a sync's root: a missing one is
    /// refused, never made and filled as if it had been emptied).
    WriteExisting,
}

impl RootMode {
    /// Will the client change the root?
    pub fn writes(self) -> bool {
        matches!(self, RootMode::Write | RootMode::WriteExisting)
    }
}

/// The client's opening message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
    pub features: u64,
    pub mode: RootMode,
    /// The root, as the user wrote it after the host (the server resolves
    /// it against its module or restriction).
    pub root: Vec<u8>,
}

/// Why a server refuses a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It speaks another protocol version.
    Version = 1,
    /// The root does not exist (a `RootMode::Inspect` client takes this as
    /// "nothing there yet").
    NotFound = 2,
    /// The root is outside what this key or module may reach, or writes
    /// were asked of a read-only one.
    Denied = 3,
    /// The root could not be opened.
    Failed = 4,
}

/// The server's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Welcome {
    Accepted {
        version: u32,
        /// Features both sides will use.
        features: u64,
        /// The root's identity (device, inode).
        identity: (u64, u64),
        /// The root as the server names it, for messages.
        describe: String,
    },
    Refused {
        version: u32,
        why: Refusal,
        message: String,
    },
}

fn put_message(w: &mut dyn Write, body: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(12 + body.len());
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(body);
    w.write_all(&buf)?;
    w.flush()
}

/// What came instead of a handshake.
#[derive(Debug)]
pub enum HelloError {
    Io(io::Error),
    /// The peer sent something that is not our magic: the bytes it sent
    /// (for a message; often a shell's or ssh's complaint).
    NotAccord(Vec<u8>),
    Proto(ProtoError),
}

impl From<io::Error> for HelloError {
    fn from(e: io::Error) -> Self {
        HelloError::Io(e)
    }
}

impl From<ProtoError> for HelloError {
    fn from(e: ProtoError) -> Self {
        HelloError::Proto(e)
    }
}

fn get_message(r: &mut dyn Read) -> Result<Vec<u8>, HelloError> {
    let mut magic = [0u8; 8];
    let mut got = 0;
    while got < magic.len() {
        match r.read(&mut magic[got..]) {
            Ok(0) => return Err(HelloError::NotAccord(magic[..got].to_vec())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
        if magic[..got] != MAGIC[..got] {
            // Keep what follows for the message, up to a line or so.
            let mut more = magic[..got].to_vec();
            let _ = r.take(200).read_to_end(&mut more);
            return Err(HelloError::NotAccord(more));
        }
    }
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_HELLO {
        return Err(ProtoError::TooLarge {
            what: "handshake",
            len: len as u64,
            max: MAX_HELLO as u64,
        }
        .into());
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

impl Hello {
    pub fn write(&self, w: &mut dyn Write) -> io::Result<()> {
        let mut e = Enc::new();
        e.varint(self.version as u64).varint(self.features);
        e.u8(match self.mode {
            RootMode::Read => 0,
            RootMode::Write => 1,
            RootMode::Inspect => 2,
            RootMode::WriteExisting => 3,
        });
        e.bytes(&self.root);
        put_message(w, &e.finish())
    }

    pub fn read(r: &mut dyn Read) -> Result<Hello, HelloError> {
        let body = get_message(r)?;
        Ok(Hello::decode(&body)?)
    }

    pub fn decode(body: &[u8]) -> Result<Hello, ProtoError> {
        let mut d = Dec::new(body);
        let version = d.u32("version")?;
        let features = d.varint("features")?;
        if version != VERSION {
            // The rest may be laid out otherwise: stop here, the server
            // answers with its own version.
            return Ok(Hello {
                version,
                features,
                mode: RootMode::Read,
                root: Vec::new(),
            });
        }
        let mode = match d.u8("mode")? {
            0 => RootMode::Read,
            1 => RootMode::Write,
            2 => RootMode::Inspect,
            3 => RootMode::WriteExisting,
            m => return Err(ProtoError::Invalid(format!("unknown root mode {m}"))),
        };
        let root = d.bytes(MAX_ROOT, "root")?.to_vec();
        if root.contains(&0) {
            return Err(ProtoError::Invalid("a NUL byte in the root".into()));
        }
        d.end("the handshake")?;
        Ok(Hello {
            version,
            features,
            mode,
            root,
        })
    }
}

impl Welcome {
    pub fn write(&self, w: &mut dyn Write) -> io::Result<()> {
        let mut e = Enc::new();
        match self {
            Welcome::Accepted {
                version,
                features,
                identity,
                describe,
            } => {
                e.varint(*version as u64).u8(0).varint(*features);
                e.varint(identity.0).varint(identity.1).str(describe);
            }
            Welcome::Refused {
                version,
                why,
                message,
            } => {
                e.varint(*version as u64).u8(*why as u8).str(message);
            }
        }
        put_message(w, &e.finish())
    }

    pub fn read(r: &mut dyn Read) -> Result<Welcome, HelloError> {
        let body = get_message(r)?;
        Ok(Welcome::decode(&body)?)
    }

    pub fn decode(body: &[u8]) -> Result<Welcome, ProtoError> {
        let mut d = Dec::new(body);
        let version = d.u32("version")?;
        let status = d.u8("status")?;
        let w = if status == 0 {
            Welcome::Accepted {
                version,
                features: d.varint("features")?,
                identity: (d.varint("device")?, d.varint("inode")?),
                describe: d.text(MAX_ROOT + 256, "root name")?,
            }
        } else {
            let why = match status {
                1 => Refusal::Version,
                2 => Refusal::NotFound,
                3 => Refusal::Denied,
                4 => Refusal::Failed,
                s => return Err(ProtoError::Invalid(format!("unknown refusal {s}"))),
            };
            Welcome::Refused {
                version,
                why,
                message: d.text(4096, "message")?,
            }
        };
        d.end("the answer to the handshake")?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_and_welcome_round_trip() {
        for mode in [
            RootMode::Read,
            RootMode::Write,
            RootMode::Inspect,
            RootMode::WriteExisting,
        ] {
            let h = Hello {
                version: VERSION,
                features: FEATURES,
                mode,
                root: b"/srv/data".to_vec(),
            };
            let mut buf = Vec::new();
            h.write(&mut buf).unwrap();
            assert_eq!(Hello::read(&mut &buf[..]).unwrap(), h);
        }
        let w = Welcome::Refused {
            version: VERSION,
            why: Refusal::Denied,
            message: "outside".into(),
        };
        let mut buf = Vec::new();
        w.write(&mut buf).unwrap();
        assert_eq!(Welcome::read(&mut &buf[..]).unwrap(), w);
    }

    #[test]
    fn shell_noise_is_reported_as_such() {
        let mut r = &b"bash: accord: command not found\n"[..];
        match Welcome::read(&mut r) {
            Err(HelloError::NotAccord(b)) => assert!(b.starts_with(b"bash")),
            other => panic!("{other:?}"),
        }
    }
}
