//! Every error path of the public API: the variant, a message that names the offending
//! value, and an arena left exactly as it was (tables, watermarks, free ids, counts, the
//! last plan, the in-flight token).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ukv_core::{Arena, ArenaConfig, Direction, PoolSpec, UkvError};

mod common;
use common::{assert_same_tables, spec};

fn build(total: u64, pools: Vec<PoolSpec>, lazy: bool) -> Arena {
    let mut cfg = ArenaConfig::new(total, pools);
    cfg.lazy = lazy;
    Arena::new(cfg).unwrap()
}

/// Full up (64 B) + mamba down (160 B), §2.7 geometry, with some state in it: live pages,
/// a hole (lazy), a plan from the last operation and a token in flight.
fn busy_full_mamba(lazy: bool) -> Arena {
    let mut a = build(
        6656,
        vec![
            spec("full", 64, 1, Direction::Up, None),
            spec("mamba", 160, 1, Direction::Down, None),
        ],
        lazy,
    );
    assert!(a.alloc(0, 6).unwrap());
    let x = a.plan().pages.clone();
    assert!(a.alloc(1, 3).unwrap());
    a.set_latest_token(Some(5));
    a.free(0, &x[1..2]).unwrap();
    assert!(a.alloc(0, 2).unwrap()); // the last plan: something to keep
    a.check_invariants().unwrap();
    a
}

/// Full up ps 8 + swa down ps 8 binding full's ids.
fn busy_paged_swa(lazy: bool) -> Arena {
    let mut a = build(
        40 * 8 * 64,
        vec![
            spec("full", 64, 8, Direction::Up, None),
            spec("swa", 64, 8, Direction::Down, Some(0)),
        ],
        lazy,
    );
    assert!(a.alloc(0, 4).unwrap());
    let ids = a.plan().pages.clone();
    assert!(a.alloc_with_virtual(1, &ids[..3]).unwrap());
    a.check_invariants().unwrap();
    a
}

/// Everything observable through the public API, plan included.
fn assert_unchanged(before: &Arena, after: &Arena) {
    assert_eq!(before.plan(), after.plan(), "plan");
    assert_same_tables(before, after);
    after.check_invariants().unwrap();
}

/// Run `op` on a clone of `a`; it must fail, name `needle` in its message, and change
/// nothing. Returns the error for variant checks.
fn fails<T: std::fmt::Debug>(
    a: &Arena,
    needle: &str,
    op: impl FnOnce(&mut Arena) -> ukv_core::Result<T>,
) -> UkvError {
    let mut after = a.clone();
    let err = op(&mut after).expect_err("the call should fail");
    let msg = err.to_string();
    assert!(
        msg.contains(needle),
        "message {msg:?} does not name {needle:?}"
    );
    assert!(
        msg.starts_with(|c: char| c.is_ascii_lowercase()),
        "{msg:?} starts lower-case"
    );
    assert_unchanged(a, &after);
    // The arena still works after the error.
    after.flush(true);
    after.check_invariants().unwrap();
    err
}

fn is_argument(e: &UkvError, want: &str) -> bool {
    matches!(e, UkvError::Argument { arg, .. } if *arg == want)
}

// ----- configuration ------------------------------------------------------------------

fn config_err(total: u64, pools: Vec<PoolSpec>, field: &str, needle: &str) {
    let err = Arena::new(ArenaConfig::new(total, pools)).expect_err("config should be rejected");
    match &err {
        UkvError::Config { field: f, .. } => assert_eq!(*f, field, "{err}"),
        other => panic!("expected a config error, got {other:?}"),
    }
    assert!(
        err.to_string().contains(needle),
        "{err} should name {needle}"
    );
}

#[test]
fn config_errors_name_the_field_and_value() {
    let up = |n: &str, e: u64| spec(n, e, 1, Direction::Up, None);
    let down = |n: &str, e: u64| spec(n, e, 1, Direction::Down, None);
    config_err(1 << 16, vec![], "pools", "0");
    let mid = |n: &str, e: u64| spec(n, e, 1, Direction::Middle, None);
    config_err(
        1 << 16,
        vec![up("a", 64), mid("m", 64), down("b", 64), down("c", 64)],
        "pools",
        "4",
    );
    config_err(
        1 << 16,
        vec![up("a", 64), down("b", 64), down("c", 64)],
        "grow",
        "2 down",
    );
    // A middle band floats between two ends: never alone, never two of them.
    config_err(1 << 16, vec![up("a", 64), mid("m", 64)], "grow", "1 middle");
    config_err(1 << 16, vec![mid("m", 64)], "grow", "1 middle");
    config_err(
        1 << 16,
        vec![up("a", 64), mid("m", 64), mid("n", 64)],
        "grow",
        "2 middle",
    );
    config_err(1 << 16, vec![up("", 64), down("b", 64)], "name", "\"\"");
    config_err(1 << 16, vec![up("a", 64), down("a", 64)], "name", "\"a\"");
    config_err(1 << 16, vec![up("a", 0), down("b", 64)], "entry_bytes", "0");
    config_err(
        1 << 16,
        vec![spec("a", 64, 0, Direction::Up, None), down("b", 64)],
        "page_size",
        "0",
    );
    config_err(1 << 16, vec![up("a", 64), up("b", 64)], "grow", "2 up");
    config_err(
        1 << 16,
        vec![down("a", 64), down("b", 64)],
        "grow",
        "2 down",
    );
    config_err(
        1 << 16,
        vec![spec("a", 64, 1, Direction::Up, Some(0)), down("b", 64)],
        "id_owner",
        "0",
    );
    config_err(
        1 << 16,
        vec![up("a", 64), spec("b", 64, 1, Direction::Down, Some(7))],
        "id_owner",
        "7",
    );
    config_err(
        1 << 16,
        vec![
            spec("a", 64, 1, Direction::Up, Some(1)),
            spec("b", 64, 1, Direction::Down, Some(0)),
        ],
        "id_owner",
        "1",
    );
    config_err(
        1 << 16,
        vec![
            spec("a", 64, 8, Direction::Up, None),
            spec("b", 64, 4, Direction::Down, Some(0)),
        ],
        "page_size",
        "4",
    );
    // Too small: the floor (160) leaves no page for "b" (2 pages of 160 B, min page 1... 0).
    config_err(200, vec![up("a", 64), down("b", 160)], "total_bytes", "200");
    config_err(
        u64::MAX,
        vec![spec("a", u64::MAX, 2, Direction::Up, None), down("b", 64)],
        "page_size",
        "2",
    );
    let mut cfg = ArenaConfig::new(1 << 16, vec![up("a", 64), down("b", 64)]);
    cfg.max_moves_per_flush = 0;
    let err = Arena::new(cfg).unwrap_err();
    assert!(
        matches!(
            err,
            UkvError::Config {
                field: "max_moves_per_flush",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_single_pool_arena_is_allowed() {
    let mut a = build(
        1024,
        vec![spec("solo", 64, 1, Direction::Down, None)],
        false,
    );
    assert_eq!(a.available_pages(0), 15);
    assert!(a.alloc(0, 15).unwrap());
    assert!(!a.alloc(0, 1).unwrap());
    a.check_invariants().unwrap();
}

// ----- bad pool indices and roles ---------------------------------------------------------

#[test]
fn bad_pool_index_is_an_argument_error_everywhere() {
    for lazy in [false, true] {
        let a = busy_full_mamba(lazy);
        let is_pool = |e: UkvError| assert!(is_argument(&e, "pool"), "{e:?}");
        is_pool(fails(&a, "7", |a| a.alloc(7, 1)));
        is_pool(fails(&a, "7", |a| a.alloc_tokens(7, 1)));
        is_pool(fails(&a, "7", |a| a.alloc_with_virtual(7, &[3])));
        is_pool(fails(&a, "7", |a| a.alloc_extend(7, &[0], &[1], None)));
        is_pool(fails(&a, "7", |a| a.alloc_decode(7, &[1], None)));
        is_pool(fails(&a, "7", |a| a.free(7, &[3])));
        is_pool(fails(&a, "7", |a| a.free_group_begin(7)));
        is_pool(fails(&a, "7", |a| a.free_group_end(7)));
        is_pool(fails(&a, "7", |a| a.flush_pool(7, true)));
        is_pool(fails(&a, "7", |a| a.set_inflight_writes(7, 1, &[3])));
        is_pool(fails(&a, "7", |a| a.clear(7)));
        assert!(a.try_pool(7).is_err());
        assert!(!a.is_token_allocated(7, 3));
        assert!(!a.in_free_group(7));
    }
}

#[test]
fn owner_only_operations_reject_a_non_owner_pool() {
    let a = busy_paged_swa(false);
    for e in [
        fails(&a, "swa", |a| a.alloc(1, 1)),
        fails(&a, "swa", |a| a.alloc_tokens(1, 8)),
        fails(&a, "swa", |a| a.alloc_extend(1, &[0], &[8], None)),
        fails(&a, "swa", |a| a.alloc_decode(1, &[1], None)),
    ] {
        assert!(is_argument(&e, "pool"), "{e:?}");
    }
    let e = fails(&a, "full", |a| a.alloc_with_virtual(0, &[5]));
    assert!(is_argument(&e, "pool"), "{e:?}");
}

// ----- alloc ---------------------------------------------------------------------------

#[test]
fn alloc_tokens_must_be_a_non_negative_page_multiple() {
    let a = busy_paged_swa(true);
    for n in [5, 9, -8, -1] {
        let e = fails(&a, &n.to_string(), |a| a.alloc_tokens(0, n));
        assert!(is_argument(&e, "need_size"), "{e:?}");
    }
    // Zero tokens is fine and binds nothing.
    let mut b = a.clone();
    assert!(b.alloc_tokens(0, 0).unwrap());
    assert!(b.plan().pages.is_empty() && b.plan().tokens.is_empty());
}

#[test]
fn alloc_with_virtual_rejects_bad_pages() {
    for lazy in [false, true] {
        let a = busy_paged_swa(lazy);
        let ids: Vec<i64> = (1..a.pool(1).v2p().len() as i64 - 1)
            .filter(|&v| a.pool(0).v2p()[v as usize] >= 0)
            .collect();
        let bound = ids[0]; // bound on swa already
        let unbound = ids[3]; // live on full, not on swa
        let n = a.pool(1).geometry().num_virtual_pages;
        let invalid = |e: &UkvError, want: i64| {
            assert!(
                matches!(e, UkvError::InvalidId { id, unit: "page", .. } if *id == want),
                "{e:?}"
            );
        };
        invalid(
            &fails(&a, "-1", |a| a.alloc_with_virtual(1, &[unbound, -1])),
            -1,
        );
        invalid(
            &fails(&a, &n.to_string(), |a| {
                a.alloc_with_virtual(1, &[unbound, n])
            }),
            n,
        );
        invalid(
            &fails(&a, "0", |a| a.alloc_with_virtual(1, &[unbound, 0])),
            0,
        );
        let e = fails(&a, &bound.to_string(), |a| {
            a.alloc_with_virtual(1, &[unbound, bound])
        });
        assert!(is_argument(&e, "virtual_pages"), "{e:?}");
        let e = fails(&a, &unbound.to_string(), |a| {
            a.alloc_with_virtual(1, &[unbound, unbound])
        });
        assert!(is_argument(&e, "virtual_pages"), "{e:?}");
        // The error does not leave a stale duplicate mark behind: the same page binds now.
        let mut b = a.clone();
        assert!(b.alloc_with_virtual(1, &[unbound]).unwrap());
        b.check_invariants().unwrap();
    }
}

#[test]
fn alloc_extend_rejects_malformed_batches() {
    let mut a = busy_paged_swa(false);
    assert!(a.alloc_tokens(0, 8).unwrap());
    let page = a.plan().pages[0];
    let last = page * 8 + 4; // request with prefix 5 ends here
                             // Lengths must match.
    let e = fails(&a, "length 1", |a| a.alloc_extend(0, &[5, 0], &[9], None));
    assert!(is_argument(&e, "seq_lens"), "{e:?}");
    let e = fails(&a, "length 2", |a| {
        a.alloc_extend(0, &[5], &[9], Some(&[last, last]))
    });
    assert!(is_argument(&e, "last_loc"), "{e:?}");
    // Negative prefix, prefix beyond the sequence.
    let e = fails(&a, "-1", |a| a.alloc_extend(0, &[-1], &[9], None));
    assert!(is_argument(&e, "seq_lens"), "{e:?}");
    let e = fails(&a, "request 1", |a| {
        a.alloc_extend(0, &[0, 9], &[4, 5], None)
    });
    assert!(is_argument(&e, "seq_lens"), "{e:?}");
    // last_loc must be live and at the prefix's page offset.
    let e = fails(&a, &(last + 1).to_string(), |a| {
        a.alloc_extend(0, &[5], &[9], Some(&[last + 1]))
    });
    assert!(is_argument(&e, "last_loc"), "{e:?}");
    let free_page = a.pool(0).free_ids().next().unwrap();
    let dead = free_page * 8 + 4;
    let e = fails(&a, &dead.to_string(), |a| {
        a.alloc_extend(0, &[5], &[9], Some(&[dead]))
    });
    assert!(is_argument(&e, "last_loc"), "{e:?}");
    let e = fails(&a, "-1", |a| a.alloc_extend(0, &[5], &[9], Some(&[-1])));
    assert!(is_argument(&e, "last_loc"), "{e:?}");
    // A bad request after good ones still changes nothing.
    let e = fails(&a, "request 2", |a| {
        a.alloc_extend(0, &[0, 5, 3], &[16, 9, 2], Some(&[-1, last, -1]))
    });
    assert!(is_argument(&e, "seq_lens"), "{e:?}");
    // The good call works.
    assert!(a.alloc_extend(0, &[5], &[9], Some(&[last])).unwrap());
    a.check_invariants().unwrap();
}

#[test]
fn alloc_decode_rejects_malformed_batches() {
    let mut a = busy_paged_swa(true);
    assert!(a.alloc_tokens(0, 8).unwrap());
    let page = a.plan().pages[0];
    let e = fails(&a, "length 1", |a| {
        a.alloc_decode(0, &[3, 4], Some(&[page * 8 + 1]))
    });
    assert!(is_argument(&e, "last_loc"), "{e:?}");
    let e = fails(&a, "0", |a| a.alloc_decode(0, &[3, 0], None));
    assert!(is_argument(&e, "seq_lens"), "{e:?}");
    let e = fails(&a, "-4", |a| a.alloc_decode(0, &[-4], None));
    assert!(is_argument(&e, "seq_lens"), "{e:?}");
    // seq 3: the last token sits at offset 1; offset 2 is wrong.
    let e = fails(&a, &(page * 8 + 2).to_string(), |a| {
        a.alloc_decode(0, &[3], Some(&[page * 8 + 2]))
    });
    assert!(is_argument(&e, "last_loc"), "{e:?}");
    assert!(a.alloc_decode(0, &[3], Some(&[page * 8 + 1])).unwrap());
    assert_eq!(a.plan().tokens, vec![page * 8 + 2]);
}

#[test]
fn huge_requests_do_not_panic() {
    for lazy in [false, true] {
        let a = busy_paged_swa(lazy);
        let mut b = a.clone();
        assert!(!b.alloc(0, usize::MAX).unwrap());
        assert!(!b.alloc_tokens(0, i64::MAX - i64::MAX % 8).unwrap());
        for (pre, seq) in [(0, i64::MAX), (8, i64::MAX)] {
            assert!(!b.alloc_extend(0, &[pre], &[seq], None).unwrap());
        }
        // One token continuing a partial page near i64::MAX: no new page, no overflow.
        assert!(b
            .alloc_extend(0, &[i64::MAX - 1], &[i64::MAX], None)
            .unwrap());
        assert_eq!(
            (b.plan().tokens.clone(), b.plan().token_req.clone()),
            (vec![((i64::MAX - 2) % 8) * 8 + 1], vec![0])
        );
        // Two absurd requests whose page counts would wrap around when summed.
        assert!(!b
            .alloc_extend(0, &[0, 0], &[i64::MAX, i64::MAX], None)
            .unwrap());
        assert!(!b
            .alloc_extend(0, &[0; 3], &[i64::MAX / 2 + 9; 3], None)
            .unwrap());
        assert!(b.alloc_decode(0, &[i64::MAX - 6], None).unwrap()); // starts a page
        b.check_invariants().unwrap();
        // A whole page's worth of tokens at the very top of the i64 range (page size 8).
        let page: Vec<i64> = (0..8).map(|k| (i64::MAX - 7) + k).collect();
        let e = fails(&a, &(i64::MAX - 7).to_string(), |a| a.free(0, &page));
        assert!(matches!(e, UkvError::InvalidId { .. }), "{e:?}");
        let mut c = a.clone();
        assert!(!c.is_token_allocated(0, i64::MAX));
        assert!(!c.is_token_allocated(0, i64::MIN));
        c.set_inflight_writes(0, 3, &[i64::MAX, i64::MIN, -1])
            .unwrap();
        c.flush(false);
        c.check_invariants().unwrap();
    }
}

// ----- free -----------------------------------------------------------------------------

#[test]
fn free_rejects_bad_ids_and_changes_nothing() {
    for lazy in [false, true] {
        let a = busy_full_mamba(lazy);
        let live: Vec<i64> = (3..104).filter(|&v| a.is_token_allocated(0, v)).collect();
        let dead = a.pool(0).free_ids().next().unwrap();
        let invalid = |e: &UkvError, want: i64| {
            assert!(
                matches!(e, UkvError::InvalidId { id, unit: "token", .. } if *id == want),
                "{e:?}"
            );
        };
        invalid(&fails(&a, "-3", |a| a.free(0, &[live[0], -3])), -3);
        invalid(&fails(&a, "104", |a| a.free(0, &[live[0], 104])), 104);
        invalid(
            &fails(&a, &i64::MAX.to_string(), |a| a.free(0, &[i64::MAX])),
            i64::MAX,
        );
        invalid(&fails(&a, "0", |a| a.free(0, &[0])), 0); // the padding anchor
        invalid(&fails(&a, "2", |a| a.free(0, &[live[0], 2])), 2); // below the floor
        let not_live = |e: &UkvError, want: i64| {
            assert!(
                matches!(e, UkvError::DoubleFree { id, .. } if *id == want),
                "{e:?}"
            );
        };
        not_live(
            &fails(&a, &dead.to_string(), |a| {
                a.free(0, &[live[0], live[1], dead])
            }),
            dead,
        );
        // Repeated in one call at page size 1: a double free, named.
        not_live(
            &fails(&a, &live[2].to_string(), |a| {
                a.free(0, &[live[2], live[1], live[2]])
            }),
            live[2],
        );
        // The mamba side too.
        not_live(&fails(&a, "40", |a| a.free(1, &[40])), 40);
        invalid(&fails(&a, "41", |a| a.free(1, &[41])), 41);
    }
}

#[test]
fn double_free_raises_in_eager_and_lazy_mode() {
    for lazy in [false, true] {
        let mut a = busy_full_mamba(lazy);
        let x: Vec<i64> = a.plan().pages.clone();
        a.free(0, &x).unwrap();
        let e = fails(&a, &x[0].to_string(), |a| a.free(0, &x[..1]));
        assert!(matches!(e, UkvError::DoubleFree { .. }), "{e:?}");
        assert!(e.to_string().contains("full"), "{e}");
    }
}

#[test]
fn free_at_page_size_8_dedups_pages_but_rejects_dead_ones() {
    let mut a = busy_paged_swa(false);
    assert!(a.alloc_tokens(0, 8).unwrap());
    let toks = a.plan().tokens.clone();
    // Two tokens of one live page are fine.
    let mut b = a.clone();
    b.free(0, &[toks[1], toks[6], toks[1]]).unwrap();
    assert!(!b.is_token_allocated(0, toks[0]));
    // A token of a freed page is not.
    let e = fails(&b, &toks[3].to_string(), |b| b.free(0, &[toks[3]]));
    assert!(
        matches!(e, UkvError::DoubleFree { unit: "token", .. }),
        "{e:?}"
    );
    // The swa side: a page that full minted but swa never bound.
    let unbound = (1..a.pool(0).v2p().len() as i64 - 1)
        .find(|&v| a.pool(0).v2p()[v as usize] >= 0 && a.pool(1).v2p()[v as usize] < 0)
        .unwrap();
    let e = fails(&a, &(unbound * 8).to_string(), |a| {
        a.free(1, &[unbound * 8])
    });
    assert!(matches!(e, UkvError::DoubleFree { .. }), "{e:?}");
}

#[test]
fn free_groups_reject_misuse() {
    for lazy in [false, true] {
        let mut a = busy_full_mamba(lazy);
        let e = fails(&a, "full", |a| a.free_group_end(0));
        assert!(is_argument(&e, "free_group_end"), "{e:?}");
        let live: Vec<i64> = (3..104).filter(|&v| a.is_token_allocated(0, v)).collect();
        a.free_group_begin(0).unwrap();
        a.free(0, &live[..2]).unwrap();
        let e = fails(&a, "full", |a| a.free_group_begin(0));
        assert!(is_argument(&e, "free_group_begin"), "{e:?}");
        // A page already queued cannot be queued again.
        let e = fails(&a, &live[1].to_string(), |a| a.free(0, &[live[2], live[1]]));
        assert!(matches!(e, UkvError::DoubleFree { .. }), "{e:?}");
        a.free_group_end(0).unwrap();
        a.check_invariants().unwrap();
        assert!(!a.is_token_allocated(0, live[0]));
    }
}

#[test]
fn errors_display_lower_case_and_carry_numbers() {
    let a = busy_full_mamba(false);
    let mut b = a.clone();
    let e = b.free(0, &[500]).unwrap_err();
    match &e {
        UkvError::InvalidId { pool, id, unit, .. } => {
            assert_eq!((pool.as_str(), *id, *unit), ("full", 500, "token"));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("sub-pool \"full\": invalid token id 500"),
        "{e}"
    );
    let src: &dyn std::error::Error = &e;
    assert!(src.source().is_none());
}
