//! Determinism: one operation trace gives byte-identical plans and tables, run after run
//! and process after process. Tensor-parallel ranks each run their own arena on the same
//! trace and must agree on every page move without talking to each other.
//!
//! A seeded trace (prefill, decode, alloc, free, free groups, flushes, forward tokens,
//! invalid calls) runs on five configurations (eager/lazy x page size 1/16, plus a SWA
//! pool that binds the owner's ids). Every field of every plan and, at the end, every
//! table, watermark, count and free-id list is folded into an FNV-1a hash. The test
//! compares: two runs in this process, a run on a clone taken mid-trace, and two child
//! processes (this test binary re-run with `UKV_DETERMINISM_CHILD=1`), whose hash maps
//! are randomly seeded differently from ours.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use ukv_core::{Arena, ArenaConfig, Direction, Plan, PoolSpec};

mod common;
use common::Rng;

const TRACE_OPS: usize = 20_000;

/// FNV-1a, 64 bits: stable across processes, builds and platforms.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn i64s(&mut self, xs: &[i64]) {
        self.u64(xs.len() as u64);
        for &x in xs {
            self.bytes(&x.to_le_bytes());
        }
    }

    fn u64(&mut self, x: u64) {
        self.bytes(&x.to_le_bytes());
    }
}

fn hash_plan(h: &mut Fnv, plan: &Plan) {
    h.i64s(&plan.tokens);
    h.i64s(&plan.token_req);
    h.i64s(&plan.pages);
    h.u64(plan.wait_tokens.len() as u64);
    for &t in &plan.wait_tokens {
        h.u64(t);
    }
    for p in &plan.pools {
        h.i64s(&p.src);
        h.i64s(&p.dst);
        h.i64s(&p.v2p_rows);
        h.i64s(&p.v2p_vals);
        h.i64s(&p.p2v_rows);
        h.i64s(&p.p2v_vals);
        h.u64(u64::from(p.reset));
    }
}

fn hash_state(h: &mut Fnv, a: &Arena) {
    for i in 0..a.num_pools() {
        let p = a.pool(i);
        h.i64s(p.v2p());
        h.i64s(p.p2v());
        h.i64s(&p.free_ids().collect::<Vec<_>>());
        h.u64(p.watermark() as u64);
        h.u64(p.live_pages() as u64);
        h.u64(p.num_holes() as u64);
        h.u64(p.num_pending() as u64);
        let s = p.stats();
        h.u64(s.pages_moved);
        h.u64(s.compactions);
        h.u64(s.flushes);
    }
}

/// (name, page size, lazy, SWA second pool)
const CONFIGS: [(&str, u64, bool, bool); 5] = [
    ("eager-ps1", 1, false, false),
    ("lazy-ps1", 1, true, false),
    ("eager-ps16", 16, false, false),
    ("lazy-ps16", 16, true, false),
    ("lazy-ps16-swa", 16, true, true),
];

fn arena(ps: u64, lazy: bool, swa: bool) -> Arena {
    let kv = PoolSpec {
        name: "kv".into(),
        entry_bytes: 64,
        page_size: ps,
        direction: Direction::Up,
        id_owner: None,
    };
    let side = PoolSpec {
        name: "side".into(),
        entry_bytes: if swa { 32 } else { 528 },
        page_size: if swa { ps } else { 1 },
        direction: Direction::Down,
        id_owner: swa.then_some(0),
    };
    Arena::new(ArenaConfig {
        total_bytes: 64 * 16 + 3000 * 64,
        pools: vec![kv, side],
        lazy,
        max_moves_per_flush: 32,
    })
    .unwrap()
}

/// The trace's state: requests as (kv tokens, side ids).
struct Trace {
    rng: Rng,
    ps: i64,
    swa: bool,
    reqs: Vec<(Vec<i64>, Vec<i64>)>,
    token: u64,
}

impl Trace {
    /// Run one step on `a`, folding its plan into `h`.
    fn step(&mut self, a: &mut Arena, h: &mut Fnv) {
        let op = self.rng.below(100);
        let ok = match op {
            0..=29 => {
                let len = 1 + self.rng.below(3 * self.ps as u64 + 20) as i64;
                let got = a.alloc_extend(0, &[0], &[len], None).unwrap();
                if got {
                    let toks = a.plan().tokens.clone();
                    hash_plan(h, a.plan());
                    let side = self.bind_side(a, &toks, h);
                    self.reqs.push((toks, side));
                }
                got
            }
            30..=59 if !self.reqs.is_empty() => {
                let r = self.rng.below(self.reqs.len() as u64) as usize;
                let n = self.reqs[r].0.len() as i64;
                let last = *self.reqs[r].0.last().unwrap();
                let got = a.alloc_decode(0, &[n + 1], Some(&[last])).unwrap();
                if got {
                    let t = a.plan().tokens[0];
                    hash_plan(h, a.plan());
                    if self.swa && t % self.ps == 0 {
                        let side = self.bind_side(a, &[t], h);
                        self.reqs[r].1.extend(side);
                    }
                    self.reqs[r].0.push(t);
                    if a.pool(0).is_lazy() {
                        self.token += 1;
                        a.set_latest_token(Some(self.token));
                        a.set_inflight_writes(0, self.token, &[t]).unwrap();
                        a.retire_token(self.token - 1);
                    }
                }
                got
            }
            60..=79 if !self.reqs.is_empty() => {
                let group = self.rng.below(3) == 0;
                if group {
                    a.free_group_begin(0).unwrap();
                }
                for _ in 0..1 + self.rng.below(3) {
                    if self.reqs.is_empty() {
                        break;
                    }
                    let r = self.rng.below(self.reqs.len() as u64) as usize;
                    let (toks, side) = self.reqs.swap_remove(r);
                    a.free(0, &toks).unwrap();
                    hash_plan(h, a.plan());
                    // A SWA side's bindings went with the owner's free; a state side is freed
                    // on its own.
                    if !side.is_empty() && !self.swa {
                        a.free(1, &side).unwrap();
                        hash_plan(h, a.plan());
                    }
                }
                if group {
                    a.free_group_end(0).unwrap();
                }
                true
            }
            80..=89 => {
                h.u64(a.flush(op < 87) as u64);
                true
            }
            90..=94 => {
                // Invalid: a dead id and an out-of-range id; the error text is hashed too.
                let e = a.free(0, &[-3, 1 << 40]).unwrap_err();
                h.bytes(e.to_string().as_bytes());
                true
            }
            _ => {
                a.retire_token(self.token);
                true
            }
        };
        hash_plan(h, a.plan());
        h.u64(u64::from(ok));
    }

    /// A state slot (own ids) or, for SWA, the same virtual pages on the side pool.
    fn bind_side(&mut self, a: &mut Arena, toks: &[i64], h: &mut Fnv) -> Vec<i64> {
        if self.swa {
            let mut pages: Vec<i64> = toks.iter().map(|t| t / self.ps).collect();
            pages.dedup();
            if a.alloc_with_virtual(1, &pages).unwrap() {
                hash_plan(h, a.plan());
                pages
            } else {
                Vec::new()
            }
        } else if a.alloc(1, 1).unwrap() {
            hash_plan(h, a.plan());
            a.plan().tokens.clone()
        } else {
            Vec::new()
        }
    }
}

/// Hash of the whole trace on configuration `cfg`; with `fork_at`, the second half runs
/// on a clone of the arena taken there.
fn trace_hash(cfg: usize, fork_at: Option<usize>) -> u64 {
    let (_, ps, lazy, swa) = CONFIGS[cfg];
    let mut a = arena(ps, lazy, swa);
    let mut t = Trace {
        rng: Rng(0xde7e_0000 + cfg as u64),
        ps: ps as i64,
        swa,
        reqs: Vec::new(),
        token: 0,
    };
    let mut h = Fnv::new();
    for k in 0..TRACE_OPS {
        if Some(k) == fork_at {
            a = a.clone();
        }
        t.step(&mut a, &mut h);
    }
    a.check_invariants().unwrap();
    hash_state(&mut h, &a);
    h.0
}

fn all_hashes() -> Vec<u64> {
    (0..CONFIGS.len()).map(|c| trace_hash(c, None)).collect()
}

#[test]
fn same_trace_same_plans_in_process() {
    let first = all_hashes();
    assert_eq!(first, all_hashes(), "a second run differs");
    for (c, &h) in first.iter().enumerate() {
        assert_eq!(
            trace_hash(c, Some(TRACE_OPS / 2)),
            h,
            "{}: a cloned arena differs",
            CONFIGS[c].0
        );
    }
    let distinct: std::collections::HashSet<_> = first.iter().collect();
    assert_eq!(
        distinct.len(),
        CONFIGS.len(),
        "configurations should not collide"
    );
}

/// Runs only in a child process: prints the hashes for the parent to compare.
#[test]
fn child_prints_hashes() {
    if std::env::var_os("UKV_DETERMINISM_CHILD").is_none() {
        return;
    }
    let hs: Vec<String> = all_hashes().iter().map(|h| format!("{h:016x}")).collect();
    println!("UKV_HASHES {}", hs.join(","));
}

#[test]
fn same_trace_same_plans_across_processes() {
    let exe = std::env::current_exe().unwrap();
    let mine: Vec<String> = all_hashes().iter().map(|h| format!("{h:016x}")).collect();
    let mine = mine.join(",");
    for run in 0..2 {
        let out = Command::new(&exe)
            .args([
                "child_prints_hashes",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("UKV_DETERMINISM_CHILD", "1")
            .env("UKV_DETERMINISM_RUN", run.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "child {run} failed: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split("UKV_HASHES ").nth(1)?.split_whitespace().next())
            .unwrap_or_else(|| panic!("child {run} printed no hashes: {stdout}"));
        assert_eq!(
            line, mine,
            "child process {run} computed different plans or tables"
        );
    }
    eprintln!("plan+table hashes per config: {mine}");
}
