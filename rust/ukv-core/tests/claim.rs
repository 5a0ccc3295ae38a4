//! Caller-chosen virtual ids (`Arena::alloc_at`) and handing a page to another id
//! (`Arena::rebind`), checked against the tables, the free queue and the invariants.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ukv_core::{Arena, ArenaConfig, Direction, TOMBSTONE};

mod common;
use common::{spec, Rng};

const FULL: usize = 0;
const SWA: usize = 1;

fn arena(lazy: bool, ps: u64) -> Arena {
    let mut cfg = ArenaConfig::new(
        64 * 64 * ps + 16 * 64 * ps,
        vec![
            spec("full", 64, ps, Direction::Up, None),
            spec("swa", 64, ps, Direction::Down, Some(FULL)),
        ],
    );
    cfg.lazy = lazy;
    Arena::new(cfg).unwrap()
}

fn free_queue(a: &Arena, i: usize) -> Vec<i64> {
    a.pool(i).free_ids().collect()
}

#[test]
fn alloc_at_binds_the_chosen_ids_to_a_fresh_ascending_run() {
    for ps in [1, 4] {
        let mut a = arena(false, ps);
        let wm = a.pool(FULL).watermark();
        let before = free_queue(&a, FULL);
        assert!(a.alloc_at(FULL, &[20, 21, 22, 23]).unwrap());
        assert_eq!(a.plan().pages, vec![20, 21, 22, 23]);
        assert_eq!(a.plan().tokens.len(), 4 * ps as usize);
        for (k, v) in (20..24).enumerate() {
            assert_eq!(a.pool(FULL).v2p()[v as usize], wm + k as i64);
            assert_eq!(a.pool(FULL).p2v()[(wm + k as i64) as usize], v);
        }
        assert_eq!(a.pool(FULL).watermark(), wm + 4);
        // The queue lost exactly those ids and kept its order.
        let want: Vec<i64> = before
            .into_iter()
            .filter(|v| !(20..24).contains(v))
            .collect();
        assert_eq!(free_queue(&a, FULL), want);
        a.check_invariants().unwrap();
    }
}

#[test]
fn alloc_at_takes_holes_first_in_lazy_mode() {
    let mut a = arena(true, 1);
    assert!(a.alloc(FULL, 3).unwrap());
    let got = a.plan().pages.clone();
    let hole = a.pool(FULL).v2p()[got[0] as usize];
    a.free(FULL, &got[..1]).unwrap();
    let wm = a.pool(FULL).watermark();
    assert!(a.alloc_at(FULL, &[42]).unwrap());
    assert_eq!(a.pool(FULL).v2p()[42], hole);
    assert_eq!(a.pool(FULL).watermark(), wm);
    assert_eq!(a.pool(FULL).num_holes(), 0);
    a.check_invariants().unwrap();
}

#[test]
fn alloc_at_refuses_bad_ids_and_answers_false_when_too_many() {
    let mut a = arena(false, 1);
    assert!(a.alloc_at(FULL, &[10]).unwrap());
    let wm = a.pool(FULL).watermark();
    for bad in [vec![10], vec![11, 11], vec![-1], vec![1 << 20], vec![0]] {
        assert!(a.alloc_at(FULL, &bad).is_err(), "{bad:?}");
    }
    assert!(a.alloc_at(SWA, &[12]).is_err(), "a non-owner mints no ids");
    let too_many = vec![0; a.pool(FULL).free_ids().count() + 1];
    assert!(!a.alloc_at(FULL, &too_many).unwrap());
    assert_eq!(a.pool(FULL).watermark(), wm);
    a.check_invariants().unwrap();
}

#[test]
fn rebind_renames_a_page_and_puts_the_old_id_back_in_front() {
    let mut a = arena(true, 2);
    assert!(a.alloc(FULL, 3).unwrap());
    let taken = a.plan().pages.clone();
    let phys: Vec<i64> = taken
        .iter()
        .map(|&v| a.pool(FULL).v2p()[v as usize])
        .collect();
    let queue = free_queue(&a, FULL);
    a.rebind(FULL, &taken, &[50, 51, 52]).unwrap();
    for (k, v) in (50..53).enumerate() {
        assert_eq!(a.pool(FULL).v2p()[v as usize], phys[k]);
        assert_eq!(a.pool(FULL).p2v()[phys[k] as usize], v);
        assert_eq!(a.pool(FULL).v2p()[taken[k] as usize], TOMBSTONE);
    }
    let mut want = taken.clone();
    want.extend(queue.into_iter().filter(|v| !(50..53).contains(v)));
    assert_eq!(free_queue(&a, FULL), want);
    a.check_invariants().unwrap();
    // Nothing changes on error: a free `from`, a live `to`, a dependent's binding.
    assert!(a.rebind(FULL, &[taken[0]], &[60]).is_err());
    assert!(a.rebind(FULL, &[50], &[51]).is_err());
    assert!(a.rebind(FULL, &[50, 51], &[60]).is_err());
    assert!(a.alloc_with_virtual(SWA, &[50]).unwrap());
    assert!(a.rebind(FULL, &[50], &[60]).is_err());
    assert_eq!(a.pool(FULL).v2p()[50], phys[0]);
    a.check_invariants().unwrap();
}

#[test]
fn random_mixes_with_chosen_ids_keep_the_invariants() {
    for lazy in [false, true] {
        let mut a = arena(lazy, 1);
        let mut rng = Rng(7);
        let mut live: Vec<i64> = Vec::new();
        for _ in 0..3000 {
            match rng.next() % 4 {
                0 => {
                    let free = free_queue(&a, FULL);
                    if let Some(&v) = free.get((rng.next() % free.len().max(1) as u64) as usize) {
                        if a.alloc_at(FULL, &[v]).unwrap() {
                            live.push(v);
                        }
                    }
                }
                1 if !live.is_empty() => {
                    let k = (rng.next() % live.len() as u64) as usize;
                    let v = live.swap_remove(k);
                    a.free(FULL, &[v]).unwrap();
                }
                2 if !live.is_empty() => {
                    let k = (rng.next() % live.len() as u64) as usize;
                    if let Some(&to) = free_queue(&a, FULL).first() {
                        a.rebind(FULL, &[live[k]], &[to]).unwrap();
                        live[k] = to;
                    }
                }
                _ => {
                    if a.alloc(FULL, 1).unwrap() {
                        live.push(a.plan().pages[0]);
                    }
                }
            }
            if lazy && rng.next() % 8 == 0 {
                a.flush(false);
            }
            a.check_invariants().unwrap();
        }
    }
}
