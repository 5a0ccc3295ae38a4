//! The middle band: a third sub-pool floating between the grow-up and the grow-down band
//! (e.g. SWA KV between Mamba state and full-attention KV).
//!
//! # Design
//!
//! * **Shape.** The middle band is one run of pages `[base, watermark)` of its own page
//!   size. Its lower neighbour is the up band, its upper neighbour the down band, and the
//!   frontier rule holds in exact bytes on both sides: `up.high <= middle.low` and
//!   `middle.high <= down.low`.
//! * **Growth.** It takes its holes first (lazy mode), then fresh pages above its top while
//!   there is room below the down band, then fresh pages below its base. Its own
//!   allocations never move a page.
//! * **Anchoring.** An empty middle band takes no bytes and is transparent: the two ends are
//!   then each other's neighbours (the arena relinks them), and it is parked at the top of
//!   its index space. Its next allocation anchors it centred in the gap between the ends,
//!   so that both ends can grow before either reaches it.
//! * **Sliding.** When an end band needs bytes the middle band occupies, and the gap on the
//!   middle band's far side has them, the allocation relocates the middle band by the
//!   least distance that makes room: its live pages are packed into the window
//!   `[t, t + live)`, moving only the live pages outside that window into the free pages
//!   inside it (disjoint sources and destinations, ascending pairs: one launch). A slide
//!   by `d` pages moves `min(d, live)` pages. Compaction at free time shrinks the band from
//!   its top, like a grow-up band, so the band stays hole-free in eager mode.
//! * **Capacity.** Because the middle band can always be slid (or grown at either end) to
//!   where the gap is, every room depends only on the ends' frontiers and the middle band's
//!   span (see [`crate::capacity`]), and `available_pages` / `schedulable_pages` stay exact:
//!   an allocation of `n <= schedulable` pages succeeds, one page more returns false with
//!   nothing changed. A slide packs the band (its holes go), so an end band's capacity
//!   counts the middle band at its live pages; the middle band's own allocation never
//!   slides it, so its own capacity counts its holes as holes.
//! * **Plan order.** An end band's urgent flush and a slide can share one plan, the slide
//!   moving into bytes the flush vacated: the middle band's moves run last
//!   ([`Arena::move_order`]). Each pool's moves stay one launch.
//! * **Alternative not taken.** A middle band pinned just above the up band (never moving)
//!   needs no relocation, but then the up band can never grow past it and the bytes freed
//!   below it serve only the up band: capacity would depend on history.
//! * **Hazards.** A relocation that moves pages waits on the in-flight forward first, like
//!   an urgent flush (its token goes to the plan's wait list, and the band's pending pages
//!   are released with their tokens waited on).

use crate::arena::Arena;
use crate::geometry::Direction;
use crate::plan::Plan;
use crate::subpool::TOMBSTONE;

impl Arena {
    /// The page range `[first, end)` of middle pool `m`'s index space that lies between its
    /// two neighbours as they stand now.
    pub(crate) fn middle_range(&self, m: usize) -> (i64, i64) {
        let g = &self.pools[m].geo;
        let below = self.below(m).map_or(0, |u| self.pools[u].high_byte());
        let above = self
            .above(m)
            .map_or(self.total_bytes, |d| self.pools[d].low_byte());
        let first = (below.div_ceil(g.page_bytes) as i64).max(g.min_page_index);
        let end = ((above / g.page_bytes) as i64).min(g.num_pages);
        (first, end)
    }

    /// Fresh pages middle pool `m` can take without moving anything: above its top and
    /// below its base (the whole gap between the ends when it is empty).
    pub(crate) fn middle_room_now(&self, m: usize) -> i64 {
        let p = &self.pools[m];
        let (first, end) = self.middle_range(m);
        let room = if p.span_pages() == 0 {
            end - first
        } else {
            (end - p.wm) + (p.base - first)
        };
        room.max(0)
    }

    /// [`Arena::make_room`]'s slow path in an arena with a middle band: flush the other
    /// end bands urgently when the pages do not fit without, then slide the middle band
    /// when it is in the way of end band `i`. Returns false, with nothing changed, when
    /// `n` pages do not fit even then.
    pub(crate) fn make_room_with_middle(&mut self, i: usize, n: i64) -> bool {
        if n > self.available_pages(i) {
            if n > self.schedulable_pages(i) {
                return false;
            }
            self.flush_ends_except(Some(i));
        }
        let fresh = n - self.pools[i].holes.len() as i64;
        // A middle band's own allocation never needs a slide: it grows at either end.
        if fresh > 0 && self.middle != Some(i) && !self.can_extend(i, fresh) {
            let (up_extra, down_extra) = match self.pools[i].geo.direction {
                Direction::Up => (fresh, 0),
                _ => (0, fresh),
            };
            self.slide_middle(up_extra, down_extra, 0);
        }
        debug_assert!(
            fresh <= 0 || self.fits_in_place(i, fresh),
            "make_room: no room"
        );
        true
    }

    /// Flush every end band except `skip` urgently, lowest first.
    pub(crate) fn flush_ends_except(&mut self, skip: Option<usize>) {
        for k in 0..self.chain().len() {
            let j = self.chain()[k];
            if Some(j) != skip && self.middle != Some(j) {
                self.flush_one(j, true);
            }
        }
    }

    /// Relocate the middle band, if it holds pages, so that the up band can grow by
    /// `up_extra` pages, the down band by `down_extra`, and then the middle band itself by
    /// `own` fresh pages; it moves the least distance that does this. No-op when the
    /// band as it stands already allows all three. Returns whether it relocated.
    pub(crate) fn slide_middle(&mut self, up_extra: i64, down_extra: i64, own: i64) -> bool {
        let Some(m) = self.middle else { return false };
        let p = &self.pools[m];
        if p.span_pages() == 0 {
            return false; // transparent: the ends see each other
        }
        let (up, down) = (self.chain()[0], self.chain()[2]);
        let g = &p.geo;
        let up_high = self.pools[up].high_byte() + up_extra as u64 * self.pools[up].geo.page_bytes;
        let down_low = self.pools[down]
            .low_byte()
            .saturating_sub(down_extra as u64 * self.pools[down].geo.page_bytes);
        let first = (up_high.div_ceil(g.page_bytes) as i64).max(g.min_page_index);
        let end = ((down_low / g.page_bytes) as i64).min(g.num_pages);
        let fits = p.base >= first && p.wm <= end && (end - p.wm) + (p.base - first) >= own;
        if fits {
            return false;
        }
        let live = p.live as i64;
        let t = p.base.min(end - live).max(first);
        self.relocate_middle(m, t);
        true
    }

    /// Pack middle pool `m`'s live pages into `[t, t + live)`: the live pages outside the
    /// window move, ascending, into the free pages inside it, ascending. Pending pages are
    /// released (their tokens waited on) and holes dropped: the band ends hole-free.
    pub(crate) fn relocate_middle(&mut self, m: usize, t: i64) {
        let Plan {
            pools: plans,
            wait_tokens: waits,
            ..
        } = &mut self.plan;
        let (pool, plan) = (&mut self.pools[m], &mut plans[m]);
        pool.drain_all_pending(waits);
        let live = pool.live as i64;
        let (lo, hi) = (pool.base, pool.wm);
        let window = t..t + live;
        let base = plan.src.len();
        let mut dst = window
            .clone()
            .filter(|&q| !(lo..hi).contains(&q) || pool.p2v[q as usize] == TOMBSTONE);
        for src in lo..hi {
            if pool.p2v[src as usize] != TOMBSTONE && !window.contains(&src) {
                if let Some(d) = dst.next() {
                    plan.push_move(src, d);
                }
            }
        }
        if plan.src.len() > base {
            pool.settle_hazards(&mut self.latest, waits);
        }
        pool.apply_moves(base, plan);
        pool.holes.clear();
        // A band left with no live page has no place (`t` may then lie past the index space,
        // in the end band's last page): relinking parks it.
        pool.base = t;
        pool.wm = t + live;
        self.relink();
    }

    /// Bind `plan.pages` on middle pool `m`: holes first, then fresh pages above the top,
    /// then below the base. An empty band is anchored centred in the gap first.
    #[inline(never)]
    pub(crate) fn bind_middle(&mut self, m: usize) {
        let n = self.plan.pages.len();
        let n_holes = self.pools[m].holes.len().min(n);
        let fresh = (n - n_holes) as i64;
        debug_assert!(fresh <= self.middle_room_now(m), "middle band: no room");
        let (first, end) = self.middle_range(m);
        if fresh > 0 && self.pools[m].span_pages() == 0 {
            let t = first + (end - first - fresh) / 2;
            self.pools[m].base = t;
            self.pools[m].wm = t;
        }
        let top = (end - self.pools[m].wm).clamp(0, fresh) as usize;
        let Plan {
            pages,
            pools: plans,
            ..
        } = &mut self.plan;
        let (pool, plan) = (&mut self.pools[m], &mut plans[m]);
        for &v in &pages[..n_holes] {
            pool.bind_hole(v, plan);
        }
        pool.bind_extension(&pages[n_holes..n_holes + top], plan);
        pool.bind_below(&pages[n_holes + top..], plan);
        self.relink();
    }
}
