//! Move plans: what an operation asks the byte mover to do, and which table rows changed.
//!
//! The core only decides; the caller owns the bytes. After every operation the caller
//! reads the [`Plan`] and, in this order: makes its stream wait on `wait_tokens`, copies
//! every `(src[i], dst[i])` page of each sub-pool (all pairs of one sub-pool at once: the
//! src and dst sets of one sub-pool's moves are disjoint, so order does not matter), one
//! sub-pool after the other in [`crate::Arena::move_order`] (a middle band last: it may
//! move into bytes an end band's moves vacate in the same plan), then writes the changed
//! v2p/p2v rows into any device mirror of the tables.

use std::collections::HashSet;

/// The part of a plan that concerns one sub-pool.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PoolPlan {
    /// Physical source pages to copy from.
    pub src: Vec<i64>,
    /// Physical destination pages, paired with `src` by position.
    pub dst: Vec<i64>,
    /// Rows of v2p that changed (may repeat; every copy then carries the same value).
    pub v2p_rows: Vec<i64>,
    /// Their values after the operation.
    pub v2p_vals: Vec<i64>,
    /// Rows of p2v that changed (may repeat).
    pub p2v_rows: Vec<i64>,
    /// Their values after the operation.
    pub p2v_vals: Vec<i64>,
    /// The whole table was rewritten (after `clear`): re-upload it instead of the rows.
    pub reset: bool,
}

impl PoolPlan {
    /// Forget the previous operation's plan, keeping the allocations.
    #[inline]
    pub fn reset(&mut self) {
        self.src.clear();
        self.dst.clear();
        self.v2p_rows.clear();
        self.v2p_vals.clear();
        self.p2v_rows.clear();
        self.p2v_vals.clear();
        self.reset = false;
    }

    /// Record one page move.
    #[inline]
    pub(crate) fn push_move(&mut self, src: i64, dst: i64) {
        self.src.push(src);
        self.dst.push(dst);
    }

    /// Record that v2p row `row` now holds `val`. Every operation writes a row's final value
    /// (no row is written twice with different values within one operation), so the value
    /// columns are complete as soon as the operation ends.
    #[inline]
    pub(crate) fn set_v2p(&mut self, row: i64, val: i64) {
        self.v2p_rows.push(row);
        self.v2p_vals.push(val);
    }

    /// Record that p2v row `row` now holds `val` (see [`PoolPlan::set_v2p`]).
    #[inline]
    pub(crate) fn set_p2v(&mut self, row: i64, val: i64) {
        self.p2v_rows.push(row);
        self.p2v_vals.push(val);
    }

    /// Record that the v2p rows `rows` all now hold `val`.
    #[inline]
    pub(crate) fn set_v2p_all(&mut self, rows: &[i64], val: i64) {
        self.v2p_rows.extend_from_slice(rows);
        self.v2p_vals.resize(self.v2p_vals.len() + rows.len(), val);
    }

    /// Record that the p2v rows `rows` all now hold `val`.
    #[inline]
    pub(crate) fn set_p2v_all(&mut self, rows: &[i64], val: i64) {
        self.p2v_rows.extend_from_slice(rows);
        self.p2v_vals.resize(self.p2v_vals.len() + rows.len(), val);
    }

    /// Whether every recorded value equals the final table value (checked in debug builds
    /// after every operation).
    pub(crate) fn values_match(&self, v2p: &[i64], p2v: &[i64]) -> bool {
        let ok = |rows: &[i64], vals: &[i64], table: &[i64]| {
            rows.len() == vals.len() && rows.iter().zip(vals).all(|(&r, &v)| table[r as usize] == v)
        };
        ok(&self.v2p_rows, &self.v2p_vals, v2p) && ok(&self.p2v_rows, &self.p2v_vals, p2v)
    }

    /// Keep each changed row once, with its final table value. Needed after an operation
    /// that compacted a pool and then bound pages of it: a vacated page can be written as a
    /// tombstone and then rebound, and a device scatter with repeated rows is not ordered.
    pub(crate) fn dedupe_rows(&mut self, v2p: &[i64], p2v: &[i64]) {
        fn keep_once(rows: &mut Vec<i64>, vals: &mut Vec<i64>, table: &[i64]) {
            let mut seen = HashSet::with_capacity(rows.len());
            rows.retain(|&r| seen.insert(r));
            vals.clear();
            vals.extend(rows.iter().map(|&r| table[r as usize]));
        }
        keep_once(&mut self.v2p_rows, &mut self.v2p_vals, v2p);
        keep_once(&mut self.p2v_rows, &mut self.p2v_vals, p2v);
    }

    /// True when there is nothing to do for this sub-pool.
    pub fn is_empty(&self) -> bool {
        self.src.is_empty() && self.v2p_rows.is_empty() && self.p2v_rows.is_empty() && !self.reset
    }

    /// Number of page moves.
    pub fn num_moves(&self) -> usize {
        self.src.len()
    }
}

/// Everything the last operation produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Virtual token ids handed out by an allocation, in order. For `alloc_extend` /
    /// `alloc_decode` without host `last_loc`, an entry is only the part to add to
    /// `last_loc[token_req[i]]` when `token_req[i] >= 0`.
    pub tokens: Vec<i64>,
    /// For token-level allocation: the request whose `last_loc` must be added to
    /// `tokens[i]`, or -1. Empty when every token is final.
    pub token_req: Vec<i64>,
    /// Virtual pages bound by the operation, in order.
    pub pages: Vec<i64>,
    /// One entry per sub-pool, indexed like the arena's pools.
    pub pools: Vec<PoolPlan>,
    /// Completion tokens the caller's stream must wait on before moving bytes.
    pub wait_tokens: Vec<u64>,
}

impl Plan {
    pub(crate) fn with_pools(n: usize) -> Self {
        Plan {
            pools: vec![PoolPlan::default(); n],
            ..Plan::default()
        }
    }

    /// Forget the previous operation's plan, keeping the allocations.
    pub fn reset(&mut self) {
        self.tokens.clear();
        self.token_req.clear();
        self.pages.clear();
        self.wait_tokens.clear();
        // Arenas have two pools: unrolled, this is a handful of stores (it runs twice per
        // alloc/free cycle).
        match &mut self.pools[..] {
            [a, b] => {
                a.reset();
                b.reset();
            }
            pools => pools.iter_mut().for_each(PoolPlan::reset),
        }
    }

    /// Total page moves across sub-pools.
    pub fn num_moves(&self) -> usize {
        self.pools.iter().map(PoolPlan::num_moves).sum()
    }
}
