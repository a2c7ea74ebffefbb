//! Who may hold one of the daemon's connection threads. Connections still
//! in their handshake (unauthenticated, "pending") and authenticated
//! sessions are counted apart, so that peers without a key, however many,
//! can never take the places of clients with one.
//!
//! A pending handshake is cheap to lose: a real client is through it in
//! milliseconds. So when the pending places are all taken, a newcomer is
//! not refused: the oldest pending handshake is cut short (its socket shut
//! down) to make room. The oldest, whatever its address: a real client is
//! young when it is through, while a peer that holds its place is old, and
//! many real clients behind one address (an office) must not be cut for
//! being many. One address may hold only so many; a newcomer from an
//! address at its limit cuts that address's own oldest. A flood of silent
//! peers thus cycles through the pending places while a real client gets
//! through between them.
//!
//! Threads stay bounded: a cut handshake keeps its place until its thread
//! has ended, and a newcomer waits (briefly) for that.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest the accept loop waits for cut handshakes' threads to end
/// before it closes a newcomer instead (they end in microseconds: their
/// socket is shut down under them).
const CUT_WAIT: Duration = Duration::from_secs(1);

/// How many of each a daemon takes.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections in their handshake, in all.
    pub handshakes: usize,
    /// Connections in their handshake from one address.
    pub handshakes_per_address: usize,
    /// Authenticated sessions, in all.
    pub sessions: usize,
    /// Authenticated sessions from one address, if limited.
    pub sessions_per_address: Option<usize>,
}

/// The places, shared by the accept loop and the connection threads.
pub struct Admission {
    limits: Limits,
    state: Mutex<State>,
    /// Signalled whenever a place is given back.
    freed: Condvar,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Pending handshakes by age (ids only grow).
    pending: BTreeMap<u64, Pending>,
    sessions: usize,
    sessions_by_address: HashMap<IpAddr, usize>,
}

struct Pending {
    address: IpAddr,
    /// A handle on the connection's socket, to shut it down when cut.
    socket: TcpStream,
    /// Why it was cut short, once it was.
    cut: Option<String>,
}

/// Why an authenticated client gets no session.
#[derive(Debug)]
pub enum NotAdmitted {
    /// Its handshake had been cut short meanwhile (why, for the log).
    Cut(String),
    /// The sessions are all taken (why, for the client).
    Busy(String),
}

/// A pending handshake's place, given back when dropped.
pub struct HandshakeSlot {
    admission: Arc<Admission>,
    id: u64,
}

/// A session's place, given back when dropped (even when its session
/// panics, or its thread could not be started).
pub struct SessionSlot {
    admission: Arc<Admission>,
    address: IpAddr,
}

/// The address whose limits a peer counts against. An IPv6 host commonly
/// has a whole /64 to itself, so it is counted per /64; an IPv4 address
/// mapped into IPv6 counts as itself.
pub fn address_of(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
        v4 => v4,
    }
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        let limits = Limits {
            handshakes: limits.handshakes.max(1),
            handshakes_per_address: limits.handshakes_per_address.max(1),
            sessions: limits.sessions.max(1),
            sessions_per_address: limits.sessions_per_address.map(|n| n.max(1)),
        };
        Arc::new(Admission {
            limits,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counts that are still
        // consistent (each change is one statement): go on with them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection from `address` (`socket` its stream),
    /// made by cutting older pending handshakes if need be; why not, when
    /// the threads of those cut did not end in time.
    pub fn admit(
        self: &Arc<Self>,
        address: IpAddr,
        socket: &TcpStream,
    ) -> Result<HandshakeSlot, String> {
        let socket = socket
            .try_clone()
            .map_err(|e| format!("cannot keep track of it: {e}"))?;
        let mut state = self.lock();
        self.cut_for_address(&mut state, address);
        let give_up = Instant::now() + CUT_WAIT;
        while state.pending.len() >= self.limits.handshakes {
            self.cut_for_room(&mut state);
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{} handshakes are pending (the limit) and those cut short have not ended yet",
                    state.pending.len()
                ));
            }
            state = self.wait(state, left);
        }
        let id = state.next_id;
        state.next_id += 1;
        let pending = Pending {
            address,
            socket,
            cut: None,
        };
        state.pending.insert(id, pending);
        Ok(HandshakeSlot {
            admission: self.clone(),
            id,
        })
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>, left: Duration) -> MutexGuard<'a, State> {
        match self.freed.wait_timeout(state, left) {
            Ok((state, _)) => state,
            Err(e) => e.into_inner().0,
        }
    }

    /// An address at its limit of pending handshakes gives up its oldest.
    fn cut_for_address(&self, state: &mut State, address: IpAddr) {
        let limit = self.limits.handshakes_per_address;
        let live = live_ids(state, |p| p.address == address);
        if live.len() >= limit {
            let why = format!(
                "handshake cut short: {limit} were pending from its address (the limit) and a newer one came"
            );
            cut(state, live[0], why);
        }
    }

    /// All pending places taken: cut enough that, once their threads have
    /// ended, one is free (counting those already cut and still ending).
    fn cut_for_room(&self, state: &mut State) {
        let ending = state.pending.values().filter(|p| p.cut.is_some()).count();
        if state.pending.len() - ending < self.limits.handshakes {
            return;
        }
        let Some(victim) = victim(state) else { return };
        let why = format!(
            "handshake cut short: {} were pending (the limit), it the oldest, and a newer one came",
            self.limits.handshakes
        );
        cut(state, victim, why);
    }

    /// Trade the pending place of `slot`, whose client has proved a known
    /// key, for a session's.
    pub fn authenticate(
        self: &Arc<Self>,
        slot: &HandshakeSlot,
    ) -> Result<SessionSlot, NotAdmitted> {
        let mut state = self.lock();
        let Some(pending) = state.pending.get(&slot.id) else {
            return Err(NotAdmitted::Cut("handshake cut short".into()));
        };
        if let Some(why) = &pending.cut {
            return Err(NotAdmitted::Cut(why.clone()));
        }
        let address = pending.address;
        self.check_sessions(&state, address)?;
        state.sessions += 1;
        *state.sessions_by_address.entry(address).or_default() += 1;
        state.pending.remove(&slot.id);
        self.freed.notify_all();
        Ok(SessionSlot {
            admission: self.clone(),
            address,
        })
    }

    fn check_sessions(&self, state: &State, address: IpAddr) -> Result<(), NotAdmitted> {
        if state.sessions >= self.limits.sessions {
            return Err(NotAdmitted::Busy(format!(
                "the server is busy ({} sessions at once, its limit); try again later",
                self.limits.sessions
            )));
        }
        let from_here = state.sessions_by_address.get(&address).copied();
        match self.limits.sessions_per_address {
            Some(limit) if from_here.unwrap_or(0) >= limit => Err(NotAdmitted::Busy(format!(
                "the server is busy: {limit} sessions from your address already (its limit per address); try again when one has ended"
            ))),
            _ => Ok(()),
        }
    }

    /// Why `slot`'s handshake was cut short, if it was.
    pub fn cut_short(&self, slot: &HandshakeSlot) -> Option<String> {
        let state = self.lock();
        state.pending.get(&slot.id).and_then(|p| p.cut.clone())
    }

    /// Pending handshakes and sessions, as now.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.pending.len(), state.sessions)
    }
}

/// The ids, oldest first, of pending handshakes not yet cut that `pick`.
fn live_ids(state: &State, pick: impl Fn(&Pending) -> bool) -> Vec<u64> {
    let live = state.pending.iter().filter(|(_, p)| p.cut.is_none());
    live.filter(|(_, p)| pick(p)).map(|(id, _)| *id).collect()
}

/// The oldest pending handshake not yet cut (ids grow with arrival).
fn victim(state: &State) -> Option<u64> {
    live_ids(state, |_| true).first().copied()
}

/// Cut a pending handshake short: shutting its socket down wakes its
/// thread at once, which ends and gives its place back.
fn cut(state: &mut State, id: u64, why: String) {
    if let Some(p) = state.pending.get_mut(&id) {
        let _ = p.socket.shutdown(std::net::Shutdown::Both);
        p.cut = Some(why);
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut state = self.admission.lock();
        if state.pending.remove(&self.id).is_some() {
            self.admission.freed.notify_all();
        }
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut state = self.admission.lock();
        state.sessions -= 1;
        if let Some(n) = state.sessions_by_address.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                state.sessions_by_address.remove(&self.address);
            }
        }
        self.admission.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    /// A connected socket (the server's end) and its client end.
    fn conn(l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (s, c)
    }

    fn limits(handshakes: usize, per_address: usize) -> Limits {
        Limits {
            handshakes,
            handshakes_per_address: per_address,
            sessions: 1,
            sessions_per_address: None,
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Whether the server end was shut down (the client reads its end).
    fn was_cut(client: &mut TcpStream) -> bool {
        client.set_nonblocking(true).unwrap();
        matches!(client.read(&mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn an_address_at_its_limit_gives_up_its_oldest() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::new(limits(10, 2));
        let mut held = Vec::new();
        for address in [ip(1), ip(1), ip(2)] {
            let (s, mut c) = conn(&l);
            let slot = a.admit(address, &s).unwrap();
            assert!(!was_cut(&mut c));
            held.push((slot, s, c));
        }
        let (s, _c) = conn(&l);
        let _newest = a.admit(ip(1), &s).unwrap();
        assert!(a
            .cut_short(&held[0].0)
            .unwrap()
            .contains("from its address"));
        assert!(was_cut(&mut held[0].2));
        assert!(a.cut_short(&held[1].0).is_none());
        assert!(a.cut_short(&held[2].0).is_none());
    }

    #[test]
    fn a_full_pool_cuts_the_oldest_and_waits_for_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::new(limits(3, 10));
        let mut held = Vec::new();
        // The second address holds the most: its number does not count.
        for address in [ip(1), ip(2), ip(2)] {
            let (s, c) = conn(&l);
            held.push((Some(a.admit(address, &s).unwrap()), s, c));
        }
        // The cut one's thread ends a little later: the newcomer waits.
        let (s, _c) = conn(&l);
        let ending = std::thread::scope(|scope| {
            let newcomer = scope.spawn(|| a.admit(ip(3), &s));
            while a.cut_short(held[0].0.as_ref().unwrap()).is_none() {
                std::thread::yield_now();
            }
            held[0].0.take();
            newcomer.join().unwrap()
        });
        assert!(ending.is_ok());
        assert!(a.cut_short(held[1].0.as_ref().unwrap()).is_none());
        assert!(a.cut_short(held[2].0.as_ref().unwrap()).is_none());
        assert_eq!(a.counts(), (3, 0));
    }

    #[test]
    fn sessions_are_counted_apart_and_refused_after_authentication() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::new(limits(1, 1));
        let (s1, _c1) = conn(&l);
        let first = a.admit(ip(1), &s1).unwrap();
        let session = a.authenticate(&first).unwrap();
        drop(first);
        // The session does not take the one pending place.
        let (s2, _c2) = conn(&l);
        let second = a.admit(ip(1), &s2).unwrap();
        assert!(a.cut_short(&second).is_none());
        match a.authenticate(&second) {
            Err(NotAdmitted::Busy(m)) => assert!(m.contains("busy"), "{m}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        drop(session);
        assert!(a.authenticate(&second).is_ok());
    }

    #[test]
    fn ipv6_counts_per_64() {
        let a: SocketAddr = "[2001:db8:1:2:aaaa::1]:5".parse().unwrap();
        let b: SocketAddr = "[2001:db8:1:2:bbbb::9]:6".parse().unwrap();
        let c: SocketAddr = "[2001:db8:1:3::1]:6".parse().unwrap();
        assert_eq!(address_of(a), address_of(b));
        assert_ne!(address_of(a), address_of(c));
        let m: SocketAddr = "[::ffff:10.0.0.1]:7".parse().unwrap();
        assert_eq!(address_of(m), ip(1));
    }
}
