//! The arena: one byte range shared by sub-pools that grow from its two ends.
//!
//! The arena is a chain of bands, lowest bytes first: a grow-up sub-pool at the low end, a
//! grow-down sub-pool at the high end, and optionally one middle band floating between them
//! (see `middle.rs` for how it grows and slides). Every check goes through a band's
//! neighbours in the chain (`limit_above` / `limit_below`), never through "the other pool";
//! an empty middle band is transparent (the two ends are then each other's neighbours).
//!
//! The frontier rule, `high_byte(band i) <= low_byte(band i + 1)`, is checked in exact bytes
//! on every physical take, eager or lazy, in both directions.

use crate::capacity::{slot_of, Band, Bands};
use crate::error::{Result, UkvError};
use crate::geometry::{reserved_floor, Direction, Geometry, PoolSpec};
use crate::lazy::FlushMode;
use std::collections::HashSet;

use crate::plan::Plan;
use crate::subpool::{FreeGroup, SubPool, SMALL_BATCH, TOMBSTONE};

/// Default cap on the page moves of one non-urgent flush pass.
pub const DEFAULT_MAX_MOVES_PER_FLUSH: usize = 4096;

/// What the caller declares about the whole arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArenaConfig {
    /// Bytes of the shared buffer.
    pub total_bytes: u64,
    /// The sub-pools: one growing up and one growing down, plus at most one middle band.
    pub pools: Vec<PoolSpec>,
    /// Lazy compaction (holes + flush) instead of eager compaction at free time.
    pub lazy: bool,
    /// Cap on page moves per non-urgent flush pass.
    pub max_moves_per_flush: usize,
}

impl ArenaConfig {
    /// A two-pool eager configuration with the default move cap.
    pub fn new(total_bytes: u64, pools: Vec<PoolSpec>) -> Self {
        ArenaConfig {
            total_bytes,
            pools,
            lazy: false,
            max_moves_per_flush: DEFAULT_MAX_MOVES_PER_FLUSH,
        }
    }
}

/// The bands on either side of one band in the chain.
#[derive(Debug, Clone, Copy, Default)]
struct Links {
    /// The band just above (higher bytes), if any.
    above: Option<usize>,
    /// The band just below (lower bytes), if any.
    below: Option<usize>,
}

/// Neighbours of every pool, from the band order.
fn links_of(chain: &[usize], n: usize) -> Vec<Links> {
    let mut links = vec![Links::default(); n];
    for (pos, &i) in chain.iter().enumerate() {
        links[i].above = chain.get(pos + 1).copied();
        links[i].below = pos.checked_sub(1).map(|q| chain[q]);
    }
    links
}

/// The two-ended arena: sub-pools, their frontier, and the plan of the last operation.
#[derive(Debug, Clone)]
pub struct Arena {
    pub(crate) total_bytes: u64,
    floor: u64,
    pub(crate) pools: Vec<SubPool>,
    /// Pool indices in band order, lowest bytes first.
    chain: Vec<usize>,
    /// Each pool's neighbours in the chain (hot-path lookups). Derived from `chain`, and
    /// re-derived for the two ends whenever the middle band opens or empties.
    links: Vec<Links>,
    /// The middle band's pool, if the arena has one.
    pub(crate) middle: Option<usize>,
    /// Pools in the order their page moves must run (see [`Arena::move_order`]).
    order: Vec<usize>,
    pub(crate) plan: Plan,
    pub(crate) latest: Option<u64>,
    max_moves: usize,
    pub(crate) scratch: Vec<i64>,
}

impl Arena {
    /// Build an arena; every id starts free.
    ///
    /// # Errors
    /// [`UkvError::Config`] for an empty or duplicate name, a zero size, a wrong number
    /// of pools or directions, a bad id owner, or a buffer too small for the floor.
    pub fn new(cfg: ArenaConfig) -> Result<Self> {
        let chain = validate_pools(&cfg.pools)?;
        if cfg.max_moves_per_flush == 0 {
            return Err(UkvError::Config {
                field: "max_moves_per_flush",
                value: "0".into(),
                reason: "must be positive".into(),
            });
        }
        let floor = reserved_floor(&cfg.pools);
        let mut geos = cfg
            .pools
            .iter()
            .map(|s| Geometry::new(s, cfg.total_bytes, floor))
            .collect::<Result<Vec<_>>>()?;
        for (i, spec) in cfg.pools.iter().enumerate() {
            if let Some(owner) = spec.id_owner {
                geos[i].num_virtual_pages = geos[owner].num_pages;
                geos[i].min_virtual_page = geos[owner].min_page_index;
            }
        }
        let mut pools: Vec<SubPool> = cfg
            .pools
            .iter()
            .zip(geos)
            .map(|(s, g)| SubPool::new(s, g, cfg.lazy))
            .collect::<Result<_>>()?;
        for spec in &cfg.pools {
            if let Some(owner) = spec.id_owner {
                pools[owner].dependents = true;
            }
        }
        for p in &mut pools {
            p.update_plain_free();
        }
        let middle = pools
            .iter()
            .position(|p| p.geo.direction == Direction::Middle);
        let mut order: Vec<usize> = chain
            .iter()
            .copied()
            .filter(|&i| middle != Some(i))
            .collect();
        order.extend(middle);
        let mut arena = Arena {
            total_bytes: cfg.total_bytes,
            floor,
            plan: Plan::with_pools(pools.len()),
            links: links_of(&chain, pools.len()),
            middle,
            order,
            pools,
            chain,
            latest: None,
            max_moves: cfg.max_moves_per_flush,
            scratch: Vec::new(),
        };
        arena.relink();
        Ok(arena)
    }

    /// Point the two ends at each other while the middle band is empty (it is transparent
    /// then, and parked: see [`SubPool::park`]), and at the middle band while it holds
    /// pages. No-op without a middle band.
    #[inline]
    pub(crate) fn relink(&mut self) {
        let Some(m) = self.middle else { return };
        let (up, down) = (self.chain[0], self.chain[2]);
        let open = self.pools[m].span_pages() > 0;
        if !open {
            self.pools[m].park();
        }
        self.links[up].above = Some(if open { m } else { down });
        self.links[down].below = Some(if open { m } else { up });
    }

    /// The neighbour of pool `i` in the chain above it (higher bytes), as linked now.
    pub(crate) fn above(&self, i: usize) -> Option<usize> {
        self.links[i].above
    }

    /// The neighbour of pool `i` in the chain below it (lower bytes), as linked now.
    pub(crate) fn below(&self, i: usize) -> Option<usize> {
        self.links[i].below
    }

    /// Bytes of the shared buffer.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes `[0, floor)` are the padding sink.
    pub fn reserved_floor(&self) -> u64 {
        self.floor
    }

    /// Number of sub-pools.
    pub fn num_pools(&self) -> usize {
        self.pools.len()
    }

    /// Sub-pool `i` (read-only).
    ///
    /// # Panics
    /// If `i` is out of range; use [`Arena::try_pool`] on caller input.
    pub fn pool(&self, i: usize) -> &SubPool {
        &self.pools[i]
    }

    /// Sub-pool `i`, or an argument error naming `i`.
    #[inline]
    pub fn try_pool(&self, i: usize) -> Result<&SubPool> {
        match self.pools.get(i) {
            Some(p) => Ok(p),
            None => Err(self.no_such_pool(i)),
        }
    }

    #[cold]
    fn no_such_pool(&self, i: usize) -> UkvError {
        UkvError::Argument {
            arg: "pool",
            value: i.to_string(),
            reason: format!("the arena has {} sub-pools", self.pools.len()),
        }
    }

    /// Index of the sub-pool called `name`.
    pub fn pool_index(&self, name: &str) -> Option<usize> {
        self.pools.iter().position(|p| p.name == name)
    }

    /// What the last operation asks the caller to do.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Completion token of the newest forward still in flight, if any.
    pub fn latest_token(&self) -> Option<u64> {
        self.latest
    }

    // ----- capacity ---------------------------------------------------------------------

    /// Bytes between the band of `i` and its neighbour in its growth direction (0 for an
    /// out-of-range `i`).
    pub fn gap_bytes(&self, i: usize) -> u64 {
        let Some(p) = self.pools.get(i) else {
            return 0; // no such pool: no room (like `is_token_allocated`, never a panic)
        };
        match p.geo.direction {
            Direction::Up => self.limit_above(i).saturating_sub(p.high_byte()),
            Direction::Down => p.low_byte().saturating_sub(self.limit_below(i)),
            // A middle band grows into the gaps on both of its sides.
            Direction::Middle if p.span_pages() == 0 => {
                self.limit_above(i).saturating_sub(self.limit_below(i))
            }
            Direction::Middle => {
                self.limit_above(i).saturating_sub(p.high_byte())
                    + p.low_byte().saturating_sub(self.limit_below(i))
            }
        }
    }

    /// Pages `alloc` can take from pool `i` right now, without compacting anything (0 for
    /// an out-of-range `i`).
    pub fn available_pages(&self, i: usize) -> i64 {
        let Some(p) = self.pools.get(i) else { return 0 };
        if self.middle.is_some() {
            // An end band's allocation may slide the middle band, which packs it.
            let bands = self.bands(|j| self.middle == Some(j) && j != i);
            return p.holes.len() as i64 + bands.room(slot_of(p.geo.direction));
        }
        p.holes.len() as i64 + self.extension_room(i, 0)
    }

    /// Pages `alloc` on pool `i` is guaranteed to get, counting the holes and pending pages
    /// an urgent flush of the neighbour would turn into gap (0 for an out-of-range `i`).
    pub fn schedulable_pages(&self, i: usize) -> i64 {
        if i >= self.pools.len() {
            return 0;
        }
        if self.middle.is_some() {
            // An allocation flushes the other bands urgently (the middle one by packing it
            // as it slides): every pool but `i` counts as packed.
            let slot = slot_of(self.pools[i].geo.direction);
            let packed = self.bands(|j| j != i).room(slot);
            return self
                .available_pages(i)
                .max(self.pools[i].holes.len() as i64 + packed);
        }
        let extra = self
            .growth_neighbour(i)
            .map_or(0, |n| self.drainable_bytes(n));
        self.pools[i].holes.len() as i64 + self.extension_room(i, extra)
    }

    /// A snapshot of every band, those for which `packed(pool)` holds packed down to their
    /// live pages.
    pub(crate) fn bands(&self, packed: impl Fn(usize) -> bool) -> Bands {
        let mut bands = Bands::new(self.total_bytes);
        for (j, p) in self.pools.iter().enumerate() {
            bands.set(slot_of(p.geo.direction), Band::of(p, packed(j)));
        }
        bands
    }

    fn drainable_bytes(&self, n: usize) -> u64 {
        let p = &self.pools[n];
        (p.holes.len() + p.pending_pages) as u64 * p.geo.page_bytes
    }

    /// Fresh pages the watermark of `i` may advance by, given `extra` more bytes of gap.
    fn extension_room(&self, i: usize, extra: u64) -> i64 {
        let p = &self.pools[i];
        let by_bytes = (self.gap_bytes(i) + extra) / p.geo.page_bytes;
        (by_bytes.min(i64::MAX as u64) as i64)
            .min(p.index_room())
            .max(0)
    }

    /// The lowest byte an up-growing band `i` may not reach.
    #[inline]
    fn limit_above(&self, i: usize) -> u64 {
        match self.links[i].above {
            Some(n) => self.pools[n].low_byte(),
            None => self.total_bytes,
        }
    }

    /// The highest byte (exclusive) a down-growing band `i` must stay above.
    #[inline]
    fn limit_below(&self, i: usize) -> u64 {
        match self.links[i].below {
            Some(n) => self.pools[n].high_byte(),
            None => 0,
        }
    }

    /// The band that pool `i` grows towards (two-band arenas).
    #[inline]
    fn growth_neighbour(&self, i: usize) -> Option<usize> {
        match self.pools[i].geo.direction {
            Direction::Up => self.links[i].above,
            Direction::Down => self.links[i].below,
            Direction::Middle => None,
        }
    }

    /// Whether pool `i` may take `n` fresh pages where its band stands now, without moving
    /// any other band (the frontier rule, exact in bytes). For a middle band: above its top
    /// (see [`Arena::fits_in_place`] for both of its ends).
    #[inline(always)]
    pub(crate) fn can_extend(&self, i: usize, n: i64) -> bool {
        // A middle band gets the grow-up check above its top only (a parked, empty one
        // none): enough for its fast path; `make_room_with_middle` sees the rest.
        let p = &self.pools[i];
        if n > p.index_room() {
            return false;
        }
        let pb = p.geo.page_bytes;
        match p.geo.direction {
            Direction::Up | Direction::Middle => (p.wm + n) as u64 * pb <= self.limit_above(i),
            Direction::Down => (p.wm - n + 1) as u64 * pb >= self.limit_below(i),
        }
    }

    /// [`Arena::can_extend`] with a middle band's growth at both ends and anchoring.
    pub(crate) fn fits_in_place(&self, i: usize, n: i64) -> bool {
        if self.middle == Some(i) {
            n <= self.middle_room_now(i)
        } else {
            self.can_extend(i, n)
        }
    }

    // ----- allocation -------------------------------------------------------------------

    #[inline]
    fn check_pool(&self, i: usize) -> Result<()> {
        self.try_pool(i).map(|_| ())
    }

    #[inline]
    pub(crate) fn require_owner(&self, i: usize, op: &str) -> Result<()> {
        self.check_pool(i)?;
        if self.pools[i].owner.is_some() {
            return Err(self.not_owner(i, op));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn not_owner(&self, i: usize, op: &str) -> UkvError {
        UkvError::Argument {
            arg: "pool",
            value: self.pools[i].name.clone(),
            reason: format!("{op} needs a sub-pool that mints its own ids"),
        }
    }

    /// Allocate `num_pages` whole pages on owner pool `i`. Returns false, with nothing
    /// changed, when they do not fit even after an urgent flush of the neighbour. On
    /// success, `plan().pages` holds the virtual pages and `plan().tokens` their tokens.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool or a non-owner pool.
    pub fn alloc(&mut self, i: usize, num_pages: usize) -> Result<bool> {
        self.require_owner(i, "alloc")?;
        self.plan.reset();
        let ok = if num_pages == 1 && self.middle != Some(i) {
            self.alloc_one(i)
        } else if num_pages <= SMALL_BATCH && num_pages > 0 && self.middle != Some(i) {
            self.alloc_few(i, num_pages)
        } else {
            let ok = self.alloc_pages(i, num_pages);
            if ok {
                self.expand_tokens(i);
            }
            ok
        };
        self.finish_plan();
        Ok(ok)
    }

    /// Hot path of [`Arena::alloc`] for one page (decode): `alloc_pages(i, 1)` and
    /// `expand_tokens(i)` without the batch machinery.
    fn alloc_one(&mut self, i: usize) -> bool {
        if self.pools[i].free_ids.is_empty() || !self.make_room(i, 1) {
            return false;
        }
        let pool = &mut self.pools[i];
        let Some(v) = pool.free_ids.pop_front() else {
            return false;
        };
        pool.bind_one(v, &mut self.plan.pools[i]);
        self.plan.pages.push(v);
        let ps = pool.geo.page_size as i64;
        if ps == 1 {
            self.plan.tokens.push(v);
        } else {
            self.plan.tokens.extend(v * ps..(v + 1) * ps);
        }
        true
    }

    /// [`Arena::alloc`] of `2..=SMALL_BATCH` pages on an end band (a request's few pages):
    /// the state and plan of `alloc_pages` + `expand_tokens` (ids from the front, holes
    /// first, then one fresh ascending run), written page by page in one pass without
    /// going through `plan.pages` three times.
    fn alloc_few(&mut self, i: usize, n: usize) -> bool {
        if n > self.pools[i].free_ids.len() || !self.make_room(i, n as i64) {
            return false;
        }
        let pool = &mut self.pools[i];
        let plan = &mut self.plan.pools[i];
        let n_holes = pool.holes.len().min(n);
        let mut next = pool.take_fresh((n - n_holes) as i64);
        let ps = pool.geo.page_size as i64;
        for k in 0..n {
            // `n <= free_ids.len()` was checked above: every pop yields an id.
            let Some(v) = pool.free_ids.pop_front() else {
                break;
            };
            // Holes first (FIFO), then the fresh run; an eager pool has no holes to pop.
            let hole = if k < n_holes {
                pool.holes.pop_front()
            } else {
                None
            };
            let p = match hole {
                Some(h) => h,
                None => {
                    next += 1;
                    next - 1
                }
            };
            pool.bind(v, p, plan);
            self.plan.pages.push(v);
            if ps == 1 {
                self.plan.tokens.push(v);
            } else {
                self.plan.tokens.extend(v * ps..(v + 1) * ps);
            }
        }
        true
    }

    /// Allocate `num_tokens` tokens (a multiple of the page size) on owner pool `i`.
    ///
    /// # Errors
    /// [`UkvError::Argument`] when `num_tokens` is negative or not a page multiple.
    pub fn alloc_tokens(&mut self, i: usize, num_tokens: i64) -> Result<bool> {
        self.require_owner(i, "alloc")?;
        let pages = self.pages_of_tokens(i, num_tokens)?;
        self.alloc(i, pages)
    }

    /// `num_tokens` as whole pages of pool `i`, or an argument error.
    pub(crate) fn pages_of_tokens(&self, i: usize, num_tokens: i64) -> Result<usize> {
        let ps = self.pools[i].geo.page_size as i64;
        if num_tokens < 0 || num_tokens % ps != 0 {
            return Err(UkvError::Argument {
                arg: "need_size",
                value: num_tokens.to_string(),
                reason: format!("must be a non-negative multiple of page_size {ps}"),
            });
        }
        Ok((num_tokens / ps) as usize)
    }

    /// Bind caller-given virtual pages (minted by the owner) on non-owner pool `i`.
    /// Returns false, with nothing changed, when they do not fit.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for an owner pool, or a page already bound, repeated, or not
    /// live on the owner; [`UkvError::InvalidId`] for a page outside the owner's id space.
    pub fn alloc_with_virtual(&mut self, i: usize, pages: &[i64]) -> Result<bool> {
        self.check_pool(i)?;
        let Some(owner) = self.pools[i].owner else {
            return Err(UkvError::Argument {
                arg: "pool",
                value: self.pools[i].name.clone(),
                reason: "alloc_with_virtual needs a sub-pool that binds another pool's ids".into(),
            });
        };
        let (o, p) = two_pools(&mut self.pools, owner, i);
        p.check_bindable(pages, o)?;
        self.plan.reset();
        let ok = self.make_room(i, pages.len() as i64);
        if ok {
            self.plan.pages.extend_from_slice(pages);
            self.bind_pages(i);
            self.expand_tokens(i);
        }
        self.finish_plan();
        Ok(ok)
    }

    /// Take `n` free ids of owner pool `i` and bind them; the plan's `pages` gets them.
    #[inline(always)]
    pub(crate) fn alloc_pages(&mut self, i: usize, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        if n > self.pools[i].free_ids.len() || !self.make_room(i, n as i64) {
            return false;
        }
        self.take_ids(i, n);
        self.bind_pages(i);
        true
    }

    /// Move the first `n` free ids of owner pool `i` (there are that many) to the plan's
    /// pages.
    #[inline(always)]
    pub(crate) fn take_ids(&mut self, i: usize, n: usize) {
        let (free_ids, pages) = (&mut self.pools[i].free_ids, &mut self.plan.pages);
        if n <= SMALL_BATCH {
            // `drain` costs more than the copy itself for a handful of ids.
            // `n <= free_ids.len()` was checked above: every pop yields an id.
            for _ in 0..n {
                if let Some(v) = free_ids.pop_front() {
                    pages.push(v);
                }
            }
        } else {
            // Copy the ids as (at most two) slices, then drop them from the front at once.
            let (front, back) = free_ids.as_slices();
            let k = n.min(front.len());
            pages.extend_from_slice(&front[..k]);
            pages.extend_from_slice(&back[..n - k]);
            free_ids.drain(..n);
        }
    }

    /// Make sure `n` pages can be taken from pool `i`, flushing its neighbour urgently
    /// when that is enough and only then.
    #[inline]
    pub(crate) fn make_room(&mut self, i: usize, n: i64) -> bool {
        self.fits_now(i, n) || self.make_room_by_flushing(i, n)
    }

    /// The slow half of [`Arena::make_room`]: an urgent flush of the neighbour, only when
    /// that is enough.
    #[inline(never)]
    fn make_room_by_flushing(&mut self, i: usize, n: i64) -> bool {
        if self.middle.is_some() {
            return self.make_room_with_middle(i, n);
        }
        if n > self.schedulable_pages(i) {
            return false;
        }
        if let Some(nb) = self.growth_neighbour(i) {
            self.flush_one(nb, true);
        }
        self.fits_now(i, n)
    }

    /// `n <= available_pages(i)`, decided without a division (the alloc hot path): the
    /// holes, then a fresh extension that the exact frontier check allows.
    #[inline(always)]
    fn fits_now(&self, i: usize, n: i64) -> bool {
        let fresh = n - self.pools[i].holes.len() as i64;
        fresh <= 0 || self.can_extend(i, fresh)
    }

    /// Bind `plan.pages` on pool `i`: holes first (FIFO), then a fresh ascending extension.
    #[inline]
    pub(crate) fn bind_pages(&mut self, i: usize) {
        if self.middle == Some(i) {
            return self.bind_middle(i);
        }
        let n = self.plan.pages.len() as i64;
        let n_holes = (self.pools[i].holes.len() as i64).min(n);
        // `make_room` ran the exact frontier check on this very state just before.
        debug_assert!(self.can_extend(i, n - n_holes), "frontier rule would break");
        let pool = &mut self.pools[i];
        let plan = &mut self.plan.pools[i];
        pool.bind_holes(&self.plan.pages[..n_holes as usize], plan);
        pool.bind_extension(&self.plan.pages[n_holes as usize..], plan);
    }

    /// Expand the plan's pages of pool `i` into tokens, ascending inside each page.
    pub(crate) fn expand_tokens(&mut self, i: usize) {
        let ps = self.pools[i].geo.page_size as i64;
        let plan = &mut self.plan;
        if ps == 1 {
            if plan.pages.len() <= SMALL_BATCH {
                // A `memcpy` call costs more than a few pushes.
                plan.pages.iter().for_each(|&v| plan.tokens.push(v));
            } else {
                plan.tokens.extend_from_slice(&plan.pages);
            }
        } else {
            plan.tokens.reserve(plan.pages.len() * ps as usize);
            for &v in &plan.pages {
                plan.tokens.extend(v * ps..(v + 1) * ps);
            }
        }
    }

    pub(crate) fn plan_mut(&mut self) -> &mut Plan {
        &mut self.plan
    }

    /// End of an operation: the plan's value columns were filled as rows were written;
    /// debug builds check them against the tables.
    #[inline]
    pub(crate) fn finish_plan(&mut self) {
        debug_assert!(
            self.pools
                .iter()
                .zip(&self.plan.pools)
                .all(|(pool, plan)| plan.values_match(&pool.v2p, &pool.p2v)),
            "plan values out of sync with the tables"
        );
    }

    /// Keep each changed table row of the plan once, with its final value: after an
    /// operation that compacted a pool and then bound pages of it (rare paths only).
    pub(crate) fn dedupe_plan(&mut self) {
        for (pool, plan) in self.pools.iter().zip(self.plan.pools.iter_mut()) {
            plan.dedupe_rows(&pool.v2p, &pool.p2v);
        }
    }

    // ----- free -------------------------------------------------------------------------

    /// Free the pages of these virtual tokens on pool `i` (a page goes when any of its
    /// tokens is named). Eager mode compacts at once; lazy mode leaves holes. Inside a free
    /// group the pages are only queued. On an owner whose ids another pool binds (the full
    /// side of a SWA pair), a page released here is released there too.
    ///
    /// # Errors
    /// [`UkvError::InvalidId`] for a negative, reserved or out-of-range id;
    /// [`UkvError::DoubleFree`] for an id that is not live or is repeated (page size 1).
    /// Nothing changes on error.
    pub fn free(&mut self, i: usize, tokens: &[i64]) -> Result<()> {
        self.check_pool(i)?;
        if let [t] = *tokens {
            if self.pools[i].plain_free {
                return self.free_one(i, t);
            }
        }
        self.free_many(i, tokens)
    }

    /// [`Arena::free`] of any number of tokens (or inside a free group), kept out of line
    /// so that the one-token hot path does not pay for the batch machinery's registers and
    /// stack frame.
    #[inline(never)]
    fn free_many(&mut self, i: usize, tokens: &[i64]) -> Result<()> {
        if self.pools[i].plain_free && self.pools[i].tokens_are_live_pages(tokens) {
            // Page size 1, ascending, all live: the tokens are the pages, no copy needed.
            self.plan.reset();
            self.pools[i].release(tokens, &mut self.plan.pools[i]);
            self.finish_plan();
            return Ok(());
        }
        let mut pages = std::mem::take(&mut self.scratch);
        let checked = self.pools[i].pages_to_free(tokens, &mut pages);
        if checked.is_err() {
            // A rejected call keeps the previous plan: the caller may not have run it yet.
            self.scratch = pages;
            return checked;
        }
        self.plan.reset();
        let dependents = self.pools[i].dependents;
        match self.pools[i].group.as_mut() {
            Some(group) => {
                group.set.extend(pages.iter().copied());
                group.pages.extend_from_slice(&pages);
            }
            // An owner whose ids another pool binds releases them there too; the middle
            // band relinks the ends when it empties.
            None if dependents => self.release_everywhere(i, &pages),
            None => self.pools[i].release(&pages, &mut self.plan.pools[i]),
        }
        self.scratch = pages;
        self.relink();
        self.finish_plan();
        Ok(())
    }

    /// Release validated live pages of owner `i`, and first release them on every pool
    /// that binds them (taking them out of that pool's open free group if they are queued
    /// there): no pool keeps a binding of an id its owner no longer holds.
    pub(crate) fn release_everywhere(&mut self, i: usize, pages: &[i64]) {
        self.release_dependents(i, pages, None);
        self.pools[i].release(pages, &mut self.plan.pools[i]);
    }

    /// The first half of [`Arena::release_everywhere`]: release these pages of owner `i`
    /// on every pool that binds them (`skip` excepted), dropping them from that pool's
    /// open free group.
    pub(crate) fn release_dependents(&mut self, i: usize, pages: &[i64], skip: Option<usize>) {
        for j in 0..self.pools.len() {
            if self.pools[j].owner != Some(i) || skip == Some(j) {
                continue;
            }
            let dep = &mut self.pools[j];
            let bound: Vec<i64> = pages
                .iter()
                .copied()
                .filter(|&v| dep.v2p[v as usize] != TOMBSTONE)
                .collect();
            if bound.is_empty() {
                continue;
            }
            if let Some(group) = dep.group.as_mut() {
                let queued: HashSet<i64> = bound
                    .iter()
                    .copied()
                    .filter(|v| group.set.remove(v))
                    .collect();
                if !queued.is_empty() {
                    group.pages.retain(|v| !queued.contains(v));
                }
            }
            dep.release(&bound, &mut self.plan.pools[j]);
        }
    }

    /// Hot path of [`Arena::free`]: one token, no free group open (a request's single page
    /// at decode time). Same checks, state and plan as the general path.
    fn free_one(&mut self, i: usize, t: i64) -> Result<()> {
        let page = self.pools[i].live_page_of(t)?;
        self.plan.reset();
        self.pools[i].release_one(page, &mut self.plan.pools[i]);
        self.finish_plan();
        Ok(())
    }

    /// Start queueing frees on pool `i`; `free_group_end` releases them in one pass.
    ///
    /// # Errors
    /// [`UkvError::Argument`] when a group is already open.
    pub fn free_group_begin(&mut self, i: usize) -> Result<()> {
        self.check_pool(i)?;
        if self.pools[i].group.is_some() {
            return Err(UkvError::Argument {
                arg: "free_group_begin",
                value: self.pools[i].name.clone(),
                reason: "a free group is already open on this sub-pool".into(),
            });
        }
        self.pools[i].group = Some(FreeGroup::default());
        self.pools[i].update_plain_free();
        self.plan.reset();
        Ok(())
    }

    /// Release everything queued since `free_group_begin` in one pass.
    ///
    /// # Errors
    /// [`UkvError::Argument`] when no group is open.
    pub fn free_group_end(&mut self, i: usize) -> Result<()> {
        self.check_pool(i)?;
        let group = self.pools[i]
            .group
            .take()
            .ok_or_else(|| UkvError::Argument {
                arg: "free_group_end",
                value: self.pools[i].name.clone(),
                reason: "no free group is open on this sub-pool".into(),
            })?;
        self.pools[i].update_plain_free();
        self.plan.reset();
        if self.pools[i].dependents {
            self.release_everywhere(i, &group.pages);
        } else {
            self.pools[i].release(&group.pages, &mut self.plan.pools[i]);
        }
        self.relink();
        self.finish_plan();
        Ok(())
    }

    /// Whether a free group is open on pool `i`.
    pub fn in_free_group(&self, i: usize) -> bool {
        self.pools.get(i).is_some_and(|p| p.group.is_some())
    }

    // ----- lazy compaction --------------------------------------------------------------

    /// Flush every lazy sub-pool. Non-urgent passes avoid in-flight hazards and respect the
    /// move cap; urgent passes pack fully and list the tokens to wait on. Returns the page
    /// moves. Eager arenas return 0.
    pub fn flush(&mut self, urgent: bool) -> usize {
        self.plan.reset();
        let moves = (0..self.pools.len())
            .map(|i| self.flush_one(i, urgent))
            .sum();
        self.relink();
        self.finish_plan();
        moves
    }

    /// The page-move cap of one non-urgent flush.
    pub fn max_moves_per_flush(&self) -> usize {
        self.max_moves
    }

    /// Change the page-move cap of one non-urgent flush (from the next flush on).
    ///
    /// # Errors
    /// [`UkvError::Config`] for 0; the cap is unchanged then.
    pub fn set_max_moves_per_flush(&mut self, max_moves: usize) -> Result<()> {
        if max_moves == 0 {
            return Err(UkvError::Config {
                field: "max_moves_per_flush",
                value: "0".into(),
                reason: "must be positive".into(),
            });
        }
        self.max_moves = max_moves;
        Ok(())
    }

    /// Flush one sub-pool; see [`Arena::flush`].
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool index.
    pub fn flush_pool(&mut self, i: usize, urgent: bool) -> Result<usize> {
        self.check_pool(i)?;
        self.plan.reset();
        let moves = self.flush_one(i, urgent);
        self.relink();
        self.finish_plan();
        Ok(moves)
    }

    pub(crate) fn flush_one(&mut self, i: usize, urgent: bool) -> usize {
        let mode = FlushMode {
            urgent,
            max_moves: self.max_moves,
        };
        let Plan {
            pools, wait_tokens, ..
        } = &mut self.plan;
        self.pools[i].flush(mode, &mut self.latest, &mut pools[i], wait_tokens)
    }

    /// Declare the completion token of the newest forward in flight (None: device idle).
    pub fn set_latest_token(&mut self, token: Option<u64>) {
        self.latest = token;
    }

    /// Declare the virtual tokens the in-flight forward `token` writes on pool `i`; a
    /// non-urgent flush will not move those pages until `token` is retired. The sets of
    /// every unretired forward block together (overlapped forwards).
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool index.
    pub fn set_inflight_writes(&mut self, i: usize, token: u64, tokens: &[i64]) -> Result<()> {
        self.check_pool(i)?;
        self.pools[i].set_write_set(token, tokens);
        Ok(())
    }

    /// The forward with this token has completed: its pending pages become reusable.
    pub fn retire_token(&mut self, token: u64) {
        for p in &mut self.pools {
            p.retire(token);
        }
        if self.latest == Some(token) {
            self.latest = None;
        }
    }

    // ----- misc -------------------------------------------------------------------------

    /// Free everything on pool `i`, and the bindings every pool holds on `i`'s ids (a SWA
    /// side is cleared with its full side: no binding outlives the id it binds). The plan
    /// marks each cleared pool's tables as rewritten whole.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool index.
    pub fn clear(&mut self, i: usize) -> Result<()> {
        self.check_pool(i)?;
        self.plan.reset();
        for j in 0..self.pools.len() {
            if j == i || self.pools[j].owner == Some(i) {
                self.pools[j].clear();
                self.plan.pools[j].reset = true;
            }
        }
        self.relink();
        Ok(())
    }

    /// Whether virtual token `token` of pool `i` is live. Out-of-range ids are not.
    pub fn is_token_allocated(&self, i: usize, token: i64) -> bool {
        self.pools
            .get(i)
            .is_some_and(|p| p.is_token_allocated(token))
    }

    /// Pool indices in band order, lowest bytes first.
    pub fn chain(&self) -> &[usize] {
        &self.chain
    }

    /// The order in which a plan's page moves must run, pool by pool: the end bands, then
    /// the middle band. A middle band that slides moves into bytes an end band's urgent
    /// flush in the same plan has just vacated, so those sources must be copied first. (The
    /// two ends never touch each other's bytes within one plan.)
    pub fn move_order(&self) -> &[usize] {
        &self.order
    }
}

/// Pool `a` shared and pool `b` mutable (`a != b`).
pub(crate) fn two_pools(pools: &mut [SubPool], a: usize, b: usize) -> (&SubPool, &mut SubPool) {
    if a < b {
        let (lo, hi) = pools.split_at_mut(b);
        (&lo[a], &mut hi[0])
    } else {
        let (lo, hi) = pools.split_at_mut(a);
        (&hi[0], &mut lo[b])
    }
}

/// Check the pool list and return the band order (lowest bytes first).
fn validate_pools(pools: &[PoolSpec]) -> Result<Vec<usize>> {
    let config = |field, value: String, reason: &str| UkvError::Config {
        field,
        value,
        reason: reason.to_string(),
    };
    if pools.is_empty() || pools.len() > 3 {
        return Err(config(
            "pools",
            pools.len().to_string(),
            "need one or two sub-pools, or three with a middle band between them",
        ));
    }
    for (i, p) in pools.iter().enumerate() {
        if p.name.is_empty() {
            return Err(config("name", format!("{:?}", p.name), "must not be empty"));
        }
        if pools[..i].iter().any(|q| q.name == p.name) {
            return Err(config(
                "name",
                format!("{:?}", p.name),
                "names must be unique",
            ));
        }
        if let Some(o) = p.id_owner {
            let owner_ok = o != i && o < pools.len() && pools[o].id_owner.is_none();
            if !owner_ok {
                return Err(config(
                    "id_owner",
                    o.to_string(),
                    "must name another sub-pool that mints its own ids",
                ));
            }
            if pools[o].page_size != p.page_size {
                return Err(config(
                    "page_size",
                    p.page_size.to_string(),
                    "a pool that binds another pool's ids must share its page size",
                ));
            }
        }
    }
    let ups: Vec<usize> = (0..pools.len())
        .filter(|&i| pools[i].direction == Direction::Up)
        .collect();
    let downs: Vec<usize> = (0..pools.len())
        .filter(|&i| pools[i].direction == Direction::Down)
        .collect();
    let middles: Vec<usize> = (0..pools.len())
        .filter(|&i| pools[i].direction == Direction::Middle)
        .collect();
    let ends_ok = ups.len() <= 1 && downs.len() <= 1;
    let middle_ok =
        middles.is_empty() || (middles.len() == 1 && ups.len() == 1 && downs.len() == 1);
    if !ends_ok || !middle_ok {
        return Err(config(
            "grow",
            format!(
                "{} up, {} middle, {} down",
                ups.len(),
                middles.len(),
                downs.len()
            ),
            "need at most one grow-up and one grow-down sub-pool, and a middle band only \
             between both",
        ));
    }
    Ok(ups.into_iter().chain(middles).chain(downs).collect())
}
