//! The arena's invariants, checked on demand (tests check them after every operation).
//!
//! 1. The tables have their sentinel last rows and padding-anchor row 0.
//! 2. v2p and p2v are inverse on every live page, and every bound page is inside the band.
//! 3. `span == live + holes + pending`; holes and pending pages are distinct band pages
//!    with no owner; eager pools have neither (the band is hole-free).
//! 4. An owner's free ids and live ids partition its id space, and every id a non-owner
//!    binds is live on its owner.
//! 5. Neighbouring bands do not overlap in bytes, and every band is above the floor. An
//!    empty middle band is transparent: the two ends must not overlap each other then, and
//!    the ends are linked to each other exactly while it is empty.

use std::collections::HashSet;

use crate::arena::Arena;
use crate::error::{Result, UkvError};
use crate::geometry::Direction;
use crate::subpool::{SubPool, TOMBSTONE};

impl Arena {
    /// Check every invariant; the error prints the out-of-sync values.
    ///
    /// # Errors
    /// [`UkvError::Invariant`] naming the sub-pool and what disagrees.
    pub fn check_invariants(&self) -> Result<()> {
        for i in 0..self.num_pools() {
            check_pool(self.pool(i))?;
            self.check_bindings(i)?;
        }
        self.check_frontiers()
    }

    fn check_frontiers(&self) -> Result<()> {
        // The bands that hold bytes, lowest first (an empty middle band holds none).
        let chain: Vec<usize> = self
            .chain()
            .iter()
            .copied()
            .filter(|&i| self.middle != Some(i) || self.pool(i).span_pages() > 0)
            .collect();
        self.check_links(&chain)?;
        for w in chain.windows(2) {
            let (lo, hi) = (self.pool(w[0]), self.pool(w[1]));
            if lo.high_byte() > hi.low_byte() {
                return Err(broken(
                    "arena",
                    format!(
                        "bands overlap: {:?} ends at byte {} but {:?} starts at byte {}",
                        lo.name(),
                        lo.high_byte(),
                        hi.name(),
                        hi.low_byte()
                    ),
                ));
            }
        }
        for &i in &chain {
            let p = self.pool(i);
            if p.span_pages() > 0 && p.low_byte() < self.reserved_floor() {
                return Err(broken(
                    p.name(),
                    format!(
                        "band starts at byte {} below the floor {}",
                        p.low_byte(),
                        self.reserved_floor()
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Arena {
    /// A non-owner binds only ids that are live on its owner.
    fn check_bindings(&self, i: usize) -> Result<()> {
        let p = self.pool(i);
        let Some(o) = p.owner else { return Ok(()) };
        let owner = self.pool(o);
        if !owner.dependents {
            return Err(broken(
                owner.name(),
                "not marked as having dependents".into(),
            ));
        }
        let stale = (1..p.geo.num_virtual_pages)
            .find(|&v| p.v2p()[v as usize] != TOMBSTONE && owner.v2p()[v as usize] == TOMBSTONE);
        match stale {
            Some(v) => Err(broken(
                p.name(),
                format!(
                    "binds page {v}, which is not live on its owner {:?}",
                    owner.name()
                ),
            )),
            None => Ok(()),
        }
    }

    /// Each band's neighbours are the adjacent bands of `chain` (the bands holding bytes,
    /// plus the ends).
    fn check_links(&self, chain: &[usize]) -> Result<()> {
        let Some(m) = self.middle else { return Ok(()) };
        let (up, down) = (self.chain()[0], self.chain()[2]);
        let open = chain.contains(&m);
        let want = if open { (m, m) } else { (down, up) };
        let got = (self.above(up), self.below(down));
        if got != (Some(want.0), Some(want.1)) {
            return Err(broken(
                "arena",
                format!(
                    "ends linked to {got:?} but the middle band is {} (want {want:?})",
                    if open { "open" } else { "empty" }
                ),
            ));
        }
        Ok(())
    }
}

fn broken(pool: &str, detail: String) -> UkvError {
    UkvError::Invariant {
        pool: pool.to_string(),
        detail,
    }
}

fn check_pool(p: &SubPool) -> Result<()> {
    let plain = p.group.is_none() && !p.dependents && p.geo.direction != Direction::Middle;
    if p.plain_free != plain {
        return Err(broken(
            p.name(),
            format!("fast-free flag {} but {plain} expected", p.plain_free),
        ));
    }
    check_sentinels(p)?;
    check_inverse(p)?;
    check_span(p)?;
    check_ids(p)
}

fn check_sentinels(p: &SubPool) -> Result<()> {
    let (v2p, p2v) = (p.v2p(), p.p2v());
    let ok = v2p.len() as i64 == p.geo.num_virtual_pages + 1
        && p2v.len() as i64 == p.geo.num_pages + 1
        && v2p[0] == 0
        && p2v[0] == 0
        && v2p[v2p.len() - 1] == TOMBSTONE
        && p2v[p2v.len() - 1] == TOMBSTONE;
    if ok {
        Ok(())
    } else {
        Err(broken(
            p.name(),
            format!(
                "table shape or anchor rows wrong: v2p len {} [0]={} [last]={}, p2v len {} [0]={} [last]={}",
                v2p.len(),
                v2p[0],
                v2p[v2p.len() - 1],
                p2v.len(),
                p2v[0],
                p2v[p2v.len() - 1]
            ),
        ))
    }
}

fn check_inverse(p: &SubPool) -> Result<()> {
    let (v2p, p2v) = (p.v2p(), p.p2v());
    let mut live = 0usize;
    for v in 1..p.geo.num_virtual_pages {
        let ph = v2p[v as usize];
        if ph == TOMBSTONE {
            continue;
        }
        live += 1;
        if !p.in_band(ph) || p2v[ph as usize] != v {
            return Err(broken(
                p.name(),
                format!(
                    "v2p[{v}] = {ph} but p2v[{ph}] = {} (in band: {}, watermark {})",
                    p2v.get(ph.max(0) as usize).copied().unwrap_or(TOMBSTONE),
                    p.in_band(ph),
                    p.watermark()
                ),
            ));
        }
    }
    if live != p.live_pages() {
        return Err(broken(
            p.name(),
            format!(
                "live count {} but {live} bound virtual pages",
                p.live_pages()
            ),
        ));
    }
    for ph in 1..p.geo.num_pages {
        let v = p2v[ph as usize];
        if v == TOMBSTONE {
            continue;
        }
        if !p.in_band(ph) || v < 1 || v >= p.geo.num_virtual_pages || v2p[v as usize] != ph {
            return Err(broken(
                p.name(),
                format!(
                    "p2v[{ph}] = {v} does not round-trip (watermark {})",
                    p.watermark()
                ),
            ));
        }
    }
    Ok(())
}

fn check_span(p: &SubPool) -> Result<()> {
    let span = p.span_pages();
    let holes = p.num_holes();
    let pending = p.num_pending();
    if span < 0 || span as usize != p.live_pages() + holes + pending {
        return Err(broken(
            p.name(),
            format!(
                "span {span} != live {} + holes {holes} + pending {pending} (watermark {})",
                p.live_pages(),
                p.watermark()
            ),
        ));
    }
    if !p.is_lazy() && holes + pending > 0 {
        return Err(broken(
            p.name(),
            format!("eager pool has {holes} holes, {pending} pending"),
        ));
    }
    let free_pages = p
        .holes
        .iter()
        .chain(p.pending.iter().flat_map(|b| b.pages.iter()));
    let mut seen = HashSet::with_capacity(holes + pending);
    for &ph in free_pages {
        if !p.in_band(ph) || p.p2v()[ph as usize] != TOMBSTONE || !seen.insert(ph) {
            return Err(broken(
                p.name(),
                format!("free page {ph} is outside the band, owned, or listed twice"),
            ));
        }
    }
    let counted: usize = p.pending.iter().map(|b| b.pages.len()).sum();
    if counted != pending {
        return Err(broken(
            p.name(),
            format!("pending count {pending} but {counted} listed"),
        ));
    }
    let band_ok = match p.geo.direction {
        Direction::Up => p.watermark() >= p.geo.min_page_index && p.watermark() <= p.geo.num_pages,
        Direction::Down => {
            p.watermark() >= p.geo.min_page_index - 1 && p.watermark() < p.geo.num_pages
        }
        Direction::Middle => {
            p.geo.min_page_index <= p.base
                && p.base <= p.watermark()
                && p.watermark() <= p.geo.num_pages
        }
    };
    if !band_ok {
        return Err(broken(
            p.name(),
            format!(
                "watermark {} (base {}) outside the index space",
                p.watermark(),
                p.base
            ),
        ));
    }
    Ok(())
}

fn check_ids(p: &SubPool) -> Result<()> {
    if !p.is_id_owner() {
        return Ok(());
    }
    let expected = (p.geo.num_virtual_pages - p.geo.min_virtual_page) as usize;
    if p.free_ids.len() + p.live_pages() != expected {
        return Err(broken(
            p.name(),
            format!(
                "{} free ids + {} live != {expected} ids",
                p.free_ids.len(),
                p.live_pages()
            ),
        ));
    }
    let mut seen = vec![false; p.geo.num_virtual_pages as usize];
    for &v in &p.free_ids {
        let bad = v < p.geo.min_virtual_page
            || v >= p.geo.num_virtual_pages
            || p.v2p()[v as usize] != TOMBSTONE
            || std::mem::replace(&mut seen[v as usize], true);
        if bad {
            return Err(broken(
                p.name(),
                format!("free id {v} is out of range, bound, or listed twice"),
            ));
        }
    }
    Ok(())
}
