//! Page ownership moving between ids on the SWA side (`Arena::transfer`): the tables, the
//! plan rows, unchanged counts, refusals that change nothing, and what compaction and an
//! in-flight forward see afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ukv_core::{Arena, ArenaConfig, Direction, UkvError, TOMBSTONE};

mod common;
use common::{assert_same_tables, spec, Rng};

const FULL: usize = 0;
const SWA: usize = 1;

fn arena(lazy: bool) -> Arena {
    let mut cfg = ArenaConfig::new(
        64 * 64 + 16 * 64,
        vec![
            spec("full", 64, 1, Direction::Up, None),
            spec("swa", 64, 1, Direction::Down, Some(FULL)),
        ],
    );
    cfg.lazy = lazy;
    Arena::new(cfg).unwrap()
}

/// Six full ids, the first `bound` of them bound on the SWA side too.
fn setup(lazy: bool, bound: usize) -> (Arena, Vec<i64>) {
    let mut a = arena(lazy);
    assert!(a.alloc(FULL, 6).unwrap());
    let ids = a.plan().pages.clone();
    assert!(a.alloc_with_virtual(SWA, &ids[..bound]).unwrap());
    (a, ids)
}

fn argument(e: UkvError) -> (String, String) {
    match e {
        UkvError::Argument { arg, value, .. } => (arg.to_string(), value),
        other => panic!("expected an argument error, got {other:?}"),
    }
}

#[test]
fn transfer_hands_the_physical_page_over_and_changes_no_count() {
    for lazy in [false, true] {
        let (mut a, ids) = setup(lazy, 3);
        let before = a.clone();
        let pages: Vec<i64> = ids[..2]
            .iter()
            .map(|&v| a.pool(SWA).v2p()[v as usize])
            .collect();
        a.transfer(SWA, &ids[..2], &ids[4..6]).unwrap();
        let s = a.pool(SWA);
        for k in 0..2 {
            assert_eq!(s.v2p()[ids[k] as usize], TOMBSTONE);
            assert_eq!(s.v2p()[ids[4 + k] as usize], pages[k]);
            assert_eq!(s.p2v()[pages[k] as usize], ids[4 + k]);
        }
        let b = before.pool(SWA);
        assert_eq!(s.v2p()[ids[2] as usize], b.v2p()[ids[2] as usize]);
        assert_eq!(
            (s.live_pages(), s.watermark(), s.num_holes(), s.stats()),
            (b.live_pages(), b.watermark(), b.num_holes(), b.stats())
        );
        assert_eq!(a.pool(FULL).v2p(), before.pool(FULL).v2p());
        assert_eq!(a.available_pages(SWA), before.available_pages(SWA));
        let plan = &a.plan().pools[SWA];
        assert_eq!(plan.num_moves(), 0);
        assert!(a.plan().pages.is_empty() && a.plan().tokens.is_empty());
        // The rows the device mirror needs, and nothing on the owner.
        let mut mirror = (b.v2p().to_vec(), b.p2v().to_vec());
        for (&r, &v) in plan.v2p_rows.iter().zip(&plan.v2p_vals) {
            mirror.0[r as usize] = v;
        }
        for (&r, &v) in plan.p2v_rows.iter().zip(&plan.p2v_vals) {
            mirror.1[r as usize] = v;
        }
        assert_eq!((&mirror.0[..], &mirror.1[..]), (s.v2p(), s.p2v()));
        assert!(a.plan().pools[FULL].v2p_rows.is_empty());
        a.check_invariants().unwrap();
    }
}

#[test]
fn refusals_name_the_bad_page_and_change_nothing() {
    let (mut a, ids) = setup(false, 3);
    // A plan the caller may not have run yet stays in place.
    let snapshot = a.clone();
    let cases: Vec<(Vec<i64>, Vec<i64>, &str, i64)> = vec![
        (vec![ids[3]], vec![ids[4]], "from", ids[3]), // from has no swa page
        (vec![ids[0], ids[0]], vec![ids[4], ids[5]], "from", ids[0]), // repeated
        (vec![ids[0], ids[1]], vec![ids[4], ids[4]], "to", ids[4]), // repeated
        (vec![ids[0]], vec![ids[1]], "to", ids[1]),   // to already bound
        (vec![ids[0]], vec![ids[0]], "to", ids[0]),   // A == B
        (vec![ids[0], ids[1]], vec![ids[4], ids[0]], "to", ids[0]), // overlap across the lists
        (vec![ids[0]], vec![40], "to", 40),           // not live on the owner
        (vec![ids[0]], vec![ids[4], ids[5]], "to", 2), // lengths differ
    ];
    for (from, to, arg, value) in cases {
        let e = a.transfer(SWA, &from, &to).unwrap_err();
        assert_eq!(
            argument(e),
            (arg.to_string(), value.to_string()),
            "{from:?} -> {to:?}"
        );
        assert_same_tables(&snapshot, &a);
        assert_eq!(a.plan(), snapshot.plan());
    }
    for bad in [-1, 0, 10_000] {
        let e = a.transfer(SWA, &[ids[0]], &[bad]).unwrap_err();
        assert!(
            matches!(e, UkvError::InvalidId { id, .. } if id == bad),
            "{bad}: {e:?}"
        );
        let e = a.transfer(SWA, &[bad], &[ids[4]]).unwrap_err();
        assert!(
            matches!(e, UkvError::InvalidId { id, .. } if id == bad),
            "{bad}: {e:?}"
        );
        assert_same_tables(&snapshot, &a);
    }
    // The owner side is not a dependent pool; an unknown pool is refused.
    assert_eq!(
        argument(a.transfer(FULL, &[ids[0]], &[ids[4]]).unwrap_err()).0,
        "pool"
    );
    assert_eq!(argument(a.transfer(7, &[], &[]).unwrap_err()).0, "pool");
    // A late failure (the last pair) leaves the earlier pairs untouched too.
    let e = a
        .transfer(SWA, &[ids[0], ids[1], ids[3]], &[ids[4], ids[5], 40])
        .unwrap_err();
    assert_eq!(argument(e), ("from".into(), ids[3].to_string()));
    assert_same_tables(&snapshot, &a);
    a.check_invariants().unwrap();
}

#[test]
fn free_groups_hold_back_pages_being_released() {
    let (mut a, ids) = setup(false, 3);
    a.free_group_begin(SWA).unwrap();
    a.free(SWA, &[ids[0]]).unwrap();
    let snapshot = a.clone();
    let e = a.transfer(SWA, &[ids[0]], &[ids[4]]).unwrap_err();
    assert_eq!(argument(e), ("from".into(), ids[0].to_string()));
    assert_same_tables(&snapshot, &a);
    a.free_group_end(SWA).unwrap();
    a.free_group_begin(FULL).unwrap();
    a.free(FULL, &[ids[5]]).unwrap();
    let snapshot = a.clone();
    let e = a.transfer(SWA, &[ids[1]], &[ids[5]]).unwrap_err();
    assert_eq!(argument(e), ("to".into(), ids[5].to_string()));
    assert_same_tables(&snapshot, &a);
    a.transfer(SWA, &[ids[1]], &[ids[4]]).unwrap();
    a.free_group_end(FULL).unwrap();
    a.check_invariants().unwrap();
}

#[test]
fn freeing_the_new_owner_releases_the_page_and_the_old_id_binds_afresh() {
    for lazy in [false, true] {
        let (mut a, ids) = setup(lazy, 2);
        let live = a.pool(SWA).live_pages();
        a.transfer(SWA, &[ids[0]], &[ids[4]]).unwrap();
        // The old id has no page: binding it again takes a new one.
        assert!(a.alloc_with_virtual(SWA, &[ids[0]]).unwrap());
        assert_eq!(a.pool(SWA).live_pages(), live + 1);
        // Freeing the new owner's full id releases the transferred page with it.
        a.free(FULL, &[ids[4]]).unwrap();
        assert_eq!(a.pool(SWA).live_pages(), live);
        assert_eq!(a.pool(SWA).v2p()[ids[4] as usize], TOMBSTONE);
        a.check_invariants().unwrap();
    }
}

#[test]
fn an_inflight_forward_keeps_the_transferred_page_in_place() {
    // Lazy: free a low page to make a hole, report a forward writing the page to transfer,
    // transfer it, and flush: the page the forward writes must not move.
    let mut a = arena(true);
    assert!(a.alloc(FULL, 6).unwrap());
    let ids = a.plan().pages.clone();
    assert!(a.alloc_with_virtual(SWA, &ids[..4]).unwrap());
    // The SWA side grows down and binds a batch ascending: ids[0] sits lowest, the page a
    // flush moves first into the hole ids[3] leaves at the top.
    let page = a.pool(SWA).v2p()[ids[0] as usize];
    assert_eq!(page, a.pool(SWA).watermark() + 1);
    a.free(SWA, &[ids[3]]).unwrap();
    a.set_latest_token(Some(1));
    a.set_inflight_writes(SWA, 1, &[ids[0]]).unwrap();
    a.transfer(SWA, &[ids[0]], &[ids[5]]).unwrap();
    let mut probe = a.clone();
    probe.flush(false);
    assert_eq!(
        probe.pool(SWA).v2p()[ids[5] as usize],
        page,
        "a written page moved"
    );
    // Retired, the page is free to move.
    a.retire_token(1);
    a.flush(false);
    assert_ne!(a.pool(SWA).v2p()[ids[5] as usize], page);
    a.check_invariants().unwrap();
}

#[test]
fn random_transfers_keep_every_page_with_its_new_owner() {
    // A byte per SWA page stands in for its data: after transfers, frees and flushes every
    // id reads what was written under the id that handed it its page.
    for seed in 0..20u64 {
        let mut rng = Rng(seed);
        let lazy = seed % 2 == 1;
        let mut a = arena(lazy);
        let mut data = vec![0u64; 4096];
        let mut expect: std::collections::HashMap<i64, u64> = Default::default();
        let mut marker = 1u64;
        for _ in 0..200 {
            let full: Vec<i64> = (1..80).filter(|&v| a.is_token_allocated(FULL, v)).collect();
            let bound: Vec<i64> = full
                .iter()
                .copied()
                .filter(|&v| a.is_token_allocated(SWA, v))
                .collect();
            let unbound: Vec<i64> = full
                .iter()
                .copied()
                .filter(|&v| !a.is_token_allocated(SWA, v))
                .collect();
            let op = rng.below(5);
            match op {
                0 => {
                    // (Each call's moves run before the next call replaces the plan.)
                    let ok = a.alloc(FULL, 1 + rng.below(3) as usize).unwrap();
                    run_moves(&a, &mut data);
                    if ok {
                        let ids = a.plan().pages.clone();
                        let ok = a.alloc_with_virtual(SWA, &ids).unwrap();
                        run_moves(&a, &mut data);
                        if ok {
                            for v in ids {
                                let p = a.pool(SWA).v2p()[v as usize];
                                data[p as usize] = marker;
                                expect.insert(v, marker);
                                marker += 1;
                            }
                        }
                    }
                }
                1 if !bound.is_empty() && !unbound.is_empty() => {
                    let n = 1 + rng.below(bound.len().min(unbound.len()) as u64) as usize;
                    let from: Vec<i64> = bound[..n].to_vec();
                    let to: Vec<i64> = unbound[unbound.len() - n..].to_vec();
                    a.transfer(SWA, &from, &to).unwrap();
                    for (f, t) in from.iter().zip(&to) {
                        let m = expect.remove(f).unwrap();
                        expect.insert(*t, m);
                    }
                }
                2 if !full.is_empty() => {
                    let v = full[rng.below(full.len() as u64) as usize];
                    a.free(FULL, &[v]).unwrap();
                    expect.remove(&v);
                }
                3 if !bound.is_empty() => {
                    let v = bound[rng.below(bound.len() as u64) as usize];
                    a.free(SWA, &[v]).unwrap();
                    expect.remove(&v);
                }
                _ => {
                    a.flush(rng.chance(0.5));
                }
            }
            if op != 0 {
                run_moves(&a, &mut data);
            }
            a.check_invariants().unwrap();
            for (&v, &m) in &expect {
                let p = a.pool(SWA).v2p()[v as usize];
                assert_eq!(data[p as usize], m, "seed {seed}: id {v} at page {p}");
            }
        }
    }
}

/// Run the last plan's SWA moves on the stand-in data (sources read before writes), once
/// per plan.
fn run_moves(a: &Arena, data: &mut [u64]) {
    let plan = &a.plan().pools[SWA];
    let vals: Vec<u64> = plan.src.iter().map(|&s| data[s as usize]).collect();
    for (&d, v) in plan.dst.iter().zip(vals) {
        data[d as usize] = v;
    }
}
