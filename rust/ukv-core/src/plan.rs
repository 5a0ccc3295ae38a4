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
    /// `alloc_decode` without host `last_loc`, an entry with `token_req[i] >= 0` is not an
    /// id but the encoded continuation of that request's `last_loc`, which
    /// [`continue_token`](crate::continue_token) turns into the id (or rejects).
    pub tokens: Vec<i64>,
    /// For token-level allocation: the request whose `last_loc` continues into
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

/// Where one sub-pool's part of a packed plan sits in the flat buffer
/// (see [`Plan::pack_into`]); offsets count `i64` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedPool {
    /// Sub-pool index.
    pub pool: usize,
    /// Offset of the `moves` source pages.
    pub src: usize,
    /// Offset of the `moves` destination pages.
    pub dst: usize,
    /// Offset of the changed table rows, over the concatenation `[v2p | p2v]`.
    pub rows: usize,
    /// Offset of their values.
    pub vals: usize,
    /// Number of page moves.
    pub moves: usize,
    /// Number of changed table rows.
    pub num_rows: usize,
}

/// The layout of a packed plan: everything one device launch per sub-pool reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedLayout {
    /// Elements the whole payload needs (the buffer was written only if it had room).
    pub len: usize,
    /// Offset and count of the returned token ids.
    pub tokens: (usize, usize),
    /// Offset and count of the token-request column (0 when every token is final).
    pub token_req: (usize, usize),
    /// Sub-pools with moves or changed rows, in index order.
    pub pools: Vec<PackedPool>,
}

/// Sections of a packed plan start on even offsets: with an aligned buffer every section
/// is 16-byte aligned, so a kernel compiled for aligned pointers reads any of them.
const PACK_ALIGN: usize = 2;

fn align_up(n: usize) -> usize {
    n.div_ceil(PACK_ALIGN) * PACK_ALIGN
}

impl Plan {
    /// Lay the plan out as one flat `i64` payload and write it into `out` when it fits.
    ///
    /// Layout: `[tokens | token_req | per sub-pool with work: src | dst | rows | vals]`,
    /// each section padded to an even length. Table rows address the concatenation
    /// `[v2p | p2v]` of their sub-pool: p2v rows are offset by `v2p_lens[pool]`.
    /// `with_tokens` includes the allocation's ids; `with_rows` the changed table rows
    /// (only callers that mirror the tables need them).
    ///
    /// Returns the layout; `out` is untouched when `layout.len > out.len()`.
    pub fn pack_into(
        &self,
        out: &mut [i64],
        v2p_lens: &[usize],
        with_tokens: bool,
        with_rows: bool,
    ) -> PackedLayout {
        let layout = self.pack_layout(with_tokens, with_rows);
        if layout.len > out.len() {
            return layout;
        }
        let (t, n) = layout.tokens;
        out[t..t + n].copy_from_slice(&self.tokens[..n]);
        let (r, n) = layout.token_req;
        out[r..r + n].copy_from_slice(&self.token_req[..n]);
        for sec in &layout.pools {
            let p = &self.pools[sec.pool];
            out[sec.src..sec.src + sec.moves].copy_from_slice(&p.src);
            out[sec.dst..sec.dst + sec.moves].copy_from_slice(&p.dst);
            if sec.num_rows > 0 {
                let offset = v2p_lens.get(sec.pool).copied().unwrap_or(0) as i64;
                let rows = p.v2p_rows.iter().copied();
                let rows = rows.chain(p.p2v_rows.iter().map(|r| r + offset));
                for (slot, row) in out[sec.rows..sec.rows + sec.num_rows].iter_mut().zip(rows) {
                    *slot = row;
                }
                let vals = p.v2p_vals.iter().chain(&p.p2v_vals);
                for (slot, &val) in out[sec.vals..sec.vals + sec.num_rows].iter_mut().zip(vals) {
                    *slot = val;
                }
            }
        }
        layout
    }

    /// The layout [`Plan::pack_into`] writes, without writing anything.
    pub fn pack_layout(&self, with_tokens: bool, with_rows: bool) -> PackedLayout {
        let mut at = 0;
        let mut section = |n: usize| {
            let start = at;
            at += align_up(n);
            (start, n)
        };
        let tokens = section(if with_tokens { self.tokens.len() } else { 0 });
        let token_req = section(if with_tokens { self.token_req.len() } else { 0 });
        let mut pools = Vec::new();
        for (i, p) in self.pools.iter().enumerate() {
            let num_rows = if with_rows {
                p.v2p_rows.len() + p.p2v_rows.len()
            } else {
                0
            };
            let moves = p.num_moves();
            if moves == 0 && num_rows == 0 {
                continue;
            }
            pools.push(PackedPool {
                pool: i,
                src: section(moves).0,
                dst: section(moves).0,
                rows: section(num_rows).0,
                vals: section(num_rows).0,
                moves,
                num_rows,
            });
        }
        PackedLayout {
            len: at,
            tokens,
            token_req,
            pools,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Plan {
        let mut plan = Plan::with_pools(2);
        plan.tokens = vec![7, 8, 9];
        plan.pools[1].push_move(5, 2);
        plan.pools[1].set_v2p(3, 2);
        plan.pools[1].set_p2v(2, 3);
        plan.pools[1].set_p2v(5, -1);
        plan
    }

    #[test]
    fn pack_writes_every_section_at_its_offset() {
        let plan = sample();
        let mut out = vec![0i64; 64];
        let l = plan.pack_into(&mut out, &[10, 10], true, true);
        assert_eq!(l.tokens, (0, 3));
        assert_eq!(l.token_req, (4, 0));
        assert_eq!(l.pools.len(), 1);
        let s = l.pools[0];
        assert_eq!((s.pool, s.moves, s.num_rows), (1, 1, 3));
        assert!([s.src, s.dst, s.rows, s.vals]
            .iter()
            .all(|o| o % PACK_ALIGN == 0));
        assert_eq!(&out[..3], &[7, 8, 9]);
        assert_eq!((out[s.src], out[s.dst]), (5, 2));
        assert_eq!(&out[s.rows..s.rows + 3], &[3, 12, 15]);
        assert_eq!(&out[s.vals..s.vals + 3], &[2, 3, -1]);
        assert_eq!(l.len, s.vals + 4);
    }

    #[test]
    fn pack_without_rows_or_tokens_skips_them() {
        let plan = sample();
        let mut out = vec![0i64; 64];
        let l = plan.pack_into(&mut out, &[10, 10], false, false);
        assert_eq!(l.tokens, (0, 0));
        assert_eq!(l.pools[0].num_rows, 0);
        assert_eq!(l.len, 4);
    }

    #[test]
    fn pack_into_a_short_buffer_writes_nothing() {
        let plan = sample();
        let mut out = vec![-5i64; 3];
        let l = plan.pack_into(&mut out, &[10, 10], true, true);
        assert!(l.len > 3);
        assert_eq!(out, vec![-5; 3]);
    }
}
