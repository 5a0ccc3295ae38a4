//! Scenario tests of the hybrid composites' core operations (API.md §5): the SWA pair's
//! joint allocation, free and window free, the joint capacity (reference-design §6), the
//! non-owner table sized by the owner's id space (§12 bug 1), the reference's SWA scenarios
//! and randomized trace (§10), and the Mamba slot translation and shortage report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use ukv_core::{Arena, ArenaConfig, Direction, PoolSpec, UkvError, TOMBSTONE};

mod common;
use common::{assert_same_tables, spec, Rng};

const FULL: usize = 0;
const SWA: usize = 1;
/// MHA rows of the reference fixtures: H = 2, D = 4, fp16, K and V: 32 B per layer.
const LAYER: u64 = 32;

fn arena(total: u64, pools: Vec<PoolSpec>, lazy: bool) -> Arena {
    let mut cfg = ArenaConfig::new(total, pools);
    cfg.lazy = lazy;
    Arena::new(cfg).unwrap()
}

/// The reference's default SWA build: full up (L = 4), swa down (L = 2), `nf` full and
/// `ns` swa entries of bytes, page size `ps`.
fn swa_pair(nf: u64, ns: u64, ps: u64, lazy: bool) -> Arena {
    let (ef, es) = (4 * LAYER, 2 * LAYER);
    arena(
        (nf * ef + ns * es) * ps,
        vec![
            spec("full", ef, ps, Direction::Up, None),
            spec("swa", es, ps, Direction::Down, Some(FULL)),
        ],
        lazy,
    )
}

fn phys(a: &Arena, i: usize, v: i64) -> i64 {
    a.pool(i).v2p()[v as usize]
}

fn swa_alloc(a: &mut Arena, n: usize) -> Vec<i64> {
    assert!(
        a.swa_alloc(FULL, SWA, n).unwrap(),
        "swa_alloc({n}) should fit"
    );
    a.check_invariants().unwrap();
    a.plan().pages.clone()
}

fn is_err_kind(e: &UkvError, pool: &str, double: bool) -> bool {
    match e {
        UkvError::DoubleFree { pool: p, .. } => double && p == pool,
        UkvError::InvalidId { pool: p, .. } => !double && p == pool,
        _ => false,
    }
}

// ----- SWA: the reference's scenarios (§10, TestUnifiedSWATokenToKVPoolAllocator) -------

#[test]
fn swa_alloc_binds_both_sides_in_one_plan() {
    let mut a = swa_pair(32, 16, 1, false);
    let v = swa_alloc(&mut a, 3);
    assert_eq!(v, vec![1, 2, 3]);
    for &x in &v {
        assert!(phys(&a, FULL, x) > 0 && phys(&a, SWA, x) > 0);
    }
    assert!(a.pool(FULL).free_ids().all(|x| !v.contains(&x)));
    assert_eq!(
        a.pool(SWA).free_ids().count(),
        0,
        "the swa side mints no ids"
    );
    // One plan: both sides' rows, the owner's tokens.
    let plan = a.plan();
    assert_eq!(plan.tokens, v);
    assert_eq!(plan.pools[FULL].v2p_rows, v);
    assert_eq!(plan.pools[SWA].v2p_rows, v);
}

#[test]
fn swa_free_releases_both_sides() {
    let mut a = swa_pair(32, 16, 1, false);
    let v = swa_alloc(&mut a, 3);
    a.swa_free(FULL, SWA, &v).unwrap();
    a.check_invariants().unwrap();
    for &x in &v {
        assert_eq!(
            (phys(&a, FULL, x), phys(&a, SWA, x)),
            (TOMBSTONE, TOMBSTONE)
        );
    }
    let free: Vec<i64> = a.pool(FULL).free_ids().collect();
    assert_eq!(
        &free[free.len() - 3..],
        &v[..],
        "ids back at the end of the free list"
    );
}

#[test]
fn free_swa_keeps_the_id_live_until_the_composite_free() {
    let mut a = swa_pair(32, 16, 1, false);
    let v = swa_alloc(&mut a, 3);
    a.swa_free_nonowner(FULL, SWA, &v[1..2]).unwrap();
    a.check_invariants().unwrap();
    assert!(phys(&a, FULL, v[1]) > 0);
    assert_eq!(phys(&a, SWA, v[1]), TOMBSTONE);
    assert!(a.pool(FULL).free_ids().all(|x| x != v[1]));
    // Again: already released on the swa side, skipped (not an error, nothing changes).
    let before = a.clone();
    a.swa_free_nonowner(FULL, SWA, &v[1..2]).unwrap();
    assert_same_tables(&before, &a);
    assert_eq!(a.plan().num_moves(), 0);
    // The composite free releases what is left and recycles the id.
    a.swa_free(FULL, SWA, &v[1..2]).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.pool(FULL).free_ids().last(), Some(v[1]));
}

#[test]
fn window_free_compacts_only_the_swa_side() {
    let mut a = swa_pair(32, 16, 1, false);
    let (x, y, z) = (
        swa_alloc(&mut a, 1)[0],
        swa_alloc(&mut a, 1)[0],
        swa_alloc(&mut a, 1)[0],
    );
    let (full_z, swa_y) = (phys(&a, FULL, z), phys(&a, SWA, y));
    a.swa_free_nonowner(FULL, SWA, &[y]).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(phys(&a, FULL, z), full_z, "full side unchanged");
    // swa grows down: z sat at the band's lowest page and moves into y's old page.
    assert_eq!(phys(&a, SWA, z), swa_y);
    assert_eq!(a.plan().pools[SWA].num_moves(), 1);
    assert_eq!(a.plan().pools[FULL].num_moves(), 0);
    assert!(phys(&a, SWA, x) > 0);
}

#[test]
fn window_free_rejects_ids_the_owner_does_not_hold() {
    let mut a = swa_pair(32, 16, 1, false);
    let v = swa_alloc(&mut a, 2);
    let before = a.clone();
    // Never allocated on the owner: an error naming the owner, nothing changed.
    let e = a.swa_free_nonowner(FULL, SWA, &[v[0], 9]).unwrap_err();
    assert!(is_err_kind(&e, "full", true), "{e}");
    let e = a
        .swa_free_nonowner(FULL, SWA, &[v[0], 1 << 20])
        .unwrap_err();
    assert!(is_err_kind(&e, "full", false), "{e}");
    let e = a.swa_free_nonowner(FULL, SWA, &[-2]).unwrap_err();
    assert!(is_err_kind(&e, "full", false), "{e}");
    assert_same_tables(&before, &a);
    // A pair that is not a SWA pair.
    assert!(matches!(
        a.swa_alloc(SWA, FULL, 1),
        Err(UkvError::Argument { arg: "swa", .. })
    ));
}

#[test]
fn window_free_skips_what_is_not_bound_instead_of_refusing_it() {
    let mut a = swa_pair(32, 16, 2, false);
    let v = swa_alloc(&mut a, 5); // five pages, tokens 2 * page .. 2 * page + 1
    let tok = |i: usize| 2 * v[i];
    a.swa_free(FULL, SWA, &[tok(0)]).unwrap(); // freed with its full side
    a.swa_free_nonowner(FULL, SWA, &[tok(1)]).unwrap(); // window already released
    a.check_invariants().unwrap();
    let before = a.clone();
    // Nothing left to release, and ids outside the id space: skipped, nothing changes.
    let dead = [tok(0), tok(1) + 1, -3, 1 << 40, 0];
    a.swa_free_window(FULL, SWA, &dead).unwrap();
    assert_same_tables(&before, &a);
    assert_eq!(a.plan().num_moves(), 0);
    // A mix with repeats: only the still-bound pages go, each once; full keeps its ids.
    let mixed = [tok(2), tok(0), tok(2) + 1, tok(3), tok(1), tok(2), -1];
    a.swa_free_window(FULL, SWA, &mixed).unwrap();
    a.check_invariants().unwrap();
    for &x in &v[1..4] {
        assert_eq!(phys(&a, SWA, x), TOMBSTONE, "page {x}");
        assert!(phys(&a, FULL, x) > 0, "page {x} stays live on full");
    }
    assert!(phys(&a, SWA, v[4]) > 0);
    assert_eq!(a.pool(SWA).live_pages(), 1);
    // The refusing variant refuses what this one skips.
    assert!(a.swa_free_nonowner(FULL, SWA, &[tok(0)]).is_err());
    // A pair that is not a SWA pair is refused.
    assert!(matches!(
        a.swa_free_window(SWA, FULL, &[tok(4)]),
        Err(UkvError::Argument { .. })
    ));
}

#[test]
fn window_free_skips_ids_queued_in_the_owners_free_group() {
    let mut a = swa_pair(32, 16, 1, false);
    let v = swa_alloc(&mut a, 4);
    a.swa_free_group_begin(FULL, SWA).unwrap();
    a.swa_free(FULL, SWA, &v[..2]).unwrap(); // queued: both sides release at the end
    a.swa_free_window(FULL, SWA, &v).unwrap(); // v[0], v[1] skipped; v[2], v[3] queued
    a.swa_free_window(FULL, SWA, &v[2..]).unwrap(); // queued already: skipped
    assert!(phys(&a, SWA, v[0]) > 0, "nothing released inside the group");
    a.swa_free_group_end(FULL, SWA).unwrap();
    a.check_invariants().unwrap();
    for &x in &v {
        assert_eq!(phys(&a, SWA, x), TOMBSTONE);
    }
    assert_eq!(phys(&a, FULL, v[0]), TOMBSTONE);
    assert!(phys(&a, FULL, v[2]) > 0);
    assert_eq!(a.pool(FULL).live_pages(), 2);
    assert_eq!(a.pool(SWA).live_pages(), 0);
}

#[test]
fn owner_free_and_clear_release_the_swa_bindings() {
    let mut a = swa_pair(32, 16, 1, false);
    let v = swa_alloc(&mut a, 4);
    // A plain free on the owner takes the swa binding with it, in the same plan.
    a.free(FULL, &v[..1]).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(phys(&a, SWA, v[0]), TOMBSTONE);
    assert_eq!(a.plan().pools[SWA].v2p_rows, vec![v[0]]);
    // An owner free group: both sides release when it closes.
    a.free_group_begin(FULL).unwrap();
    a.swa_free(FULL, SWA, &v[1..2]).unwrap();
    assert!(phys(&a, SWA, v[1]) > 0, "queued, not released yet");
    a.free_group_end(FULL).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(phys(&a, SWA, v[1]), TOMBSTONE);
    // Clearing the owner clears the swa side too (both tables rewritten whole).
    a.clear(FULL).unwrap();
    a.check_invariants().unwrap();
    assert!(a.plan().pools[FULL].reset && a.plan().pools[SWA].reset);
    assert_eq!((a.pool(SWA).live_pages(), a.pool(SWA).span_pages()), (0, 0));
    // Binding an id the owner does not hold is refused.
    assert!(matches!(
        a.alloc_with_virtual(SWA, &[5]),
        Err(UkvError::Argument { .. })
    ));
}

// ----- SWA: joint capacity (§6) -----------------------------------------------------------

#[test]
fn joint_capacity_is_exact_and_alloc_is_all_or_nothing() {
    let mut a = swa_pair(8, 8, 1, false);
    let j0 = a.joint_available_pages(FULL, SWA);
    swa_alloc(&mut a, 3);
    let j = a.joint_available_pages(FULL, SWA);
    assert!(j < j0 - 2, "both sides' bytes count: {j0} -> {j}");
    assert_eq!(j, a.joint_schedulable_pages(FULL, SWA), "eager: one number");
    assert!(j < a.available_pages(FULL).min(a.available_pages(SWA)));
    // One more than the joint capacity: false, nothing changed, although the owner alone
    // could take it.
    assert!(a.available_pages(FULL) > j);
    let before = a.clone();
    assert!(!a.swa_alloc(FULL, SWA, j as usize + 1).unwrap());
    assert_same_tables(&before, &a);
    assert!(a.plan().pages.is_empty());
    swa_alloc(&mut a, j as usize);
    assert_eq!(a.joint_available_pages(FULL, SWA), 0);
}

/// Eager formula of §6 (the reference's #29678 pre-check): with no holes, the joint value
/// is `min(gap // (epp_f + epp_s), R_f, R_s)`.
#[test]
fn joint_capacity_eager_formula() {
    for (nf, ns, ps) in [(10, 10, 1), (8, 8, 8), (16, 5, 4)] {
        let mut a = swa_pair(nf, ns, ps, false);
        swa_alloc(&mut a, 2);
        let (f, s) = (a.pool(FULL).geometry(), a.pool(SWA).geometry());
        let gap = a.gap_bytes(FULL);
        let room = |i: usize| {
            let g = a.pool(i).geometry();
            g.num_pages - g.min_page_index - a.pool(i).span_pages()
        };
        let want = ((gap / (f.page_bytes + s.page_bytes)) as i64)
            .min(room(FULL))
            .min(room(SWA));
        assert_eq!(
            a.joint_available_pages(FULL, SWA),
            want,
            "{nf}/{ns} ps {ps}"
        );
    }
}

/// Lazy: the three phases (both drain holes, the side with fewer holes extends while the
/// other drains, both extend), checked allocation by allocation: up to the joint available
/// value nothing is flushed, up to the schedulable value a flush makes room, one more fails.
#[test]
fn joint_capacity_lazy_three_phases() {
    let mut a = swa_pair(12, 12, 1, true);
    let v = swa_alloc(&mut a, 8);
    // Holes: 3 on the full side, 1 on the swa side (plus ids freed on both).
    a.free(FULL, &v[..1]).unwrap(); // both sides
    a.swa_free_nonowner(FULL, SWA, &v[1..3]).unwrap();
    a.free(FULL, &v[3..5]).unwrap();
    a.check_invariants().unwrap();
    assert_eq!((a.pool(FULL).num_holes(), a.pool(SWA).num_holes()), (3, 5));
    let now = a.joint_available_pages(FULL, SWA);
    let sched = a.joint_schedulable_pages(FULL, SWA);
    // By hand: epp 128 (full) + 64 (swa); the gap between the bands' frontiers.
    let gap = a.gap_bytes(FULL) as i64;
    let k1 = 3; // both drain
    let k2 = 2.min(gap / 128); // full extends while swa drains its 2 extra holes
    let k3 = (gap - k2 * 128) / (128 + 64);
    assert_eq!((now, k1, k2, k3), (7, 3, 2, 2));
    // Here every hole is usable in place: packing both bands gives the same 7.
    assert_eq!(sched, now);
    // Close the gap with the owner alone: now only holes help, and the swa side's surplus
    // holes are usable only after a flush turns them into gap.
    let rest = a.available_pages(FULL) - a.pool(FULL).num_holes() as i64;
    a.flush_pool(FULL, true).unwrap();
    assert!(a.alloc(FULL, rest as usize + 3).unwrap());
    a.swa_free_nonowner(FULL, SWA, &v[5..7]).unwrap();
    assert_eq!((a.pool(FULL).num_holes(), a.pool(SWA).num_holes()), (0, 7));
    assert!(a.gap_bytes(FULL) < 128);
    let now = a.joint_available_pages(FULL, SWA);
    let sched = a.joint_schedulable_pages(FULL, SWA);
    assert_eq!(now, 0, "the full side cannot extend, and has no holes");
    assert_eq!(sched, (a.gap_bytes(FULL) as i64 + 7 * 64) / (128 + 64));
    assert!(sched > now);
    let flushes = |a: &Arena| a.pool(FULL).stats().flushes + a.pool(SWA).stats().flushes;
    for n in 0..=sched + 1 {
        let mut b = a.clone();
        let ok = b.swa_alloc(FULL, SWA, n as usize).unwrap();
        b.check_invariants().unwrap();
        assert_eq!(ok, n <= sched, "n = {n}");
        assert_eq!(
            flushes(&b) > flushes(&a),
            ok && n > now,
            "n = {n}: flushed?"
        );
        if !ok {
            assert_same_tables(&a, &b);
        }
    }
}

/// §12 bug 11: per-side checks say 7 and 7, the joint check 3; a request of 7 must not be
/// admitted (the reference stopped evicting early on the per-side numbers).
#[test]
fn joint_capacity_is_below_each_sides_own() {
    let e = 64;
    let mut a = arena(
        10 * e,
        vec![
            spec("full", e, 1, Direction::Up, None),
            spec("swa", e, 1, Direction::Down, Some(FULL)),
        ],
        false,
    );
    swa_alloc(&mut a, 1);
    assert_eq!((a.available_pages(FULL), a.available_pages(SWA)), (7, 7));
    assert_eq!(a.joint_available_pages(FULL, SWA), 3);
    assert!(!a.swa_alloc(FULL, SWA, 4).unwrap());
    assert!(a.swa_alloc(FULL, SWA, 3).unwrap());
}

#[test]
fn joint_extend_and_decode_bind_new_pages_on_both_sides() {
    let mut a = swa_pair(16, 16, 4, false);
    assert!(a
        .swa_alloc_extend(FULL, SWA, &[0], &[10], Some(&[-1]))
        .unwrap());
    let pages = a.plan().pages.clone();
    assert_eq!(pages.len(), 3);
    let toks = a.plan().tokens.clone();
    assert_eq!(toks.len(), 10);
    for &v in &pages {
        assert!(phys(&a, FULL, v) > 0 && phys(&a, SWA, v) > 0);
    }
    // Decode within the last page: nothing new on either side.
    let last = *toks.last().unwrap();
    let before = a.clone();
    assert!(a.swa_alloc_decode(FULL, SWA, &[11], Some(&[last])).unwrap());
    assert_eq!(a.plan().tokens, vec![last + 1]);
    assert!(a.plan().pages.is_empty());
    assert_same_tables(&before, &a);
    // Decode starting a page: one new page, bound on both sides.
    assert!(a
        .swa_alloc_decode(FULL, SWA, &[13], Some(&[last + 2]))
        .unwrap());
    let v = a.plan().pages[0];
    assert_eq!(a.plan().tokens, vec![v * 4]);
    assert!(phys(&a, SWA, v) > 0);
    a.check_invariants().unwrap();
}

// ----- SWA: the non-owner table (§12 bug 1) -------------------------------------------------

/// Full with 1 layer next to swa with 5: the owner mints far more ids than the swa side has
/// pages. The reference sized the swa table by its own pages and failed after 24 alloc/free
/// cycles (index 29 out of bounds for size 29); ukv sizes it by the owner's id space.
#[test]
fn swa_table_covers_every_owner_id_when_its_entry_is_larger() {
    let (ef, es) = (LAYER, 5 * LAYER);
    let mut a = arena(
        28 * es,
        vec![
            spec("full", ef, 1, Direction::Up, None),
            spec("swa", es, 1, Direction::Down, Some(FULL)),
        ],
        false,
    );
    let (f, s) = (
        a.pool(FULL).geometry().clone(),
        a.pool(SWA).geometry().clone(),
    );
    assert_eq!((f.num_pages, s.num_pages), (140, 28));
    assert_eq!(a.pool(SWA).v2p().len() as i64, f.num_pages + 1);
    let mut seen = BTreeSet::new();
    for _ in 0..300 {
        let v = swa_alloc(&mut a, 1)[0];
        seen.insert(v);
        let p = phys(&a, SWA, v);
        assert!(p >= s.min_page_index && p < s.num_pages);
        let mut out = Vec::new();
        a.translate_slots(SWA, &[v, TOMBSTONE], &mut out).unwrap();
        assert_eq!(out, vec![p, TOMBSTONE]);
        a.swa_free(FULL, SWA, &[v]).unwrap();
        a.check_invariants().unwrap();
    }
    assert!(
        *seen.last().unwrap() >= s.num_pages,
        "ids beyond the swa side's own pages"
    );
    assert_eq!(
        seen.len() as i64,
        f.num_pages - f.min_page_index,
        "every owner id used"
    );
}

// ----- SWA: the reference's randomized trace ------------------------------------------------

/// `swa_randomized_alloc_free_freeswa` (seed 0xBADBEE, 48/24 entries, both L = 3, 400
/// ops): joint alloc of 1..4 with p 0.5, composite free with 0.3, window free of a whole
/// live batch with 0.2; per-side invariants and slot conservation after every op, then a
/// drain to zero. Run eager and lazy (with flushes), at page sizes 1 and 4.
#[test]
fn swa_randomized_alloc_free_freeswa() {
    for (lazy, ps) in [(false, 1), (true, 1), (false, 4), (true, 4)] {
        let e = 3 * LAYER;
        let mut a = arena(
            (48 * e + 24 * e) * ps,
            vec![
                spec("full", e, ps, Direction::Up, None),
                spec("swa", e, ps, Direction::Down, Some(FULL)),
            ],
            lazy,
        );
        let mut rng = Rng(0xBADBEE);
        // (tokens, still bound on the swa side)
        let mut live: Vec<(Vec<i64>, bool)> = Vec::new();
        let (mut fits, mut full) = (0, 0);
        for _ in 0..400 {
            let r = rng.next() % 10;
            if r < 5 || live.is_empty() {
                let n = (1 + rng.below(4)) as i64 * ps as i64;
                let j = a.joint_schedulable_pages(FULL, SWA);
                let ok = a.swa_alloc_tokens(FULL, SWA, n).unwrap();
                assert_eq!(ok, n / ps as i64 <= j, "the contract, both ways");
                if ok {
                    live.push((a.plan().tokens.clone(), true));
                    fits += 1;
                } else {
                    full += 1;
                }
            } else if r < 8 {
                let k = rng.below(live.len() as u64) as usize;
                let (toks, _) = live.swap_remove(k);
                a.swa_free(FULL, SWA, &toks).unwrap();
            } else {
                let k = rng.below(live.len() as u64) as usize;
                a.swa_free_nonowner(FULL, SWA, &live[k].0).unwrap();
                live[k].1 = false;
            }
            if lazy && rng.chance(0.2) {
                a.flush(rng.chance(0.5));
            }
            a.check_invariants().unwrap();
            // Slot conservation: each side holds exactly the pages the trace still holds.
            let pages = |swa_only: bool| -> usize {
                live.iter()
                    .filter(|(_, bound)| !swa_only || *bound)
                    .map(|(t, _)| t.len() / ps as usize)
                    .sum()
            };
            assert_eq!(a.pool(FULL).live_pages(), pages(false));
            assert_eq!(a.pool(SWA).live_pages(), pages(true));
        }
        assert!(
            fits > 50 && full > 5,
            "the trace must hit both outcomes ({fits}/{full})"
        );
        for (toks, _) in live.drain(..) {
            a.swa_free(FULL, SWA, &toks).unwrap();
        }
        a.flush(true);
        for i in [FULL, SWA] {
            assert_eq!((a.pool(i).live_pages(), a.pool(i).span_pages()), (0, 0));
        }
        a.check_invariants().unwrap();
    }
}

// ----- Mamba --------------------------------------------------------------------------------

/// The worked geometry of §2.7: full up (64 B, 104 pages, first 3) and mamba down (160 B,
/// 41 pages, first 1).
fn full_mamba() -> Arena {
    arena(
        64 * 64 + 16 * 160,
        vec![
            spec("full", 64, 1, Direction::Up, None),
            spec("mamba", 160, 1, Direction::Down, None),
        ],
        false,
    )
}

#[test]
fn translate_slots_keeps_padding_and_unbound_slots_at_minus_one() {
    let mut a = full_mamba();
    assert!(a.alloc(1, 3).unwrap());
    let v = a.plan().pages.clone();
    a.free(1, &v[1..2]).unwrap();
    let mut out = Vec::new();
    a.translate_slots(1, &[v[0], -1, v[1], v[2], -1], &mut out)
        .unwrap();
    assert_eq!(
        out,
        vec![phys(&a, 1, v[0]), -1, -1, phys(&a, 1, v[2]), -1],
        "padding and freed slots stay -1, never the sink"
    );
    for bad in [-2, 41] {
        let e = a.translate_slots(1, &[v[0], bad], &mut out).unwrap_err();
        assert!(is_err_kind(&e, "mamba", false), "{e}");
    }
}

/// The shortage report, by hand: full fills its side, then k more mamba states need the
/// full band's frontier `160 * (41 - k)` bytes down.
#[test]
fn shortage_report_says_how_many_full_pages_to_release() {
    let mut a = full_mamba();
    let n = a.available_pages(0) as usize;
    assert!(a.alloc(0, n).unwrap());
    let v = a.plan().pages.clone();
    // Full ends at page 3 + 99 = 102 (byte 6528); the mamba band starts at page 41.
    assert_eq!(a.pool(0).watermark(), 102);
    assert_eq!(a.available_pages(1), 0);
    for k in 1..=4i64 {
        // k states need mamba pages 41-k..41, bytes from 160 * (41 - k); full must end at
        // or below that: page floor(160 * (41 - k) / 64).
        let r = 102 - (160 * (41 - k)) / 64;
        assert_eq!(a.shortage_pages(1, k, 0).unwrap(), Some(r), "k = {k}");
        let mut b = a.clone();
        b.free(0, &v[..r as usize]).unwrap();
        assert!(b.alloc(1, k as usize).unwrap());
        let mut b = a.clone();
        b.free(0, &v[..r as usize - 1]).unwrap();
        assert!(!b.alloc(1, k as usize).unwrap());
    }
    assert_eq!(a.shortage_pages(1, 0, 0).unwrap(), Some(0));
    // More states than the mamba id space: no number of full pages helps.
    assert_eq!(a.shortage_pages(1, 41, 0).unwrap(), None);
    // The converse: mamba holds 30 states; 20 more full pages need 20 * 64 bytes of them.
    let mut b = full_mamba();
    assert!(b.alloc(1, 30).unwrap());
    let need = b.available_pages(0) + 20;
    let r = b.shortage_pages(0, need, 1).unwrap().unwrap();
    assert_eq!(
        r,
        (20 * 64i64).div_euclid(160) + i64::from((20 * 64) % 160 != 0)
    );
    assert!(matches!(
        b.shortage_pages(0, 1, 0),
        Err(UkvError::Argument { .. })
    ));
}

// ----- review round 3, C1: free_swa inside a free group ------------------------------------

/// Closing the pair's groups is one operation with one plan: the SWA side's compaction moves
/// (from `free_swa` queued in the group) are in the plan together with the full side's.
#[test]
fn swa_free_group_end_keeps_both_sides_moves_in_one_plan() {
    for lazy in [false, true] {
        let mut a = swa_pair(32, 16, 1, lazy);
        let ids = swa_alloc(&mut a, 8);
        let expect = {
            let mut b = swa_pair(32, 16, 1, lazy);
            swa_alloc(&mut b, 8);
            b.swa_free_nonowner(FULL, SWA, &ids[..4]).unwrap();
            b.plan().pools[SWA].clone()
        };
        a.swa_free_group_begin(FULL, SWA).unwrap();
        a.swa_free_nonowner(FULL, SWA, &ids[..4]).unwrap();
        assert!(
            a.plan().pools[SWA].src.is_empty(),
            "queued in the group, not released"
        );
        a.swa_free_group_end(FULL, SWA).unwrap();
        assert_eq!(a.plan().pools[SWA].src, expect.src, "lazy={lazy}");
        assert_eq!(a.plan().pools[SWA].v2p_rows, expect.v2p_rows, "lazy={lazy}");
        for &v in &ids[..4] {
            assert_eq!(phys(&a, SWA, v), TOMBSTONE);
            assert!(phys(&a, FULL, v) > 0, "the ids stay live on full");
        }
        a.check_invariants().unwrap();
    }
}

/// A group freeing full ids and window ids together releases each SWA page once.
#[test]
fn swa_free_group_end_releases_a_page_queued_on_both_sides_once() {
    let mut a = swa_pair(32, 16, 1, false);
    let ids = swa_alloc(&mut a, 8);
    a.swa_free_group_begin(FULL, SWA).unwrap();
    a.swa_free_nonowner(FULL, SWA, &ids[..4]).unwrap();
    a.swa_free(FULL, SWA, &ids[2..6]).unwrap();
    a.swa_free_group_end(FULL, SWA).unwrap();
    a.check_invariants().unwrap();
    for &v in &ids[..6] {
        assert_eq!(phys(&a, SWA, v), TOMBSTONE);
    }
    for &v in &ids[..2] {
        assert!(phys(&a, FULL, v) > 0);
    }
    for &v in &ids[2..6] {
        assert_eq!(phys(&a, FULL, v), TOMBSTONE);
    }
    assert_eq!(a.pool(SWA).live_pages(), 2);
}

/// Both sides are checked before either changes: a group open on one side only is refused
/// by both the pair's begin and end, and nothing changes.
#[test]
fn swa_group_boundaries_check_both_sides_first() {
    let mut a = swa_pair(32, 16, 1, false);
    let ids = swa_alloc(&mut a, 8);
    a.free_group_begin(SWA).unwrap();
    assert!(a.swa_free_group_begin(FULL, SWA).is_err());
    assert!(!a.in_free_group(FULL), "the full side must not have opened");
    a.swa_free_nonowner(FULL, SWA, &ids[..4]).unwrap();
    assert!(a.swa_free_group_end(FULL, SWA).is_err());
    assert!(a.in_free_group(SWA), "the SWA group must still be open");
    for &v in &ids[..4] {
        assert!(phys(&a, SWA, v) > 0, "nothing released by the refused call");
    }
    a.check_invariants().unwrap();
}
