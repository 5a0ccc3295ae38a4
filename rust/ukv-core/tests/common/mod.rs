//! Helpers shared by the integration tests (each test file is its own crate; not every
//! file uses every helper).
#![allow(dead_code)]

use ukv_core::{Arena, Direction, PoolSpec};

/// A pool spec: `entry` bytes per entry, page size `ps`, growing in `dir`; `owner` is the
/// pool whose virtual ids it binds (None: it mints its own).
pub fn spec(name: &str, entry: u64, ps: u64, dir: Direction, owner: Option<usize>) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        entry_bytes: entry,
        page_size: ps,
        direction: dir,
        id_owner: owner,
    }
}

/// The last plan's token ids on owner pool `i`, continuations finished from `last` the way
/// a device finishes them ([`Arena::finish_tokens`]); panics when one rejects its `last_loc`.
pub fn finish_tokens(a: &Arena, i: usize, last: &[i64]) -> Vec<i64> {
    let plan = a.plan();
    assert!(
        plan.token_req.is_empty() || plan.token_req.len() == plan.tokens.len(),
        "token_req length"
    );
    let done = a.finish_tokens(i, last).expect("owner pool");
    done.iter()
        .zip(&plan.tokens)
        .map(|(t, enc)| t.unwrap_or_else(|| panic!("a last_loc rejected (token {enc})")))
        .collect()
}

/// Deterministic generator for the randomized tests (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability about `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// Everything observable through the public API except the plan: tables, watermarks,
/// counts, holes, pending pages, free ids, stats, sizes, open free groups, latest token.
pub fn assert_same_tables(before: &Arena, after: &Arena) {
    assert_eq!(before.latest_token(), after.latest_token(), "latest token");
    for i in 0..before.num_pools() {
        let (b, a) = (before.pool(i), after.pool(i));
        assert_eq!(b.v2p(), a.v2p(), "pool {i} v2p");
        assert_eq!(b.p2v(), a.p2v(), "pool {i} p2v");
        assert_eq!(b.watermark(), a.watermark(), "pool {i} watermark");
        assert_eq!(b.live_pages(), a.live_pages(), "pool {i} live");
        assert_eq!(b.num_holes(), a.num_holes(), "pool {i} holes");
        assert_eq!(b.num_pending(), a.num_pending(), "pool {i} pending");
        assert_eq!(
            b.free_ids().collect::<Vec<_>>(),
            a.free_ids().collect::<Vec<_>>(),
            "pool {i} free ids"
        );
        assert_eq!(b.stats(), a.stats(), "pool {i} stats");
        assert_eq!(
            before.available_pages(i),
            after.available_pages(i),
            "pool {i} available"
        );
        assert_eq!(
            before.schedulable_pages(i),
            after.schedulable_pages(i),
            "pool {i} schedulable"
        );
        assert_eq!(
            before.in_free_group(i),
            after.in_free_group(i),
            "pool {i} group"
        );
    }
}
