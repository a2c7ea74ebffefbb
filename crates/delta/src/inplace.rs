//! The in-place planner: orders COPY commands so the old file can be rebuilt
//! in its own storage (the In-Place Rsync paper), breaking dependency cycles.
//!
//! A COPY `u` must run before a COPY `v` when `v` writes bytes `u` reads. The
//! graph is never stored: successors of `u` are the writes overlapping its read
//! range, found by binary search over the (disjoint, sorted) write ranges, so
//! building and walking it costs O(n log n + edges). A depth-first search gives
//! the order; a back edge closes a cycle, which one of three policies breaks
//! at the cheapest edge (or smallest node) among the last 64 of the cycle, a
//! bound that keeps each break's work and unwinding constant:
//!
//! * `Stash` (ours, the default): copy the bytes of the cheapest edge into
//!   receiver scratch memory just before they are overwritten, so the cycle
//!   costs no transfer. Scratch is allocated after ordering; a stash that does
//!   not fit becomes literal data, which is always safe (it only removes a read).
//! * `Trim` (the paper): send the bytes of the smallest overlap as literal data.
//! * `Delete` (the paper's local minimum): send the whole smallest COPY of the
//!   cycle as literal data.
//!
//! Copies longer than a piece are cut, so a swap of two huge regions becomes
//! many small two-cycles, each needing only a piece of scratch. Very large
//! plans are cut into windows of consecutive targets (the paper's §6.1):
//! each window is ordered on its own; a read of bytes an earlier window wrote
//! becomes literal data.

use crate::format::Command;
use crate::matcher::Copy;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CyclePolicy {
    Stash,
    Trim,
    Delete,
}

#[derive(Clone, Debug)]
pub struct InPlaceOptions {
    /// Receiver scratch memory for stashed bytes.
    pub scratch: u64,
    pub policy: CyclePolicy,
    /// Most copies ordered together (bounds the planner's working memory).
    pub window_nodes: usize,
}

impl Default for InPlaceOptions {
    fn default() -> Self {
        InPlaceOptions {
            scratch: 8 << 20,
            policy: CyclePolicy::Stash,
            window_nodes: 1 << 20,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct PlanStats {
    pub cycles_broken: u64,
    pub cycles_stashed: u64,
    pub cycles_trimmed: u64,
    pub cycles_deleted: u64,
    /// Stashes turned into literal data because scratch was full.
    pub stashes_evicted: u64,
    /// Bytes turned into literal data by cycle breaking, eviction and windows.
    pub converted_bytes: u64,
    pub stashed_bytes: u64,
    pub scratch_len: u64,
    pub windows: u64,
    pub planner_peak_bytes: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ExclKind {
    /// Read from scratch (index into `stashes`).
    Stash(u32),
    /// Sent as literal data.
    Add,
}

/// A sub-range of a node's read range that is not read from the file.
#[derive(Clone, Copy, Debug)]
struct Excl {
    a: u64,
    b: u64,
    kind: ExclKind,
}

#[derive(Clone, Copy, Debug)]
struct StashRec {
    reader: u32,
    writer: u32,
    a: u64,
    b: u64,
    slot: u64,
    live: bool,
}

const WHITE: u8 = 0;
const GRAY: u8 = 1;
const BLACK: u8 = 2;
const NOT_STARTED: u32 = u32::MAX;

struct Planner<'o> {
    nodes: Vec<Copy>,
    /// Per node, sorted and disjoint; only nodes that have any are stored.
    excl: HashMap<u32, Vec<Excl>>,
    deleted: Vec<bool>,
    stashes: Vec<StashRec>,
    opts: &'o InPlaceOptions,
    stats: PlanStats,
    // Working state of the window being ordered.
    w0: usize,
    w1: usize,
    color: Vec<u8>,
    cursor: Vec<u32>,
    stack_pos: Vec<u32>,
    stack: Vec<u32>,
    /// Per stack position: the cost of the tree edge into that node (for the
    /// Delete policy: the node's length), recorded when it was pushed.
    stack_cost: Vec<u64>,
    revisit: Vec<u32>,
}

/// A cycle break looks for its cheapest edge (or node) among this many
/// positions nearest the top of the stack, so a break costs bounded work and
/// unwinds at most this many nodes, however long the cycle.
const CYCLE_LOOKBACK: usize = 64;

/// Plans an in-place delta from the matcher's copies (sorted by target).
/// Returns commands without ADDs' data (ADDs take the new file's bytes at their
/// target offset) and the statistics.
pub fn plan(
    copies: &[Copy],
    new_len: u64,
    block_len: u64,
    opts: &InPlaceOptions,
) -> (Vec<Command>, PlanStats) {
    let piece = block_len.max(opts.scratch / 4).max(64 << 10);
    let mut keeps = Vec::new();
    let mut nodes = Vec::new();
    for c in copies {
        if c.src == c.dst {
            keeps.push(Command::Keep {
                dst: c.dst,
                len: c.len,
            });
            continue;
        }
        let mut off = 0;
        while off < c.len {
            let len = piece.min(c.len - off);
            nodes.push(Copy {
                src: c.src + off,
                dst: c.dst + off,
                len,
            });
            off += len;
        }
    }
    let n = nodes.len();
    let mut p = Planner {
        excl: HashMap::new(),
        deleted: vec![false; n],
        nodes,
        stashes: Vec::new(),
        opts,
        stats: PlanStats::default(),
        w0: 0,
        w1: 0,
        color: Vec::new(),
        cursor: Vec::new(),
        stack_pos: Vec::new(),
        stack: Vec::new(),
        stack_cost: Vec::new(),
        revisit: Vec::new(),
    };
    let window = opts.window_nodes.max(2);
    let mut order: Vec<u32> = Vec::with_capacity(n);
    let mut w0 = 0;
    while w0 < n {
        let w1 = (w0 + window).min(n);
        p.order_window(w0, w1, &mut order);
        p.stats.windows += 1;
        w0 = w1;
    }
    let cmds = p.emit(keeps, &order, new_len);
    p.stats.planner_peak_bytes = p.memory_bytes(order.capacity(), cmds.capacity());
    (cmds, p.stats)
}

impl Planner<'_> {
    fn read_range(&self, u: usize) -> (u64, u64) {
        let c = &self.nodes[u];
        (c.src, c.src + c.len)
    }

    fn write_range(&self, v: usize) -> (u64, u64) {
        let c = &self.nodes[v];
        (c.dst, c.dst + c.len)
    }

    /// Parts of `[a, b)` that `u` still reads from the file.
    fn excl_of(&self, u: usize) -> &[Excl] {
        self.excl.get(&(u as u32)).map_or(&[], |v| v.as_slice())
    }

    /// Calls `f` for each part of `[a, b)` that `u` still reads from the file.
    fn for_each_uncovered(&self, u: usize, a: u64, b: u64, mut f: impl FnMut(u64, u64)) {
        let mut at = a;
        for e in self.excl_of(u) {
            if e.b <= at {
                continue;
            }
            if e.a >= b {
                break;
            }
            if e.a > at {
                f(at, e.a);
            }
            at = at.max(e.b);
            if at >= b {
                return;
            }
        }
        if at < b {
            f(at, b);
        }
    }

    fn uncovered(&self, u: usize, a: u64, b: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        self.for_each_uncovered(u, a, b, |x, y| out.push((x, y)));
        out
    }

    fn uncovered_len(&self, u: usize, a: u64, b: u64) -> u64 {
        let mut total = 0;
        self.for_each_uncovered(u, a, b, |x, y| total += y - x);
        total
    }

    fn exclude(&mut self, u: usize, a: u64, b: u64, kind: ExclKind) {
        let list = self.excl.entry(u as u32).or_default();
        let at = list.partition_point(|e| e.a < a);
        list.insert(at, Excl { a, b, kind });
    }

    /// Bytes of `u`'s file reads that `v`'s write overlaps.
    fn edge_overlap(&self, u: usize, v: usize) -> (u64, u64, u64) {
        let (ra, rb) = self.read_range(u);
        let (wa, wb) = self.write_range(v);
        let (a, b) = (ra.max(wa), rb.min(wb));
        if a >= b {
            return (a, a, 0);
        }
        (a, b, self.uncovered_len(u, a, b))
    }

    /// Turns every file read of `u` inside `[a, b)` into literal data.
    fn convert(&mut self, u: usize, a: u64, b: u64) {
        for (x, y) in self.uncovered(u, a, b) {
            self.exclude(u, x, y, ExclKind::Add);
            self.stats.converted_bytes += y - x;
        }
    }

    /// Next node of the window whose write overlaps what `u` reads from the file.
    fn next_succ(&mut self, u: usize) -> Option<usize> {
        let (a, b) = self.read_range(u);
        let li = u - self.w0;
        if self.cursor[li] == NOT_STARTED {
            let first = self.nodes[self.w0..self.w1].partition_point(|c| c.dst + c.len <= a);
            self.cursor[li] = (self.w0 + first) as u32;
        }
        while (self.cursor[li] as usize) < self.w1 {
            let v = self.cursor[li] as usize;
            if self.nodes[v].dst >= b {
                self.cursor[li] = self.w1 as u32;
                return None;
            }
            self.cursor[li] += 1;
            if v == u || self.deleted[v] {
                continue; // a copy overlapping itself is applied like memmove
            }
            if self.edge_overlap(u, v).2 > 0 {
                return Some(v);
            }
        }
        None
    }

    fn order_window(&mut self, w0: usize, w1: usize, order: &mut Vec<u32>) {
        self.w0 = w0;
        self.w1 = w1;
        let len = w1 - w0;
        self.color = vec![WHITE; len];
        self.cursor = vec![NOT_STARTED; len];
        self.stack_pos = vec![0; len];
        self.stack.clear();
        self.convert_reads_of_earlier_windows();
        let mut finished: Vec<u32> = Vec::with_capacity(len);
        for root in w0..w1 {
            self.search_from(root, &mut finished);
        }
        // Nodes unwound after a cycle was broken may sit before the last root.
        while let Some(root) = self.revisit.pop() {
            self.search_from(root as usize, &mut finished);
        }
        // Depth-first finish order lists a node after everything it must precede.
        order.extend(
            finished
                .iter()
                .rev()
                .filter(|&&u| !self.deleted[u as usize]),
        );
    }

    fn search_from(&mut self, root: usize, finished: &mut Vec<u32>) {
        let w0 = self.w0;
        if self.color[root - w0] != WHITE || self.deleted[root] {
            return;
        }
        self.push(root, u64::MAX);
        while let Some(&top) = self.stack.last() {
            let u = top as usize;
            match self.next_succ(u) {
                None => {
                    self.stack.pop();
                    self.color[u - w0] = BLACK;
                    finished.push(u as u32);
                }
                Some(v) => match self.color[v - w0] {
                    WHITE => {
                        let cost = match self.opts.policy {
                            CyclePolicy::Delete => self.nodes[v].len,
                            _ => self.edge_overlap(u, v).2,
                        };
                        self.push(v, cost);
                    }
                    GRAY => self.break_cycle(self.stack_pos[v - w0] as usize),
                    _ => {}
                },
            }
        }
    }

    fn push(&mut self, v: usize, cost: u64) {
        let li = v - self.w0;
        self.color[li] = GRAY;
        self.cursor[li] = NOT_STARTED;
        self.stack_pos[li] = self.stack.len() as u32;
        self.stack.push(v as u32);
        self.stack_cost.truncate(self.stack.len() - 1);
        self.stack_cost.push(cost);
    }

    /// Pops the stack down to `keep` entries; popped nodes are explored again later.
    fn unwind(&mut self, keep: usize) {
        self.stack_cost.truncate(keep);
        while self.stack.len() > keep {
            let u = self.stack.pop().unwrap() as usize;
            let li = u - self.w0;
            if !self.deleted[u] {
                self.color[li] = WHITE;
                self.revisit.push(u as u32);
            }
            self.cursor[li] = NOT_STARTED;
        }
    }

    /// The stack from `from` to the top, plus the edge from the top back to
    /// `stack[from]`, is a cycle: break it by the policy, at the cheapest edge
    /// (or, for Delete, the smallest node) among the last `CYCLE_LOOKBACK`.
    fn break_cycle(&mut self, from: usize) {
        self.stats.cycles_broken += 1;
        let top = self.stack.len() - 1;
        let lookback = top.saturating_sub(CYCLE_LOOKBACK - 1).max(from);
        // Later positions win ties: they unwind less.
        let cheapest = |lo: usize| {
            (lo..=top)
                .map(|p| (self.stack_cost[p], p))
                .min_by_key(|&(c, p)| (c, std::cmp::Reverse(p)))
        };
        if self.opts.policy == CyclePolicy::Delete {
            let (_, p) = cheapest(lookback).expect("a cycle has a node");
            self.delete(self.stack[p] as usize);
            self.unwind(p);
            return;
        }
        // The back edge, preferred on ties because breaking it unwinds nothing.
        let (u, v) = (self.stack[top] as usize, self.stack[from] as usize);
        let mut chosen = (u, v, top + 1);
        let back = self.edge_overlap(u, v).2;
        if let Some((cost, p)) = cheapest(lookback.max(from + 1)).filter(|_| from < top) {
            if cost < back {
                chosen = (self.stack[p - 1] as usize, self.stack[p] as usize, p);
            }
        }
        let (u, v, pop_to) = chosen;
        let (a, b, cost) = self.edge_overlap(u, v);
        if self.opts.policy == CyclePolicy::Stash && cost <= self.opts.scratch {
            for (x, y) in self.uncovered(u, a, b) {
                let id = self.stashes.len() as u32;
                self.stashes.push(StashRec {
                    reader: u as u32,
                    writer: v as u32,
                    a: x,
                    b: y,
                    slot: 0,
                    live: true,
                });
                self.exclude(u, x, y, ExclKind::Stash(id));
            }
            self.stats.cycles_stashed += 1;
        } else {
            self.convert(u, a, b);
            self.stats.cycles_trimmed += 1;
        }
        if pop_to <= top {
            self.unwind(pop_to);
        }
    }

    /// The paper's node deletion: the whole copy becomes literal data.
    fn delete(&mut self, victim: usize) {
        let (a, b) = self.read_range(victim);
        let already: u64 = self
            .excl_of(victim)
            .iter()
            .filter(|e| e.kind == ExclKind::Add)
            .map(|e| e.b - e.a)
            .sum();
        self.stats.converted_bytes += (b - a) - already;
        self.excl.insert(
            victim as u32,
            vec![Excl {
                a,
                b,
                kind: ExclKind::Add,
            }],
        );
        self.deleted[victim] = true;
        self.color[victim - self.w0] = BLACK;
        self.stats.cycles_deleted += 1;
    }

    /// Earlier windows have run completely: what they wrote is gone.
    fn convert_reads_of_earlier_windows(&mut self) {
        if self.w0 == 0 {
            return;
        }
        for u in self.w0..self.w1 {
            let (a, b) = self.read_range(u);
            let first = self.nodes[..self.w0].partition_point(|c| c.dst + c.len <= a);
            for v in first..self.w0 {
                if self.nodes[v].dst >= b {
                    break;
                }
                if self.deleted[v] {
                    continue;
                }
                let (wa, wb) = self.write_range(v);
                self.convert(u, a.max(wa), b.min(wb));
            }
        }
    }

    /// Allocates scratch for the stashes in execution order and writes the
    /// commands: KEEPs, then per node its stash captures and pieces, then ADDs.
    fn emit(&mut self, keeps: Vec<Command>, order: &[u32], new_len: u64) -> Vec<Command> {
        let mut pos = vec![u32::MAX; self.nodes.len()];
        for (i, &u) in order.iter().enumerate() {
            pos[u as usize] = i as u32;
        }
        // Capture before the writer runs, unless the reader runs first anyway.
        let mut captures: Vec<(u32, u32)> = Vec::new(); // (position of the writer, stash)
        for (id, s) in self.stashes.iter_mut().enumerate() {
            let (pr, pw) = (pos[s.reader as usize], pos[s.writer as usize]);
            if pw == u32::MAX || pr == u32::MAX || pr < pw {
                s.live = false;
            } else {
                captures.push((pw, id as u32));
            }
        }
        captures.sort_unstable();
        let stashes = &self.stashes;
        for list in self.excl.values_mut() {
            list.retain(|e| match e.kind {
                ExclKind::Stash(id) => stashes[id as usize].live,
                ExclKind::Add => true,
            });
        }
        let mut scratch = ScratchAllocator::new(self.opts.scratch);
        // Sized once from an upper bound, so the buffers never double: a node
        // yields at most one piece per exclusion plus one, and every gap
        // between covered ranges one ADD.
        let excl_total: usize = self.excl.values().map(Vec::len).sum();
        let pieces = order.len() + 2 * excl_total;
        let live_stashes = captures.len();
        let mut cmds = Vec::with_capacity(2 * (keeps.len() + pieces) + live_stashes + 1);
        let mut covered: Vec<(u64, u64)> = Vec::with_capacity(keeps.len() + pieces);
        covered.extend(keeps.iter().filter_map(|c| c.target()));
        cmds.extend(keeps);
        let mut next_capture = 0;
        for (i, &u) in order.iter().enumerate() {
            while next_capture < captures.len() && captures[next_capture].0 as usize == i {
                let id = captures[next_capture].1;
                next_capture += 1;
                let s = self.stashes[id as usize];
                match scratch.alloc(s.b - s.a) {
                    Some(slot) => {
                        self.stashes[id as usize].slot = slot;
                        self.stats.stashed_bytes += s.b - s.a;
                        cmds.push(Command::Stash {
                            src: s.a,
                            len: s.b - s.a,
                            slot,
                        });
                    }
                    None => self.evict(id),
                }
            }
            self.emit_node(u as usize, &mut cmds, &mut covered, &mut scratch);
        }
        self.stats.scratch_len = scratch.high_water;
        covered.sort_unstable();
        let mut at = 0;
        for (dst, len) in covered {
            if dst > at {
                cmds.push(Command::Add {
                    dst: at,
                    len: dst - at,
                    data: at as usize,
                });
            }
            at = at.max(dst + len);
        }
        if at < new_len {
            cmds.push(Command::Add {
                dst: at,
                len: new_len - at,
                data: at as usize,
            });
        }
        cmds
    }

    fn evict(&mut self, id: u32) {
        let s = &mut self.stashes[id as usize];
        s.live = false;
        let (u, a) = (s.reader as usize, s.a);
        for e in self.excl.entry(u as u32).or_default().iter_mut() {
            if e.a == a && e.kind == ExclKind::Stash(id) {
                e.kind = ExclKind::Add;
                self.stats.converted_bytes += e.b - e.a;
            }
        }
        self.stats.stashes_evicted += 1;
    }

    /// One node's pieces: file reads as COPY, stashed bytes as UNSTASH; ordered
    /// like memmove so a copy overlapping itself never reads what it wrote.
    fn emit_node(
        &mut self,
        u: usize,
        cmds: &mut Vec<Command>,
        covered: &mut Vec<(u64, u64)>,
        scratch: &mut ScratchAllocator,
    ) {
        let c = self.nodes[u];
        let to_target = |x: u64| x - c.src + c.dst;
        let mut pieces = Vec::new();
        let mut at = c.src;
        for e in self.excl_of(u) {
            if e.a > at {
                pieces.push(Command::Copy {
                    src: at,
                    dst: to_target(at),
                    len: e.a - at,
                });
            }
            if let ExclKind::Stash(id) = e.kind {
                let s = &self.stashes[id as usize];
                pieces.push(Command::Unstash {
                    slot: s.slot + (e.a - s.a),
                    dst: to_target(e.a),
                    len: e.b - e.a,
                });
            }
            at = e.b;
        }
        if at < c.src + c.len {
            pieces.push(Command::Copy {
                src: at,
                dst: to_target(at),
                len: c.src + c.len - at,
            });
        }
        if c.dst > c.src {
            pieces.reverse();
        }
        for p in pieces {
            covered.extend(p.target());
            cmds.push(p);
        }
        for e in self.excl_of(u) {
            if let ExclKind::Stash(id) = e.kind {
                let s = &self.stashes[id as usize];
                scratch.free(s.slot, s.b - s.a);
            }
        }
    }

    /// Bytes held by the planner's structures at their largest (they only
    /// grow while planning), including the commands it hands back.
    fn memory_bytes(&self, order_cap: usize, cmds_cap: usize) -> u64 {
        use std::mem::size_of;
        let excl: usize = self
            .excl
            .values()
            .map(|v| v.capacity() * size_of::<Excl>() + size_of::<(u32, Vec<Excl>)>())
            .sum();
        (self.nodes.capacity() * size_of::<Copy>()
            + excl
            + self.deleted.capacity()
            + self.stashes.capacity() * size_of::<StashRec>()
            + self.color.capacity()
            + self.cursor.capacity() * 4
            + self.stack_pos.capacity() * 4
            + self.stack.capacity() * 4
            + self.stack_cost.capacity() * 8
            + order_cap * 4 * 2
            + cmds_cap * size_of::<Command>()) as u64
    }
}

/// First-fit allocator over the receiver's scratch buffer.
struct ScratchAllocator {
    free: std::collections::BTreeMap<u64, u64>, // start -> len
    high_water: u64,
}

impl ScratchAllocator {
    fn new(size: u64) -> Self {
        let mut free = std::collections::BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        ScratchAllocator {
            free,
            high_water: 0,
        }
    }

    fn alloc(&mut self, len: u64) -> Option<u64> {
        let (&start, &have) = self.free.iter().find(|(_, &l)| l >= len)?;
        self.free.remove(&start);
        if have > len {
            self.free.insert(start + len, have - len);
        }
        self.high_water = self.high_water.max(start + len);
        Some(start)
    }

    fn free(&mut self, mut start: u64, mut len: u64) {
        if let Some((&s, &l)) = self.free.range(..start).next_back() {
            if s + l == start {
                self.free.remove(&s);
                start = s;
                len += l;
            }
        }
        if let Some(&l) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += l;
        }
        self.free.insert(start, len);
    }
}
