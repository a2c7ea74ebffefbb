//! Memory budgets: every buffer a peer can make us keep (a request body
//! held whole, a reply read whole, the headers of requests not answered
//! yet) is charged to its connection's budget, and a connection's budget
//! draws on the process's pool. A charge that does not fit fails at once
//! (the request or the call fails with why); nothing waits for memory, so
//! two connections can never wait on each other's charges.
//!
//! The first `reserve` bytes of a connection are its own and never touch
//! the pool: what an ordinary client needs (small files, listings of
//! ordinary directories) is there whatever other connections hold, so
//! peers that fill the pool slow down only the large requests of others.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Memory shared by all connections of a process.
#[derive(Debug)]
pub struct Pool {
    limit: u64,
    used: AtomicU64,
}

impl Pool {
    pub fn new(limit: u64) -> Arc<Pool> {
        Arc::new(Pool {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// Take `n` bytes if they fit.
    fn take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                u.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::SeqCst);
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged now, for tests and the log.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }
}

/// One connection's budget.
#[derive(Debug)]
pub struct Budget {
    /// Most bytes this connection may hold.
    limit: u64,
    /// Bytes that are this connection's own (not drawn from the pool).
    reserve: u64,
    used: Mutex<u64>,
    pool: Option<Arc<Pool>>,
}

/// Why a charge failed, in the user's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    #[error("holding {what} would take more than this connection's memory budget ({} MiB)", mib(*.limit))]
    Connection { what: &'static str, limit: u64 },
    #[error("holding {what} would take more than the memory the server has left for its connections ({} MiB in all); try again later", mib(*.limit))]
    Pool { what: &'static str, limit: u64 },
}

fn mib(n: u64) -> u64 {
    n >> 20
}

impl Budget {
    /// A budget of `limit` bytes whose first `reserve` are its own, the
    /// rest drawn from `pool` (none: all of it its own).
    pub fn new(limit: u64, reserve: u64, pool: Option<Arc<Pool>>) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            reserve: reserve.min(limit),
            used: Mutex::new(0),
            pool,
        })
    }

    /// A budget of `limit` bytes of its own.
    pub fn alone(limit: u64) -> Arc<Budget> {
        Budget::new(limit, limit, None)
    }

    /// Bytes charged now.
    #[cfg(test)]
    pub fn used(&self) -> u64 {
        *self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Charge `n` bytes for `what`, or say why they do not fit.
    pub fn charge(&self, n: u64, what: &'static str) -> Result<(), OverBudget> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let after = used.saturating_add(n);
        if after > self.limit {
            return Err(OverBudget::Connection {
                what,
                limit: self.limit,
            });
        }
        let from_pool = after.saturating_sub(self.reserve) - used.saturating_sub(self.reserve);
        if let Some(pool) = &self.pool {
            if from_pool > 0 && !pool.take(from_pool) {
                return Err(OverBudget::Pool {
                    what,
                    limit: pool.limit,
                });
            }
        }
        *used = after;
        Ok(())
    }

    /// Give back `n` bytes charged before.
    pub fn release(&self, n: u64) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let after = used.saturating_sub(n);
        let to_pool = used.saturating_sub(self.reserve) - after.saturating_sub(self.reserve);
        if let Some(pool) = &self.pool {
            if to_pool > 0 {
                pool.give(to_pool);
            }
        }
        *used = after;
    }
}

impl Drop for Budget {
    /// A connection that ends with bytes still charged (queued data of a
    /// peer that went away) gives its share of the pool back.
    fn drop(&mut self) {
        let used = *self.used.get_mut().unwrap_or_else(|e| e.into_inner());
        self.release(used);
    }
}

/// Bytes held whole (a body, a reply), charged to a budget until dropped.
pub struct Held {
    data: Vec<u8>,
    charged: u64,
    budget: Arc<Budget>,
}

impl Held {
    pub fn new(budget: &Arc<Budget>) -> Held {
        Held {
            data: Vec::new(),
            charged: 0,
            budget: budget.clone(),
        }
    }

    /// Append `bytes`, charging them first.
    pub fn extend(&mut self, bytes: &[u8], what: &'static str) -> Result<(), OverBudget> {
        self.grow(bytes.len(), what)?;
        self.data.extend_from_slice(bytes);
        Ok(())
    }

    /// Append `n` zero bytes, charging them first.
    pub fn zeros(&mut self, n: usize, what: &'static str) -> Result<(), OverBudget> {
        self.grow(n, what)?;
        self.data.resize(self.data.len() + n, 0);
        Ok(())
    }

    /// Charge `n` bytes this holds no data for (memory about to be used
    /// elsewhere), given back with the rest when dropped.
    pub fn charge_only(&mut self, n: u64, what: &'static str) -> Result<(), OverBudget> {
        self.budget.charge(n, what)?;
        self.charged += n;
        Ok(())
    }

    fn grow(&mut self, n: usize, what: &'static str) -> Result<(), OverBudget> {
        self.budget.charge(n as u64, what)?;
        self.charged += n as u64;
        Ok(())
    }

    #[allow(clippy::len_without_is_empty)] // `Deref` gives `is_empty`
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// The bytes, no longer charged: for a caller that keeps them only as
    /// long as the charge would have lasted anyway, or that is bounded
    /// otherwise.
    pub fn into_vec(mut self) -> Vec<u8> {
        std::mem::take(&mut self.data)
    }
}

impl std::ops::Deref for Held {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.release(self.charged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_cannot_take_more_than_its_limit() {
        let b = Budget::alone(100);
        b.charge(60, "x").unwrap();
        assert!(matches!(
            b.charge(41, "x"),
            Err(OverBudget::Connection { .. })
        ));
        b.release(60);
        b.charge(100, "x").unwrap();
    }

    #[test]
    fn the_reserve_is_never_taken_from_the_pool() {
        let pool = Pool::new(50);
        let a = Budget::new(100, 20, Some(pool.clone()));
        let b = Budget::new(100, 20, Some(pool.clone()));
        a.charge(70, "x").unwrap(); // 20 own, 50 from the pool
        assert_eq!(pool.used(), 50);
        // The pool is empty, b's own 20 are still there.
        b.charge(20, "x").unwrap();
        assert!(matches!(b.charge(1, "x"), Err(OverBudget::Pool { .. })));
        a.release(70);
        assert_eq!(pool.used(), 0);
        b.charge(50, "x").unwrap();
        assert_eq!(pool.used(), 50);
    }

    #[test]
    fn held_bytes_are_given_back_when_dropped() {
        let b = Budget::alone(10);
        let mut h = Held::new(&b);
        h.extend(b"12345", "x").unwrap();
        h.zeros(5, "x").unwrap();
        assert!(h.extend(b"1", "x").is_err());
        assert_eq!(&h[..], b"12345\0\0\0\0\0");
        drop(h);
        assert_eq!(b.used(), 0);
    }
}
