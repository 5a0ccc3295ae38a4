//! Criterion benches for the core bookkeeping (BENCHMARKS.md, suite 1).
//!
//! Pools are production-sized (about a million pages on the KV side), and every bench keeps
//! the arena in a steady state: whatever a timed step allocates is given back, outside the
//! timed region where that would distort the figure. Targets (benches/results/core-cpu.md):
//! alloc+free of one page <= 30 ns; alloc(2) + relocating free <= 60 ns; alloc 4096 pages +
//! free all <= 20 us; lazy flush <= 10 ns per move.
//!
//! Every bench runs twice: once on wall-clock time (criterion's default), once on the
//! thread's CPU time (ids prefixed `cpu_`), which time slices lost to other processes on a
//! shared machine do not inflate.
//!
//! Run: `cargo bench -p ukv-core -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Instant;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ukv_core::{Arena, ArenaConfig, Direction, PoolSpec};

const KV: usize = 0;
const STATE: usize = 1;
/// KV pages of the benched arenas.
const KV_PAGES: u64 = 1 << 20;
/// Pages kept live on each side, so no bench runs against an empty arena.
const RESIDENT: usize = 1000;

// ----- clocks ----------------------------------------------------------------------------

/// A measurement the benches can also read by hand (in `iter_custom`), in nanoseconds.
trait Clock: Measurement<Value = u64> + 'static {
    /// Prefix of the group names measured with this clock.
    const PREFIX: &'static str;
    fn now() -> u64;
    /// Cost of one `now()` pair, subtracted from per-iteration readings.
    fn overhead() -> u64;
    fn clock() -> Self;

    fn elapsed(start: u64) -> u64 {
        Self::now()
            .saturating_sub(start)
            .saturating_sub(Self::overhead())
    }
}

fn calibrate(now: fn() -> u64) -> u64 {
    let mut v: Vec<u64> = (0..2001)
        .map(|_| {
            let s = now();
            now() - s
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

fn wall_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Wall-clock time, via criterion's own measurement.
struct Wall(WallTime);

impl Measurement for Wall {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        wall_ns()
    }
    fn end(&self, i: u64) -> u64 {
        wall_ns() - i
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.0.formatter()
    }
}

impl Clock for Wall {
    const PREFIX: &'static str = "";
    fn now() -> u64 {
        wall_ns()
    }
    fn overhead() -> u64 {
        static O: OnceLock<u64> = OnceLock::new();
        *O.get_or_init(|| calibrate(wall_ns))
    }
    fn clock() -> Self {
        Wall(WallTime)
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the benchmarking thread: unaffected by time slices given to other processes.
struct CpuTime;

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, i: u64) -> u64 {
        thread_cpu_ns() - i
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &WALL_FORMAT
    }
}

/// Nanosecond values, formatted like criterion's wall-clock durations.
static WALL_FORMAT: NsFormatter = NsFormatter;
struct NsFormatter;

impl ValueFormatter for NsFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        WallTime.formatter().scale_values(typical, values)
    }
    fn scale_throughputs(&self, typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        WallTime.formatter().scale_throughputs(typical, t, values)
    }
    fn scale_for_machines(&self, values: &mut [f64]) -> &'static str {
        WallTime.formatter().scale_for_machines(values)
    }
}

impl Clock for CpuTime {
    const PREFIX: &'static str = "cpu_";
    fn now() -> u64 {
        thread_cpu_ns()
    }
    fn overhead() -> u64 {
        static O: OnceLock<u64> = OnceLock::new();
        *O.get_or_init(|| calibrate(thread_cpu_ns))
    }
    fn clock() -> Self {
        CpuTime
    }
}

fn name<M: Clock>(base: &str) -> String {
    format!("{}{base}", M::PREFIX)
}

// ----- fixtures --------------------------------------------------------------------------

/// KV grows up (64 B entries, `ps` tokens a page, about a million pages), a state pool of
/// 4 KiB entries grows down.
fn arena(ps: u64, lazy: bool) -> Arena {
    let kv_entry = 64;
    let state_entry = 4096;
    let total = KV_PAGES * ps * kv_entry + 4096 * state_entry;
    let mut cfg = ArenaConfig::new(
        total,
        vec![
            PoolSpec {
                name: "kv".into(),
                entry_bytes: kv_entry,
                page_size: ps,
                direction: Direction::Up,
                id_owner: None,
            },
            PoolSpec {
                name: "state".into(),
                entry_bytes: state_entry,
                page_size: 1,
                direction: Direction::Down,
                id_owner: None,
            },
        ],
    );
    cfg.lazy = lazy;
    let mut a = Arena::new(cfg).unwrap();
    assert!(a.alloc(KV, RESIDENT).unwrap());
    assert!(a.alloc(STATE, 64).unwrap());
    a
}

// ----- benches ---------------------------------------------------------------------------

/// alloc(1) + free of that page, page size 1: the smallest round trip.
fn alloc_free_one_page<M: Clock>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group(name::<M>("alloc_free_1page"));
    for lazy in [false, true] {
        let mut a = arena(1, lazy);
        let mut tok = [0i64];
        g.bench_function(if lazy { "lazy_ps1" } else { "eager_ps1" }, |b| {
            b.iter(|| {
                a.alloc(KV, 1).unwrap();
                tok[0] = a.plan().tokens[0];
                // Lazy: the freed page becomes a hole the next alloc reuses.
                a.free(KV, black_box(&tok)).unwrap();
            });
        });
        a.check_invariants().unwrap();
    }
    g.finish();
}

/// alloc(2), then free the lower page: the upper one relocates into it (1 move). The pair
/// is timed; each pair leaves one page behind, released untimed every `CHUNK` pairs (they
/// sit at the top of the band, so that release moves nothing).
fn alloc_relocating_free<M: Clock>(c: &mut Criterion<M>) {
    const CHUNK: u64 = 1024;
    let mut g = c.benchmark_group(name::<M>("alloc2_relocating_free"));
    let mut a = arena(1, false);
    let mut left = Vec::with_capacity(CHUNK as usize);
    g.bench_function("eager_ps1", |b| {
        b.iter_custom(|iters| {
            let m = M::clock();
            let mut spent = m.zero();
            let mut done = 0;
            while done < iters {
                let n = CHUNK.min(iters - done);
                left.clear();
                let t = m.start();
                for _ in 0..n {
                    a.alloc(KV, 2).unwrap();
                    let lower = a.plan().tokens[0];
                    let upper = a.plan().tokens[1];
                    a.free(KV, black_box(&[lower])).unwrap();
                    debug_assert_eq!(a.plan().num_moves(), 1);
                    left.push(upper);
                }
                spent = m.add(&spent, &m.end(t));
                a.free(KV, &left).unwrap();
                done += n;
            }
            spent
        });
    });
    a.check_invariants().unwrap();
    g.finish();
}

/// alloc 4096 pages, then free all of them, at page sizes 1 and 16. At page size 16 the
/// free gets either one token per page (frees the same pages) or every token back (65,536
/// ids to validate, what a caller returning a request's whole token list does). Lazy
/// cycles end with a flush that absorbs the freed pages, except the `reuse_holes` ones:
/// there the next alloc takes the 4096 holes the free left (what the GPU host-path bench's
/// lazy rows do).
fn batch_4096<M: Clock>(c: &mut Criterion<M>) {
    const PAGES: usize = 4096;
    let mut g = c.benchmark_group(name::<M>("batch_4096_pages"));
    g.throughput(Throughput::Elements(PAGES as u64));
    let cases = [
        (1, "ps1", false, true),
        (16, "ps16_token_per_page", true, true),
        (16, "ps16_all_tokens", false, true),
        (1, "ps1_reuse_holes", false, false),
        (16, "ps16_all_tokens_reuse_holes", false, false),
    ];
    for (ps, case, per_page, flush) in cases {
        for lazy in [false, true] {
            if !flush && !lazy {
                continue; // an eager pool has no holes
            }
            let mut a = arena(ps, lazy);
            let mut ids = Vec::with_capacity(PAGES * ps as usize);
            let id = format!("{}_{case}", if lazy { "lazy" } else { "eager" });
            g.bench_function(id, |b| {
                b.iter(|| {
                    a.alloc(KV, PAGES).unwrap();
                    ids.clear();
                    if per_page {
                        ids.extend(a.plan().pages.iter().map(|&p| p * ps as i64));
                    } else {
                        ids.extend_from_slice(&a.plan().tokens);
                    }
                    a.free(KV, black_box(&ids)).unwrap();
                    if lazy && flush {
                        // Lazy frees leave boundary holes; absorbing them is part of the cycle.
                        a.flush(false);
                    }
                });
            });
            a.check_invariants().unwrap();
        }
    }
    g.finish();
}

/// A lazy flush that moves exactly K pages: 2K pages live, the lower K freed, so every one
/// of the upper K walks into a hole. Timed: the flush alone; reported per move.
fn lazy_flush<M: Clock>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group(name::<M>("lazy_flush"));
    for (k, urgent) in [(64usize, true), (1024, true), (4096, true), (4096, false)] {
        let mut a = arena(1, true);
        g.throughput(Throughput::Elements(k as u64));
        let id = BenchmarkId::new(
            if urgent {
                "urgent_per_move"
            } else {
                "non_urgent_per_move"
            },
            k,
        );
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let mut spent = 0;
                for _ in 0..iters {
                    a.alloc(KV, 2 * k).unwrap();
                    let pages = a.plan().pages.clone();
                    a.free(KV, &pages[..k]).unwrap();
                    let t = M::now();
                    let moved = a.flush(black_box(urgent));
                    spent += M::elapsed(t);
                    assert_eq!(moved, k);
                    a.free(KV, &pages[k..]).unwrap();
                    a.flush(true);
                }
                spent
            });
        });
        a.check_invariants().unwrap();
    }
    g.finish();
}

/// Deterministic request shapes (no RNG dependency).
fn shapes(n: usize, seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// alloc_extend for 256 requests at page size 16: prefixes of 0..=300 tokens (partial last
/// pages included, host last_loc given), each growing by 1..=128 tokens. The new pages are
/// released untimed after each call.
fn alloc_extend<M: Clock>(c: &mut Criterion<M>) {
    const REQS: usize = 256;
    let ps = 16i64;
    let mut g = c.benchmark_group(name::<M>("alloc_extend"));
    g.throughput(Throughput::Elements(REQS as u64));
    for lazy in [false, true] {
        let mut a = arena(ps as u64, lazy);
        let (mut pre, mut seq, mut last) = (Vec::new(), Vec::new(), Vec::new());
        for s in shapes(REQS, 0x9E37) {
            let p = (s % 301) as i64;
            let grow = 1 + ((s >> 20) % 128) as i64;
            // The prefix's pages, so last_loc is a live token at the right page offset.
            let tail = if p > 0 {
                assert!(a.alloc(KV, ((p + ps - 1) / ps) as usize).unwrap());
                *a.plan().pages.last().unwrap() * ps + (p - 1) % ps
            } else {
                -1
            };
            pre.push(p);
            seq.push(p + grow);
            last.push(tail);
        }
        let mut new_pages = Vec::new();
        g.bench_function(
            format!("{}_256req_ps16", if lazy { "lazy" } else { "eager" }),
            |b| {
                b.iter_custom(|iters| {
                    let mut spent = 0;
                    for _ in 0..iters {
                        let t = M::now();
                        let ok = a
                            .alloc_extend(KV, black_box(&pre), &seq, Some(&last))
                            .unwrap();
                        spent += M::elapsed(t);
                        assert!(ok);
                        new_pages.clear();
                        new_pages.extend(a.plan().pages.iter().map(|&p| p * ps));
                        a.free(KV, &new_pages).unwrap();
                        a.flush(false);
                    }
                    spent
                });
            },
        );
        a.check_invariants().unwrap();
    }
    g.finish();
}

/// alloc_decode for 256 requests (one token each) at page sizes 16 and 1. At 16, the
/// requests whose new token starts a page take one (1 in 16 here); the others continue
/// after their host last_loc. `REPEAT` calls are timed together (the requests do not
/// advance, so each call takes new pages for the same requests); their new pages are
/// released untimed.
fn alloc_decode<M: Clock>(c: &mut Criterion<M>) {
    const REQS: usize = 256;
    const REPEAT: u64 = 16;
    let mut g = c.benchmark_group(name::<M>("alloc_decode"));
    g.throughput(Throughput::Elements(REQS as u64));
    for ps in [16i64, 1] {
        let mut a = arena(ps as u64, false);
        let (mut seq, mut last) = (Vec::new(), Vec::new());
        for (r, s) in shapes(REQS, 0xDEC0).enumerate() {
            let len = 1 + (s % 2000) as i64; // tokens already there
            let len = if ps > 1 && r % 16 == 0 {
                len - len % ps
            } else {
                len
            }; // page-aligned: new page
            let len = len.max(ps);
            assert!(a.alloc(KV, ((len + ps - 1) / ps) as usize).unwrap());
            last.push(*a.plan().pages.last().unwrap() * ps + (len - 1) % ps);
            seq.push(len + 1);
        }
        let mut new_pages = Vec::new();
        g.bench_function(format!("eager_256req_ps{ps}"), |b| {
            b.iter_custom(|iters| {
                let mut spent = 0;
                let mut done = 0;
                while done < iters {
                    let n = REPEAT.min(iters - done);
                    new_pages.clear();
                    let t = M::now();
                    for _ in 0..n {
                        let ok = a.alloc_decode(KV, black_box(&seq), Some(&last)).unwrap();
                        assert!(ok);
                        new_pages.extend(a.plan().pages.iter().map(|&p| p * ps));
                    }
                    spent += M::elapsed(t);
                    a.free(KV, &new_pages).unwrap();
                    done += n;
                }
                spent
            });
        });
        a.check_invariants().unwrap();
    }
    g.finish();
}

fn all<M: Clock>(c: &mut Criterion<M>) {
    alloc_free_one_page(c);
    alloc_relocating_free(c);
    batch_4096(c);
    lazy_flush(c);
    alloc_extend(c);
    alloc_decode(c);
}

criterion_group!(
    name = wall;
    config = Criterion::default().with_measurement(Wall::clock());
    targets = all::<Wall>
);
criterion_group!(
    name = cpu;
    config = Criterion::default().with_measurement(CpuTime);
    targets = all::<CpuTime>
);
criterion_main!(wall, cpu);
