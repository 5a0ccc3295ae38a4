//! Soak: a long serving-like workload on one arena per configuration (eager and lazy,
//! page sizes 1 and 16), checking that memory stays flat, counters conserve and the pool
//! drains to empty.
//!
//! Each configuration runs `UKV_SOAK_OPS` operations (default 50,000; the long run used
//! 1,000,000 per configuration). An operation is one call into the arena: prefill
//! (`alloc_extend`), state slot `alloc`, decode (`alloc_decode`), `free` (single or in a
//! free group), `flush` (non-urgent or urgent), forward bookkeeping
//! (`set_latest_token`, `set_inflight_writes`, `retire_token`) and a sprinkling of
//! invalid calls (dead, repeated and out-of-range ids) that must fail and change nothing.
//!
//! Every `CHECK_EVERY` operations: `check_invariants()`; live pages equal what the
//! workload holds; the plan's vectors' capacities, the holes and the pending pages stay
//! under bounds set by the pool's size, never by the number of operations; the
//! compaction counters equal the moves the plans carried. At the end every request is
//! freed, an urgent flush runs, and the arena must be exactly empty. The process RSS is
//! sampled (Linux) and must not grow after the warm-up.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use ukv_core::{Arena, ArenaConfig, Direction, Plan, PoolSpec};

mod common;
use common::Rng;

const CHECK_EVERY: u64 = 1000;
const KV: usize = 0;
const STATE: usize = 1;

struct Req {
    tokens: Vec<i64>,
    slot: i64,
}

/// What one configuration's soak measured.
#[derive(Debug, Default)]
struct Report {
    ops: u64,
    invalid_calls: u64,
    refusals: u64,
    moves: u64,
    max_live_kv_pages: usize,
    max_holes: usize,
    max_pending: usize,
    max_plan_capacity: usize,
    rss_kib_warm: u64,
    rss_kib_end: u64,
    secs: f64,
}

fn ops_per_config() -> u64 {
    std::env::var("UKV_SOAK_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

fn arena(ps: u64, lazy: bool) -> Arena {
    let kv = PoolSpec {
        name: "kv".into(),
        entry_bytes: 64,
        page_size: ps,
        direction: Direction::Up,
        id_owner: None,
    };
    let state = PoolSpec {
        name: "state".into(),
        entry_bytes: 1040,
        page_size: 1,
        direction: Direction::Down,
        id_owner: None,
    };
    // Room for about 6,000 KV tokens or about 370 state slots, shared.
    let total = 64 * 16 + 6000 * 64;
    Arena::new(ArenaConfig {
        total_bytes: total,
        pools: vec![kv, state],
        lazy,
        max_moves_per_flush: 64,
    })
    .unwrap()
}

/// Largest capacity among the plan's reusable vectors.
fn plan_capacity(plan: &Plan) -> usize {
    let mut caps = vec![
        plan.tokens.capacity(),
        plan.token_req.capacity(),
        plan.pages.capacity(),
        plan.wait_tokens.capacity(),
    ];
    for p in &plan.pools {
        caps.extend([
            p.src.capacity(),
            p.dst.capacity(),
            p.v2p_rows.capacity(),
            p.v2p_vals.capacity(),
            p.p2v_rows.capacity(),
            p.p2v_vals.capacity(),
        ]);
    }
    caps.into_iter().max().unwrap_or(0)
}

struct Soak {
    a: Arena,
    ps: i64,
    lazy: bool,
    rng: Rng,
    reqs: Vec<Req>,
    /// Moves and operations-with-moves per pool, from the plans.
    moved: [u64; 2],
    compactions: [u64; 2],
    token: u64,
    rep: Report,
}

impl Soak {
    /// Account for the plan of the call that just returned Ok.
    fn took(&mut self) {
        self.rep.ops += 1;
        for i in [KV, STATE] {
            let n = self.a.plan().pools[i].num_moves() as u64;
            self.moved[i] += n;
            self.rep.moves += n;
            self.compactions[i] += u64::from(n > 0);
        }
    }

    fn live_kv_pages(&self) -> usize {
        self.reqs
            .iter()
            .map(|r| r.tokens.len().div_ceil(self.ps as usize))
            .sum()
    }

    fn finish(&mut self, r: usize) {
        let req = self.reqs.swap_remove(r);
        self.a.free(KV, &req.tokens).unwrap();
        self.took();
        self.a.free(STATE, &[req.slot]).unwrap();
        self.took();
    }

    fn finish_group(&mut self) {
        let k = 1 + self.rng.below(4) as usize;
        self.a.free_group_begin(KV).unwrap();
        self.took();
        let mut slots = Vec::new();
        for _ in 0..k.min(self.reqs.len()) {
            let r = self.rng.below(self.reqs.len() as u64) as usize;
            let req = self.reqs.swap_remove(r);
            self.a.free(KV, &req.tokens).unwrap();
            self.took();
            slots.push(req.slot);
        }
        self.a.free_group_end(KV).unwrap();
        self.took();
        if !slots.is_empty() {
            self.a.free(STATE, &slots).unwrap();
            self.took();
        }
    }

    /// A new request: prefill tokens plus one state slot; under pressure, evict.
    fn admit(&mut self) {
        let len = 1 + self.rng.below(3 * self.ps as u64 + 40) as i64;
        if !self.a.alloc_extend(KV, &[0], &[len], Some(&[-1])).unwrap() {
            self.took();
            self.rep.refusals += 1;
            self.evict();
            return;
        }
        self.took();
        let tokens = self.a.plan().tokens.clone();
        assert_eq!(tokens.len() as i64, len);
        if !self.a.alloc(STATE, 1).unwrap() {
            self.took();
            self.rep.refusals += 1;
            self.a.free(KV, &tokens).unwrap();
            self.took();
            self.evict();
            return;
        }
        self.took();
        let slot = self.a.plan().tokens[0];
        self.reqs.push(Req { tokens, slot });
    }

    fn evict(&mut self) {
        if !self.reqs.is_empty() {
            let r = self.rng.below(self.reqs.len() as u64) as usize;
            self.finish(r);
        }
    }

    /// One decode step for a random batch, reported as a forward in flight.
    fn decode(&mut self) {
        if self.reqs.is_empty() {
            return;
        }
        let batch = (1 + self.rng.below(8) as usize).min(self.reqs.len());
        let start = self.rng.below(self.reqs.len() as u64) as usize;
        let idx: Vec<usize> = (0..batch).map(|k| (start + k) % self.reqs.len()).collect();
        let seq: Vec<i64> = idx
            .iter()
            .map(|&r| self.reqs[r].tokens.len() as i64 + 1)
            .collect();
        let last: Vec<i64> = idx
            .iter()
            .map(|&r| *self.reqs[r].tokens.last().unwrap())
            .collect();
        if !self.a.alloc_decode(KV, &seq, Some(&last)).unwrap() {
            self.took();
            self.rep.refusals += 1;
            self.evict();
            return;
        }
        self.took();
        let new = self.a.plan().tokens.clone();
        for (k, &r) in idx.iter().enumerate() {
            self.reqs[r].tokens.push(new[k]);
        }
        if self.lazy {
            // The forward that writes these tokens is now in flight; the previous one ends.
            self.a.retire_token(self.token);
            self.rep.ops += 1;
            self.token += 1;
            self.a.set_latest_token(Some(self.token));
            self.rep.ops += 1;
            self.a.set_inflight_writes(KV, self.token, &new).unwrap();
            self.rep.ops += 1;
        }
    }

    /// Invalid calls: each must fail and leave the arena as it was.
    fn invalid(&mut self) {
        let before = (
            self.a.pool(KV).v2p().to_vec(),
            self.a.pool(KV).watermark(),
            self.a.pool(KV).num_holes(),
        );
        let nvp = self.a.pool(KV).geometry().num_virtual_pages;
        let bad = match self.rng.below(4) {
            0 => -1,
            1 => nvp * self.ps + 3,
            2 => i64::MAX,
            _ => {
                // a dead token
                let v2p = self.a.pool(KV).v2p();
                match (1..nvp).find(|&v| v2p[v as usize] == -1) {
                    Some(v) => v * self.ps,
                    None => -5,
                }
            }
        };
        let mut ids = self
            .reqs
            .first()
            .map(|r| r.tokens.clone())
            .unwrap_or_default();
        ids.push(bad);
        assert!(self.a.free(KV, &ids).is_err());
        self.rep.ops += 1;
        self.rep.invalid_calls += 1;
        let after = (
            self.a.pool(KV).v2p().to_vec(),
            self.a.pool(KV).watermark(),
            self.a.pool(KV).num_holes(),
        );
        assert_eq!(before, after, "a rejected free changed the arena");
    }

    fn check(&mut self, bound: usize) {
        self.a.check_invariants().unwrap();
        let kv = self.a.pool(KV);
        let st = self.a.pool(STATE);
        assert_eq!(kv.live_pages(), self.live_kv_pages(), "live KV pages");
        assert_eq!(st.live_pages(), self.reqs.len(), "live state slots");
        for (i, p) in [kv, st].into_iter().enumerate() {
            let s = p.stats();
            assert_eq!(s.pages_moved, self.moved[i], "pool {i}: pages_moved");
            assert_eq!(
                s.bytes_moved,
                self.moved[i] * p.geometry().page_bytes,
                "pool {i}"
            );
            assert_eq!(s.compactions, self.compactions[i], "pool {i}: compactions");
            let pages = p.geometry().num_pages as usize;
            assert!(p.num_holes() <= pages && p.num_pending() <= pages);
            self.rep.max_holes = self.rep.max_holes.max(p.num_holes());
            self.rep.max_pending = self.rep.max_pending.max(p.num_pending());
        }
        let cap = plan_capacity(self.a.plan());
        self.rep.max_plan_capacity = self.rep.max_plan_capacity.max(cap);
        assert!(cap <= bound, "a plan vector grew to {cap} (bound {bound})");
        self.rep.max_live_kv_pages = self.rep.max_live_kv_pages.max(kv.live_pages());
    }
}

fn soak(ps: u64, lazy: bool, ops: u64, seed: u64) -> Report {
    let start = Instant::now();
    let a = arena(ps, lazy);
    // Plan vectors hold at most a table's worth of rows per pool (tokens: pages * ps).
    let rows = a.pool(KV).p2v().len().max(a.pool(STATE).p2v().len());
    let bound = 4 * rows * ps as usize + 64;
    let empty_gap = a.gap_bytes(KV);
    let mut s = Soak {
        a,
        ps: ps as i64,
        lazy,
        rng: Rng(seed),
        reqs: Vec::new(),
        moved: [0; 2],
        compactions: [0; 2],
        token: 0,
        rep: Report::default(),
    };
    let mut next_check = CHECK_EVERY;
    while s.rep.ops < ops {
        match s.rng.below(100) {
            0..=24 => s.admit(),
            25..=69 => s.decode(),
            70..=79 => {
                if !s.reqs.is_empty() {
                    let r = s.rng.below(s.reqs.len() as u64) as usize;
                    s.finish(r);
                }
            }
            80..=84 => s.finish_group(),
            85..=92 => {
                s.a.flush(false);
                s.took();
            }
            93..=95 => {
                s.a.flush(true);
                s.took();
            }
            96..=97 => {
                s.a.retire_token(s.token);
                s.rep.ops += 1;
            }
            _ => s.invalid(),
        }
        if s.rep.ops >= next_check {
            next_check += CHECK_EVERY;
            s.check(bound);
            if s.rep.rss_kib_warm == 0 && s.rep.ops >= ops / 10 {
                s.rep.rss_kib_warm = rss_kib();
            }
        }
    }
    // Drain: everything freed, the forward retired, an urgent flush packs the rest.
    while !s.reqs.is_empty() {
        s.finish(0);
    }
    s.a.retire_token(s.token);
    s.a.flush(true);
    s.took();
    s.check(bound);
    for i in [KV, STATE] {
        let p = s.a.pool(i);
        let g = p.geometry();
        assert_eq!(
            (
                p.live_pages(),
                p.num_holes(),
                p.num_pending(),
                p.span_pages()
            ),
            (0, 0, 0, 0),
            "pool {i} did not drain"
        );
        assert_eq!(
            p.free_ids().count() as i64,
            g.num_pages - g.min_page_index,
            "pool {i}: free ids"
        );
        assert!(p.v2p()[1..p.v2p().len() - 1].iter().all(|&x| x == -1));
    }
    assert_eq!(
        s.a.gap_bytes(KV),
        empty_gap,
        "the gap did not return to its empty size"
    );
    s.rep.rss_kib_end = rss_kib();
    s.rep.secs = start.elapsed().as_secs_f64();
    s.rep
}

#[test]
fn soak_eager_lazy_ps1_ps16() {
    let ops = ops_per_config();
    let mut total = 0;
    for (k, (ps, lazy)) in [(1, false), (1, true), (16, false), (16, true)]
        .into_iter()
        .enumerate()
    {
        let rep = soak(ps, lazy, ops, 0x50a6 + k as u64);
        eprintln!("soak ps={ps} lazy={lazy}: {rep:?}");
        total += rep.ops;
        assert!(rep.moves > 0, "the workload never compacted");
        assert!(rep.refusals > 0, "the workload never hit memory pressure");
        if rep.rss_kib_warm > 0 && ops >= 200_000 {
            let grown = rep.rss_kib_end.saturating_sub(rep.rss_kib_warm);
            assert!(grown < 16 * 1024, "RSS grew by {grown} KiB after warm-up");
        }
    }
    eprintln!("soak total: {total} operations");
}
