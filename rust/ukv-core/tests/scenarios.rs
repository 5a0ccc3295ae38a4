//! Scenario tests through the public API: the worked geometry of reference-design §2.7, the
//! reference's allocator scenarios (§10: TestMultiEndedAllocator, TestPagedMultiEndedAllocator,
//! TestLazyCompaction, the SWA non-owner ones), the bugs ukv must not have (§12), and the
//! observable rules of API.md §4.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

use ukv_core::{Arena, ArenaConfig, Direction, Plan, PoolSpec, TOMBSTONE};

mod common;
use common::{assert_same_tables, spec, Rng};

// ----- fixtures -------------------------------------------------------------------------

const FULL_ENTRY: u64 = 64; // MHA L=2, H=2, D=4, fp16
const MAMBA_ENTRY: u64 = 160; // L=2, conv (4,3) fp32 + temporal (2,2,2) fp32
const FULL: usize = 0;
const MAMBA: usize = 1;

fn arena(total: u64, pools: Vec<PoolSpec>, lazy: bool, max_moves: usize) -> Arena {
    let mut cfg = ArenaConfig::new(total, pools);
    cfg.lazy = lazy;
    cfg.max_moves_per_flush = max_moves;
    Arena::new(cfg).unwrap()
}

/// Full up (64 B) and mamba down (160 B), `nf` full entries + `nm` mamba entries of bytes.
fn full_mamba(nf: u64, nm: u64, lazy: bool) -> Arena {
    full_mamba_cap(nf, nm, lazy, ukv_core::DEFAULT_MAX_MOVES_PER_FLUSH)
}

fn full_mamba_cap(nf: u64, nm: u64, lazy: bool, cap: usize) -> Arena {
    arena(
        nf * FULL_ENTRY + nm * MAMBA_ENTRY,
        vec![
            spec("full", FULL_ENTRY, 1, Direction::Up, None),
            spec("mamba", MAMBA_ENTRY, 1, Direction::Down, None),
        ],
        lazy,
        cap,
    )
}

/// Allocate `n` pages and return the virtual pages.
fn alloc(a: &mut Arena, i: usize, n: usize) -> Vec<i64> {
    assert!(a.alloc(i, n).unwrap(), "alloc({i}, {n}) should fit");
    a.check_invariants().unwrap();
    a.plan().pages.clone()
}

fn free(a: &mut Arena, i: usize, tokens: &[i64]) {
    a.free(i, tokens).unwrap();
    a.check_invariants().unwrap();
}

fn phys(a: &Arena, i: usize, v: i64) -> i64 {
    a.pool(i).v2p()[v as usize]
}

fn physs(a: &Arena, i: usize, vs: &[i64]) -> Vec<i64> {
    vs.iter().map(|&v| phys(a, i, v)).collect()
}

fn moves(plan: &Plan, i: usize) -> Vec<(i64, i64)> {
    let p = &plan.pools[i];
    p.src.iter().copied().zip(p.dst.iter().copied()).collect()
}

fn free_ids(a: &Arena, i: usize) -> Vec<i64> {
    a.pool(i).free_ids().collect()
}

/// A fake KV cache: `buf[pool][phys page] = marker`, driven only by plans (the
/// reference's `_FakeKVCache`).
#[derive(Default)]
struct Markers {
    buf: BTreeMap<(usize, i64), i64>,
}

impl Markers {
    /// Stamp every page just bound by the last plan with its virtual id.
    fn stamp_bound(&mut self, a: &Arena, i: usize) {
        for &v in &a.plan().pages {
            self.buf.insert((i, phys(a, i, v)), v);
        }
    }

    /// Execute the last plan's moves: read every source first, then write every destination.
    fn apply(&mut self, a: &Arena) {
        for (i, p) in a.plan().pools.iter().enumerate() {
            let vals: Vec<Option<i64>> = p
                .src
                .iter()
                .map(|&s| self.buf.get(&(i, s)).copied())
                .collect();
            for (&d, v) in p.dst.iter().zip(vals) {
                match v {
                    Some(v) => self.buf.insert((i, d), v),
                    None => self.buf.remove(&(i, d)),
                };
            }
        }
    }

    /// Every live virtual page of pool `i` finds its own marker at its physical page.
    fn check(&self, a: &Arena, i: usize) {
        for (v, &p) in a.pool(i).v2p().iter().enumerate().skip(1) {
            if p != TOMBSTONE && p != 0 {
                assert_eq!(
                    self.buf.get(&(i, p)),
                    Some(&(v as i64)),
                    "pool {i} v {v} at p {p}"
                );
            }
        }
    }
}

// ----- §2.7 worked geometry -------------------------------------------------------------

#[test]
fn worked_geometry_full_up_mamba_down() {
    let a = full_mamba(64, 16, false);
    assert_eq!(a.total_bytes(), 6656);
    assert_eq!(a.reserved_floor(), 160);
    let full = a.pool(FULL).geometry();
    assert_eq!((full.entry_bytes, full.page_bytes), (64, 64));
    assert_eq!(
        (full.num_pages, full.max_slots(), full.min_page_index),
        (104, 104, 3)
    );
    let mamba = a.pool(MAMBA).geometry();
    assert_eq!(
        (mamba.num_pages, mamba.max_slots(), mamba.min_page_index),
        (41, 41, 1)
    );

    assert_eq!(a.pool(FULL).watermark(), 3);
    assert_eq!(a.gap_bytes(FULL), 6368);
    assert_eq!(a.available_pages(FULL), 99);
    assert_eq!(a.schedulable_pages(FULL), 99);
    let ids = free_ids(&a, FULL);
    assert_eq!(ids.len(), 101);
    assert_eq!(ids, (3..104).collect::<Vec<_>>());

    assert_eq!(a.pool(MAMBA).watermark(), 40);
    assert_eq!(a.gap_bytes(MAMBA), 6368);
    assert_eq!(a.available_pages(MAMBA), 39);
    assert_eq!(free_ids(&a, MAMBA), (1..41).collect::<Vec<_>>());

    // Tables: num_pages + 1 rows, row 0 the padding anchor, last row the sentinel.
    for i in [FULL, MAMBA] {
        let p = a.pool(i);
        let n = p.geometry().num_pages as usize;
        assert_eq!((p.v2p().len(), p.p2v().len()), (n + 1, n + 1));
        assert_eq!((p.v2p()[0], p.p2v()[0]), (0, 0));
        assert_eq!((p.v2p()[n], p.p2v()[n]), (TOMBSTONE, TOMBSTONE));
        assert!(
            a.is_token_allocated(i, 0),
            "virtual 0 is the padding anchor"
        );
        assert!(!a.is_token_allocated(i, n as i64));
    }
    assert_eq!(a.chain(), &[FULL, MAMBA]);
    a.check_invariants().unwrap();
}

#[test]
fn worked_geometry_full_down_mamba_up() {
    let a = arena(
        6656,
        vec![
            spec("full", FULL_ENTRY, 1, Direction::Down, None),
            spec("mamba", MAMBA_ENTRY, 1, Direction::Up, None),
        ],
        false,
        16,
    );
    assert_eq!(a.chain(), &[MAMBA, FULL]);
    assert_eq!(a.pool(FULL).watermark(), 103);
    assert_eq!(a.pool(MAMBA).watermark(), 1);
    // gap = 104*64 - 1*160 = 6496 bytes.
    assert_eq!(a.gap_bytes(FULL), 6496);
    assert_eq!(a.available_pages(FULL), 101); // bytes allow 101, index room 101
    assert_eq!(a.available_pages(MAMBA), 40); // bytes allow 40, index room 40
    a.check_invariants().unwrap();
}

#[test]
fn reserved_floor_is_the_largest_page_envelope() {
    // §12 bug 2: full with 2 KiB/token at ps 16 next to a 4.8 KB mamba entry. The floor must
    // hold full's whole page-0 envelope, or a write to full token 0 lands on mamba slot 1.
    let a = arena(
        1 << 22,
        vec![
            spec("full", 2048, 16, Direction::Up, None),
            spec("mamba", 4800, 1, Direction::Down, None),
        ],
        false,
        16,
    );
    assert_eq!(a.reserved_floor(), 16 * 2048);
    assert_eq!(a.pool(FULL).geometry().min_page_index, 1);
    assert_eq!(a.pool(MAMBA).geometry().min_page_index, 7); // ceil(32768 / 4800)
    for i in [FULL, MAMBA] {
        let g = a.pool(i).geometry();
        assert!(g.page_start(g.min_page_index) >= a.reserved_floor());
    }
}

// ----- TestMultiEndedAllocator ---------------------------------------------------------

#[test]
fn basic_alloc_free_compaction() {
    let mut a = full_mamba(64, 16, false);
    let mut m = Markers::default();
    let x = alloc(&mut a, FULL, 3);
    m.stamp_bound(&a, FULL);
    let y = alloc(&mut a, FULL, 5);
    m.stamp_bound(&a, FULL);
    let z = alloc(&mut a, FULL, 2);
    m.stamp_bound(&a, FULL);
    assert_eq!(
        (x.clone(), y.clone(), z.clone()),
        (vec![3, 4, 5], vec![6, 7, 8, 9, 10], vec![11, 12])
    );
    assert_eq!(physs(&a, FULL, &z), vec![11, 12]);

    free(&mut a, FULL, &y);
    m.apply(&a);
    // Vacated band [8, 13): survivors 11, 12 go to the freed pages below 8: 6, 7.
    assert_eq!(moves(a.plan(), FULL), vec![(11, 6), (12, 7)]);
    assert_eq!(physs(&a, FULL, &x), vec![3, 4, 5]);
    assert_eq!(physs(&a, FULL, &z), vec![6, 7]);
    assert_eq!(a.pool(FULL).watermark(), 8);
    m.check(&a, FULL);

    free(&mut a, FULL, &z);
    free(&mut a, FULL, &x);
    assert_eq!(a.pool(FULL).live_pages(), 0);
    assert_eq!(a.pool(FULL).watermark(), 3);
}

#[test]
fn grow_down_side() {
    let mut a = full_mamba(64, 16, false);
    let mut m = Markers::default();
    let x = alloc(&mut a, MAMBA, 2);
    m.stamp_bound(&a, MAMBA);
    let y = alloc(&mut a, MAMBA, 3);
    m.stamp_bound(&a, MAMBA);
    let z = alloc(&mut a, MAMBA, 1);
    m.stamp_bound(&a, MAMBA);
    // Each fresh extension binds ascending physical pages.
    assert_eq!(physs(&a, MAMBA, &x), vec![39, 40]);
    assert_eq!(physs(&a, MAMBA, &y), vec![36, 37, 38]);
    assert_eq!(physs(&a, MAMBA, &z), vec![35]);
    free(&mut a, MAMBA, &y);
    m.apply(&a);
    // K = 3: vacated band [35, 38) holds survivor 35; the freed page above the new band is 38.
    assert_eq!(moves(a.plan(), MAMBA), vec![(35, 38)]);
    assert_eq!(a.pool(MAMBA).watermark(), 37);
    assert_eq!(physs(&a, MAMBA, &x), vec![39, 40]);
    m.check(&a, MAMBA);
    free(&mut a, MAMBA, &z);
    free(&mut a, MAMBA, &x);
    assert_eq!(a.pool(MAMBA).live_pages(), 0);
    assert_eq!(a.pool(MAMBA).watermark(), 40);
}

#[test]
fn byte_frontier_coordination() {
    let mut a = full_mamba(8, 8, false);
    // 8*64 + 8*160 = 1792 bytes: full 28 pages (floor 3), mamba 11 pages (floor 1).
    assert_eq!(a.available_pages(FULL), 24); // (1760 - 192) / 64
    assert_eq!(a.available_pages(MAMBA), 9); // 1568 / 160
    alloc(&mut a, MAMBA, 3);
    assert_eq!(a.available_pages(FULL), 17); // (1280 - 192) / 64
    let before = a.clone();
    assert!(!a.alloc(FULL, 18).unwrap());
    assert_same_state(&before, &a);
    alloc(&mut a, FULL, 17);
    assert_eq!(a.available_pages(MAMBA), 0);
    assert!(!a.alloc(MAMBA, 1).unwrap());
}

/// Frontiers compare exact bytes in both directions with entry sizes that do not divide
/// each other (§3.3, §12 bug 4: a floor would admit part of a page of overlap going down).
#[test]
fn frontier_is_exact_bytes_in_both_directions() {
    let mut a = arena(
        800,
        vec![
            spec("up", 48, 1, Direction::Up, None),
            spec("down", 80, 1, Direction::Down, None),
        ],
        false,
        16,
    );
    assert_eq!(a.reserved_floor(), 80);
    assert_eq!(a.pool(0).geometry().min_page_index, 2); // first up byte 96
    alloc(&mut a, 0, 5); // up pages 2..7, high byte 336
    assert_eq!(a.pool(0).high_byte(), 336);
    // 336 / 80 = 4.2: page 4 ([320, 400)) would overlap, page 5 is the lowest allowed.
    assert_eq!(a.available_pages(1), 5);
    let before = a.clone();
    assert!(!a.alloc(1, 6).unwrap());
    assert_same_state(&before, &a);
    let d = alloc(&mut a, 1, 5);
    assert_eq!(physs(&a, 1, &d), vec![5, 6, 7, 8, 9]);
    assert_eq!(a.pool(1).low_byte(), 400);
    // Up has 64 bytes of gap: one 48 B page, not two.
    assert_eq!(a.gap_bytes(0), 64);
    assert_eq!(a.available_pages(0), 1);
    assert!(!a.alloc(0, 2).unwrap());
    alloc(&mut a, 0, 1);
    assert_eq!(a.pool(0).high_byte(), 384);
    assert_eq!(a.available_pages(0), 0);
    assert_eq!(a.available_pages(1), 0);
    assert!(a.pool(0).high_byte() <= a.pool(1).low_byte());

    // The same from the other side first: the down pool takes its pages, then up fills in.
    let mut b = arena(
        800,
        vec![
            spec("up", 48, 1, Direction::Up, None),
            spec("down", 80, 1, Direction::Down, None),
        ],
        false,
        16,
    );
    alloc(&mut b, 1, 3); // down pages 7..9, low byte 560
    assert_eq!(b.available_pages(0), (560 - 96) / 48); // 9 pages: high byte 528
    alloc(&mut b, 0, 9);
    assert_eq!(b.pool(0).high_byte(), 528);
    assert_eq!(b.available_pages(1), 0); // (560 - 528) < 80
}

#[test]
fn randomized_eager_pair_with_markers() {
    // Port of `randomized` (seed 0xC0FFEE, 48/24, 400 ops), plus data markers.
    let mut a = full_mamba(48, 24, false);
    let mut rng = Rng(0xC0FFEE);
    let mut m = Markers::default();
    let mut live: [Vec<Vec<i64>>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..400 {
        let i = if rng.chance(0.6) { FULL } else { MAMBA };
        if rng.chance(0.55) || live[i].is_empty() {
            let n = 1 + rng.below(5) as usize;
            let avail = a.available_pages(i) as usize;
            let ok = a.alloc(i, n).unwrap();
            assert_eq!(ok, n <= avail);
            if ok {
                m.stamp_bound(&a, i);
                live[i].push(a.plan().pages.clone());
            }
        } else {
            let k = rng.below(live[i].len() as u64) as usize;
            let batch = live[i].swap_remove(k);
            a.free(i, &batch).unwrap();
            m.apply(&a);
        }
        a.check_invariants().unwrap();
        m.check(&a, FULL);
        m.check(&a, MAMBA);
    }
    for i in [FULL, MAMBA] {
        for batch in std::mem::take(&mut live[i]) {
            free(&mut a, i, &batch);
            m.apply(&a);
            m.check(&a, i);
        }
        assert_eq!(a.pool(i).live_pages(), 0);
    }
}

#[test]
fn lazy_retract_churn_no_ghost() {
    // Port: lazy full (64/16), move cap 2, 3000 ops, seed 0x5373.
    let mut a = full_mamba_cap(64, 16, true, 2);
    let mut rng = Rng(0x5373);
    let mut m = Markers::default();
    let mut live: Vec<Vec<i64>> = Vec::new();
    for step in 0..3000u64 {
        let avail = a.available_pages(FULL) as u64;
        if (rng.chance(0.55) || live.is_empty()) && avail > 0 {
            let n = 1 + rng.below(avail.min(5)) as usize;
            assert!(a.alloc(FULL, n).unwrap());
            m.stamp_bound(&a, FULL);
            live.push(a.plan().pages.clone());
        } else if !live.is_empty() {
            let batch = live.swap_remove(rng.below(live.len() as u64) as usize);
            free(&mut a, FULL, &batch);
        }
        if rng.chance(0.5) {
            // Alternate "a forward is in flight" and "idle" to exercise pending reuse.
            if step % 3 == 0 {
                a.set_latest_token(Some(step));
            }
            a.flush(false);
            m.apply(&a);
            if step % 3 == 1 {
                a.retire_token(step - 1);
            }
        }
        a.check_invariants().unwrap();
        m.check(&a, FULL);
    }
    for batch in live.drain(..) {
        free(&mut a, FULL, &batch);
    }
    a.set_latest_token(None);
    for t in 0..3000 {
        a.retire_token(t);
    }
    for _ in 0..64 {
        a.flush(false);
        a.check_invariants().unwrap();
    }
    let p = a.pool(FULL);
    assert_eq!(p.live_pages(), 0);
    assert_eq!((p.num_holes(), p.num_pending(), p.span_pages()), (0, 0, 0));
    assert_eq!(p.watermark(), p.geometry().min_page_index);
}

// ----- observable rules (API.md §4) ------------------------------------------------------

#[test]
fn free_ids_are_recycled_fifo() {
    let mut a = full_mamba(64, 16, false);
    let x = alloc(&mut a, FULL, 3);
    assert_eq!(x, vec![3, 4, 5]);
    free(&mut a, FULL, &[5, 3]);
    let ids = free_ids(&a, FULL);
    assert_eq!(ids[0], 6, "alloc takes from the front");
    assert_eq!(
        &ids[ids.len() - 2..],
        &[5, 3],
        "free appends at the back, in call order"
    );
    assert_eq!(alloc(&mut a, FULL, 98), (6..104).collect::<Vec<_>>());
    free(&mut a, FULL, &[9, 8, 10]);
    assert_eq!(alloc(&mut a, FULL, 3), vec![5, 3, 9]);

    // The same on the grow-down side.
    let mut a = full_mamba(64, 16, false);
    assert_eq!(alloc(&mut a, MAMBA, 2), vec![1, 2]);
    free(&mut a, MAMBA, &[2]);
    free(&mut a, MAMBA, &[1]);
    let ids = free_ids(&a, MAMBA);
    assert_eq!((ids[0], &ids[ids.len() - 2..]), (3, &[2i64, 1][..]));
}

#[test]
fn fresh_extension_binds_ascending_pages_both_directions() {
    let mut a = full_mamba(64, 16, false);
    let wm = a.pool(MAMBA).watermark();
    let got = alloc(&mut a, MAMBA, 4);
    assert_eq!(physs(&a, MAMBA, &got), (wm - 3..=wm).collect::<Vec<_>>());

    alloc(&mut a, FULL, 6); // ids 3..9
    free(&mut a, FULL, &[7, 4, 8, 3, 6, 5]);
    let filler = alloc(&mut a, FULL, 80); // ids 9..89
    free(&mut a, FULL, &filler);
    alloc(&mut a, FULL, 15); // ids 89..104: the recycled ids come next
    let wm = a.pool(FULL).watermark();
    let got = alloc(&mut a, FULL, 4);
    assert_eq!(got, vec![7, 4, 8, 3]);
    assert_eq!(physs(&a, FULL, &got), (wm..wm + 4).collect::<Vec<_>>());
}

#[test]
fn eager_compaction_pairs_ith_survivor_with_ith_hole() {
    // Up: pages 3..13 bound; free the pages at 9, 4, 6 (in that order): K = 3, vacated band
    // [10, 13) holds three survivors; the holes below are 4, 6, 9.
    let mut a = full_mamba(64, 16, false);
    let v = alloc(&mut a, FULL, 10);
    let at = |p: i64| v[(p - 3) as usize];
    free(&mut a, FULL, &[at(9), at(4), at(6)]);
    assert_eq!(moves(a.plan(), FULL), vec![(10, 4), (11, 6), (12, 9)]);
    assert_eq!(a.pool(FULL).watermark(), 10);
    // A mixed case: a freed page inside the vacated band too.
    let v: Vec<i64> = (3..10).map(|p| a.pool(FULL).p2v()[p as usize]).collect();
    let at = |p: i64| v[(p - 3) as usize];
    free(&mut a, FULL, &[at(8), at(3), at(5)]); // K=3, band [7,10): 7, 9 survive; holes 3, 5
    assert_eq!(moves(a.plan(), FULL), vec![(7, 3), (9, 5)]);

    // Down: pages 31..41 bound (wm 30). Free the pages at 33, 38, 36: band [31, 34) holds
    // survivors 31, 32 (33 is freed); holes above the new band (wm 33) are 36, 38.
    let w = alloc(&mut a, MAMBA, 10);
    assert_eq!(physs(&a, MAMBA, &w), (31..41).collect::<Vec<_>>());
    let at = |p: i64| w[(p - 31) as usize];
    free(&mut a, MAMBA, &[at(33), at(38), at(36)]);
    assert_eq!(moves(a.plan(), MAMBA), vec![(31, 36), (32, 38)]);
    assert_eq!(a.pool(MAMBA).watermark(), 33);
}

#[test]
fn failed_alloc_changes_nothing() {
    for lazy in [false, true] {
        let mut a = full_mamba(8, 8, lazy);
        let x = alloc(&mut a, FULL, 5);
        alloc(&mut a, MAMBA, 2);
        free(&mut a, FULL, &x[1..3]);
        a.alloc(FULL, 1).unwrap();
        let before = a.clone();
        let sched = a.schedulable_pages(FULL) as usize;
        assert!(!a.alloc(FULL, sched + 1).unwrap());
        assert_same_state(&before, &a);
        assert!(!a.alloc(FULL, usize::MAX).unwrap());
        assert_same_state(&before, &a);
        assert!(!a.alloc_tokens(FULL, i64::MAX).unwrap());
        assert_same_state(&before, &a);
    }
}

#[test]
fn schedulable_pages_guarantee_alloc_and_flush_only_the_neighbour() {
    // Both lazy. Mamba leaves interior holes; full's `available` ignores them but its
    // `schedulable` credits them, and an alloc in between flushes mamba urgently.
    let mut a = full_mamba(16, 16, true);
    let mut m = Markers::default();
    let w = alloc(&mut a, MAMBA, 10);
    m.stamp_bound(&a, MAMBA);
    free(&mut a, MAMBA, &[w[0], w[2], w[4]]); // physical 31, 33, 35: interior holes
                                              // Mamba: 22 pages, w at 12..22; holes 12 (the boundary), 14, 16.
    let full_avail = a.available_pages(FULL);
    let full_sched = a.schedulable_pages(FULL);
    assert_eq!(a.gap_bytes(FULL), 12 * 160 - 3 * 64);
    assert_eq!(full_avail, (12 * 160 - 3 * 64) / 64);
    assert_eq!(full_sched, (12 * 160 - 3 * 64 + 3 * 160) / 64);

    // Over-asking returns false and does not flush the neighbour.
    let before = a.clone();
    assert!(!a.alloc(FULL, full_sched as usize + 1).unwrap());
    assert_same_state(&before, &a);
    assert_eq!(a.pool(MAMBA).num_holes(), 3);

    // Exactly `schedulable` fits: mamba is packed by an urgent flush inside the alloc.
    a.set_latest_token(Some(9));
    assert!(a.alloc(FULL, full_sched as usize).unwrap());
    m.apply(&a);
    m.stamp_bound(&a, FULL);
    assert!(a.plan().pools[MAMBA].num_moves() > 0);
    assert_eq!(a.plan().wait_tokens, vec![9]);
    assert_eq!(a.latest_token(), None);
    assert_eq!(a.pool(MAMBA).num_holes(), 0);
    assert_eq!(moves(a.plan(), MAMBA), vec![(13, 16)]);
    assert_eq!(a.pool(MAMBA).span_pages(), 7);
    assert_eq!(a.available_pages(FULL), 0);
    a.check_invariants().unwrap();
    m.check(&a, MAMBA);
    m.check(&a, FULL);
}

// ----- TestPagedMultiEndedAllocator (page size 8) ----------------------------------------

const PS: u64 = 8;

/// Full up and swa down, both MHA 64 B entries, ps 8, two independent owners.
fn paged(n_full_pages: u64, n_swa_pages: u64) -> Arena {
    arena(
        (n_full_pages + n_swa_pages) * PS * 64,
        vec![
            spec("full", 64, PS, Direction::Up, None),
            spec("swa", 64, PS, Direction::Down, None),
        ],
        false,
        16,
    )
}

fn page_tokens(p: i64) -> Vec<i64> {
    (0..PS as i64).map(|o| p * PS as i64 + o).collect()
}

#[test]
fn paged_alloc_token_aligned() {
    let mut a = paged(16, 8);
    assert_eq!(a.reserved_floor(), 512);
    assert!(a.alloc_tokens(0, 16).unwrap());
    let toks = a.plan().tokens.clone();
    let pages = a.plan().pages.clone();
    assert_eq!(pages.len(), 2);
    assert_eq!(
        toks,
        [page_tokens(pages[0]), page_tokens(pages[1])].concat()
    );
}

#[test]
fn paged_v2p_sized_by_pages() {
    let a = paged(10, 8);
    let p = a.pool(0);
    let n = p.geometry().num_pages as usize;
    assert!(n > 1);
    assert_eq!((p.v2p().len(), p.p2v().len()), (n + 1, n + 1));
    assert_eq!(p.geometry().max_slots(), n as i64 * 8);
}

#[test]
fn paged_compaction_relocates_whole_pages() {
    let mut a = paged(16, 8);
    // Token-level stamps: phys token -> virtual token.
    let mut buf: BTreeMap<i64, i64> = BTreeMap::new();
    let mut groups = Vec::new();
    for _ in 0..3 {
        assert!(a.alloc_tokens(0, 8).unwrap());
        let toks = a.plan().tokens.clone();
        for &t in &toks {
            buf.insert(phys(&a, 0, t / 8) * 8 + t % 8, t);
        }
        groups.push(toks);
    }
    a.free(0, &groups[1][3..4]).unwrap(); // one token frees its whole page
    a.check_invariants().unwrap();
    assert!(!a.is_token_allocated(0, groups[1][0]));
    let p = &a.plan().pools[0];
    assert_eq!(p.num_moves(), 1);
    let vals: Vec<_> = p
        .src
        .iter()
        .flat_map(|&s| page_tokens(s))
        .map(|t| buf[&t])
        .collect();
    for (d, v) in p.dst.iter().flat_map(|&d| page_tokens(d)).zip(vals) {
        buf.insert(d, v);
    }
    for g in [&groups[0], &groups[2]] {
        for &t in g {
            assert!(a.is_token_allocated(0, t));
            assert_eq!(buf[&(phys(&a, 0, t / 8) * 8 + t % 8)], t);
        }
    }
}

#[test]
fn paged_free_unique_by_page() {
    let mut a = paged(16, 8);
    assert!(a.alloc_tokens(0, 16).unwrap());
    let toks = a.plan().tokens.clone();
    assert_eq!(a.pool(0).live_pages() * 8, 16);
    assert_eq!(a.pool(0).span_pages(), 2);
    // Every token of both pages, plus repeats: still exactly two pages freed.
    let mut all = toks.clone();
    all.extend_from_slice(&toks[..3]);
    a.free(0, &all).unwrap();
    assert_eq!((a.pool(0).live_pages(), a.pool(0).span_pages()), (0, 0));
    let ids = free_ids(&a, 0);
    assert_eq!(&ids[ids.len() - 2..], &[toks[0] / 8, toks[8] / 8]);
}

#[test]
fn paged_take_overflow_check() {
    let mut a = paged(4, 8);
    let avail = a.available_pages(0);
    assert!(a.alloc_tokens(0, avail * 8).unwrap());
    let before = a.clone();
    assert!(!a.alloc_tokens(0, 8).unwrap());
    assert_same_state(&before, &a);
}

#[test]
fn paged_alloc_extend_binds_v2p_p2v() {
    let mut a = paged(16, 8);
    let head: Vec<i64> = a.pool(0).free_ids().take(2).collect();
    let wm = a.pool(0).watermark();
    let nfree = free_ids(&a, 0).len();
    assert!(a.alloc_extend(0, &[0], &[16], Some(&[-1])).unwrap());
    assert_eq!(a.plan().pages, head);
    assert_eq!(
        a.plan().tokens,
        [page_tokens(head[0]), page_tokens(head[1])].concat()
    );
    assert!(a.plan().token_req.is_empty());
    for &v in &head {
        let p = phys(&a, 0, v);
        assert_eq!(a.pool(0).p2v()[p as usize], v);
    }
    assert_eq!(a.pool(0).live_pages(), 2);
    assert_eq!(a.pool(0).watermark(), wm + 2);
    assert_eq!(free_ids(&a, 0).len(), nfree - 2);
    a.check_invariants().unwrap();
}

#[test]
fn paged_alloc_extend_matches_naive_reference() {
    // Request 0: prefix 5 in page P (last_loc P*8+4), grows to 20: 3 tail tokens, then page
    // Q whole and 4 tokens of page R. Request 1: prefix 8 (page aligned) grows to 9.
    // Request 2: new, 0 -> 3.
    let mut a = paged(16, 8);
    assert!(a.alloc_tokens(0, 16).unwrap());
    let r0 = a.plan().pages[0];
    let r1 = a.plan().pages[1];
    let last = [r0 * 8 + 4, r1 * 8 + 7, -1];
    let head: Vec<i64> = a.pool(0).free_ids().take(4).collect();
    assert!(a
        .alloc_extend(0, &[5, 8, 0], &[20, 9, 3], Some(&last))
        .unwrap());
    let mut want = vec![r0 * 8 + 5, r0 * 8 + 6, r0 * 8 + 7];
    want.extend(page_tokens(head[0]));
    want.extend((0..4).map(|o| head[1] * 8 + o));
    want.push(head[2] * 8);
    want.extend((0..3).map(|o| head[3] * 8 + o));
    assert_eq!(a.plan().tokens, want);
    assert_eq!(a.plan().pages, head);

    // Without host last_loc the plan carries offsets and the request per token.
    let mut b = paged(16, 8);
    assert!(b.alloc_tokens(0, 16).unwrap());
    assert!(b.alloc_extend(0, &[5, 8, 0], &[20, 9, 3], None).unwrap());
    assert_eq!(common::finish_tokens(&b, 0, &last), want);
    // The continuation names last_loc's in-page offset (4) above the distance (1..=3).
    assert_eq!(&b.plan().tokens[..3], &[4 * 8 + 1, 4 * 8 + 2, 4 * 8 + 3]);
    // A missing, -1 or wrong-offset last_loc leaves those three unfinished, nothing else.
    for bad in [&[][..], &[-1, 0, 0], &[r0 * 8 + 3, 0, 0]] {
        let done = b.finish_tokens(0, bad).unwrap();
        assert!(done[..3].iter().all(Option::is_none));
        assert_eq!(
            done[3..].iter().map(|t| t.unwrap()).collect::<Vec<_>>(),
            want[3..]
        );
    }
    assert!(b.finish_tokens(9, &last).is_err());
    assert_eq!(&b.plan().token_req[..3], &[0, 0, 0]);
    assert!(b.plan().token_req[3..].iter().all(|&r| r == -1));
}

#[test]
fn paged_alloc_decode_binds_on_page_wrap() {
    let mut a = paged(16, 8);
    assert!(a.alloc_tokens(0, 8).unwrap());
    let last = *a.plan().tokens.last().unwrap();
    let head = a.pool(0).free_ids().next().unwrap();
    let (wm, live, nfree) = (
        a.pool(0).watermark(),
        a.pool(0).live_pages(),
        free_ids(&a, 0).len(),
    );
    assert!(a.alloc_decode(0, &[9], Some(&[last])).unwrap());
    assert_eq!(a.plan().tokens, vec![head * 8]);
    assert_eq!(a.plan().pages, vec![head]);
    let p = phys(&a, 0, head);
    assert_eq!(a.pool(0).p2v()[p as usize], head);
    assert_eq!(a.pool(0).watermark(), wm + 1);
    assert_eq!(a.pool(0).live_pages(), live + 1);
    assert_eq!(free_ids(&a, 0).len(), nfree - 1);
}

#[test]
fn paged_alloc_decode_no_op_without_new_page() {
    let mut a = paged(16, 8);
    assert!(a.alloc_tokens(0, 8).unwrap());
    let toks = a.plan().tokens.clone();
    let before = a.clone();
    // seq 7: the new token is position 6, continuing after last_loc at position 5.
    assert!(a.alloc_decode(0, &[7], Some(&[toks[5]])).unwrap());
    assert_eq!(a.plan().tokens, vec![toks[6]]);
    assert!(a.plan().pages.is_empty());
    assert_eq!(a.pool(0).watermark(), before.pool(0).watermark());
    assert_eq!(a.pool(0).live_pages(), before.pool(0).live_pages());
    assert_eq!(free_ids(&a, 0), free_ids(&before, 0));
    assert!(a.plan().pools.iter().all(|p| p.is_empty()));
}

#[test]
fn alloc_decode_is_valid_at_page_size_1() {
    // §12 bug 8: at ps 1 every decode token starts a page.
    let mut a = full_mamba(64, 16, false);
    let x = alloc(&mut a, FULL, 3);
    let head: Vec<i64> = a.pool(FULL).free_ids().take(3).collect();
    assert!(a
        .alloc_decode(FULL, &[2, 5, 1], Some(&[x[0], x[1], -1]))
        .unwrap());
    assert_eq!(a.plan().tokens, head);
    assert_eq!(a.plan().pages, head);
    for &v in &head {
        assert!(a.is_token_allocated(FULL, v));
    }
    assert_eq!(a.pool(FULL).live_pages(), 6);
    a.check_invariants().unwrap();
    // alloc_extend at ps 1 likewise takes one page per new token.
    let head: Vec<i64> = a.pool(FULL).free_ids().take(4).collect();
    assert!(a.alloc_extend(FULL, &[2, 0], &[4, 2], None).unwrap());
    assert_eq!(a.plan().tokens, head);
    assert!(a.plan().token_req.iter().all(|&r| r == -1));
}

#[test]
fn alloc_extend_and_decode_fail_cleanly_when_full() {
    let mut a = paged(4, 4);
    let avail = a.available_pages(0);
    let before = a.clone();
    assert!(!a.alloc_extend(0, &[0], &[(avail + 1) * 8], None).unwrap());
    assert_same_state(&before, &a);
    assert!(a.alloc_extend(0, &[0], &[avail * 8], None).unwrap());
    let last = *a.plan().tokens.last().unwrap();
    let before = a.clone();
    assert!(!a.alloc_decode(0, &[avail * 8 + 1], Some(&[last])).unwrap());
    assert_same_state(&before, &a);
}

// ----- TestLazyCompaction (full up lazy, mamba down, 64/16, ps 1) ----------------------------

#[test]
fn lazy_state_initialized() {
    let mut a = full_mamba(64, 16, true);
    let p = a.pool(FULL);
    assert!(p.is_lazy());
    assert_eq!((p.num_holes(), p.num_pending(), p.live_pages()), (0, 0, 0));
    assert_eq!(p.watermark(), p.geometry().min_page_index);
    assert_eq!(a.flush(false), 0);
    assert_eq!(a.flush(true), 0);
    alloc(&mut a, FULL, 8);
    assert_eq!(
        (a.pool(FULL).live_pages(), a.pool(FULL).num_holes()),
        (8, 0)
    );
}

#[test]
fn lazy_free_boundary_shortcut() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 3);
    let wm = a.pool(FULL).watermark();
    free(&mut a, FULL, &x[2..]);
    assert_eq!(
        a.pool(FULL).watermark(),
        wm,
        "lazy free never moves the watermark"
    );
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).live_pages()),
        (1, 2)
    );
    assert!(a.plan().pools[FULL].src.is_empty());
    assert_eq!(a.flush_pool(FULL, true).unwrap(), 0);
    assert_eq!(a.pool(FULL).watermark(), wm - 1);
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).live_pages()),
        (0, 2)
    );
    a.check_invariants().unwrap();
}

#[test]
fn lazy_free_non_boundary_pushes_hole() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 5);
    let wm = a.pool(FULL).watermark();
    free(&mut a, FULL, &x[2..3]);
    assert_eq!(a.pool(FULL).watermark(), wm);
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).live_pages()),
        (1, 4)
    );
}

#[test]
fn lazy_free_inward_walk() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 5);
    let wm = a.pool(FULL).watermark();
    free(&mut a, FULL, &[x[2]]);
    free(&mut a, FULL, &[x[4]]);
    free(&mut a, FULL, &[x[3]]);
    assert_eq!(
        (a.pool(FULL).watermark(), a.pool(FULL).num_holes()),
        (wm, 3)
    );
    assert_eq!(a.flush(true), 0, "all three are boundary holes once sorted");
    assert_eq!(a.pool(FULL).watermark(), wm - 3);
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).live_pages()),
        (0, 2)
    );
}

#[test]
fn lazy_alloc_drains_holes_first() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 5);
    let wm = a.pool(FULL).watermark();
    let holes = physs(&a, FULL, &[x[1], x[3]]);
    free(&mut a, FULL, &[x[1], x[3]]);
    let y = alloc(&mut a, FULL, 2);
    assert_eq!(physs(&a, FULL, &y), holes, "holes are reused FIFO");
    assert_eq!(
        (a.pool(FULL).watermark(), a.pool(FULL).num_holes()),
        (wm, 0)
    );
    let z = alloc(&mut a, FULL, 1);
    assert_eq!(physs(&a, FULL, &z), vec![wm]);
    assert_eq!(a.pool(FULL).watermark(), wm + 1);
    // Mixed: one hole, then a fresh ascending extension.
    free(&mut a, FULL, &[x[0]]);
    let wm = a.pool(FULL).watermark();
    let w = alloc(&mut a, FULL, 3);
    assert_eq!(physs(&a, FULL, &w), vec![3, wm, wm + 1]);
}

#[test]
fn lazy_available_size_includes_holes() {
    let mut a = full_mamba(64, 16, true);
    let initial = a.available_pages(FULL);
    let x = alloc(&mut a, FULL, 5);
    free(&mut a, FULL, &x[..3]);
    assert_eq!(a.pool(FULL).num_holes(), 3);
    assert_eq!(a.available_pages(FULL), initial - 2);
}

#[test]
fn lazy_flush_compacts_holes_into_gap() {
    let mut a = full_mamba(64, 16, true);
    let mut m = Markers::default();
    let x = alloc(&mut a, FULL, 5);
    m.stamp_bound(&a, FULL);
    let wm = a.pool(FULL).watermark();
    free(&mut a, FULL, &x[1..2]);
    let n = a.flush(true);
    m.apply(&a);
    assert!(n >= 1);
    assert_eq!(
        moves(a.plan(), FULL),
        vec![(7, 4)],
        "topmost survivor into the deepest hole"
    );
    assert!(a.pool(FULL).watermark() < wm);
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).live_pages()),
        (0, 4)
    );
    m.check(&a, FULL);
    a.check_invariants().unwrap();
}

#[test]
fn lazy_flush_walk_order_and_crossing() {
    // Up: pages 3..15 bound; free 12, 6, 14, 4, 9, 13. The flush absorbs 14, 13, 12 (the
    // band becomes [3, 12)), then pairs survivors topmost first (11, 10, 8, ...) with holes
    // deepest first (4, 6, 9): 11 -> 4, 10 -> 6, and 8 < 9 crosses. The vacated 10, 11 and
    // the hole 9 are then boundary holes and are absorbed too.
    let mut a = full_mamba(64, 16, true);
    let v = alloc(&mut a, FULL, 12);
    let at = |p: i64| v[(p - 3) as usize];
    free(&mut a, FULL, &[at(12), at(6), at(14), at(4), at(9), at(13)]);
    assert_eq!(a.flush(false), 2);
    assert_eq!(moves(a.plan(), FULL), vec![(11, 4), (10, 6)]);
    assert_eq!(a.pool(FULL).watermark(), 9);
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).live_pages()),
        (0, 6)
    );
    a.check_invariants().unwrap();
}

#[test]
fn lazy_move_cap_changes_between_flushes() {
    // Same free pattern as above: two moves pending. A cap of 1 set after the arena was
    // built holds the next non-urgent flush to one move; the next flush does the other.
    let mut a = full_mamba(64, 16, true);
    let v = alloc(&mut a, FULL, 12);
    let at = |p: i64| v[(p - 3) as usize];
    free(&mut a, FULL, &[at(12), at(6), at(14), at(4), at(9), at(13)]);
    assert!(a.set_max_moves_per_flush(0).is_err());
    assert_eq!(
        a.max_moves_per_flush(),
        ukv_core::DEFAULT_MAX_MOVES_PER_FLUSH
    );
    a.set_max_moves_per_flush(1).unwrap();
    assert_eq!(a.flush(false), 1);
    assert_eq!(moves(a.plan(), FULL), vec![(11, 4)]);
    assert_eq!(a.flush(false), 1);
    assert_eq!(moves(a.plan(), FULL), vec![(10, 6)]);
    a.check_invariants().unwrap();
}

#[test]
fn lazy_v2p_p2v_identity_after_flush() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 8);
    free(&mut a, FULL, &[x[1], x[3], x[5]]);
    a.flush(true);
    a.check_invariants().unwrap();
    for &v in [x[0], x[2], x[4], x[6], x[7]].iter() {
        let p = phys(&a, FULL, v);
        assert_eq!(a.pool(FULL).p2v()[p as usize], v);
    }
    assert_eq!(a.pool(FULL).span_pages(), 5);
}

#[test]
fn lazy_vs_eager_equivalence_seeded() {
    // Port: seed 42, 200 ops, alloc(1..6) with probability 0.6, otherwise free the smallest
    // 1..4 live ids. Eager and lazy end with the same live set and the same data.
    let mut eager = full_mamba(64, 16, false);
    let mut lazy = full_mamba(64, 16, true);
    let (mut me, mut ml) = (Markers::default(), Markers::default());
    let mut rng = Rng(42);
    let mut live: BTreeSet<i64> = BTreeSet::new();
    for _ in 0..200 {
        if rng.chance(0.6) || live.is_empty() {
            let n = 1 + rng.below(6) as usize;
            let oe = eager.alloc(FULL, n).unwrap();
            let ol = lazy.alloc(FULL, n).unwrap();
            assert_eq!(oe, ol);
            if oe {
                assert_eq!(eager.plan().pages, lazy.plan().pages);
                me.stamp_bound(&eager, FULL);
                ml.stamp_bound(&lazy, FULL);
                live.extend(eager.plan().pages.iter().copied());
            }
        } else {
            let k = 1 + rng.below(4) as usize;
            let batch: Vec<i64> = live.iter().copied().take(k).collect();
            for v in &batch {
                live.remove(v);
            }
            eager.free(FULL, &batch).unwrap();
            me.apply(&eager);
            lazy.free(FULL, &batch).unwrap();
            ml.apply(&lazy);
        }
        if rng.chance(0.3) {
            lazy.flush(false);
            ml.apply(&lazy);
        }
        eager.check_invariants().unwrap();
        lazy.check_invariants().unwrap();
    }
    lazy.flush(true);
    ml.apply(&lazy);
    lazy.check_invariants().unwrap();
    for a in [&eager, &lazy] {
        let got: BTreeSet<i64> = (1..a.pool(FULL).v2p().len() as i64)
            .filter(|&v| a.pool(FULL).v2p()[v as usize] >= 0)
            .collect();
        assert_eq!(got, live);
    }
    assert_eq!(eager.pool(FULL).span_pages(), lazy.pool(FULL).span_pages());
    me.check(&eager, FULL);
    ml.check(&lazy, FULL);
}

#[test]
fn lazy_non_urgent_stops_at_write_set_blocker() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 5);
    a.set_latest_token(Some(1));
    free(&mut a, FULL, &x[1..2]);
    a.set_inflight_writes(FULL, 1, &x[4..]).unwrap(); // the topmost survivor
    assert_eq!(a.flush(false), 0);
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).num_pending()),
        (1, 0)
    );
    a.retire_token(1);
    assert_eq!(a.latest_token(), None);
    assert!(a.flush(false) >= 1);
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).num_pending()),
        (0, 0)
    );
    a.check_invariants().unwrap();
}

/// Review round 3, C5: two overlapped forwards each report their own write set; a
/// non-urgent flush must move neither forward's pages (it used to keep only the newest set).
#[test]
fn lazy_non_urgent_protects_every_unretired_write_set() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 6);
    free(&mut a, FULL, &x[1..3]);
    a.set_latest_token(Some(1));
    a.set_inflight_writes(FULL, 1, &x[5..]).unwrap(); // forward N: the topmost survivor
    a.set_latest_token(Some(2));
    a.set_inflight_writes(FULL, 2, &x[3..4]).unwrap(); // forward N+1: another page
    assert_eq!(
        a.flush(false),
        0,
        "the topmost survivor is N's: nothing may move"
    );
    a.retire_token(1);
    // N retired: its page may move now, N+1's still may not.
    let (p5, p3) = (phys(&a, FULL, x[5]), phys(&a, FULL, x[3]));
    assert_eq!(a.flush(false), 2);
    let m = moves(a.plan(), FULL);
    assert_eq!(m[0].0, p5, "N's page is the first to move once N retired");
    assert!(m.iter().all(|&(src, _)| src != p3), "N+1's page must stay");
    assert_eq!(phys(&a, FULL, x[3]), p3);
    a.retire_token(2);
    a.check_invariants().unwrap();
}

#[test]
fn lazy_urgent_waits_for_the_write_set_instead() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 5);
    a.set_latest_token(Some(1));
    free(&mut a, FULL, &x[1..2]);
    a.set_inflight_writes(FULL, 1, &x[4..]).unwrap();
    assert_eq!(a.flush(true), 1);
    assert_eq!(a.plan().wait_tokens, vec![1]);
    assert_eq!(moves(a.plan(), FULL), vec![(7, 4)]);
    assert_eq!(
        (a.pool(FULL).num_holes(), a.pool(FULL).num_pending()),
        (0, 0)
    );
    a.check_invariants().unwrap();
}

#[test]
fn lazy_non_urgent_read_race_uses_pending_reuse() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 5);
    a.set_latest_token(Some(1));
    free(&mut a, FULL, &x[1..2]);
    let n = a.flush(false);
    assert!(n >= 1);
    assert!(
        a.plan().wait_tokens.is_empty(),
        "a non-urgent flush never waits"
    );
    assert_eq!(a.pool(FULL).num_pending(), n);
    assert_eq!(a.pool(FULL).num_holes(), 0);
    // The vacated page cannot be reused while the forward may still read it.
    let y = alloc(&mut a, FULL, 1);
    assert_eq!(physs(&a, FULL, &y), vec![8]);
    a.retire_token(1);
    assert_eq!(a.pool(FULL).num_pending(), 0);
    assert_eq!(a.pool(FULL).num_holes(), 1);
    a.check_invariants().unwrap();
}

#[test]
fn lazy_pending_reuse_is_a_list_of_batches_per_token() {
    // §12 bug 3 reproduction: move cap 1, two non-urgent flushes under one unfired token,
    // then retire: both batches come back and no ghost page stays behind.
    let mut a = full_mamba_cap(64, 16, true, 1);
    let x = alloc(&mut a, FULL, 8); // pages 3..11
    free(&mut a, FULL, &[x[1], x[3]]); // holes 4, 6
    a.set_latest_token(Some(7));
    assert_eq!(a.flush(false), 1);
    assert_eq!(moves(a.plan(), FULL), vec![(10, 4)]);
    assert_eq!(a.flush(false), 1);
    assert_eq!(moves(a.plan(), FULL), vec![(9, 6)]);
    assert_eq!(a.pool(FULL).num_pending(), 2);
    a.check_invariants().unwrap();
    a.retire_token(7);
    assert_eq!(
        (a.pool(FULL).num_pending(), a.pool(FULL).num_holes()),
        (0, 2)
    );
    assert_eq!(a.flush(false), 0);
    let p = a.pool(FULL);
    assert_eq!((p.span_pages(), p.live_pages(), p.num_holes()), (6, 6, 0));
    assert_eq!(p.watermark(), 9);
    // The same through an urgent drain: two batches under one token, one wait.
    let mut b = full_mamba_cap(64, 16, true, 1);
    let x = alloc(&mut b, FULL, 8);
    free(&mut b, FULL, &[x[1], x[3]]);
    b.set_latest_token(Some(7));
    b.flush(false);
    b.flush(false);
    b.set_latest_token(None);
    assert_eq!(b.flush(true), 0);
    assert_eq!(b.plan().wait_tokens, vec![7]);
    let p = b.pool(FULL);
    assert_eq!((p.span_pages(), p.live_pages(), p.num_pending()), (6, 6, 0));
    b.check_invariants().unwrap();
}

#[test]
fn lazy_flush_opportunistic_fast_path() {
    let mut a = full_mamba(64, 16, true);
    assert_eq!(a.flush(false), 0);
    let x = alloc(&mut a, FULL, 3);
    free(&mut a, FULL, &x[..1]);
    assert_eq!(a.flush(false), 1); // no token in flight: released immediately
    assert_eq!(a.pool(FULL).num_pending(), 0);
    assert_eq!(a.pool(FULL).span_pages(), 2);
}

#[test]
fn lazy_double_free_is_detected() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 3);
    free(&mut a, FULL, &x[..1]);
    let before = a.clone();
    assert!(matches!(
        a.free(FULL, &x[..1]),
        Err(ukv_core::UkvError::DoubleFree { .. })
    ));
    assert_same_tables(&before, &a);
    assert!(matches!(
        a.free(FULL, &[x[1], x[1]]),
        Err(ukv_core::UkvError::DoubleFree { .. })
    ));
    assert_same_tables(&before, &a);
    assert_eq!(a.pool(FULL).num_holes(), 1);
}

#[test]
fn lazy_grow_down_walk() {
    // Mamba lazy, grows down: pages 31..41. Holes 32, 35, 38: the walk takes the lowest
    // survivors (topmost of a grow-down band) into the highest holes.
    let mut a = full_mamba(64, 16, true);
    let w = alloc(&mut a, MAMBA, 10);
    assert_eq!(physs(&a, MAMBA, &w), (31..41).collect::<Vec<_>>());
    let at = |p: i64| w[(p - 31) as usize];
    free(&mut a, MAMBA, &[at(35), at(32), at(38)]);
    assert_eq!(a.flush_pool(MAMBA, false).unwrap(), 2);
    // Survivors from the bottom: 31 -> 38, 33 -> 35; then 34 > 32 crosses. The vacated 31,
    // 33 and the hole 32 are then boundary holes, absorbed in the same pass.
    assert_eq!(moves(a.plan(), MAMBA), vec![(31, 38), (33, 35)]);
    assert_eq!(a.pool(MAMBA).watermark(), 33);
    assert_eq!(
        (a.pool(MAMBA).num_holes(), a.pool(MAMBA).span_pages()),
        (0, 7)
    );
    a.check_invariants().unwrap();
    assert_eq!(a.flush(true), 0);
}

// ----- SWA: a non-owner pool binding the owner's ids -------------------------------------

const SWA: usize = 1;

fn swa_arena(nf: u64, ns: u64, lazy: bool) -> Arena {
    arena(
        nf * 64 + ns * 32,
        vec![
            spec("full", 64, 1, Direction::Up, None),
            spec("swa", 32, 1, Direction::Down, Some(FULL)),
        ],
        lazy,
        16,
    )
}

/// Composite alloc: ids from full, the same ids bound on swa.
fn swa_alloc(a: &mut Arena, n: usize) -> Vec<i64> {
    let ids = alloc(a, FULL, n);
    assert!(a.alloc_with_virtual(SWA, &ids).unwrap());
    assert_eq!(a.plan().pages, ids);
    a.check_invariants().unwrap();
    ids
}

#[test]
fn swa_alloc_both_peers_hold() {
    let mut a = swa_arena(32, 16, false);
    assert!(!a.pool(SWA).is_id_owner());
    assert_eq!(a.pool(SWA).free_ids().count(), 0);
    let ids = swa_alloc(&mut a, 3);
    for &v in &ids {
        assert!(phys(&a, FULL, v) >= 0 && phys(&a, SWA, v) >= 0);
        assert!(!free_ids(&a, FULL).contains(&v));
    }
}

#[test]
fn swa_free_releases_both_and_free_swa_keeps_virtual_alive() {
    let mut a = swa_arena(32, 16, false);
    let ids = swa_alloc(&mut a, 3);
    free(&mut a, SWA, &ids[1..2]); // free_swa: left the window
    assert!(phys(&a, FULL, ids[1]) >= 0);
    assert_eq!(phys(&a, SWA, ids[1]), TOMBSTONE);
    assert!(!free_ids(&a, FULL).contains(&ids[1]));
    // Composite free of everything: swa side only for what it still holds.
    free(&mut a, SWA, &[ids[0], ids[2]]);
    free(&mut a, FULL, &ids);
    for &v in &ids {
        assert_eq!(
            (phys(&a, FULL, v), phys(&a, SWA, v)),
            (TOMBSTONE, TOMBSTONE)
        );
    }
    assert_eq!(
        &free_ids(&a, FULL)[free_ids(&a, FULL).len() - 3..],
        &ids[..]
    );
}

#[test]
fn swa_compaction_diverges_physical_layout() {
    let mut a = swa_arena(32, 16, false);
    let x = swa_alloc(&mut a, 1);
    let y = swa_alloc(&mut a, 1);
    let z = swa_alloc(&mut a, 1);
    let (zf, ys) = (phys(&a, FULL, z[0]), phys(&a, SWA, y[0]));
    free(&mut a, SWA, &y);
    assert_eq!(phys(&a, FULL, z[0]), zf, "full is untouched");
    assert_eq!(
        phys(&a, SWA, z[0]),
        ys,
        "z's swa page moved into y's old swa page"
    );
    assert!(phys(&a, SWA, x[0]) >= 0);
}

#[test]
fn swa_byte_frontier_coordination() {
    // 8*64 + 8*32 = 768 bytes, floor 64: full 12 pages from page 1, swa 24 pages from page 2.
    let mut a = swa_arena(8, 8, false);
    // Joint availability: each token takes a full page and a swa page out of one gap.
    let joint = |a: &Arena| a.gap_bytes(FULL) / (64 + 32);
    assert_eq!((a.gap_bytes(FULL), joint(&a)), (704, 7));
    assert_eq!((a.available_pages(FULL), a.available_pages(SWA)), (11, 22));
    swa_alloc(&mut a, 3);
    assert_eq!(joint(&a), 4);
    assert_eq!((a.available_pages(FULL), a.available_pages(SWA)), (6, 13));
    swa_alloc(&mut a, 4);
    assert_eq!(a.gap_bytes(FULL), 32);
    assert_eq!((a.available_pages(FULL), a.available_pages(SWA)), (0, 1));
    assert!(!a.alloc(FULL, 1).unwrap());
}

#[test]
fn swa_v2p_is_sized_by_the_owner_id_space() {
    // §12 bug 1: swa has far fewer pages than full has ids.
    let mut a = arena(
        64 * 32 + 16 * 320,
        vec![
            spec("full", 32, 1, Direction::Up, None),
            spec("swa", 320, 1, Direction::Down, Some(FULL)),
        ],
        false,
        16,
    );
    let (full, swa) = (
        a.pool(FULL).geometry().clone(),
        a.pool(SWA).geometry().clone(),
    );
    assert_eq!(full.num_pages, 224);
    assert_eq!(swa.num_pages, 22);
    assert_eq!(swa.num_virtual_pages, full.num_pages);
    assert_eq!(swa.min_virtual_page, full.min_page_index);
    assert_eq!(a.pool(SWA).v2p().len(), 225);
    assert_eq!(a.pool(SWA).p2v().len(), 23);
    // Mint ids well beyond swa's page count, then bind a few of them on swa.
    let ids = alloc(&mut a, FULL, 150);
    let high: Vec<i64> = ids[140..]
        .iter()
        .copied()
        .filter(|&v| v > 22)
        .take(5)
        .collect();
    assert_eq!(high.len(), 5);
    assert!(a.alloc_with_virtual(SWA, &high).unwrap());
    a.check_invariants().unwrap();
    for &v in &high {
        assert!(phys(&a, SWA, v) < 22);
        assert!(a.is_token_allocated(SWA, v));
    }
    free(&mut a, SWA, &high[1..3]);
    assert!(a.is_token_allocated(SWA, high[4]));
}

#[test]
fn swa_lazy_non_owner_binds_holes_then_ascending() {
    let mut a = swa_arena(32, 16, true);
    let ids = swa_alloc(&mut a, 4);
    let sp = physs(&a, SWA, &ids);
    let wm = a.pool(SWA).watermark();
    assert_eq!(sp, (wm + 1..wm + 5).collect::<Vec<_>>());
    free(&mut a, SWA, &ids[1..2]);
    let more = alloc(&mut a, FULL, 2);
    assert!(a.alloc_with_virtual(SWA, &more).unwrap());
    assert_eq!(physs(&a, SWA, &more), vec![sp[1], wm]);
    a.check_invariants().unwrap();
}

#[test]
fn clear_resets_a_pool_and_marks_the_plan() {
    let mut a = full_mamba(64, 16, true);
    let x = alloc(&mut a, FULL, 5);
    free(&mut a, FULL, &x[1..2]);
    alloc(&mut a, MAMBA, 2);
    a.clear(FULL).unwrap();
    assert!(a.plan().pools[FULL].reset);
    assert!(!a.plan().pools[MAMBA].reset);
    let p = a.pool(FULL);
    assert_eq!((p.live_pages(), p.num_holes(), p.span_pages()), (0, 0, 0));
    assert_eq!(free_ids(&a, FULL), (3..104).collect::<Vec<_>>());
    assert_eq!(a.pool(MAMBA).live_pages(), 2);
    a.check_invariants().unwrap();
}

#[test]
fn free_group_releases_in_one_pass() {
    let mut a = full_mamba(64, 16, false);
    let x = alloc(&mut a, FULL, 6);
    a.free_group_begin(FULL).unwrap();
    assert!(a.in_free_group(FULL));
    a.free(FULL, &[x[1]]).unwrap();
    a.free(FULL, &[x[3], x[0]]).unwrap();
    assert_eq!(a.pool(FULL).live_pages(), 6, "queued frees are still live");
    assert!(a.plan().pools[FULL].is_empty());
    a.check_invariants().unwrap();
    a.free_group_end(FULL).unwrap();
    assert!(!a.in_free_group(FULL));
    assert_eq!(a.pool(FULL).live_pages(), 3);
    // One compaction over pages 3..9: freed 4, 6, 3 (K = 3); the vacated band [6, 9) holds
    // survivors 7, 8, which go to the holes 3, 4.
    assert_eq!(moves(a.plan(), FULL), vec![(7, 3), (8, 4)]);
    let ids = free_ids(&a, FULL);
    assert_eq!(&ids[ids.len() - 3..], &[x[1], x[3], x[0]]);
    a.check_invariants().unwrap();
}

#[test]
fn plan_rows_describe_every_table_change() {
    // A device mirror of the tables, updated only from plan rows, tracks the real tables.
    let mut a = full_mamba(16, 16, true);
    let mut mirror: Vec<(Vec<i64>, Vec<i64>)> = (0..2)
        .map(|i| (a.pool(i).v2p().to_vec(), a.pool(i).p2v().to_vec()))
        .collect();
    let mut rng = Rng(7);
    let mut live: [Vec<Vec<i64>>; 2] = [Vec::new(), Vec::new()];
    for step in 0..500 {
        let i = rng.below(2) as usize;
        match rng.below(6) {
            0..=2 => {
                if a.alloc(i, 1 + rng.below(3) as usize).unwrap() {
                    live[i].push(a.plan().pages.clone());
                }
            }
            3 | 4 if !live[i].is_empty() => {
                let b = live[i].swap_remove(rng.below(live[i].len() as u64) as usize);
                a.free(i, &b).unwrap();
            }
            _ => {
                if step % 2 == 0 {
                    a.set_latest_token(Some(step));
                } else {
                    a.retire_token(step - 1);
                }
                a.flush(rng.chance(0.3));
            }
        }
        for (i, p) in a.plan().pools.iter().enumerate() {
            for (&r, &v) in p.v2p_rows.iter().zip(&p.v2p_vals) {
                mirror[i].0[r as usize] = v;
            }
            for (&r, &v) in p.p2v_rows.iter().zip(&p.p2v_vals) {
                mirror[i].1[r as usize] = v;
            }
            assert_eq!(mirror[i].0, a.pool(i).v2p(), "v2p mirror, step {step}");
            assert_eq!(mirror[i].1, a.pool(i).p2v(), "p2v mirror, step {step}");
        }
        a.check_invariants().unwrap();
    }
}

// ----- helpers --------------------------------------------------------------------------

/// After an allocation that did not fit: the state is untouched and the plan (the last
/// operation's) is empty.
fn assert_same_state(before: &Arena, after: &Arena) {
    assert!(after.plan().pages.is_empty() && after.plan().tokens.is_empty());
    assert!(
        after.plan().pools.iter().all(|p| p.is_empty()),
        "{:?}",
        after.plan()
    );
    assert!(after.plan().wait_tokens.is_empty());
    assert_same_tables(before, after);
}

#[test]
fn urgent_flush_lists_each_wait_token_once() {
    // A pending batch under token 3 while token 3 is also the newest forward in flight.
    let mut a = full_mamba_cap(64, 16, true, 1);
    let x = alloc(&mut a, FULL, 8);
    free(&mut a, FULL, &[x[1], x[3]]);
    a.set_latest_token(Some(3));
    assert_eq!(a.flush(false), 1); // one batch pending under 3, hole 6 left
    assert_eq!(a.flush(true), 1);
    assert_eq!(a.plan().wait_tokens, vec![3]);
    // Two pools, both with batches pending under the same token.
    let mut b = full_mamba_cap(64, 16, true, 1);
    let x = alloc(&mut b, FULL, 8);
    let w = alloc(&mut b, MAMBA, 8);
    free(&mut b, FULL, &[x[1], x[3]]);
    free(&mut b, MAMBA, &[w[1], w[3]]);
    b.set_latest_token(Some(4));
    assert_eq!(b.flush(false), 2);
    assert!(b.flush(true) >= 1);
    assert_eq!(b.plan().wait_tokens, vec![4]);
    b.check_invariants().unwrap();
}

/// A lazy alloc of more pages than the small-batch cutoff takes the holes in the order they
/// were made (FIFO), then a fresh run, on both band directions, with every changed table
/// row in the plan once with its final value: the batch path writes the hole bindings as
/// slices, and must plan exactly what one binding per page plans.
#[test]
fn lazy_batch_alloc_takes_holes_fifo_then_fresh_pages() {
    for pool in [FULL, MAMBA] {
        let mut a = full_mamba(256, 256, true);
        let pages = alloc(&mut a, pool, 40);
        // Holes in a scattered order (not ascending, not the band's order).
        let freed: Vec<i64> = [7, 31, 2, 19, 23, 11, 5, 37, 13, 29, 3, 17]
            .iter()
            .map(|&k| pages[k])
            .collect();
        let hole_order = physs(&a, pool, &freed);
        for &v in &freed {
            free(&mut a, pool, &[v]); // one at a time: the holes queue in this order
        }
        assert_eq!(a.pool(pool).num_holes(), freed.len());
        let wm = a.pool(pool).watermark();
        let got = alloc(&mut a, pool, freed.len() + 5);
        let p = physs(&a, pool, &got);
        assert_eq!(&p[..freed.len()], &hole_order[..], "holes reused FIFO");
        let step = if pool == FULL { 1 } else { -1 };
        let fresh: Vec<i64> = (0..5).map(|k| wm + step * k).collect();
        let mut fresh_sorted = fresh.clone();
        fresh_sorted.sort_unstable();
        assert_eq!(
            &p[freed.len()..],
            &fresh_sorted[..],
            "then one ascending fresh run"
        );
        let plan = &a.plan().pools[pool];
        let rows: BTreeMap<i64, i64> = plan
            .v2p_rows
            .iter()
            .copied()
            .zip(plan.v2p_vals.iter().copied())
            .collect();
        assert_eq!(rows.len(), got.len());
        for (&v, &pv) in got.iter().zip(&p) {
            assert_eq!(rows[&v], pv);
        }
        let prow: BTreeMap<i64, i64> = plan
            .p2v_rows
            .iter()
            .copied()
            .zip(plan.p2v_vals.iter().copied())
            .collect();
        for (&v, &pv) in got.iter().zip(&p) {
            assert_eq!(prow[&pv], v);
        }
        assert_eq!(a.pool(pool).num_holes(), 0);
    }
}
