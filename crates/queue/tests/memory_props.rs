//! The in-memory queue against a model, over random sequences of pushes,
//! leases (with every lease at once reclaimable, as if each worker were
//! lost the moment it took its tasks), acknowledgements and failures:
//! after every step waiting + leased + done + dead is what was pushed (a
//! task lost, or done twice, breaks the sum), nothing is handed out while
//! paused, and draining ends with every task done or dead.

use accord_queue::{Lease, MemoryQueue, Policy, RunState, TaskQueue};
use proptest::prelude::*;
use std::collections::HashSet;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Push(u8),
    Lease(u8),
    Ack(u8),
    Fail(u8),
    Pause(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u8..6).prop_map(Op::Push),
        (1u8..5).prop_map(Op::Lease),
        (1u8..4).prop_map(Op::Ack),
        (1u8..3).prop_map(Op::Fail),
        any::<bool>().prop_map(Op::Pause),
    ]
}

proptest! {
    #[test]
    fn counts_add_up_and_nothing_is_done_twice(ops in prop::collection::vec(op(), 1..80)) {
        let q = MemoryQueue::new(Policy { claim_timeout: Duration::ZERO, max_attempts: 3 });
        let mut pushed = 0u64;
        let mut held: Vec<Lease> = Vec::new();
        let mut paused = false;
        for op in ops {
            match op {
                Op::Push(n) => {
                    let tasks: Vec<Vec<u8>> =
                        (0..n).map(|i| format!("t{}", pushed + i as u64).into_bytes()).collect();
                    q.push(&tasks).unwrap();
                    pushed += n as u64;
                }
                Op::Lease(n) => {
                    let got = q.lease("w", n as usize, Duration::ZERO).unwrap();
                    prop_assert!(got.len() <= n as usize);
                    prop_assert!(!paused || got.is_empty(), "handed out while paused");
                    held.extend(got);
                }
                Op::Ack(n) => {
                    let before = q.stats().unwrap().done;
                    let take: Vec<Lease> = held.drain(..held.len().min(n as usize)).collect();
                    let ids: Vec<_> = take.iter().map(|l| l.id.clone()).collect();
                    q.ack(&ids).unwrap();
                    // Only leases still held count (a reclaimed one may be
                    // acknowledged by an older holder first): a task done
                    // twice would break the sum below.
                    let distinct: HashSet<_> = ids.iter().collect();
                    prop_assert!(q.stats().unwrap().done - before <= distinct.len() as u64);
                }
                Op::Fail(n) => {
                    for l in held.drain(..held.len().min(n as usize)) {
                        q.fail(&l, "failed").unwrap();
                    }
                }
                Op::Pause(p) => {
                    paused = p;
                    q.set_state(if p { RunState::Paused } else { RunState::Running }).unwrap();
                }
            }
            let s = q.stats().unwrap();
            prop_assert_eq!(s.waiting + s.leased + s.done + s.dead, pushed, "{:?}", s);
            for l in q.dead(usize::MAX).unwrap() {
                prop_assert!(l.attempts >= 3);
            }
        }
        // Drain: everything left ends done or dead, each task once.
        q.set_state(RunState::Running).unwrap();
        loop {
            let got = q.lease("drain", 64, Duration::ZERO).unwrap();
            if got.is_empty() { break; }
            let ids: Vec<_> = got.iter().map(|l| l.id.clone()).collect();
            q.ack(&ids).unwrap();
        }
        let s = q.stats().unwrap();
        prop_assert_eq!((s.waiting, s.leased), (0, 0));
        prop_assert_eq!(s.done + s.dead, pushed);
    }
}
