//! Scenario tests of the middle band (a third sub-pool floating between the two ends,
//! API.md §3): anchoring, transparency while empty, growth at both ends, slides by the
//! least distance, the frontier rule exact on both sides, lazy hazards, and the SWA pair
//! with the SWA side as the middle band (the reference's later FULL + SWA + Mamba layout).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ukv_core::{Arena, ArenaConfig, Direction, PoolSpec};

mod common;
use common::{assert_same_tables, spec, Rng};

const UP: usize = 0;
const MID: usize = 1;
const DOWN: usize = 2;

fn arena(total: u64, pools: Vec<PoolSpec>, lazy: bool) -> Arena {
    let mut cfg = ArenaConfig::new(total, pools);
    cfg.lazy = lazy;
    Arena::new(cfg).unwrap()
}

/// Up 48 B, middle 160 B, down 80 B entries (none divides another), page size 1:
/// 100 pages of 48 B, 30 of 160 B, 60 of 80 B; the floor is 160 B.
fn three(lazy: bool) -> Arena {
    arena(
        4800,
        vec![
            spec("kv", 48, 1, Direction::Up, None),
            spec("mid", 160, 1, Direction::Middle, None),
            spec("state", 80, 1, Direction::Down, None),
        ],
        lazy,
    )
}

fn alloc(a: &mut Arena, i: usize, n: usize) -> Vec<i64> {
    assert!(a.alloc(i, n).unwrap(), "alloc({i}, {n}) should fit");
    a.check_invariants().unwrap();
    a.plan().pages.clone()
}

fn band(a: &Arena, i: usize) -> (u64, u64) {
    (a.pool(i).low_byte(), a.pool(i).high_byte())
}

#[test]
fn an_empty_middle_band_is_transparent_and_anchors_centred() {
    let mut a = three(false);
    assert_eq!(a.chain(), &[UP, MID, DOWN]);
    assert_eq!(a.move_order(), &[UP, DOWN, MID]);
    // Empty: the ends see each other across the whole buffer.
    assert_eq!(a.gap_bytes(UP), 4800 - 192); // up starts at page 4 (192 B >= the floor)
    assert_eq!(a.available_pages(UP), 96);
    let m = alloc(&mut a, MID, 2);
    // Middle pages 2..30 lie between the ends (up's top at byte 192 rounds up to middle
    // page 2); 2 pages centred: 2 + (28 - 2) / 2 = 15, and 16.
    assert_eq!(band(&a, MID), (15 * 160, 17 * 160));
    assert_eq!(
        (
            a.pool(MID).v2p()[m[0] as usize],
            a.pool(MID).v2p()[m[1] as usize]
        ),
        (15, 16)
    );
    assert_eq!(a.gap_bytes(UP), 15 * 160 - 192);
    // Emptied again: transparent again.
    a.free(MID, &m).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.gap_bytes(UP), 4800 - 192);
}

#[test]
fn the_middle_band_grows_above_then_below_without_moving() {
    let mut a = three(false);
    alloc(&mut a, MID, 2); // pages 15, 16
    let v = alloc(&mut a, MID, 3); // above: 17, 18, 19
    assert_eq!(a.plan().num_moves(), 0);
    assert_eq!(a.pool(MID).v2p()[v[0] as usize], 17);
    assert_eq!(band(&a, MID), (15 * 160, 20 * 160));
    // The down end grows to the middle band's top exactly (20 pages of 80 B from byte
    // 4800 down to 3200 = 20 * 160): no slide.
    alloc(&mut a, DOWN, 20);
    assert_eq!(a.plan().num_moves(), 0);
    assert_eq!(a.pool(DOWN).low_byte(), a.pool(MID).high_byte());
    // No room above any more: the middle band grows below its base, still without moves.
    let v = alloc(&mut a, MID, 2);
    assert_eq!(a.plan().num_moves(), 0);
    assert_eq!(
        (
            a.pool(MID).v2p()[v[0] as usize],
            a.pool(MID).v2p()[v[1] as usize]
        ),
        (13, 14)
    );
    assert_eq!(band(&a, MID), (13 * 160, 20 * 160));
    // The down end can still take everything down to the middle band slid to the up end
    // (up's top at byte 192, middle pages from 2): 7 middle pages end at byte 1440, page 18
    // of 80 B. Taking it all slides the middle band by 11 pages: each of its 7 pages moves
    // once, into the window [2, 9).
    assert_eq!(a.available_pages(DOWN), 40 - 18);
    alloc(&mut a, DOWN, 22);
    let p = &a.plan().pools[MID];
    assert_eq!(p.src, (13..20).collect::<Vec<i64>>());
    assert_eq!(p.dst, (2..9).collect::<Vec<i64>>());
    assert_eq!(band(&a, MID), (2 * 160, 9 * 160));
    assert_eq!(a.pool(DOWN).low_byte(), 9 * 160);
    // What is left for the up end: bytes 192..320 below the middle band, 2 pages of 48 B.
    assert_eq!(a.available_pages(UP), 2);
}

/// A slide by `d` pages moves `min(d, live)` pages, in one plan of disjoint sources and
/// destinations, and the frontier rule holds in exact bytes on both sides afterwards.
#[test]
fn end_growth_slides_the_middle_band_by_the_least_distance() {
    let mut a = three(false);
    alloc(&mut a, MID, 5); // pages 13..18
    assert_eq!(band(&a, MID), (13 * 160, 18 * 160));
    // Up grows as close to the middle band's base as its 48 B pages go: byte 2064 of
    // 2080, no slide.
    alloc(&mut a, UP, 39);
    assert_eq!(a.plan().num_moves(), 0);
    assert_eq!(a.pool(UP).high_byte(), 2064);
    // One more up page (to byte 2112) needs one middle page of room: slide up by 1, moving
    // the lowest middle page to just above the top.
    alloc(&mut a, UP, 1);
    let p = &a.plan().pools[MID];
    assert_eq!((p.src.clone(), p.dst.clone()), (vec![13], vec![18]));
    assert_eq!(band(&a, MID), (14 * 160, 19 * 160));
    // Up grows by 10 more pages, to byte 2592: the base must reach page 17 (2720), so 3
    // pages move.
    alloc(&mut a, UP, 10);
    let p = &a.plan().pools[MID];
    assert_eq!(
        (p.src.clone(), p.dst.clone()),
        (vec![14, 15, 16], vec![19, 20, 21])
    );
    assert!(a.pool(UP).high_byte() <= a.pool(MID).low_byte());
    assert!(
        a.pool(UP).high_byte() + 160 > a.pool(MID).low_byte(),
        "least distance"
    );
    // Sliding further than the band is long moves each page once: all 5.
    let room = a.available_pages(UP);
    let before = band(&a, MID);
    alloc(&mut a, UP, room as usize);
    assert_eq!(a.plan().pools[MID].num_moves(), 5);
    let after = band(&a, MID);
    assert!(after.0 >= before.1, "the whole band moved past its old top");
    assert_eq!(after.1, a.pool(DOWN).low_byte() / 160 * 160);
    // Full: one more page anywhere does not fit, and changes nothing.
    for i in [UP, MID, DOWN] {
        let n = a.schedulable_pages(i) as usize;
        let before = a.clone();
        assert!(!a.alloc(i, n + 1).unwrap());
        assert_same_tables(&before, &a);
    }
}

/// With a middle band, the ends' capacities count the middle band slid out of the way, and
/// both neighbours of the middle band are checked in exact bytes: randomized eager and lazy
/// traces keep every invariant and every capacity exact.
#[test]
fn randomized_three_bands_keep_the_contract() {
    for (lazy, seed) in [(false, 7u64), (true, 11), (false, 13), (true, 17)] {
        let mut a = three(lazy);
        let mut rng = Rng(seed);
        let mut live: Vec<(usize, Vec<i64>)> = Vec::new();
        let mut slides = 0;
        for step in 0..3000 {
            let i = rng.below(3) as usize;
            if rng.chance(0.55) || live.is_empty() {
                let sched = a.schedulable_pages(i);
                let n = (1 + rng.below(6)) as i64;
                let before = a.clone();
                let ok = a.alloc(i, n as usize).unwrap();
                assert_eq!(
                    ok,
                    n <= sched,
                    "step {step}: alloc({i}, {n}), schedulable {sched}"
                );
                if ok {
                    live.push((i, a.plan().pages.clone()));
                    if i != MID && a.plan().pools[MID].num_moves() > 0 {
                        slides += 1;
                    }
                } else {
                    assert_same_tables(&before, &a);
                }
            } else {
                let k = rng.below(live.len() as u64) as usize;
                let (i, pages) = live.swap_remove(k);
                a.free(i, &pages).unwrap();
            }
            if lazy && rng.chance(0.1) {
                a.flush(rng.chance(0.3));
            }
            a.check_invariants()
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
        assert!(
            slides > 10,
            "the trace must slide the middle band ({slides})"
        );
    }
}

/// Lazy: a slide that moves pages waits on the forward in flight (it may still read the
/// vacated pages or write the moved ones), and releases the middle band's pending pages.
#[test]
fn a_lazy_slide_waits_on_the_forward_in_flight() {
    let mut a = three(true);
    let m = alloc(&mut a, MID, 4); // pages 14..18
    a.set_latest_token(Some(7));
    a.set_inflight_writes(MID, 7, &m[..1]).unwrap();
    a.free(MID, &m[3..]).unwrap(); // a hole at the top (page 17)
                                   // Up to byte 2256 (47 pages of 48 B): the middle band's base must reach page 15; its
                                   // page 14 moves into the hole, after the forward that writes it has finished.
    alloc(&mut a, UP, 43);
    let p = &a.plan().pools[MID];
    assert_eq!((p.src.clone(), p.dst.clone()), (vec![14], vec![17]));
    assert_eq!(a.plan().wait_tokens, vec![7]);
    assert_eq!(a.latest_token(), None);
    assert_eq!(a.pool(MID).num_holes(), 0, "packed while sliding");
    assert_eq!(band(&a, MID), (15 * 160, 18 * 160));
    // A slide that moves nothing (the page left behind was a hole) waits on nothing.
    a.set_latest_token(Some(8));
    a.free(MID, &m[1..2]).unwrap(); // page 15: a hole at the bottom now
    alloc(&mut a, UP, 4); // to byte 2448: base to page 16
    assert_eq!(a.plan().num_moves(), 0);
    assert!(a.plan().wait_tokens.is_empty());
    assert_eq!(a.latest_token(), Some(8));
    assert_eq!(band(&a, MID), (16 * 160, 18 * 160));
}

/// The reference's later layout: Mamba at the up end, SWA floating, full attention at the
/// down end. Joint allocations may slide the SWA band; the capacity stays exact.
#[test]
fn swa_as_the_middle_band() {
    for lazy in [false, true] {
        let (full, swa, mamba) = (0, 1, 2);
        let mut a = arena(
            40 * 128 + 40 * 64 + 10 * 320,
            vec![
                spec("full", 128, 1, Direction::Down, None),
                spec("swa", 64, 1, Direction::Middle, Some(full)),
                spec("mamba", 320, 1, Direction::Up, None),
            ],
            lazy,
        );
        let mut rng = Rng(0x5EED);
        let mut reqs: Vec<Vec<i64>> = Vec::new();
        let mut states: Vec<Vec<i64>> = Vec::new();
        let (mut ok_n, mut no_n) = (0, 0);
        for step in 0..2000 {
            match rng.below(6) {
                0..=2 => {
                    let n = 1 + rng.below(5) as usize;
                    let j = a.joint_schedulable_pages(full, swa) as usize;
                    let before = a.clone();
                    let ok = a.swa_alloc(full, swa, n).unwrap();
                    assert_eq!(ok, n <= j, "step {step}");
                    if ok {
                        reqs.push(a.plan().pages.clone());
                        ok_n += 1;
                    } else {
                        assert_same_tables(&before, &a);
                        no_n += 1;
                    }
                }
                3 if !reqs.is_empty() => {
                    let k = rng.below(reqs.len() as u64) as usize;
                    let r = reqs.swap_remove(k);
                    a.swa_free(full, swa, &r).unwrap();
                }
                4 => {
                    if a.alloc(mamba, 1).unwrap() {
                        states.push(a.plan().pages.clone());
                    }
                }
                _ if !states.is_empty() => {
                    let k = rng.below(states.len() as u64) as usize;
                    let s = states.swap_remove(k);
                    a.free(mamba, &s).unwrap();
                }
                _ => {
                    if let Some(r) = reqs.first() {
                        a.swa_free_nonowner(full, swa, &r[..1]).unwrap();
                    }
                }
            }
            a.check_invariants()
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
        assert!(ok_n > 100 && no_n > 10, "both outcomes ({ok_n}/{no_n})");
    }
}
