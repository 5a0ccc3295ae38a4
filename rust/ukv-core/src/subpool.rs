//! One sub-pool's bookkeeping: tables, watermark, free virtual ids, holes and pending
//! pages. Operations here never look at a neighbour; the [`crate::Arena`] checks the
//! frontier before it lets a sub-pool take physical pages.

use std::collections::{HashSet, VecDeque};

use crate::error::{Result, UkvError};
use crate::geometry::{Direction, Geometry, PoolSpec};
use crate::plan::PoolPlan;

/// Marks the absence of a binding in v2p/p2v and the sentinel last row.
pub const TOMBSTONE: i64 = -1;

/// A batch of vacated physical pages that an in-flight forward may still read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingBatch {
    pub token: u64,
    pub pages: Vec<i64>,
}

/// Frees queued between `free_group_begin` and `free_group_end`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FreeGroup {
    pub pages: Vec<i64>,
    pub set: HashSet<i64>,
}

/// Running counters of one sub-pool.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Pages moved by compaction so far.
    pub pages_moved: u64,
    /// Bytes moved by compaction so far.
    pub bytes_moved: u64,
    /// Operations that moved at least one page.
    pub compactions: u64,
    /// Flush passes that ran (lazy mode).
    pub flushes: u64,
}

/// One sub-pool of the arena.
#[derive(Debug, Clone)]
pub struct SubPool {
    pub(crate) name: String,
    pub(crate) geo: Geometry,
    pub(crate) owner: Option<usize>,
    pub(crate) lazy: bool,
    /// `num_virtual_pages + 1` rows; the last row is a tombstone sentinel.
    pub(crate) v2p: Vec<i64>,
    /// `num_pages + 1` rows; the last row is a tombstone sentinel.
    pub(crate) p2v: Vec<i64>,
    /// Up: first free page (band `[min, wm)`). Down: highest free page (band `(wm, num_pages)`).
    pub(crate) wm: i64,
    /// Live virtual pages.
    pub(crate) live: usize,
    /// Free virtual page ids (owners only): alloc takes the front, free appends at the back.
    pub(crate) free_ids: VecDeque<i64>,
    /// Lazy mode: free physical pages inside the band, reusable now (FIFO between flushes).
    pub(crate) holes: VecDeque<i64>,
    /// Lazy mode: vacated pages that become holes once their token completes.
    pub(crate) pending: Vec<PendingBatch>,
    pub(crate) pending_pages: usize,
    /// Virtual pages an in-flight forward writes, and its completion token.
    pub(crate) write_set: Vec<i64>,
    pub(crate) write_token: Option<u64>,
    /// Free group: queued virtual pages, or None outside a group.
    pub(crate) group: Option<FreeGroup>,
    /// Generation-stamped marks over virtual pages, for duplicate detection without allocation.
    pub(crate) marks: Vec<u32>,
    pub(crate) mark_gen: u32,
    pub(crate) stats: PoolStats,
    /// Scratch buffer reused by free and flush.
    pub(crate) scratch: Vec<i64>,
}

impl SubPool {
    pub(crate) fn new(spec: &PoolSpec, geo: Geometry, lazy: bool) -> Self {
        let mut pool = SubPool {
            name: spec.name.clone(),
            owner: spec.id_owner,
            lazy,
            v2p: vec![TOMBSTONE; geo.num_virtual_pages as usize + 1],
            p2v: vec![TOMBSTONE; geo.num_pages as usize + 1],
            wm: 0,
            live: 0,
            free_ids: VecDeque::new(),
            holes: VecDeque::new(),
            pending: Vec::new(),
            pending_pages: 0,
            write_set: Vec::new(),
            write_token: None,
            group: None,
            marks: vec![0; geo.num_virtual_pages as usize + 1],
            mark_gen: 0,
            stats: PoolStats::default(),
            scratch: Vec::new(),
            geo,
        };
        pool.clear();
        pool
    }

    /// Forget every allocation: all ids free, tables reset, watermark at the start.
    pub(crate) fn clear(&mut self) {
        self.wm = match self.geo.direction {
            Direction::Up => self.geo.min_page_index,
            Direction::Down => self.geo.num_pages - 1,
        };
        self.v2p.fill(TOMBSTONE);
        self.p2v.fill(TOMBSTONE);
        self.v2p[0] = 0;
        self.p2v[0] = 0;
        self.live = 0;
        self.free_ids.clear();
        if self.owner.is_none() {
            self.free_ids
                .extend(self.geo.min_virtual_page..self.geo.num_virtual_pages);
        }
        self.holes.clear();
        self.pending.clear();
        self.pending_pages = 0;
        self.write_set.clear();
        self.write_token = None;
        self.group = None;
    }

    /// Name of the sub-pool.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Immutable geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Whether this sub-pool mints its own virtual ids.
    pub fn is_id_owner(&self) -> bool {
        self.owner.is_none()
    }

    /// Lazy (hole-leaving) or eager (compact-at-free) mode.
    pub fn is_lazy(&self) -> bool {
        self.lazy
    }

    /// The virtual-to-physical page table (`num_virtual_pages + 1` rows).
    pub fn v2p(&self) -> &[i64] {
        &self.v2p
    }

    /// The physical-to-virtual page table (`num_pages + 1` rows).
    pub fn p2v(&self) -> &[i64] {
        &self.p2v
    }

    /// The watermark, in pages.
    pub fn watermark(&self) -> i64 {
        self.wm
    }

    /// Live virtual pages.
    pub fn live_pages(&self) -> usize {
        self.live
    }

    /// Holes (lazy mode): free pages inside the band that can be reused now.
    pub fn num_holes(&self) -> usize {
        self.holes.len()
    }

    /// Pages vacated by moves whose completion token has not been retired yet.
    pub fn num_pending(&self) -> usize {
        self.pending_pages
    }

    /// Free virtual page ids (owners), in the order alloc will hand them out.
    pub fn free_ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.free_ids.iter().copied()
    }

    /// Running counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Pages of the band between the floor (or top) and the watermark: live + holes + pending.
    pub fn span_pages(&self) -> i64 {
        match self.geo.direction {
            Direction::Up => self.wm - self.geo.min_page_index,
            Direction::Down => self.geo.num_pages - 1 - self.wm,
        }
    }

    /// Lowest byte of the band (inclusive). Equals `high_byte` when the band is empty.
    pub fn low_byte(&self) -> u64 {
        match self.geo.direction {
            Direction::Up => self.geo.page_start(self.geo.min_page_index),
            Direction::Down => self.geo.page_start(self.wm + 1),
        }
    }

    /// One past the highest byte of the band.
    pub fn high_byte(&self) -> u64 {
        match self.geo.direction {
            Direction::Up => self.geo.page_start(self.wm),
            Direction::Down => self.geo.page_start(self.geo.num_pages),
        }
    }

    /// Pages the watermark can still advance by in the index space alone.
    pub(crate) fn index_room(&self) -> i64 {
        match self.geo.direction {
            Direction::Up => self.geo.num_pages - self.wm,
            Direction::Down => self.wm + 1 - self.geo.min_page_index,
        }
    }

    /// Whether physical page `p` lies inside the band.
    #[inline]
    pub(crate) fn in_band(&self, p: i64) -> bool {
        match self.geo.direction {
            Direction::Up => p >= self.geo.min_page_index && p < self.wm,
            Direction::Down => p > self.wm && p < self.geo.num_pages,
        }
    }

    /// Whether virtual token `token` is live (its page is bound). Out-of-range ids are not.
    pub fn is_token_allocated(&self, token: i64) -> bool {
        if token < 0 {
            return false;
        }
        let page = token / self.geo.page_size as i64;
        page < self.geo.num_virtual_pages && self.v2p[page as usize] != TOMBSTONE
    }

    fn next_mark_gen(&mut self) -> u32 {
        self.mark_gen = self.mark_gen.wrapping_add(1);
        if self.mark_gen == 0 {
            self.marks.fill(0);
            self.mark_gen = 1;
        }
        self.mark_gen
    }

    /// Check that a virtual page id is a real one, naming `id` (in `unit`s) on failure.
    fn check_virtual_page(&self, page: i64, id: i64, unit: &'static str) -> Result<()> {
        if id < 0 {
            return Err(self.invalid(id, unit, "negative".into()));
        }
        if page >= self.geo.num_virtual_pages {
            return Err(self.invalid(
                id,
                unit,
                format!(
                    "beyond the id space ({} {unit}s)",
                    self.geo.num_virtual_pages * self.unit_scale(unit)
                ),
            ));
        }
        if page < self.geo.min_virtual_page {
            return Err(self.invalid(
                id,
                unit,
                format!(
                    "reserved (ids below {} are the padding sink)",
                    self.geo.min_virtual_page * self.unit_scale(unit)
                ),
            ));
        }
        Ok(())
    }

    fn unit_scale(&self, unit: &str) -> i64 {
        if unit == "token" {
            self.geo.page_size as i64
        } else {
            1
        }
    }

    pub(crate) fn invalid(&self, id: i64, unit: &'static str, reason: String) -> UkvError {
        UkvError::InvalidId {
            pool: self.name.clone(),
            id,
            unit,
            reason,
        }
    }

    fn not_live(&self, id: i64, unit: &'static str, reason: &str) -> UkvError {
        UkvError::DoubleFree {
            pool: self.name.clone(),
            id,
            unit,
            reason: reason.to_string(),
        }
    }

    /// Validate a free request and turn tokens into distinct live virtual pages, written to
    /// `out`. Tokens of one page free the whole page; at page size 1 a repeated id is a
    /// double free. Nothing is mutated except the duplicate marks.
    pub(crate) fn pages_to_free(&mut self, tokens: &[i64], out: &mut Vec<i64>) -> Result<()> {
        out.clear();
        let ps = self.geo.page_size as i64;
        let gen = self.next_mark_gen();
        for &t in tokens {
            let page = if t >= 0 { t / ps } else { -1 };
            self.check_virtual_page(page, t, "token")?;
            if self.v2p[page as usize] == TOMBSTONE {
                return Err(self.not_live(t, "token", "already freed or never allocated"));
            }
            if self.group_contains(page) {
                return Err(self.not_live(t, "token", "already queued in the open free group"));
            }
            let mark = &mut self.marks[page as usize];
            if *mark == gen {
                if ps == 1 {
                    return Err(self.not_live(t, "token", "repeated in the same call"));
                }
                continue;
            }
            *mark = gen;
            out.push(page);
        }
        Ok(())
    }

    fn group_contains(&self, page: i64) -> bool {
        self.group.as_ref().is_some_and(|g| g.set.contains(&page))
    }

    /// Validate virtual pages for `alloc_with_virtual` (non-owner binding).
    pub(crate) fn check_bindable(&mut self, pages: &[i64]) -> Result<()> {
        let gen = self.next_mark_gen();
        for &v in pages {
            self.check_virtual_page(v, v, "page")?;
            if self.v2p[v as usize] != TOMBSTONE {
                return Err(UkvError::Argument {
                    arg: "virtual_pages",
                    value: v.to_string(),
                    reason: format!("page is already bound in sub-pool {:?}", self.name),
                });
            }
            let mark = &mut self.marks[v as usize];
            if *mark == gen {
                return Err(UkvError::Argument {
                    arg: "virtual_pages",
                    value: v.to_string(),
                    reason: "repeated in the same call".into(),
                });
            }
            *mark = gen;
        }
        Ok(())
    }

    /// Advance the watermark by `n` fresh pages and bind `vpages[i]` to the i-th of them,
    /// ascending. The arena has checked the frontier and the index room.
    pub(crate) fn bind_extension(&mut self, vpages: &[i64], plan: &mut PoolPlan) {
        let n = vpages.len() as i64;
        let start = match self.geo.direction {
            Direction::Up => {
                let s = self.wm;
                self.wm += n;
                s
            }
            Direction::Down => {
                self.wm -= n;
                self.wm + 1
            }
        };
        for (i, &v) in vpages.iter().enumerate() {
            self.bind(v, start + i as i64, plan);
        }
    }

    /// Bind `v` to the front hole.
    pub(crate) fn bind_hole(&mut self, v: i64, plan: &mut PoolPlan) {
        // The arena only calls this when holes are available.
        if let Some(p) = self.holes.pop_front() {
            self.bind(v, p, plan);
        }
    }

    #[inline]
    fn bind(&mut self, v: i64, p: i64, plan: &mut PoolPlan) {
        self.v2p[v as usize] = p;
        self.p2v[p as usize] = v;
        plan.v2p_rows.push(v);
        plan.p2v_rows.push(p);
        self.live += 1;
    }

    /// Release validated live pages. Eager mode compacts the band at once; lazy mode
    /// leaves holes for the next flush.
    pub(crate) fn release(&mut self, vpages: &[i64], plan: &mut PoolPlan) {
        let mut freed = std::mem::take(&mut self.scratch);
        freed.clear();
        for &v in vpages {
            let p = self.v2p[v as usize];
            self.v2p[v as usize] = TOMBSTONE;
            plan.v2p_rows.push(v);
            freed.push(p);
        }
        if self.owner.is_none() {
            self.free_ids.extend(vpages.iter().copied());
        }
        self.live -= vpages.len();
        for &p in &freed {
            self.p2v[p as usize] = TOMBSTONE;
            plan.p2v_rows.push(p);
        }
        if self.lazy {
            self.holes.extend(freed.iter().copied());
        } else {
            self.compact_eager(&mut freed, plan);
        }
        self.scratch = freed;
    }

    /// Eager compaction after freeing the physical pages in `freed`: the band shrinks by
    /// `K = freed.len()` pages, and the i-th smallest survivor of the vacated stretch moves
    /// into the i-th smallest freed page left inside the new band.
    fn compact_eager(&mut self, freed: &mut [i64], plan: &mut PoolPlan) {
        let k = freed.len() as i64;
        if k == 0 {
            return;
        }
        freed.sort_unstable();
        // The vacated stretch `[lo, hi)` and the freed pages that stay inside the new band.
        let (lo, hi, dst): (i64, i64, &[i64]) = match self.geo.direction {
            Direction::Up => {
                let new_wm = self.wm - k;
                let split = freed.partition_point(|&p| p < new_wm);
                let band = (new_wm, self.wm, &freed[..split]);
                self.wm = new_wm;
                band
            }
            Direction::Down => {
                let new_wm = self.wm + k;
                let split = freed.partition_point(|&p| p <= new_wm);
                let band = (self.wm + 1, new_wm + 1, &freed[split..]);
                self.wm = new_wm;
                band
            }
        };
        let mut next_dst = dst.iter();
        let mut moved = 0u64;
        for src in lo..hi {
            let v = self.p2v[src as usize];
            if v == TOMBSTONE {
                continue; // a freed page of the stretch (its row is already a tombstone)
            }
            self.p2v[src as usize] = TOMBSTONE;
            plan.p2v_rows.push(src);
            // Survivors and destinations are equally many; both walk ascending.
            if let Some(&d) = next_dst.next() {
                self.v2p[v as usize] = d;
                self.p2v[d as usize] = v;
                plan.v2p_rows.push(v);
                plan.p2v_rows.push(d);
                plan.push_move(src, d);
                moved += 1;
            }
        }
        self.record_moves(moved);
    }

    pub(crate) fn record_moves(&mut self, moved: u64) {
        if moved > 0 {
            self.stats.pages_moved += moved;
            self.stats.bytes_moved += moved * self.geo.page_bytes;
            self.stats.compactions += 1;
        }
    }
}
