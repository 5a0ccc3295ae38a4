//! Core operations of the hybrid composites (API.md §5).
//!
//! * **SWA hybrid.** Full attention owns one virtual page id space; the SWA pool binds the
//!   same ids (its v2p is sized by the owner's id space). A joint allocation takes ids from
//!   the owner and binds them on both sides in **one plan**: either both sides bind or
//!   neither does, and a `false` return leaves the arena untouched. The joint capacity is
//!   exact (`n <= joint_schedulable_pages` ⇒ the joint allocation succeeds, one more ⇒ it
//!   returns false), computed on the band snapshot of [`crate::capacity`].
//! * **Mamba hybrid.** Two independent owners, so allocation needs nothing joint; the core
//!   adds the slot translation that keeps padding (−1) as −1, and the exact shortage
//!   report: how many pages one pool must give back for another to take `k` more.

use crate::arena::Arena;
use crate::capacity::{slot_of, Bands, DOWN, UP};
use crate::error::{Result, UkvError};
use crate::geometry::Direction;
use crate::subpool::TOMBSTONE;

impl Arena {
    // ----- SWA: checks ------------------------------------------------------------------

    /// The band slot of pool `i`.
    pub(crate) fn slot(&self, i: usize) -> usize {
        slot_of(self.pools[i].geo.direction)
    }

    /// Check that `swa` binds the ids minted by `full` (a SWA pair).
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool index or a pair that is not a SWA pair.
    pub fn check_swa_pair(&self, full: usize, swa: usize) -> Result<()> {
        self.try_pool(full)?;
        let s = self.try_pool(swa)?;
        if s.owner != Some(full) {
            return Err(UkvError::Argument {
                arg: "swa",
                value: s.name.clone(),
                reason: format!(
                    "sub-pool {:?} does not bind the ids of sub-pool {:?}",
                    s.name, self.pools[full].name
                ),
            });
        }
        Ok(())
    }

    /// The order in which a joint allocation binds the pair: end bands before a middle band
    /// (a middle band's own growth never moves anything, an end band's may slide it).
    fn joint_order(&self, full: usize, swa: usize) -> (usize, usize) {
        if self.middle == Some(full) {
            (swa, full)
        } else {
            (full, swa)
        }
    }

    // ----- SWA: allocation ----------------------------------------------------------------

    /// Allocate `num_pages` pages of ids on owner `full` and bind the same ids on `swa`, in
    /// one plan. Returns false, with nothing changed, when they do not fit on both sides
    /// even after urgent flushes. On success `plan().pages` holds the virtual pages and
    /// `plan().tokens` their tokens (ascending inside each page).
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool or when `swa` does not bind `full`'s ids.
    pub fn swa_alloc(&mut self, full: usize, swa: usize, num_pages: usize) -> Result<bool> {
        self.check_swa_pair(full, swa)?;
        self.plan.reset();
        let ok = self.joint_alloc_pages(full, swa, num_pages);
        if ok {
            self.expand_tokens(full);
        }
        self.finish_plan();
        Ok(ok)
    }

    /// [`Arena::swa_alloc`] of `num_tokens` tokens (a multiple of the page size).
    ///
    /// # Errors
    /// As [`Arena::swa_alloc`], and [`UkvError::Argument`] for a negative count or one that
    /// is not a page multiple.
    pub fn swa_alloc_tokens(&mut self, full: usize, swa: usize, num_tokens: i64) -> Result<bool> {
        self.check_swa_pair(full, swa)?;
        let pages = self.pages_of_tokens(full, num_tokens)?;
        self.swa_alloc(full, swa, pages)
    }

    /// [`Arena::alloc_extend`] on `full`, with every new page also bound on `swa`, in one
    /// plan (all or nothing).
    ///
    /// # Errors
    /// As [`Arena::alloc_extend`], and for a pair that is not a SWA pair.
    pub fn swa_alloc_extend(
        &mut self,
        full: usize,
        swa: usize,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: Option<&[i64]>,
    ) -> Result<bool> {
        self.check_swa_pair(full, swa)?;
        let new_pages = self.extend_new_pages(full, prefix_lens, seq_lens, last_loc)?;
        self.plan.reset();
        let ok = self.joint_alloc_pages(full, swa, new_pages);
        if ok {
            self.fill_extend_tokens(full, prefix_lens, seq_lens, last_loc);
        }
        self.finish_plan();
        Ok(ok)
    }

    /// [`Arena::alloc_decode`] on `full`, with every new page also bound on `swa`, in one
    /// plan (all or nothing). Tokens that continue a page bind nothing new.
    ///
    /// # Errors
    /// As [`Arena::alloc_decode`], and for a pair that is not a SWA pair.
    pub fn swa_alloc_decode(
        &mut self,
        full: usize,
        swa: usize,
        seq_lens: &[i64],
        last_loc: Option<&[i64]>,
    ) -> Result<bool> {
        self.check_swa_pair(full, swa)?;
        let new_pages = self.decode_new_pages(full, seq_lens, last_loc)?;
        self.plan.reset();
        let ok = self.joint_alloc_pages(full, swa, new_pages);
        if ok {
            self.fill_decode_tokens(full, seq_lens, last_loc);
        }
        self.finish_plan();
        Ok(ok)
    }

    /// The joint allocation behind every `swa_alloc*`: decide first (now, or after urgent
    /// flushes of the end bands), change nothing when neither fits, then take the ids,
    /// slide the middle band once if it is in the way, and bind both sides.
    pub(crate) fn joint_alloc_pages(&mut self, full: usize, swa: usize, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        if n > self.pools[full].free_ids.len() {
            return false;
        }
        let n = n as i64;
        let (first, second) = self.joint_order(full, swa);
        let mut flushed = false;
        if !self.joint_fits(first, second, n, false) {
            if !self.joint_fits(first, second, n, true) {
                return false;
            }
            self.flush_ends_except(None);
            flushed = true;
        }
        self.take_ids(full, n as usize);
        let fresh = |a: &Arena, j: usize| (n - a.pools[j].holes.len() as i64).max(0);
        let (mut up, mut down, mut own) = (0, 0, 0);
        for j in [first, second] {
            match self.pools[j].geo.direction {
                Direction::Up => up = fresh(self, j),
                Direction::Down => down = fresh(self, j),
                Direction::Middle => own = fresh(self, j),
            }
        }
        let slid = self.slide_middle(up, down, own);
        self.bind_pages(first);
        self.bind_pages(second);
        if flushed || slid {
            // A page the flush or the slide vacated can be rebound in the same plan.
            self.dedupe_plan();
        }
        true
    }

    /// Whether `n` pages fit on `first` and then on `second`: as the end bands stand now,
    /// or (`packed`) after the urgent flushes a joint allocation may run. The middle band
    /// counts as packed either way: a joint allocation relocates (and so packs) it whenever
    /// it does not fit as it stands.
    fn joint_fits(&self, first: usize, second: usize, n: i64, packed: bool) -> bool {
        let (bands, holes) = self.joint_view(packed);
        let (h1, h2) = (holes(first), holes(second));
        bands.joint_fits(self.slot(first), self.slot(second), h1, h2, n)
    }

    /// The band snapshot and hole counts a joint decision sees (see `joint_fits`).
    fn joint_view(&self, packed: bool) -> (Bands, impl Fn(usize) -> i64 + '_) {
        let packs = move |j: usize| packed || self.middle == Some(j);
        let holes = move |j: usize| {
            if packs(j) {
                0
            } else {
                self.pools[j].holes.len() as i64
            }
        };
        (self.bands(packs), holes)
    }

    /// Pages a joint allocation on `full` + `swa` can take right now, without compacting
    /// anything (0 for a pair that is not a SWA pair). With two bands this is the
    /// reference's three-phase formula; with a middle band an exact search over the same
    /// room arithmetic.
    pub fn joint_available_pages(&self, full: usize, swa: usize) -> i64 {
        self.joint_max(full, swa, false)
    }

    /// Pages a joint allocation on `full` + `swa` is guaranteed to get, urgent flushes
    /// included: `swa_alloc` of `n <= joint_schedulable_pages` pages succeeds, and of one
    /// page more returns false with nothing changed (0 for a pair that is not a SWA pair).
    /// Equals [`Arena::joint_available_pages`] in an eager arena.
    pub fn joint_schedulable_pages(&self, full: usize, swa: usize) -> i64 {
        self.joint_max(full, swa, false)
            .max(self.joint_max(full, swa, true))
    }

    fn joint_max(&self, full: usize, swa: usize, packed: bool) -> i64 {
        if self.check_swa_pair(full, swa).is_err() {
            return 0;
        }
        let cap = self.pools[full].free_ids.len() as i64;
        let (bands, holes) = self.joint_view(packed);
        if self.middle.is_none() {
            let (up, down) = if self.slot(full) == UP {
                (full, swa)
            } else {
                (swa, full)
            };
            debug_assert_eq!((self.slot(up), self.slot(down)), (UP, DOWN));
            return bands.three_phase(holes(up), holes(down)).min(cap);
        }
        let (first, second) = self.joint_order(full, swa);
        bands.joint_max(
            self.slot(first),
            self.slot(second),
            holes(first),
            holes(second),
            cap,
        )
    }

    // ----- SWA: free ----------------------------------------------------------------------

    /// Free these tokens' pages on both sides, in one plan: on `full` (validated exactly as
    /// [`Arena::free`]: every id live) and on `swa` where the page is still bound there
    /// (pages that already left the window are skipped). An open free group on `full`
    /// queues them, and both sides release them when it closes. This is [`Arena::free`] on
    /// `full`, which always releases the bindings of its ids; the pair is checked.
    ///
    /// # Errors
    /// As [`Arena::free`] on `full`, and for a pair that is not a SWA pair. Nothing
    /// changes on error.
    pub fn swa_free(&mut self, full: usize, swa: usize, tokens: &[i64]) -> Result<()> {
        self.check_swa_pair(full, swa)?;
        self.free(full, tokens)
    }

    /// Free only the `swa` side of these tokens' pages (tokens that left the sliding
    /// window): their ids stay live on `full`. Pages already released on `swa` are
    /// skipped; an open free group on `swa` queues instead.
    ///
    /// # Errors
    /// [`UkvError::InvalidId`] for an id outside `full`'s id space;
    /// [`UkvError::DoubleFree`] for an id that is not live on `full` (never allocated or
    /// already freed there); [`UkvError::Argument`] for a pair that is not a SWA pair.
    /// Nothing changes on error.
    pub fn swa_free_nonowner(&mut self, full: usize, swa: usize, tokens: &[i64]) -> Result<()> {
        self.check_swa_pair(full, swa)?;
        let mut pages = Vec::with_capacity(tokens.len());
        for &t in tokens {
            pages.push(self.pools[full].live_page_of(t)?);
        }
        self.release_swa_side(swa, pages);
        Ok(())
    }

    /// The window free SGLang's composite makes: free the `swa` side of those tokens'
    /// pages that are still bound there, skipping every other token instead of refusing
    /// it (its page already released on `swa`, freed on `full` or queued in `full`'s open
    /// free group, which releases both sides when it closes; a negative id or one outside
    /// `full`'s id space). An open free group on `swa` queues instead.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a pair that is not a SWA pair (nothing changes).
    pub fn swa_free_window(&mut self, full: usize, swa: usize, tokens: &[i64]) -> Result<()> {
        self.check_swa_pair(full, swa)?;
        let f = &self.pools[full];
        let pages = tokens
            .iter()
            .filter_map(|&t| f.try_live_page_of(t))
            .collect();
        self.release_swa_side(swa, pages);
        Ok(())
    }

    /// Release (or queue) the `swa` side of live `full` pages, each once, skipping pages
    /// already released or queued on `swa`; one plan.
    fn release_swa_side(&mut self, swa: usize, mut pages: Vec<i64>) {
        let s = &mut self.pools[swa];
        let gen = s.next_mark_gen();
        pages.retain(|&v| {
            let fresh = s.marks[v as usize] != gen;
            s.marks[v as usize] = gen;
            fresh && s.v2p[v as usize] != TOMBSTONE && !s.group_contains(v)
        });
        self.plan.reset();
        self.release_or_queue(swa, &pages);
        self.relink();
        self.finish_plan();
    }

    /// Open the free groups of both sides of a SWA pair as one operation: both are checked
    /// closed before either opens.
    ///
    /// # Errors
    /// [`UkvError::Argument`] when either side already has a group open, or for a pair that
    /// is not a SWA pair. Nothing changes on error.
    pub fn swa_free_group_begin(&mut self, full: usize, swa: usize) -> Result<()> {
        self.check_swa_pair(full, swa)?;
        for i in [full, swa] {
            if self.pools[i].group.is_some() {
                return Err(UkvError::Argument {
                    arg: "free_group_begin",
                    value: self.pools[i].name.clone(),
                    reason: "a free group is already open on this sub-pool".into(),
                });
            }
        }
        self.free_group_begin(full)?;
        self.free_group_begin(swa)
    }

    /// Close the free groups of both sides of a SWA pair in ONE plan: the SWA side releases
    /// what `free_swa` queued there together with the bindings of the ids the full side
    /// queued, and the full side releases its ids. (Closing the two groups as two
    /// operations would leave only the second one's moves in the plan.)
    ///
    /// # Errors
    /// [`UkvError::Argument`] when either side has no group open, or for a pair that is
    /// not a SWA pair. Nothing changes on error.
    pub fn swa_free_group_end(&mut self, full: usize, swa: usize) -> Result<()> {
        self.check_swa_pair(full, swa)?;
        for i in [full, swa] {
            if self.pools[i].group.is_none() {
                return Err(UkvError::Argument {
                    arg: "free_group_end",
                    value: self.pools[i].name.clone(),
                    reason: "no free group is open on this sub-pool".into(),
                });
            }
        }
        let (Some(fg), Some(sg)) = (self.pools[full].group.take(), self.pools[swa].group.take())
        else {
            unreachable!("both groups were checked open");
        };
        self.pools[full].update_plain_free();
        self.pools[swa].update_plain_free();
        self.plan.reset();
        let mut swa_pages = sg.pages;
        let s = &self.pools[swa];
        swa_pages.extend(
            fg.pages
                .iter()
                .copied()
                .filter(|v| s.v2p[*v as usize] != TOMBSTONE && !sg.set.contains(v)),
        );
        self.pools[swa].release(&swa_pages, &mut self.plan.pools[swa]);
        // Any other pool binding full's ids releases them as a plain free would.
        self.release_dependents(full, &fg.pages, Some(swa));
        self.pools[full].release(&fg.pages, &mut self.plan.pools[full]);
        self.relink();
        self.finish_plan();
        Ok(())
    }

    /// Release validated live pages of pool `i`, or queue them in its open free group.
    fn release_or_queue(&mut self, i: usize, pages: &[i64]) {
        if pages.is_empty() {
            return;
        }
        match self.pools[i].group.as_mut() {
            Some(group) => {
                group.set.extend(pages.iter().copied());
                group.pages.extend_from_slice(pages);
            }
            None => self.pools[i].release(pages, &mut self.plan.pools[i]),
        }
    }

    // ----- Mamba --------------------------------------------------------------------------

    /// Translate virtual slots (tokens) of pool `i` to physical ones into `out`, keeping
    /// −1 (padding) as −1 and mapping a slot whose page is not bound to −1 as well (state
    /// kernels skip −1; nothing is clamped to the sink).
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool; [`UkvError::InvalidId`] for an id below −1 or
    /// beyond the pool's id space.
    pub fn translate_slots(&self, i: usize, slots: &[i64], out: &mut Vec<i64>) -> Result<()> {
        let p = self.try_pool(i)?;
        let ps = p.geo.page_size as i64;
        let virt = p.geo.num_virtual_pages * ps;
        out.clear();
        out.reserve(slots.len());
        for &t in slots {
            if t == TOMBSTONE {
                out.push(TOMBSTONE);
                continue;
            }
            if t < 0 || t >= virt {
                return Err(p.invalid(
                    t,
                    "token",
                    format!("a slot must be -1 (padding) or in [0, {virt})"),
                ));
            }
            let page = p.v2p[(t / ps) as usize];
            out.push(if page == TOMBSTONE {
                TOMBSTONE
            } else {
                page * ps + t % ps
            });
        }
        Ok(())
    }

    /// The least number of pages `donor` must release (free any of its live pages) for an
    /// allocation of `k` more pages on pool `i` to succeed, or None when no number of them
    /// is enough (`i`'s id space or another band is the limit). Exact: with `r` the answer,
    /// after `donor` frees any `r` live pages `alloc(i, k)` succeeds, and after `r - 1` it
    /// does not. For a Mamba hybrid, `shortage_pages(mamba, k, full)` says how many full
    /// pages to evict for `k` more states, and `shortage_pages(full, n, mamba)` the
    /// converse.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool, `donor == i`, or a negative `k`.
    pub fn shortage_pages(&self, i: usize, k: i64, donor: usize) -> Result<Option<i64>> {
        self.try_pool(i)?;
        self.try_pool(donor)?;
        if donor == i || k < 0 {
            return Err(UkvError::Argument {
                arg: if k < 0 { "k" } else { "donor" },
                value: if k < 0 {
                    k.to_string()
                } else {
                    donor.to_string()
                },
                reason: "need k >= 0 and a donor other than the pool that allocates".into(),
            });
        }
        let p = &self.pools[i];
        if p.owner.is_none() && k > p.free_ids.len() as i64 {
            return Ok(None);
        }
        let now = self.schedulable_pages(i);
        let fits = |r: i64| {
            let mut bands = self.bands(|j| j != i);
            bands.shrink(slot_of(self.pools[donor].geo.direction), r);
            k <= now.max(p.holes.len() as i64 + bands.room(self.slot(i)))
        };
        if k <= now {
            return Ok(Some(0));
        }
        let live = self.pools[donor].live as i64;
        if !fits(live) {
            return Ok(None);
        }
        let (mut lo, mut hi) = (1i64, live);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(Some(lo))
    }
}
