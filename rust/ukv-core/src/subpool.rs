//! One sub-pool's bookkeeping: tables, watermark, free virtual ids, holes and pending
//! pages. Operations here never look at a neighbour; the [`crate::Arena`] checks the
//! frontier before it lets a sub-pool take physical pages.

use std::collections::{HashSet, VecDeque};

use crate::error::{Result, UkvError};
use crate::geometry::{Direction, Geometry, PoolSpec};
use crate::plan::PoolPlan;

/// Batches up to this many ids use element-wise deque operations instead of bulk ones.
pub(crate) const SMALL_BATCH: usize = 8;

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
    /// Another pool binds this pool's ids: releasing an id releases it there too.
    pub(crate) dependents: bool,
    /// `Arena::free` may take its one-token fast path: no free group open, no dependents to
    /// release, not the middle band (which relinks the ends). One flag on the hot path.
    pub(crate) plain_free: bool,
    pub(crate) lazy: bool,
    /// `num_virtual_pages + 1` rows; the last row is a tombstone sentinel.
    pub(crate) v2p: Vec<i64>,
    /// `num_pages + 1` rows; the last row is a tombstone sentinel.
    pub(crate) p2v: Vec<i64>,
    /// Up and middle: first free page (band `[base, wm)`). Down: highest free page (band
    /// `(wm, num_pages)`).
    pub(crate) wm: i64,
    /// Up and middle: first page of the band. Fixed at `min_page_index` for a grow-up pool;
    /// a middle band moves it (it grows, is absorbed or slides at its low end). Unused by a
    /// grow-down pool.
    pub(crate) base: i64,
    /// How the watermark moves when the band grows by a page: +1 upwards (up and middle
    /// bands), -1 downwards. Lets the one-page hot paths step without a branch.
    pub(crate) step: i64,
    /// Live virtual pages.
    pub(crate) live: usize,
    /// Free virtual page ids (owners only): alloc takes the front, free appends at the back.
    pub(crate) free_ids: VecDeque<i64>,
    /// Lazy mode: free physical pages inside the band, reusable now (FIFO between flushes).
    pub(crate) holes: VecDeque<i64>,
    /// Lazy mode: vacated pages that become holes once their token completes.
    pub(crate) pending: Vec<PendingBatch>,
    pub(crate) pending_pages: usize,
    /// Virtual pages each unretired forward writes, by completion token: a non-urgent
    /// flush moves none of their union (overlapped forwards each have their own set).
    pub(crate) write_sets: Vec<(u64, Vec<i64>)>,
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
    /// # Errors
    /// [`UkvError::Config`] when the tables cannot be allocated (a caller-given size too
    /// large for this machine): an error, never an abort or a capacity-overflow panic.
    pub(crate) fn new(spec: &PoolSpec, geo: Geometry, lazy: bool) -> Result<Self> {
        let virt = geo.num_virtual_pages as usize;
        let mut free_ids = VecDeque::new();
        if spec.id_owner.is_none() {
            free_ids
                .try_reserve_exact(virt)
                .map_err(|_| table_error(spec, virt))?;
        }
        let mut pool = SubPool {
            name: spec.name.clone(),
            owner: spec.id_owner,
            dependents: false,
            plain_free: false,
            lazy,
            v2p: table(spec, virt + 1, TOMBSTONE)?,
            p2v: table(spec, geo.num_pages as usize + 1, TOMBSTONE)?,
            wm: 0,
            base: geo.min_page_index,
            step: if geo.direction == Direction::Down {
                -1
            } else {
                1
            },
            live: 0,
            free_ids,
            holes: VecDeque::new(),
            pending: Vec::new(),
            pending_pages: 0,
            write_sets: Vec::new(),
            group: None,
            marks: table(spec, virt + 1, 0)?,
            mark_gen: 0,
            stats: PoolStats::default(),
            scratch: Vec::new(),
            geo,
        };
        pool.clear();
        Ok(pool)
    }

    /// Forget every allocation: all ids free, tables reset, watermark at the start.
    pub(crate) fn clear(&mut self) {
        self.base = self.geo.min_page_index;
        self.wm = match self.geo.direction {
            Direction::Up | Direction::Middle => self.base,
            Direction::Down => self.geo.num_pages - 1,
        };
        if self.geo.direction == Direction::Middle {
            self.park();
        }
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
        self.write_sets.clear();
        self.group = None;
        self.update_plain_free();
    }

    /// Recompute `plain_free` (after a free group opens or closes).
    pub(crate) fn update_plain_free(&mut self) {
        self.plain_free =
            self.group.is_none() && !self.dependents && self.geo.direction != Direction::Middle;
    }

    /// An empty middle band has no place until its next allocation anchors it. It waits at
    /// the top of its index space, where the grow-up fast path (`index_room` 0) sends every
    /// fresh allocation to the arena's slow path, which anchors it.
    pub(crate) fn park(&mut self) {
        self.base = self.geo.num_pages;
        self.wm = self.geo.num_pages;
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
            Direction::Up | Direction::Middle => self.wm - self.base,
            Direction::Down => self.geo.num_pages - 1 - self.wm,
        }
    }

    /// Lowest byte of the band (inclusive). Equals `high_byte` when the band is empty.
    pub fn low_byte(&self) -> u64 {
        // One multiply on the frontier hot path: pick the page, then convert.
        let page = match self.geo.direction {
            Direction::Up | Direction::Middle => self.base,
            Direction::Down => self.wm + 1,
        };
        self.geo.page_start(page)
    }

    /// One past the highest byte of the band.
    pub fn high_byte(&self) -> u64 {
        let page = match self.geo.direction {
            Direction::Up | Direction::Middle => self.wm,
            Direction::Down => self.geo.num_pages,
        };
        self.geo.page_start(page)
    }

    /// Pages the watermark can still advance by in the index space alone (a middle band:
    /// at its top end).
    pub(crate) fn index_room(&self) -> i64 {
        match self.geo.direction {
            Direction::Up | Direction::Middle => self.geo.num_pages - self.wm,
            Direction::Down => self.wm + 1 - self.geo.min_page_index,
        }
    }

    /// Whether physical page `p` lies inside the band.
    #[inline]
    pub(crate) fn in_band(&self, p: i64) -> bool {
        match self.geo.direction {
            Direction::Up | Direction::Middle => p >= self.base && p < self.wm,
            Direction::Down => p > self.wm && p < self.geo.num_pages,
        }
    }

    /// The page of a non-negative token id (a shift for power-of-two page sizes).
    #[inline]
    pub(crate) fn page_of(&self, token: i64) -> i64 {
        let ps = self.geo.page_size;
        if ps.is_power_of_two() {
            token >> ps.trailing_zeros()
        } else {
            token / ps as i64
        }
    }

    /// Whether virtual token `token` is live (its page is bound). Out-of-range ids are not.
    pub fn is_token_allocated(&self, token: i64) -> bool {
        if token < 0 {
            return false;
        }
        let page = self.page_of(token);
        page < self.geo.num_virtual_pages && self.v2p[page as usize] != TOMBSTONE
    }

    pub(crate) fn next_mark_gen(&mut self) -> u32 {
        self.mark_gen = self.mark_gen.wrapping_add(1);
        if self.mark_gen == 0 {
            self.marks.fill(0);
            self.mark_gen = 1;
        }
        self.mark_gen
    }

    /// Check that a virtual page id is a real one, naming `id` (in `unit`s) on failure.
    #[inline]
    pub(crate) fn check_virtual_page(&self, page: i64, id: i64, unit: &'static str) -> Result<()> {
        if id >= 0 && page >= self.geo.min_virtual_page && page < self.geo.num_virtual_pages {
            return Ok(());
        }
        Err(self.bad_virtual_page(page, id, unit))
    }

    /// The error for a page that [`SubPool::check_virtual_page`] rejects (kept off the hot path).
    #[cold]
    #[inline(never)]
    fn bad_virtual_page(&self, page: i64, id: i64, unit: &'static str) -> UkvError {
        if id < 0 {
            return self.invalid(id, unit, "negative".into());
        }
        if page >= self.geo.num_virtual_pages {
            return self.invalid(
                id,
                unit,
                format!(
                    "beyond the id space ({} {unit}s)",
                    self.geo.num_virtual_pages * self.unit_scale(unit)
                ),
            );
        }
        self.invalid(
            id,
            unit,
            format!(
                "reserved (ids below {} are the padding sink)",
                self.geo.min_virtual_page * self.unit_scale(unit)
            ),
        )
    }

    fn unit_scale(&self, unit: &str) -> i64 {
        if unit == "token" {
            self.geo.page_size as i64
        } else {
            1
        }
    }

    #[cold]
    pub(crate) fn invalid(&self, id: i64, unit: &'static str, reason: String) -> UkvError {
        UkvError::InvalidId {
            pool: self.name.clone(),
            id,
            unit,
            reason,
        }
    }

    #[cold]
    #[inline(never)]
    fn not_live(&self, id: i64, unit: &'static str, reason: &str) -> UkvError {
        UkvError::DoubleFree {
            pool: self.name.clone(),
            id,
            unit,
            reason: reason.to_string(),
        }
    }

    /// Whether `tokens` can be released as they are: page size 1, strictly ascending (so
    /// no repeats), every one a real, live page. Then [`SubPool::pages_to_free`] would
    /// return them unchanged. False leaves the checks (and any error) to that function.
    pub(crate) fn tokens_are_live_pages(&self, tokens: &[i64]) -> bool {
        if self.geo.page_size != 1 {
            return false;
        }
        let first = self.geo.min_virtual_page;
        // Negative ids wrap far beyond `span`.
        let span = (self.geo.num_virtual_pages - first) as u64;
        let mut prev = -1i64;
        for &t in tokens {
            if t <= prev
                || t.wrapping_sub(first) as u64 >= span
                || self.v2p[t as usize] == TOMBSTONE
            {
                return false;
            }
            prev = t;
        }
        true
    }

    /// Validate a free request and turn tokens into distinct live virtual pages, written to
    /// `out`. Tokens of one page free the whole page; at page size 1 a repeated id is a
    /// double free. Nothing is mutated except the duplicate marks.
    pub(crate) fn pages_to_free(&mut self, tokens: &[i64], out: &mut Vec<i64>) -> Result<()> {
        out.clear();
        if let [t] = *tokens {
            // One token cannot repeat: no duplicate marks needed.
            let page = self.live_page_of(t)?;
            out.push(page);
            return Ok(());
        }
        if self.group.is_none() && self.collect_live_pages(tokens, out) {
            return Ok(());
        }
        // The exact path: names the first offending token (or queues inside a free group).
        out.clear();
        let ps = self.geo.page_size as i64;
        let gen = self.next_mark_gen();
        out.reserve(tokens.len());
        for &t in tokens {
            let page = self.live_page_of(t)?;
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

    /// The fast half of [`SubPool::pages_to_free`] (no free group open): one pass with the
    /// page shift hoisted and one unsigned range compare per token. Returns false as soon
    /// as anything is off, leaving the exact error to the slow path.
    ///
    /// Duplicates are found without the marks while the pages come ascending (how tokens
    /// are usually handed back): a repeat can then only be the previous page. At the first
    /// descent the pages collected so far are marked and the marks take over, so the output
    /// is the same as with marks throughout.
    fn collect_live_pages(&mut self, tokens: &[i64], out: &mut Vec<i64>) -> bool {
        let ps = self.geo.page_size as i64;
        if ps > 1 && tokens.len() % ps as usize == 0 && self.collect_whole_pages(tokens, out) {
            return true;
        }
        out.clear();
        let (shift, first, span) = self.page_range_params();
        out.reserve(tokens.len());
        // Pages are at least `first >= 0` once range-checked, so -1 is below all of them.
        let mut prev = -1i64;
        let mut gen = None;
        for &t in tokens {
            let page = match shift {
                Some(s) => t >> s,
                None => t / ps,
            };
            if page.wrapping_sub(first) as u64 >= span || self.v2p[page as usize] == TOMBSTONE {
                return false;
            }
            let g = match gen {
                None if page > prev => {
                    prev = page;
                    out.push(page);
                    continue;
                }
                None if page == prev => {
                    if ps == 1 {
                        return false;
                    }
                    continue;
                }
                None => self.start_marks(out, &mut gen),
                Some(g) => g,
            };
            let mark = &mut self.marks[page as usize];
            if *mark == g {
                if ps == 1 {
                    return false;
                }
                continue;
            }
            *mark = g;
            out.push(page);
        }
        true
    }

    /// What the unchecked free loops need to map tokens to pages and range-check them with
    /// one unsigned compare: the page shift (power-of-two page sizes), the first real page,
    /// and the number of real pages (negative tokens give negative pages, which wrap far
    /// beyond it).
    #[inline]
    fn page_range_params(&self) -> (Option<u32>, i64, u64) {
        let ps = self.geo.page_size;
        let first = self.geo.min_virtual_page;
        let shift = ps.is_power_of_two().then(|| ps.trailing_zeros());
        (shift, first, (self.geo.num_virtual_pages - first) as u64)
    }

    /// Switch duplicate detection to the marks: a fresh generation, with every page of
    /// `seen` marked.
    #[cold]
    #[inline(never)]
    fn start_marks(&mut self, seen: &[i64], gen: &mut Option<u32>) -> u32 {
        let g = self.next_mark_gen();
        for &q in seen {
            self.marks[q as usize] = g;
        }
        *gen = Some(g);
        g
    }

    /// [`SubPool::collect_live_pages`] for tokens that come as whole pages, each page's
    /// tokens ascending from its first (how a request hands its tokens back): one check per
    /// page plus one compare per token. False when the tokens are not laid out that way or
    /// anything is off. Duplicate pages are found as in `collect_live_pages`.
    fn collect_whole_pages(&mut self, tokens: &[i64], out: &mut Vec<i64>) -> bool {
        let ps = self.geo.page_size as i64;
        if !page_runs(tokens, ps as usize) {
            return false;
        }
        let (shift, first, span) = self.page_range_params();
        out.reserve(tokens.len() / ps as usize);
        let mut prev = -1i64;
        let mut gen = None;
        for &base in tokens.iter().step_by(ps as usize) {
            // For a power-of-two page size, a mask and an arithmetic shift give the same
            // (floored) remainder and page as `rem_euclid` / `div_euclid`, without a divide.
            let (aligned, page) = match shift {
                Some(s) => (base & (ps - 1) == 0, base >> s),
                None => (base.rem_euclid(ps) == 0, base.div_euclid(ps)),
            };
            if !aligned
                || page.wrapping_sub(first) as u64 >= span
                || self.v2p[page as usize] == TOMBSTONE
            {
                return false;
            }
            let g = match gen {
                None if page > prev => {
                    prev = page;
                    out.push(page);
                    continue;
                }
                None if page == prev => continue,
                None => self.start_marks(out, &mut gen),
                Some(g) => g,
            };
            let mark = &mut self.marks[page as usize];
            if *mark != g {
                *mark = g;
                out.push(page);
            }
        }
        true
    }

    /// The page of token `t`, checked to be a real, live page not queued in a free group.
    #[inline(always)]
    pub(crate) fn live_page_of(&self, t: i64) -> Result<i64> {
        let page = if t >= 0 { self.page_of(t) } else { -1 };
        self.check_virtual_page(page, t, "token")?;
        if self.v2p[page as usize] == TOMBSTONE {
            return Err(self.not_live(t, "token", "already freed or never allocated"));
        }
        if self.group_contains(page) {
            return Err(self.not_live(t, "token", "already queued in the open free group"));
        }
        Ok(page)
    }

    /// The page of `t` when [`SubPool::live_page_of`] would accept it, else None (no
    /// error is built: for frees that skip what is not live).
    #[inline(always)]
    pub(crate) fn try_live_page_of(&self, t: i64) -> Option<i64> {
        let page = if t >= 0 { self.page_of(t) } else { -1 };
        let live = page >= self.geo.min_virtual_page
            && page < self.geo.num_virtual_pages
            && self.v2p[page as usize] != TOMBSTONE
            && !self.group_contains(page);
        live.then_some(page)
    }

    #[inline(always)]
    pub(crate) fn group_contains(&self, page: i64) -> bool {
        self.group.as_ref().is_some_and(|g| g.set.contains(&page))
    }

    /// Validate virtual pages for `alloc_with_virtual` (non-owner binding): each one a
    /// real page of the owner's id space, live on `owner`, not bound here yet, not repeated.
    pub(crate) fn check_bindable(&mut self, pages: &[i64], owner: &SubPool) -> Result<()> {
        let gen = self.next_mark_gen();
        for &v in pages {
            self.check_virtual_page(v, v, "page")?;
            if owner.v2p[v as usize] == TOMBSTONE {
                return Err(UkvError::Argument {
                    arg: "virtual_pages",
                    value: v.to_string(),
                    reason: format!("page is not live on the owner {:?}", owner.name),
                });
            }
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
    #[inline(always)]
    pub(crate) fn bind_extension(&mut self, vpages: &[i64], plan: &mut PoolPlan) {
        let start = self.take_fresh(vpages.len() as i64);
        self.bind_run(start, vpages, plan);
    }

    /// Advance the watermark by `n` fresh pages (the arena has checked the frontier) and
    /// return the first of them: they are `start..start + n`, ascending, as
    /// [`SubPool::bind_extension`] binds them.
    #[inline(always)]
    pub(crate) fn take_fresh(&mut self, n: i64) -> i64 {
        match self.geo.direction {
            Direction::Up | Direction::Middle => {
                self.wm += n;
                self.wm - n
            }
            Direction::Down => {
                self.wm -= n;
                self.wm + 1
            }
        }
    }

    /// Middle band: grow at the low end, binding `vpages[i]` to the i-th of the fresh pages
    /// just below the base, ascending. The arena has checked the frontier below.
    pub(crate) fn bind_below(&mut self, vpages: &[i64], plan: &mut PoolPlan) {
        self.base -= vpages.len() as i64;
        self.bind_run(self.base, vpages, plan);
    }

    /// Bind `vpages[i]` to fresh page `start + i`.
    #[inline(always)]
    fn bind_run(&mut self, start: i64, vpages: &[i64], plan: &mut PoolPlan) {
        let n = vpages.len() as i64;
        if vpages.len() <= SMALL_BATCH {
            // A few pages: element-wise beats four `memcpy` calls.
            for (p, &v) in (start..).zip(vpages) {
                self.bind(v, p, plan);
            }
            return;
        }
        // The fresh pages are one ascending run: write p2v and the plan rows as slices.
        let run = start..start + n;
        let v2p = &mut self.v2p[..]; // a slice: its address stays in a register
        for (p, &v) in run.clone().zip(vpages) {
            v2p[v as usize] = p;
        }
        self.p2v[start as usize..(start + n) as usize].copy_from_slice(vpages);
        plan.v2p_rows.extend_from_slice(vpages);
        plan.v2p_vals.extend(run.clone());
        plan.p2v_rows.extend(run);
        plan.p2v_vals.extend_from_slice(vpages);
        self.live += vpages.len();
    }

    /// Bind `v` to the front hole, or else to the next fresh page (the arena has checked
    /// the frontier): the one-page case of the hole-then-extension rule.
    #[inline]
    pub(crate) fn bind_one(&mut self, v: i64, plan: &mut PoolPlan) {
        let p = match self.holes.pop_front() {
            Some(h) => h,
            None => {
                self.wm += self.step;
                self.wm - self.step
            }
        };
        self.bind(v, p, plan);
    }

    /// Bind `v` to the front hole.
    pub(crate) fn bind_hole(&mut self, v: i64, plan: &mut PoolPlan) {
        // The arena only calls this when holes are available.
        if let Some(p) = self.holes.pop_front() {
            self.bind(v, p, plan);
        }
    }

    /// Bind `vpages[i]` to the i-th front hole (FIFO); the arena only calls this with at
    /// most as many pages as there are holes. The rows come out as from one
    /// [`SubPool::bind_hole`] per page; a batch writes them as slices.
    #[inline(never)] // the batch path: kept out of the callers' small-alloc frames
    pub(crate) fn bind_holes(&mut self, vpages: &[i64], plan: &mut PoolPlan) {
        let n = vpages.len().min(self.holes.len());
        if n <= SMALL_BATCH {
            vpages.iter().for_each(|&v| self.bind_hole(v, plan));
            return;
        }
        let vpages = &vpages[..n];
        let (front, back) = self.holes.as_slices();
        let k = n.min(front.len());
        let (h1, h2) = (&front[..k], &back[..n - k]);
        let (v2p, p2v) = (&mut self.v2p[..], &mut self.p2v[..]);
        for (&v, &p) in vpages.iter().zip(h1.iter().chain(h2)) {
            v2p[v as usize] = p;
            p2v[p as usize] = v;
        }
        plan.v2p_rows.extend_from_slice(vpages);
        plan.v2p_vals.extend_from_slice(h1);
        plan.v2p_vals.extend_from_slice(h2);
        plan.p2v_rows.extend_from_slice(h1);
        plan.p2v_rows.extend_from_slice(h2);
        plan.p2v_vals.extend_from_slice(vpages);
        self.holes.drain(..n);
        self.live += n;
    }

    #[inline(always)]
    pub(crate) fn bind(&mut self, v: i64, p: i64, plan: &mut PoolPlan) {
        self.v2p[v as usize] = p;
        self.p2v[p as usize] = v;
        plan.set_v2p(v, p);
        plan.set_p2v(p, v);
        self.live += 1;
    }

    /// Release validated live pages. Eager mode compacts the band at once; lazy mode
    /// leaves holes for the next flush.
    pub(crate) fn release(&mut self, vpages: &[i64], plan: &mut PoolPlan) {
        let mut freed = std::mem::take(&mut self.scratch);
        freed.clear();
        // Eager: only the freed pages that stay inside the new band matter (they receive
        // the survivors), so only they are kept, noting whether they come ascending.
        let k = vpages.len() as i64;
        let (v2p, p2v) = (&mut self.v2p[..], &mut self.p2v[..]);
        let ascending = match (self.lazy, self.geo.direction) {
            (true, _) => {
                // Every freed page becomes a hole: one exact-size extend.
                freed.extend(vpages.iter().map(|&v| {
                    let p = std::mem::replace(&mut v2p[v as usize], TOMBSTONE);
                    p2v[p as usize] = TOMBSTONE;
                    p
                }));
                true // unused: holes are sorted when a flush needs them
            }
            (false, Direction::Up | Direction::Middle) => {
                let new_wm = self.wm - k;
                unbind_pages(v2p, p2v, vpages, &mut freed, |p| p < new_wm)
            }
            (false, Direction::Down) => {
                let new_wm = self.wm + k;
                unbind_pages(v2p, p2v, vpages, &mut freed, |p| p > new_wm)
            }
        };
        plan.set_v2p_all(vpages, TOMBSTONE);
        if self.owner.is_none() {
            if vpages.len() <= SMALL_BATCH {
                vpages.iter().for_each(|&v| self.free_ids.push_back(v));
            } else {
                self.free_ids.extend(vpages);
            }
        }
        self.live -= vpages.len();
        if self.lazy {
            plan.set_p2v_all(&freed, TOMBSTONE);
            self.holes.extend(freed.iter());
        } else {
            // The p2v rows of the freed pages are recorded by the compaction, which knows
            // which of them stay tombstones and which receive a survivor.
            self.compact_eager(k, &mut freed, ascending, plan);
        }
        self.scratch = freed;
    }

    /// [`SubPool::release`] of one validated live page, without the batch machinery. Eager:
    /// the band's outermost page (the whole vacated stretch when K = 1) moves into the
    /// freed page unless it is that page; the rows come out as in `compact_eager`.
    pub(crate) fn release_one(&mut self, v: i64, plan: &mut PoolPlan) {
        let p = self.v2p[v as usize];
        self.v2p[v as usize] = TOMBSTONE;
        plan.set_v2p(v, TOMBSTONE);
        if self.owner.is_none() {
            self.free_ids.push_back(v);
        }
        self.live -= 1;
        self.p2v[p as usize] = TOMBSTONE;
        if self.lazy {
            plan.set_p2v(p, TOMBSTONE);
            self.holes.push_back(p);
            return;
        }
        self.wm -= self.step;
        let last = self.wm;
        plan.set_p2v(last, TOMBSTONE);
        if last != p {
            let u = self.p2v[last as usize];
            self.p2v[last as usize] = TOMBSTONE;
            self.v2p[u as usize] = p;
            self.p2v[p as usize] = u;
            plan.set_v2p(u, p);
            plan.set_p2v(p, u);
            plan.push_move(last, p);
            self.record_moves(1);
        }
    }

    /// Eager compaction after freeing `k` physical pages: the band shrinks by `k` pages,
    /// and the i-th smallest survivor of the vacated stretch moves into the i-th smallest
    /// freed page left inside the new band. `dst` holds exactly those freed pages (in any
    /// order; `ascending` when they are already sorted).
    fn compact_eager(&mut self, k: i64, dst: &mut [i64], ascending: bool, plan: &mut PoolPlan) {
        if k == 0 {
            return;
        }
        if !ascending {
            dst.sort_unstable();
        }
        // The vacated stretch `[lo, hi)`.
        let (lo, hi) = match self.geo.direction {
            Direction::Up | Direction::Middle => {
                let new_wm = self.wm - k;
                let band = (new_wm, self.wm);
                self.wm = new_wm;
                band
            }
            Direction::Down => {
                let new_wm = self.wm + k;
                let band = (self.wm + 1, new_wm + 1);
                self.wm = new_wm;
                band
            }
        };
        let mut next_dst = dst.iter();
        let mut moved = 0u64;
        // Every page of the stretch ends up beyond the band: a tombstone.
        plan.p2v_rows.extend(lo..hi);
        plan.p2v_vals
            .resize(plan.p2v_vals.len() + (hi - lo) as usize, TOMBSTONE);
        if dst.is_empty() {
            return; // every page of the stretch was freed (e.g. the top of the band): no survivor
        }
        for src in lo..hi {
            let v = self.p2v[src as usize];
            if v == TOMBSTONE {
                continue; // a freed page of the stretch
            }
            self.p2v[src as usize] = TOMBSTONE;
            // Survivors and destinations are equally many; both walk ascending.
            if let Some(&d) = next_dst.next() {
                self.v2p[v as usize] = d;
                self.p2v[d as usize] = v;
                plan.set_v2p(v, d);
                plan.set_p2v(d, v);
                plan.push_move(src, d);
                moved += 1;
            }
        }
        self.record_moves(moved);
    }

    pub(crate) fn record_moves(&mut self, moved: u64) {
        if moved > 0 {
            // Saturating: a caller-given page size can make the byte count exceed u64.
            self.stats.pages_moved = self.stats.pages_moved.saturating_add(moved);
            let bytes = moved.saturating_mul(self.geo.page_bytes);
            self.stats.bytes_moved = self.stats.bytes_moved.saturating_add(bytes);
            self.stats.compactions += 1;
        }
    }
}

/// Whether each chunk of `ps` tokens (`tokens.len()` is a multiple of `ps`) counts up by
/// one from its first token: `base, base + 1, ..., base + ps - 1`, by wrapping arithmetic
/// (`base + k` may not exist near `i64::MAX`). One pass over the tokens without early exit,
/// an OR of XORs; common page sizes get a constant chunk length, which the compiler
/// unrolls and vectorizes (a run-time length costs a vector prologue per page).
fn page_runs(tokens: &[i64], ps: usize) -> bool {
    match ps {
        2 => page_runs_of::<2>(tokens),
        4 => page_runs_of::<4>(tokens),
        8 => page_runs_of::<8>(tokens),
        16 => page_runs_of::<16>(tokens),
        32 => page_runs_of::<32>(tokens),
        64 => page_runs_of::<64>(tokens),
        _ => tokens.chunks_exact(ps).all(|c| run_mismatch(c) == 0),
    }
}

fn page_runs_of<const PS: usize>(tokens: &[i64]) -> bool {
    // Blocks of pages, each folded without early exit (vectorized), with an exit between
    // blocks: tokens laid out otherwise (one per page, say) are rejected after one block.
    tokens.chunks(PS * RUN_BLOCK_PAGES).all(|block| {
        block
            .chunks_exact(PS)
            .fold(0, |acc, c| acc | run_mismatch(c))
            == 0
    })
}

/// Pages per block of [`page_runs_of`].
const RUN_BLOCK_PAGES: usize = 16;

/// Zero when `chunk` is `base, base + 1, ...` (`base = chunk[0]`), else nonzero.
#[inline(always)]
fn run_mismatch(chunk: &[i64]) -> i64 {
    let base = chunk[0];
    chunk
        .iter()
        .enumerate()
        .fold(0, |acc, (k, &t)| acc | (t ^ base.wrapping_add(k as i64)))
}

/// Unbind validated live pages `vpages` from both tables, appending to `kept` the physical
/// pages `keep` accepts; returns whether those came ascending. Takes the tables as slices
/// so the loop keeps their addresses in registers (through `&mut Vec` fields the compiler
/// reloads them after every store).
#[inline(always)]
fn unbind_pages(
    v2p: &mut [i64],
    p2v: &mut [i64],
    vpages: &[i64],
    kept: &mut Vec<i64>,
    keep: impl Fn(i64) -> bool,
) -> bool {
    let mut ascending = true;
    let mut prev = i64::MIN;
    for &v in vpages {
        let p = std::mem::replace(&mut v2p[v as usize], TOMBSTONE);
        p2v[p as usize] = TOMBSTONE;
        if keep(p) {
            ascending &= prev <= p;
            prev = p;
            kept.push(p);
        }
    }
    ascending
}

/// Whether `v` is sorted ascending (`slice::is_sorted` is newer than the MSRV).
pub(crate) fn is_ascending(v: &[i64]) -> bool {
    v.windows(2).all(|w| w[0] <= w[1])
}

/// A table of `len` copies of `fill`, or a config error when it cannot be allocated.
fn table<T: Copy>(spec: &PoolSpec, len: usize, fill: T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| table_error(spec, len))?;
    v.resize(len, fill);
    Ok(v)
}

fn table_error(spec: &PoolSpec, rows: usize) -> UkvError {
    UkvError::Config {
        field: "total_bytes",
        value: format!("{rows} table rows for sub-pool {:?}", spec.name),
        reason: "the page tables cannot be allocated on this host; use a smaller buffer or \
                 larger entries"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::page_runs;

    /// The definition `page_runs` must agree with: each chunk's k-th token is its first
    /// plus k (wrapping).
    fn naive(tokens: &[i64], ps: usize) -> bool {
        tokens.chunks_exact(ps).all(|c| {
            c.iter()
                .enumerate()
                .all(|(k, &t)| t.wrapping_sub(c[0]) == k as i64)
        })
    }

    #[test]
    fn page_runs_agrees_with_its_definition_at_every_page_size() {
        for ps in 1..=70usize {
            for base in [0i64, 16 * 7, 3, i64::MAX - 2, i64::MIN] {
                let good: Vec<i64> = (0..3)
                    .flat_map(|p| (0..ps as i64).map(move |k| base.wrapping_add(p * 1000 + k)))
                    .collect();
                assert!(page_runs(&good, ps), "ps {ps} base {base}");
                assert_eq!(page_runs(&good, ps), naive(&good, ps));
                // Any single token off by one anywhere breaks its page's run (a page's first
                // token moves the whole run, so only later offsets are bent).
                for j in 0..good.len() {
                    let mut bad = good.clone();
                    bad[j] = bad[j].wrapping_add(1);
                    assert_eq!(page_runs(&bad, ps), naive(&bad, ps), "ps {ps} j {j}");
                    if j % ps != 0 {
                        assert!(!page_runs(&bad, ps), "ps {ps} base {base} j {j}");
                    }
                }
            }
        }
    }
}
