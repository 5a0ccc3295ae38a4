//! Capacity math over a snapshot of the bands: how many fresh pages a sub-pool can take,
//! what a joint (SWA) allocation can take on both sides, and what-if versions of both.
//!
//! A room depends only on the two end bands' frontiers and on the middle band's span, never
//! on where the middle band sits: an allocation slides the middle band out of the way when
//! it must (and a middle band grows at either end). So every capacity is a function of a
//! handful of integers that an allocation changes in a known way, and joint or what-if
//! queries are exact without cloning the arena: the snapshot is extended or packed and the
//! same `room` is asked again.
//!
//! The frontier rule is exact in bytes: a grow-up band ends at `hi * pb`, a grow-down band
//! starts at `lo * pb`, each in its own page size, and no two bands overlap.

use crate::geometry::Direction;
use crate::subpool::SubPool;

/// Slot of the grow-up band in [`Bands`].
pub(crate) const UP: usize = 0;
/// Slot of the middle band.
pub(crate) const MID: usize = 1;
/// Slot of the grow-down band.
pub(crate) const DOWN: usize = 2;

/// The slot of a band growing in direction `d`.
#[inline]
pub(crate) fn slot_of(d: Direction) -> usize {
    match d {
        Direction::Up => UP,
        Direction::Middle => MID,
        Direction::Down => DOWN,
    }
}

/// One band as the capacity math sees it: pages `[lo, hi)` of a sub-pool with
/// `pb`-byte pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Band {
    pub pb: u64,
    pub lo: i64,
    pub hi: i64,
    pub min_page: i64,
    pub num_pages: i64,
}

impl Band {
    /// The band of `p` now, or packed down to its live pages (what an urgent flush leaves).
    pub(crate) fn of(p: &SubPool, packed: bool) -> Band {
        let g = &p.geo;
        let live = p.live as i64;
        let (lo, hi) = match g.direction {
            Direction::Up | Direction::Middle => {
                (p.base, if packed { p.base + live } else { p.wm })
            }
            Direction::Down => (
                if packed { g.num_pages - live } else { p.wm + 1 },
                g.num_pages,
            ),
        };
        Band {
            pb: g.page_bytes,
            lo,
            hi,
            min_page: g.min_page_index,
            num_pages: g.num_pages,
        }
    }

    fn span(&self) -> i64 {
        self.hi - self.lo
    }
}

/// A snapshot of the arena's bands (at most one per slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bands {
    total: u64,
    bands: [Option<Band>; 3],
}

impl Bands {
    /// An empty snapshot of a `total`-byte buffer.
    pub(crate) fn new(total: u64) -> Self {
        Bands {
            total,
            bands: [None; 3],
        }
    }

    /// Put `band` into `slot`.
    pub(crate) fn set(&mut self, slot: usize, band: Band) {
        self.bands[slot] = Some(band);
    }

    /// One past the up band's last byte (0 without an up band).
    fn up_high(&self) -> u64 {
        self.bands[UP].map_or(0, |b| b.hi as u64 * b.pb)
    }

    /// The down band's first byte (`total` without a down band).
    fn down_low(&self) -> u64 {
        self.bands[DOWN].map_or(self.total, |b| b.lo as u64 * b.pb)
    }

    /// The middle band if it occupies bytes (an empty middle band is transparent).
    fn open_middle(&self) -> Option<Band> {
        self.bands[MID].filter(|m| m.span() > 0)
    }

    /// The page range `[first, end)` of the middle band's index space that lies between
    /// the two end bands.
    fn middle_range(&self, m: &Band) -> (i64, i64) {
        let first = (self.up_high().div_ceil(m.pb) as i64).max(m.min_page);
        let end = ((self.down_low() / m.pb) as i64).min(m.num_pages);
        (first, end)
    }

    /// Fresh pages the band in `slot` can take, sliding the middle band out of the way
    /// where that is what it takes (0 for an absent band).
    pub(crate) fn room(&self, slot: usize) -> i64 {
        let Some(b) = self.bands[slot] else { return 0 };
        let room = match slot {
            UP => {
                // The middle band slid as high as it can go.
                let limit = match self.open_middle() {
                    Some(m) => page_bytes(self.middle_range(&m).1 - m.span(), m.pb),
                    None => self.down_low(),
                };
                ((limit / b.pb) as i64).min(b.num_pages) - b.hi
            }
            DOWN => {
                // The middle band slid as low as it can go.
                let limit = match self.open_middle() {
                    Some(m) => page_bytes(self.middle_range(&m).0 + m.span(), m.pb),
                    None => self.up_high(),
                };
                b.lo - (limit.div_ceil(b.pb) as i64).max(b.min_page)
            }
            _ => {
                let (first, end) = self.middle_range(&b);
                end - first - b.span()
            }
        };
        room.max(0)
    }

    /// The band in `slot` took `e` fresh pages.
    pub(crate) fn extend(&mut self, slot: usize, e: i64) {
        if let Some(b) = self.bands[slot].as_mut() {
            if slot == DOWN {
                b.lo -= e;
            } else {
                b.hi += e;
            }
        }
    }

    /// The band in `slot` gave `r` pages back (from its packed footprint).
    pub(crate) fn shrink(&mut self, slot: usize, r: i64) {
        self.extend(slot, -r);
    }

    /// Whether `n` pages fit on the band in `first` (which has `h1` holes) and then the
    /// same number on the band in `second` (`h2` holes): each side takes its holes first,
    /// then fresh pages.
    pub(crate) fn joint_fits(&self, first: usize, second: usize, h1: i64, h2: i64, n: i64) -> bool {
        let e1 = (n - h1).max(0);
        if e1 > self.room(first) {
            return false;
        }
        let mut after = *self;
        after.extend(first, e1);
        (n - h2).max(0) <= after.room(second)
    }

    /// The largest `n <= cap` for which [`Bands::joint_fits`] holds (it is monotone in `n`).
    pub(crate) fn joint_max(&self, first: usize, second: usize, h1: i64, h2: i64, cap: i64) -> i64 {
        let cap = cap.min(h1 + self.room(first)).max(0);
        let (mut lo, mut hi) = (0i64, cap);
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            if self.joint_fits(first, second, h1, h2, mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// The reference's three-phase formula for two facing end bands (no middle band in
    /// between): both drain holes; then the side with fewer holes extends while the other
    /// still drains; then both extend. Equals [`Bands::joint_max`] there (tested).
    pub(crate) fn three_phase(&self, h_up: i64, h_down: i64) -> i64 {
        let (Some(u), Some(d)) = (self.bands[UP], self.bands[DOWN]) else {
            return 0;
        };
        let gap = self.down_low().saturating_sub(self.up_high());
        let (r_up, r_down) = (u.num_pages - u.hi, d.lo - d.min_page);
        let k1 = h_up.min(h_down);
        // The side with fewer holes extends alone while the other drains its surplus.
        let (more, pb_fewer) = if h_up < h_down {
            (h_down, u.pb)
        } else {
            (h_up, d.pb)
        };
        let k2 = (more - k1).min((gap / pb_fewer) as i64);
        let left = gap - k2 as u64 * pb_fewer;
        let k3 = (left / (u.pb + d.pb)) as i64;
        (k1 + k2 + k3).min(h_up + r_up).min(h_down + r_down)
    }
}

/// Bytes of `pages` pages of `pb` bytes (0 for a negative count).
fn page_bytes(pages: i64, pb: u64) -> u64 {
    pages.max(0) as u64 * pb
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(pb: u64, lo: i64, hi: i64, num_pages: i64) -> Band {
        Band {
            pb,
            lo,
            hi,
            min_page: 1,
            num_pages,
        }
    }

    /// The three-phase formula equals the search over the joint predicate for two facing
    /// bands, over every small state: page sizes that do and do not divide each other,
    /// holes on either side, gaps from none to several pages.
    #[test]
    fn three_phase_equals_the_search() {
        let total = 960;
        let mut checked = 0;
        for (pu, pd) in [(48u64, 48u64), (48, 80), (80, 48), (64, 160), (160, 64)] {
            let (nu, nd) = ((total / pu) as i64, (total / pd) as i64);
            for up_hi in 1..=nu {
                for down_lo in 1..=nd {
                    if up_hi as u64 * pu > down_lo as u64 * pd {
                        continue;
                    }
                    let mut b = Bands::new(total);
                    b.set(UP, band(pu, 1, up_hi, nu));
                    b.set(DOWN, band(pd, down_lo, nd, nd));
                    for (hu, hd) in [(0, 0), (2, 0), (0, 3), (1, 4), (5, 2)] {
                        let hu = hu.min(up_hi - 1);
                        let hd = hd.min(nd - down_lo);
                        let search = b.joint_max(UP, DOWN, hu, hd, i64::MAX);
                        assert_eq!(
                            b.three_phase(hu, hd),
                            search,
                            "{pu}/{pd} {up_hi}/{down_lo} {hu}/{hd}"
                        );
                        // Either side may go first: the same answer.
                        assert_eq!(b.joint_max(DOWN, UP, hd, hu, i64::MAX), search);
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 1000);
    }

    /// With a middle band, an end band's room is what remains once the middle band is slid
    /// all the way to the other end; the middle band's own room does not depend on where it
    /// stands.
    #[test]
    fn rooms_with_a_middle_band_do_not_depend_on_its_position() {
        let total = 4800;
        let (pu, pm, pd) = (48u64, 160u64, 80u64);
        let (nu, nm, nd) = (
            (total / pu) as i64,
            (total / pm) as i64,
            (total / pd) as i64,
        );
        let mut at = |m_lo: i64| {
            let mut b = Bands::new(total);
            b.set(UP, band(pu, 1, 11, nu)); // up to byte 528
            b.set(MID, band(pm, m_lo, m_lo + 3, nm)); // 3 pages of 160 B
            b.set(DOWN, band(pd, 40, nd, nd)); // from byte 3200
            (b.room(UP), b.room(MID), b.room(DOWN))
        };
        // Middle pages 4..20 lie between 528 and 3200 (first = ceil(528/160) = 4,
        // end = 3200/160 = 20): 16 pages, 3 taken.
        let rooms: Vec<_> = (4..=17).map(&mut at).collect();
        assert!(rooms.iter().all(|&r| r == rooms[0]));
        let (up, mid, down) = rooms[0];
        assert_eq!(mid, 13);
        // Up may reach the middle band slid to pages 17..20: byte 2720 = page 56 of 48 B.
        assert_eq!(up, 2720 / 48 - 11);
        // Down may reach the middle band slid to pages 4..7: byte 1120 = page 14 of 80 B.
        assert_eq!(down, 40 - 14);
    }
}
