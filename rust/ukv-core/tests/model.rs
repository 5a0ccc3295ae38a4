//! Model-based property tests: random operation sequences run against the arena and against
//! a deliberately naive reference model, compared after every single operation.
//!
//! The model keeps per-pool `BTreeMap`s (virtual -> physical and back), a `VecDeque` of free
//! ids, a FIFO hole list and pending batches, and recomputes frontiers in bytes from scratch.
//! It predicts everything exactly: success or failure and the error kind, the ids handed out,
//! the physical placement (eager and lazy), every page move of every plan in order, the wait
//! tokens, counters and capacities. On top of that a byte-level data model (the shared buffer
//! in 16-byte cells) executes each plan's moves and checks that every live page still holds
//! what was written when it was bound, which also catches two pools overlapping in bytes.
//!
//! Arenas have two bands, or three with a middle band (every assignment of up / middle /
//! down to a KV owner, a SWA or state pool and a second state pool). With a middle band the
//! model finds rooms by trying every position of the middle band (no closed form), and the
//! composite SWA operations are decided by running them on a copy of the model and checking
//! the resulting layout, so the core's capacity arithmetic is checked against brute force.
//! After every operation the feasibility contract is probed on copies of the arena: an
//! allocation of `schedulable` pages (joint: `joint_schedulable_pages`) succeeds, one page
//! more returns false and changes nothing.
//!
//! A second property runs one trace on an eager and a lazy arena without memory pressure and
//! checks that they hand out the same ids and end with the same live set and data.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use proptest::prelude::*;
use ukv_core::{Arena, ArenaConfig, Direction, Plan, PoolSpec, UkvError, TOMBSTONE};

mod common;
use common::assert_same_tables;

/// Granularity of the simulated buffer: every entry size used here is a multiple of it.
const CELL: u64 = 16;
/// Random cases per property (fixed here so `cargo test` runs the same amount everywhere;
/// an unoptimized build runs fewer of the main property, which probes every operation on
/// copies of the arena and of the model).
const MODEL_CASES: u32 = if cfg!(debug_assertions) { 160 } else { 512 };
const EQUIV_CASES: u32 = 96;
/// The SWA pair of a SWA configuration: pool 1 binds pool 0's ids.
const FULL: usize = 0;
const SWA: usize = 1;

// ----- configuration ---------------------------------------------------------------------

/// Directions of the three pools of a three-band arena, by `perm % 6`.
const PERMS: [[Direction; 3]; 6] = {
    use Direction::{Down, Middle, Up};
    [
        [Up, Middle, Down],
        [Up, Down, Middle],
        [Middle, Up, Down],
        [Middle, Down, Up],
        [Down, Up, Middle],
        [Down, Middle, Up],
    ]
};

#[derive(Clone, Debug)]
struct Cfg {
    /// Direction of pool 0 (pool 1 grows the other way) in a two-band arena.
    dir0: Direction,
    /// Page size of pool 0 (pool 1 shares it when it is a SWA pool, else 1).
    ps0: u64,
    e0: u64,
    e1: u64,
    /// Pool 1 binds pool 0's ids (SWA) instead of minting its own (mamba).
    swa: bool,
    lazy: bool,
    cap: usize,
    /// Buffer size: floor + `units` of the larger page + `slack` cells.
    units: u64,
    slack: u64,
    /// A third pool (state, page size 1, `e2`-byte entries) and the directions of the three
    /// pools, `PERMS[perm % 6]`: one of them is the middle band.
    three: Option<(u64, u8)>,
}

impl Cfg {
    fn specs(&self) -> Vec<PoolSpec> {
        let (d0, d1, d2) = match self.three {
            Some((_, perm)) => {
                let p = PERMS[perm as usize % 6];
                (p[0], p[1], Some(p[2]))
            }
            None => {
                let d1 = match self.dir0 {
                    Direction::Up => Direction::Down,
                    _ => Direction::Up,
                };
                (self.dir0, d1, None)
            }
        };
        let mut specs = vec![
            PoolSpec {
                name: "kv".into(),
                entry_bytes: self.e0,
                page_size: self.ps0,
                direction: d0,
                id_owner: None,
            },
            PoolSpec {
                name: if self.swa { "swa" } else { "state" }.into(),
                entry_bytes: self.e1,
                page_size: if self.swa { self.ps0 } else { 1 },
                direction: d1,
                id_owner: if self.swa { Some(0) } else { None },
            },
        ];
        if let (Some((e2, _)), Some(d2)) = (self.three, d2) {
            specs.push(PoolSpec {
                name: "state2".into(),
                entry_bytes: e2,
                page_size: 1,
                direction: d2,
                id_owner: None,
            });
        }
        specs
    }

    fn num_pools(&self) -> usize {
        if self.three.is_some() {
            3
        } else {
            2
        }
    }

    fn total(&self) -> u64 {
        let specs = self.specs();
        let max_pb = specs
            .iter()
            .map(|s| s.entry_bytes * s.page_size)
            .max()
            .unwrap();
        max_pb + self.units * max_pb + self.slack * CELL
    }

    fn arena(&self, lazy: bool) -> Arena {
        let mut cfg = ArenaConfig::new(self.total(), self.specs());
        cfg.lazy = lazy;
        cfg.max_moves_per_flush = self.cap;
        Arena::new(cfg).unwrap()
    }
}

fn cfg_strategy() -> impl Strategy<Value = Cfg> {
    (
        (
            prop_oneof![Just(Direction::Up), Just(Direction::Down)],
            prop_oneof![Just(1u64), Just(8), Just(16)],
            prop_oneof![Just(48u64), Just(64), Just(80), Just(112)],
            prop_oneof![Just(48u64), Just(80), Just(112), Just(160)],
            any::<bool>(),
            any::<bool>(),
        ),
        prop_oneof![Just(1usize), Just(2), Just(3), Just(4096)],
        4u64..28,
        0u64..12,
        prop::option::of((prop_oneof![Just(48u64), Just(96), Just(160)], 0..6u8)),
    )
        .prop_map(
            |((dir0, ps0, e0, e1, swa, lazy), cap, units, slack, three)| Cfg {
                dir0,
                ps0,
                e0,
                e1,
                swa,
                lazy,
                cap,
                units,
                slack,
                three,
            },
        )
}

// ----- the reference model ----------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    InvalidId,
    DoubleFree,
    Argument,
}

fn kind_of(e: &UkvError) -> Kind {
    match e {
        UkvError::InvalidId { .. } => Kind::InvalidId,
        UkvError::DoubleFree { .. } => Kind::DoubleFree,
        UkvError::Argument { .. } => Kind::Argument,
        other => panic!("unexpected error {other:?}"),
    }
}

#[derive(Clone, Debug)]
struct MPool {
    /// Grows upwards: a grow-up band or the middle band.
    up: bool,
    /// The middle band (a floating band with a movable base).
    mid: bool,
    ps: i64,
    pb: u64,
    num_pages: i64,
    min_page: i64,
    num_virt: i64,
    min_virt: i64,
    owner: bool,
    lazy: bool,
    v2p: BTreeMap<i64, i64>,
    p2v: BTreeMap<i64, i64>,
    wm: i64,
    /// First page of an upward band (fixed at `min_page` except for the middle band).
    base: i64,
    free_ids: VecDeque<i64>,
    /// Reusable free pages inside the band, in the order alloc takes them.
    holes: Vec<i64>,
    pending: Vec<(u64, Vec<i64>)>,
    /// Write sets of the unretired forwards, by token (their union blocks a flush).
    writes: Vec<(u64, Vec<i64>)>,
    group: Option<Vec<i64>>,
    moved: u64,
    compactions: u64,
    flushes: u64,
}

impl MPool {
    fn clear(&mut self) {
        self.v2p.clear();
        self.p2v.clear();
        self.base = self.min_page;
        self.wm = if self.up {
            self.min_page
        } else {
            self.num_pages - 1
        };
        self.free_ids = if self.owner {
            (self.min_virt..self.num_virt).collect()
        } else {
            VecDeque::new()
        };
        self.holes.clear();
        self.pending.clear();
        self.writes.clear();
        self.group = None;
    }

    fn live(&self) -> i64 {
        self.v2p.len() as i64
    }

    fn pending_pages(&self) -> usize {
        self.pending.iter().map(|b| b.1.len()).sum()
    }

    /// The band's pages `[lo, hi)`, or packed down to its live pages.
    fn band(&self, packed: bool) -> (i64, i64) {
        match (self.up, packed) {
            (true, false) => (self.base, self.wm),
            (true, true) => (self.base, self.base + self.live()),
            (false, false) => (self.wm + 1, self.num_pages),
            (false, true) => (self.num_pages - self.live(), self.num_pages),
        }
    }

    fn span(&self) -> i64 {
        let (lo, hi) = self.band(false);
        hi - lo
    }

    /// Up: one past the band's last byte. Down: the band's first byte.
    fn frontier(&self) -> u64 {
        if self.up {
            self.wm as u64 * self.pb
        } else {
            (self.wm + 1) as u64 * self.pb
        }
    }

    /// The frontier after an urgent flush packed the band down to the live pages.
    fn packed_frontier(&self) -> u64 {
        if self.up {
            (self.min_page + self.live()) as u64 * self.pb
        } else {
            (self.num_pages - self.live()) as u64 * self.pb
        }
    }

    fn index_room(&self) -> i64 {
        if self.up {
            self.num_pages - self.wm
        } else {
            self.wm + 1 - self.min_page
        }
    }

    fn bind(&mut self, v: i64, p: i64) {
        assert!(self.v2p.insert(v, p).is_none() && self.p2v.insert(p, v).is_none());
    }

    /// Absorb holes touching the watermark (and, for the middle band, its base).
    fn absorb(&mut self) {
        self.holes.sort_unstable();
        loop {
            let edge = if self.up { self.wm - 1 } else { self.wm + 1 };
            match self.holes.iter().position(|&h| h == edge) {
                Some(k) => {
                    self.holes.remove(k);
                    self.wm += if self.up { -1 } else { 1 };
                }
                None => break,
            }
        }
        while self.mid && self.holes.first() == Some(&self.base) {
            self.holes.remove(0);
            self.base += 1;
        }
    }

    /// The page of an id of this pool's id space: InvalidId when out of range.
    fn checked_page(&self, t: i64) -> Result<i64, Kind> {
        if t < 0 {
            return Err(Kind::InvalidId);
        }
        let v = t / self.ps;
        if v >= self.num_virt || v < self.min_virt {
            return Err(Kind::InvalidId);
        }
        Ok(v)
    }

    /// The page of a live id not queued in the open group, or the error kind.
    fn live_page(&self, t: i64) -> Result<i64, Kind> {
        let v = self.checked_page(t)?;
        if !self.v2p.contains_key(&v) || self.group.as_ref().is_some_and(|g| g.contains(&v)) {
            return Err(Kind::DoubleFree);
        }
        Ok(v)
    }

    /// Check a free call the way the arena promises to: token by token, first offender wins.
    fn validate_free(&self, tokens: &[i64]) -> Result<Vec<i64>, Kind> {
        let mut pages = Vec::new();
        let mut seen = BTreeSet::new();
        for &t in tokens {
            let v = self.live_page(t)?;
            if !seen.insert(v) {
                if self.ps == 1 {
                    return Err(Kind::DoubleFree);
                }
                continue;
            }
            pages.push(v);
        }
        Ok(pages)
    }

    /// Whether the band lies inside the index space.
    fn in_index_space(&self) -> bool {
        if self.up {
            self.min_page <= self.base && self.base <= self.wm && self.wm <= self.num_pages
        } else {
            self.min_page - 1 <= self.wm && self.wm < self.num_pages
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Pred {
    res: Option<Result<i64, Kind>>,
    pages: Vec<i64>,
    tokens: Vec<i64>,
    token_req: Vec<i64>,
    moves: [Vec<(i64, i64)>; 3],
    waits: Vec<u64>,
    reset: [bool; 3],
    /// The call leaves the previous plan in place (errors and the token setters).
    keeps_plan: bool,
}

impl Pred {
    fn ok(v: i64) -> Self {
        Pred {
            res: Some(Ok(v)),
            ..Pred::default()
        }
    }
    fn err(k: Kind) -> Self {
        Pred {
            res: Some(Err(k)),
            keeps_plan: true,
            ..Pred::default()
        }
    }
}

#[derive(Clone, Debug)]
struct Model {
    pools: Vec<MPool>,
    latest: Option<u64>,
    cap: usize,
    total: u64,
    /// The up end, the middle band and the down end (pool indices), where present.
    up: Option<usize>,
    mid: Option<usize>,
    down: Option<usize>,
    swa: bool,
}

impl Model {
    fn new(cfg: &Cfg, lazy: bool) -> Self {
        let specs = cfg.specs();
        let floor = specs
            .iter()
            .map(|s| s.entry_bytes * s.page_size)
            .max()
            .unwrap();
        let total = cfg.total();
        let mut pools: Vec<MPool> = specs
            .iter()
            .map(|s| {
                let pb = s.entry_bytes * s.page_size;
                let num_pages = (total / pb) as i64;
                let min_page = floor.div_ceil(pb) as i64;
                MPool {
                    up: s.direction != Direction::Down,
                    mid: s.direction == Direction::Middle,
                    ps: s.page_size as i64,
                    pb,
                    num_pages,
                    min_page,
                    num_virt: num_pages,
                    min_virt: min_page,
                    owner: s.id_owner.is_none(),
                    lazy,
                    v2p: BTreeMap::new(),
                    p2v: BTreeMap::new(),
                    wm: 0,
                    base: min_page,
                    free_ids: VecDeque::new(),
                    holes: Vec::new(),
                    pending: Vec::new(),
                    writes: Vec::new(),
                    group: None,
                    moved: 0,
                    compactions: 0,
                    flushes: 0,
                }
            })
            .collect();
        if cfg.swa {
            pools[SWA].num_virt = pools[FULL].num_pages;
            pools[SWA].min_virt = pools[FULL].min_page;
        }
        for p in &mut pools {
            p.clear();
        }
        let find = |d: Direction| specs.iter().position(|s| s.direction == d);
        let mut model = Model {
            pools,
            latest: None,
            cap: cfg.cap,
            total,
            up: find(Direction::Up),
            mid: find(Direction::Middle),
            down: find(Direction::Down),
            swa: cfg.swa,
        };
        model.park();
        model
    }

    fn n(&self) -> usize {
        self.pools.len()
    }

    /// The bands holding bytes, lowest first (an empty middle band holds none).
    fn open_chain(&self) -> Vec<usize> {
        [self.up, self.mid, self.down]
            .into_iter()
            .flatten()
            .filter(|&j| !self.pools[j].mid || self.pools[j].span() > 0)
            .collect()
    }

    fn low_byte(&self, j: usize) -> u64 {
        let p = &self.pools[j];
        p.band(false).0 as u64 * p.pb
    }

    fn high_byte(&self, j: usize) -> u64 {
        let p = &self.pools[j];
        p.band(false).1 as u64 * p.pb
    }

    /// The first byte band `i` may not grow into (upwards), or the last it must stay above
    /// (downwards): the next band holding bytes.
    fn limit_above(&self, i: usize) -> u64 {
        let chain = self.open_chain();
        let k = chain.iter().position(|&j| j == i).unwrap();
        chain.get(k + 1).map_or(self.total, |&j| self.low_byte(j))
    }

    fn limit_below(&self, i: usize) -> u64 {
        let chain = self.open_chain();
        let k = chain.iter().position(|&j| j == i).unwrap();
        k.checked_sub(1).map_or(0, |q| self.high_byte(chain[q]))
    }

    /// The pages of the middle band's index space between the two ends, `[first, end)`.
    fn mid_range(&self) -> (i64, i64) {
        let m = &self.pools[self.mid.unwrap()];
        let up_high = self.up.map_or(0, |u| self.high_byte(u));
        let down_low = self.down.map_or(self.total, |d| self.low_byte(d));
        let first = (up_high.div_ceil(m.pb) as i64).max(m.min_page);
        let end = ((down_low / m.pb) as i64).min(m.num_pages);
        (first, end)
    }

    /// Fresh pages pool `i` may take. Two bands: the index room and the bytes up to the
    /// neighbour's frontier. Three bands: the best over every position of the middle band
    /// (it may slide), with the bands for which `packed` holds packed to their live pages.
    fn room(&self, i: usize, packed: &dyn Fn(usize) -> bool) -> i64 {
        if self.mid.is_none() {
            let (p, n) = (&self.pools[i], &self.pools[1 - i]);
            let nb = if packed(1 - i) {
                n.packed_frontier()
            } else {
                n.frontier()
            };
            let by_bytes = if p.up {
                (nb / p.pb) as i64 - p.wm
            } else {
                p.wm + 1 - nb.div_ceil(p.pb) as i64
            };
            return by_bytes.min(p.index_room()).max(0);
        }
        let (u, m, d) = (self.up.unwrap(), self.mid.unwrap(), self.down.unwrap());
        let band = |j: usize| self.pools[j].band(j != i && packed(j));
        let (up, mp, dp) = (&self.pools[u], &self.pools[m], &self.pools[d]);
        let up_high = band(u).1 as u64 * up.pb;
        let down_low = band(d).0 as u64 * dp.pb;
        let (mlo, mhi) = band(m);
        let span = mhi - mlo;
        // Every position t of a `span`-page middle band inside its index space.
        let positions = mp.min_page..=mp.num_pages - span;
        let room = if i == m {
            let free = (mp.min_page..mp.num_pages)
                .filter(|&q| q as u64 * mp.pb >= up_high && (q + 1) as u64 * mp.pb <= down_low)
                .count() as i64;
            free - span
        } else if i == u {
            let high = |limit: u64| ((limit / up.pb) as i64).min(up.num_pages) - up.wm;
            if span == 0 {
                high(down_low)
            } else {
                positions
                    .filter(|&t| (t + span) as u64 * mp.pb <= down_low)
                    .map(|t| high(t as u64 * mp.pb))
                    .max()
                    .unwrap_or(0)
            }
        } else {
            let low = |limit: u64| dp.wm + 1 - (limit.div_ceil(dp.pb) as i64).max(dp.min_page);
            if span == 0 {
                low(up_high)
            } else {
                positions
                    .filter(|&t| t as u64 * mp.pb >= up_high)
                    .map(|t| low((t + span) as u64 * mp.pb))
                    .max()
                    .unwrap_or(0)
            }
        };
        room.max(0)
    }

    /// Pages pool `i` can take without flushing another band (an end band's allocation
    /// may slide the middle band, which packs it).
    fn available(&self, i: usize) -> i64 {
        let mid = self.mid;
        self.pools[i].holes.len() as i64 + self.room(i, &|j| Some(j) == mid)
    }

    fn schedulable(&self, i: usize) -> i64 {
        let packed = self.pools[i].holes.len() as i64 + self.room(i, &|j| j != i);
        self.available(i).max(packed)
    }

    /// Whether pool `i` can take `fresh` pages where the bands stand now (no slide).
    fn fits_in_place(&self, i: usize, fresh: i64) -> bool {
        let p = &self.pools[i];
        if p.mid {
            let (first, end) = self.mid_range();
            let room = if p.span() == 0 {
                end - first
            } else {
                (end - p.wm) + (p.base - first)
            };
            return fresh <= room.max(0);
        }
        if p.up {
            fresh <= p.index_room() && (p.wm + fresh) as u64 * p.pb <= self.limit_above(i)
        } else {
            fresh <= p.index_room() && (p.wm - fresh + 1) as u64 * p.pb >= self.limit_below(i)
        }
    }

    /// Bytes pool `i` can grow into where the bands stand now.
    fn gap_bytes(&self, i: usize) -> u64 {
        let p = &self.pools[i];
        if p.mid {
            let up_high = self.up.map_or(0, |u| self.high_byte(u));
            let down_low = self.down.map_or(self.total, |d| self.low_byte(d));
            if p.span() == 0 {
                return down_low.saturating_sub(up_high);
            }
            return down_low.saturating_sub(self.high_byte(i))
                + self.low_byte(i).saturating_sub(up_high);
        }
        if p.up {
            self.limit_above(i).saturating_sub(self.high_byte(i))
        } else {
            self.low_byte(i).saturating_sub(self.limit_below(i))
        }
    }

    /// Whether every band lies in its index space and no two bands overlap.
    fn layout_ok(&self) -> bool {
        let chain = self.open_chain();
        self.pools.iter().all(MPool::in_index_space)
            && chain
                .windows(2)
                .all(|w| self.high_byte(w[0]) <= self.low_byte(w[1]))
    }

    /// Whether `n` pages fit on pool `i`, flushing the other end bands urgently and
    /// sliding the middle band when that is what it takes.
    fn make_room(&mut self, i: usize, n: i64, pred: &mut Pred) -> bool {
        let fresh = n - self.pools[i].holes.len() as i64;
        if fresh <= 0 || self.fits_in_place(i, fresh) {
            return true;
        }
        if self.mid.is_none() {
            if n > self.schedulable(i) {
                return false;
            }
            self.flush_pool(1 - i, true, pred);
            assert!(
                n <= self.available(i),
                "model: an urgent neighbour flush must make room"
            );
            return true;
        }
        if n > self.available(i) {
            if n > self.schedulable(i) {
                return false;
            }
            self.flush_ends(Some(i), pred);
        }
        if !self.pools[i].mid && !self.fits_in_place(i, fresh) {
            let up = self.pools[i].up;
            let (ux, dx) = if up { (fresh, 0) } else { (0, fresh) };
            assert!(
                self.slide(ux, dx, 0, pred),
                "model: the middle band must slide"
            );
        }
        assert!(
            self.fits_in_place(i, fresh),
            "model: no room after the slide"
        );
        true
    }

    /// Flush the end bands (not `skip`) urgently, lowest first.
    fn flush_ends(&mut self, skip: Option<usize>, pred: &mut Pred) {
        for j in [self.up, self.down].into_iter().flatten() {
            if Some(j) != skip {
                self.flush_pool(j, true, pred);
            }
        }
    }

    /// Relocate the middle band by the least distance that lets the up end grow by `ux`
    /// pages, the down end by `dx`, and the middle band itself by `own`; false when it
    /// already allows that (or is empty).
    fn slide(&mut self, ux: i64, dx: i64, own: i64, pred: &mut Pred) -> bool {
        let Some(m) = self.mid else { return false };
        let p = &self.pools[m];
        if p.span() == 0 {
            return false;
        }
        let (u, d) = (
            &self.pools[self.up.unwrap()],
            &self.pools[self.down.unwrap()],
        );
        let up_high = (u.wm + ux) as u64 * u.pb;
        let down_low = (d.wm + 1 - dx).max(0) as u64 * d.pb;
        let first = (up_high.div_ceil(p.pb) as i64).max(p.min_page);
        let end = ((down_low / p.pb) as i64).min(p.num_pages);
        if p.base >= first && p.wm <= end && (end - p.wm) + (p.base - first) >= own {
            return false;
        }
        let t = p.base.min(end - p.live()).max(first);
        self.relocate(m, t, pred);
        true
    }

    /// Pack the middle band's live pages into `[t, t + live)`: live pages outside the window
    /// move, ascending, to the free pages inside it, ascending.
    fn relocate(&mut self, m: usize, t: i64, pred: &mut Pred) {
        let p = &mut self.pools[m];
        for (tok, pages) in p.pending.drain(..) {
            if !pred.waits.contains(&tok) {
                pred.waits.push(tok);
            }
            p.holes.extend(pages);
        }
        let live = p.live();
        let window = t..t + live;
        let srcs: Vec<i64> = p
            .p2v
            .keys()
            .copied()
            .filter(|s| !window.contains(s))
            .collect();
        let dsts: Vec<i64> = window.filter(|q| !p.p2v.contains_key(q)).collect();
        assert_eq!(srcs.len(), dsts.len(), "model: relocation pairs");
        if !srcs.is_empty() {
            if let Some(tok) = self.latest.take() {
                if !pred.waits.contains(&tok) {
                    pred.waits.push(tok);
                }
            }
            p.writes.clear();
            p.moved += srcs.len() as u64;
            p.compactions += 1;
        }
        for (&s, &d) in srcs.iter().zip(&dsts) {
            let v = p.p2v.remove(&s).unwrap();
            p.p2v.insert(d, v);
            p.v2p.insert(v, d);
            pred.moves[m].push((s, d));
        }
        p.holes.clear();
        p.base = t;
        p.wm = t + live;
    }

    /// An empty middle band waits at the top of its index space until an allocation
    /// anchors it (the arena parks it at the end of every operation that empties it).
    fn park(&mut self) {
        if let Some(m) = self.mid {
            let p = &mut self.pools[m];
            if p.span() == 0 {
                p.base = p.num_pages;
                p.wm = p.num_pages;
            }
        }
    }

    /// Bind `vs` on pool `i`: holes first in list order, then fresh pages, ascending (the
    /// middle band: above its top, then below its base; anchored centred when empty).
    fn bind_pages(&mut self, i: usize, vs: &[i64]) {
        let mid_range = self.mid.map(|_| self.mid_range());
        let p = &mut self.pools[i];
        let n_holes = p.holes.len().min(vs.len());
        let holes: Vec<i64> = p.holes.drain(..n_holes).collect();
        for (&v, h) in vs.iter().zip(holes) {
            p.bind(v, h);
        }
        let fresh = &vs[n_holes..];
        let k = fresh.len() as i64;
        if p.mid {
            let (first, end) = mid_range.unwrap();
            if k > 0 && p.span() == 0 {
                p.base = first + (end - first - k) / 2;
                p.wm = p.base;
            }
            let top = (end - p.wm).clamp(0, k) as usize;
            for (&v, ph) in fresh[..top].iter().zip(p.wm..) {
                p.bind(v, ph);
            }
            p.wm += top as i64;
            p.base -= k - top as i64;
            for (&v, ph) in fresh[top..].iter().zip(p.base..) {
                p.bind(v, ph);
            }
            return;
        }
        let start = if p.up { p.wm } else { p.wm - k + 1 };
        if p.up {
            p.wm += k;
        } else {
            p.wm -= k;
        }
        for (&v, ph) in fresh.iter().zip(start..) {
            p.bind(v, ph);
        }
    }

    fn alloc(&mut self, i: usize, n: i64) -> Pred {
        if !self.pools[i].owner {
            return Pred::err(Kind::Argument);
        }
        let mut pred = Pred::ok(1);
        if n == 0 {
            return pred;
        }
        if n > self.pools[i].free_ids.len() as i64 || !self.make_room(i, n, &mut pred) {
            return Pred::ok(0);
        }
        let vs: Vec<i64> = self.pools[i].free_ids.drain(..n as usize).collect();
        self.bind_pages(i, &vs);
        pred.tokens = self.tokens_of(i, &vs);
        pred.pages = vs;
        pred
    }

    fn tokens_of(&self, i: usize, vs: &[i64]) -> Vec<i64> {
        let ps = self.pools[i].ps;
        vs.iter()
            .flat_map(|&v| (0..ps).map(move |o| v * ps + o))
            .collect()
    }

    fn alloc_tokens(&mut self, i: usize, n: i64) -> Pred {
        let p = &self.pools[i];
        if !p.owner || n < 0 || n % p.ps != 0 {
            return Pred::err(Kind::Argument);
        }
        self.alloc(i, n / p.ps)
    }

    fn alloc_with_virtual(&mut self, i: usize, vs: &[i64]) -> Pred {
        let p = &self.pools[i];
        if p.owner {
            return Pred::err(Kind::Argument);
        }
        let owner = &self.pools[FULL];
        let mut seen = BTreeSet::new();
        for &v in vs {
            if v < 0 || v >= p.num_virt || v < p.min_virt {
                return Pred::err(Kind::InvalidId);
            }
            if !owner.v2p.contains_key(&v) || p.v2p.contains_key(&v) || !seen.insert(v) {
                return Pred::err(Kind::Argument);
            }
        }
        let mut pred = Pred::ok(1);
        if !self.make_room(i, vs.len() as i64, &mut pred) {
            return Pred::ok(0);
        }
        self.bind_pages(i, vs);
        pred.tokens = self.tokens_of(i, vs);
        pred.pages = vs.to_vec();
        pred
    }

    /// New pages of an extend batch, or the error of its validation.
    fn extend_pages(&self, i: usize, pre: &[i64], seq: &[i64]) -> i64 {
        let ps = self.pools[i].ps;
        pre.iter()
            .zip(seq)
            .map(|(&a, &b)| (b + ps - 1) / ps - (a + ps - 1) / ps)
            .sum()
    }

    /// Token allocation, position by position: a position inside the prefix's last page
    /// continues after `last_loc`; a position at a page start takes the next new page.
    /// `last[r]` is request r's last token (host side) or None for relative output.
    /// `joint`: the pages are taken jointly on the SWA pair (pool `i` is the owner).
    fn alloc_extend(
        &mut self,
        i: usize,
        pre: &[i64],
        seq: &[i64],
        last: Option<&[i64]>,
        joint: bool,
    ) -> Pred {
        if !self.pools[i].owner || (joint && !self.swa) {
            return Pred::err(Kind::Argument);
        }
        let new_pages = self.extend_pages(i, pre, seq);
        let mut pred = if joint {
            self.swa_alloc(new_pages)
        } else {
            self.alloc(i, new_pages)
        };
        if pred.res != Some(Ok(1)) {
            return pred;
        }
        let ps = self.pools[i].ps;
        let mut pages = pred.pages.clone().into_iter();
        pred.tokens.clear();
        for (r, (&a, &b)) in pre.iter().zip(seq).enumerate() {
            let mut page = -1;
            for pos in a..b {
                if pos % ps == 0 {
                    page = pages.next().unwrap();
                }
                if page < 0 {
                    // Still inside the prefix's partial last page.
                    // With a host last_loc the final id; else the encoded continuation
                    // (distance plus page_size times last_loc's expected in-page offset).
                    let base = last.map_or(((a - 1) % ps) * ps, |l| l[r]);
                    pred.tokens.push(pos - a + 1 + base);
                    pred.token_req.push(r as i64);
                } else {
                    pred.tokens.push(page * ps + pos % ps);
                    pred.token_req.push(-1);
                }
            }
        }
        assert!(pages.next().is_none());
        if last.is_some() {
            pred.token_req.clear();
        }
        pred
    }

    fn alloc_decode(&mut self, i: usize, seq: &[i64], last: Option<&[i64]>, joint: bool) -> Pred {
        let pre: Vec<i64> = seq.iter().map(|&s| s - 1).collect();
        self.alloc_extend(i, &pre, seq, last, joint)
    }

    // ----- the SWA composite ----------------------------------------------------------------

    /// Joint allocation of `n` pages on the SWA pair, decided by running it on a copy: as
    /// the bands stand, else after flushing the end bands urgently; the first that leaves a
    /// valid layout wins, else nothing changes.
    fn swa_alloc(&mut self, n: i64) -> Pred {
        if !self.swa {
            return Pred::err(Kind::Argument);
        }
        let mut pred = Pred::ok(1);
        if n == 0 {
            return pred;
        }
        if n > self.pools[FULL].free_ids.len() as i64 {
            return Pred::ok(0);
        }
        for flush in [false, true] {
            let mut trial = self.clone();
            let mut tp = Pred::ok(1);
            if trial.joint_try(n, flush, &mut tp) {
                *self = trial;
                pred = tp;
                pred.tokens = self.tokens_of(FULL, &pred.pages);
                return pred;
            }
        }
        Pred::ok(0)
    }

    /// One attempt at a joint allocation; false when the resulting layout is invalid.
    fn joint_try(&mut self, n: i64, flush: bool, pred: &mut Pred) -> bool {
        if flush {
            self.flush_ends(None, pred);
        }
        let vs: Vec<i64> = self.pools[FULL].free_ids.drain(..n as usize).collect();
        // End bands bind before a middle band.
        let order = if self.mid == Some(FULL) {
            [SWA, FULL]
        } else {
            [FULL, SWA]
        };
        let fresh = |m: &Model, j: usize| (n - m.pools[j].holes.len() as i64).max(0);
        let (mut ux, mut dx, mut own) = (0, 0, 0);
        for j in order {
            if Some(j) == self.up {
                ux = fresh(self, j);
            } else if Some(j) == self.down {
                dx = fresh(self, j);
            } else {
                own = fresh(self, j);
            }
        }
        self.slide(ux, dx, own, pred);
        for j in order {
            self.bind_pages(j, &vs);
            if !self.layout_ok() {
                return false;
            }
        }
        pred.pages = vs;
        true
    }

    /// The largest joint allocation that succeeds (`flush`: urgent flushes allowed), by
    /// running it on copies (it is monotone in `n`).
    fn swa_fits(&self, n: i64, flush: bool) -> bool {
        if n == 0 {
            return true;
        }
        if n > self.pools[FULL].free_ids.len() as i64 {
            return false;
        }
        [false, flush].iter().any(|&f| {
            let mut trial = self.clone();
            trial.joint_try(n, f, &mut Pred::default())
        })
    }

    /// Free on both sides: a free on the owner, which releases the SWA side with it.
    fn swa_free(&mut self, tokens: &[i64]) -> Pred {
        if !self.swa {
            return Pred::err(Kind::Argument);
        }
        self.free(FULL, tokens)
    }

    /// Free the SWA side only; ids must be live on the owner.
    fn swa_free_nonowner(&mut self, tokens: &[i64]) -> Pred {
        if !self.swa {
            return Pred::err(Kind::Argument);
        }
        let mut pages = Vec::new();
        for &t in tokens {
            match self.pools[FULL].live_page(t) {
                Ok(v) if !pages.contains(&v) => pages.push(v),
                Ok(_) => {}
                Err(k) => return Pred::err(k),
            }
        }
        let bound = self.swa_bound(&pages);
        let mut pred = Pred::ok(1);
        self.release_or_queue(SWA, &bound, &mut pred);
        pred
    }

    /// The pages still bound on the SWA side and not queued in its free group.
    fn swa_bound(&self, pages: &[i64]) -> Vec<i64> {
        let s = &self.pools[SWA];
        pages
            .iter()
            .copied()
            .filter(|v| s.v2p.contains_key(v) && !s.group.as_ref().is_some_and(|g| g.contains(v)))
            .collect()
    }

    fn release_or_queue(&mut self, i: usize, vs: &[i64], pred: &mut Pred) {
        if vs.is_empty() {
            return;
        }
        match self.pools[i].group.as_mut() {
            Some(g) => g.extend(vs.iter().copied()),
            None => {
                let moves = self.release(i, vs);
                pred.moves[i].extend(moves);
            }
        }
    }

    // ----- free, flush, tokens ----------------------------------------------------------

    fn free(&mut self, i: usize, tokens: &[i64]) -> Pred {
        let pages = match self.pools[i].validate_free(tokens) {
            Ok(p) => p,
            Err(k) => return Pred::err(k),
        };
        let mut pred = Pred::ok(1);
        match self.pools[i].group.as_mut() {
            Some(g) => g.extend(pages),
            None => self.release_everywhere(i, &pages, &mut pred),
        }
        pred
    }

    /// Release on pool `i`, and first on the SWA side where it binds these ids (taking them
    /// out of its free group if queued there).
    fn release_everywhere(&mut self, i: usize, vs: &[i64], pred: &mut Pred) {
        if self.swa && i == FULL {
            let s = &mut self.pools[SWA];
            let bound: Vec<i64> = vs
                .iter()
                .copied()
                .filter(|v| s.v2p.contains_key(v))
                .collect();
            if let Some(g) = s.group.as_mut() {
                g.retain(|v| !bound.contains(v));
            }
            if !bound.is_empty() {
                let moves = self.release(SWA, &bound);
                pred.moves[SWA].extend(moves);
            }
        }
        let moves = self.release(i, vs);
        pred.moves[i].extend(moves);
    }

    fn release(&mut self, i: usize, vs: &[i64]) -> Vec<(i64, i64)> {
        let p = &mut self.pools[i];
        let mut freed = Vec::new();
        for v in vs {
            let ph = p.v2p.remove(v).unwrap();
            p.p2v.remove(&ph);
            freed.push(ph);
        }
        if p.owner {
            p.free_ids.extend(vs.iter().copied());
        }
        if p.lazy {
            p.holes.extend(freed);
            return Vec::new();
        }
        // Eager: the band shrinks by K from its top (up and middle) or bottom (down); the
        // survivors of the vacated stretch, ascending, go to the freed pages left inside the
        // new band, ascending.
        let k = freed.len() as i64;
        let (lo, hi, new_wm) = if p.up {
            (p.wm - k, p.wm, p.wm - k)
        } else {
            (p.wm + 1, p.wm + k + 1, p.wm + k)
        };
        let survivors: Vec<i64> = p.p2v.range(lo..hi).map(|(&ph, _)| ph).collect();
        let mut dsts: Vec<i64> = freed
            .into_iter()
            .filter(|&f| !(lo..hi).contains(&f))
            .collect();
        dsts.sort_unstable();
        assert_eq!(survivors.len(), dsts.len(), "model: eager pairing");
        p.wm = new_wm;
        let moves: Vec<(i64, i64)> = survivors.into_iter().zip(dsts).collect();
        for &(s, d) in &moves {
            let v = p.p2v.remove(&s).unwrap();
            p.v2p.insert(v, d);
            p.p2v.insert(d, v);
        }
        if !moves.is_empty() {
            p.moved += moves.len() as u64;
            p.compactions += 1;
        }
        moves
    }

    fn group_begin(&mut self, i: usize) -> Pred {
        if self.pools[i].group.is_some() {
            return Pred::err(Kind::Argument);
        }
        self.pools[i].group = Some(Vec::new());
        Pred::ok(1)
    }

    fn group_end(&mut self, i: usize) -> Pred {
        let Some(g) = self.pools[i].group.take() else {
            return Pred::err(Kind::Argument);
        };
        let mut pred = Pred::ok(1);
        self.release_everywhere(i, &g, &mut pred);
        pred
    }

    /// One lazy flush pass over pool `j`, appending moves and waits to `pred`.
    fn flush_pool(&mut self, j: usize, urgent: bool, pred: &mut Pred) -> i64 {
        if !self.pools[j].lazy {
            return 0;
        }
        let cap = if urgent { usize::MAX } else { self.cap };
        let p = &mut self.pools[j];
        p.flushes += 1;
        if urgent {
            for (t, pages) in p.pending.drain(..) {
                if !pred.waits.contains(&t) {
                    pred.waits.push(t);
                }
                p.holes.extend(pages);
            }
        }
        p.absorb();
        if p.holes.is_empty() {
            return 0;
        }
        if urgent {
            if let Some(t) = self.latest.take() {
                if !pred.waits.contains(&t) {
                    pred.waits.push(t);
                }
            }
            p.writes.clear();
        }
        // Survivors topmost first; holes deepest first.
        let survivors: Vec<i64> = if p.up {
            p.p2v.keys().rev().copied().collect()
        } else {
            p.p2v.keys().copied().collect()
        };
        let mut holes = p.holes.clone();
        if !p.up {
            holes.reverse();
        }
        let blockers: BTreeSet<i64> = if urgent {
            BTreeSet::new()
        } else {
            p.writes
                .iter()
                .flat_map(|(_, vs)| vs.iter().filter_map(|v| p.v2p.get(v).copied()))
                .collect()
        };
        let mut moves = Vec::new();
        for (&s, &h) in survivors.iter().zip(&holes) {
            let crossed = if p.up { s < h } else { s > h };
            if moves.len() >= cap || crossed || blockers.contains(&s) {
                break;
            }
            moves.push((s, h));
        }
        for &(s, h) in &moves {
            let v = p.p2v.remove(&s).unwrap();
            p.p2v.insert(h, v);
            p.v2p.insert(v, h);
            p.holes.retain(|&x| x != h);
        }
        if !moves.is_empty() {
            p.moved += moves.len() as u64;
            p.compactions += 1;
            let vacated: Vec<i64> = moves.iter().map(|m| m.0).collect();
            match self.latest {
                None => {
                    p.holes.extend(vacated);
                    p.absorb();
                }
                Some(t) => p.pending.push((t, vacated)),
            }
        }
        if urgent {
            p.absorb();
            assert!(
                p.holes.is_empty(),
                "model: an urgent flush leaves a packed band"
            );
        }
        let n = moves.len() as i64;
        pred.moves[j].extend(moves);
        n
    }

    fn flush(&mut self, pool: Option<usize>, urgent: bool) -> Pred {
        let mut pred = Pred::ok(0);
        let mut n = 0;
        let all: Vec<usize> = (0..self.n()).collect();
        for j in pool.map_or(all, |j| vec![j]) {
            n += self.flush_pool(j, urgent, &mut pred);
        }
        pred.res = Some(Ok(n));
        pred
    }

    fn set_latest(&mut self, t: Option<u64>) -> Pred {
        self.latest = t;
        Pred {
            keeps_plan: true,
            ..Pred::ok(1)
        }
    }

    fn inflight(&mut self, i: usize, t: u64, tokens: &[i64]) -> Pred {
        let p = &mut self.pools[i];
        let vs = tokens
            .iter()
            .filter(|&&x| x >= 0 && x / p.ps < p.num_virt)
            .map(|&x| x / p.ps)
            .collect();
        match p.writes.iter_mut().find(|w| w.0 == t) {
            Some(w) => w.1 = vs,
            None => p.writes.push((t, vs)),
        }
        Pred {
            keeps_plan: true,
            ..Pred::ok(1)
        }
    }

    fn retire(&mut self, t: u64) -> Pred {
        for p in &mut self.pools {
            // Batches of the token leave in list order; `Vec::swap_remove` reorders the rest.
            let mut k = 0;
            while k < p.pending.len() {
                if p.pending[k].0 == t {
                    let (_, pages) = p.pending.swap_remove(k);
                    p.holes.extend(pages);
                } else {
                    k += 1;
                }
            }
            p.writes.retain(|w| w.0 != t);
        }
        if self.latest == Some(t) {
            self.latest = None;
        }
        Pred {
            keeps_plan: true,
            ..Pred::ok(1)
        }
    }

    /// The SWA side hands the page of `from[k]` over to `to[k]` (`Arena::transfer`): checked
    /// pair list by pair list in the arena's order, then the bindings and the write-set
    /// reports renamed; nothing else changes.
    fn transfer(&mut self, from: &[i64], to: &[i64]) -> Pred {
        if !self.swa || from.len() != to.len() {
            return Pred::err(Kind::Argument);
        }
        let (o, s) = (&self.pools[FULL], &self.pools[SWA]);
        let queued = |p: &MPool, v: i64| p.group.as_ref().is_some_and(|g| g.contains(&v));
        let in_space = |v: i64| v >= s.min_virt && v < s.num_virt;
        let mut seen = BTreeSet::new();
        for &v in from {
            if !in_space(v) {
                return Pred::err(Kind::InvalidId);
            }
            if !s.v2p.contains_key(&v) || queued(s, v) || !seen.insert(v) {
                return Pred::err(Kind::Argument);
            }
        }
        for &v in to {
            if !in_space(v) {
                return Pred::err(Kind::InvalidId);
            }
            let live = o.v2p.contains_key(&v) && !queued(o, v);
            if !live || s.v2p.contains_key(&v) || !seen.insert(v) {
                return Pred::err(Kind::Argument);
            }
        }
        let s = &mut self.pools[SWA];
        for (&f, &t) in from.iter().zip(to) {
            let p = s.v2p.remove(&f).unwrap();
            s.v2p.insert(t, p);
            s.p2v.insert(p, t);
        }
        for (_, set) in &mut s.writes {
            for v in set.iter_mut() {
                if let Some(k) = from.iter().position(|f| f == v) {
                    *v = to[k];
                }
            }
        }
        Pred::ok(1)
    }

    /// Clearing an owner also clears the pool that binds its ids.
    fn clear(&mut self, i: usize) -> Pred {
        let mut pred = Pred::ok(1);
        for j in 0..self.n() {
            if j == i || (self.swa && i == FULL && j == SWA) {
                self.pools[j].clear();
                pred.reset[j] = true;
            }
        }
        pred
    }
}

// ----- calls, the harness and the data model ------------------------------------------------

#[derive(Clone, Debug)]
enum Call {
    Alloc(usize, usize),
    AllocTokens(usize, i64),
    AllocWithVirtual(usize, Vec<i64>),
    Extend(usize, Vec<i64>, Vec<i64>, Option<Vec<i64>>),
    Decode(usize, Vec<i64>, Option<Vec<i64>>),
    Free(usize, Vec<i64>),
    GroupBegin(usize),
    GroupEnd(usize),
    Flush(Option<usize>, bool),
    SetLatest(Option<u64>),
    Inflight(usize, u64, Vec<i64>),
    Retire(u64),
    Clear(usize),
    SwaAlloc(i64),
    SwaExtend(Vec<i64>, Vec<i64>, Option<Vec<i64>>),
    SwaDecode(Vec<i64>, Option<Vec<i64>>),
    SwaFree(Vec<i64>),
    SwaFreeNonowner(Vec<i64>),
    Transfer(Vec<i64>, Vec<i64>),
}

fn run_real(a: &mut Arena, call: &Call) -> Result<i64, UkvError> {
    let b = |r: ukv_core::Result<bool>| r.map(i64::from);
    let u = |r: ukv_core::Result<()>| r.map(|()| 1);
    match call {
        Call::Alloc(i, n) => b(a.alloc(*i, *n)),
        Call::AllocTokens(i, n) => b(a.alloc_tokens(*i, *n)),
        Call::AllocWithVirtual(i, vs) => b(a.alloc_with_virtual(*i, vs)),
        Call::Extend(i, pre, seq, last) => b(a.alloc_extend(*i, pre, seq, last.as_deref())),
        Call::Decode(i, seq, last) => b(a.alloc_decode(*i, seq, last.as_deref())),
        Call::Free(i, t) => u(a.free(*i, t)),
        Call::GroupBegin(i) => u(a.free_group_begin(*i)),
        Call::GroupEnd(i) => u(a.free_group_end(*i)),
        Call::Flush(None, urgent) => Ok(a.flush(*urgent) as i64),
        Call::Flush(Some(i), urgent) => a.flush_pool(*i, *urgent).map(|n| n as i64),
        Call::SetLatest(t) => {
            a.set_latest_token(*t);
            Ok(1)
        }
        Call::Inflight(i, t, toks) => u(a.set_inflight_writes(*i, *t, toks)),
        Call::Retire(t) => {
            a.retire_token(*t);
            Ok(1)
        }
        Call::Clear(i) => u(a.clear(*i)),
        Call::SwaAlloc(n) => b(a.swa_alloc_tokens(FULL, SWA, *n)),
        Call::SwaExtend(pre, seq, last) => {
            b(a.swa_alloc_extend(FULL, SWA, pre, seq, last.as_deref()))
        }
        Call::SwaDecode(seq, last) => b(a.swa_alloc_decode(FULL, SWA, seq, last.as_deref())),
        Call::SwaFree(t) => u(a.swa_free(FULL, SWA, t)),
        Call::SwaFreeNonowner(t) => u(a.swa_free_nonowner(FULL, SWA, t)),
        Call::Transfer(from, to) => u(a.transfer(SWA, from, to)),
    }
}

fn run_model(m: &mut Model, call: &Call) -> Pred {
    let pred = run_model_call(m, call);
    m.park();
    pred
}

fn run_model_call(m: &mut Model, call: &Call) -> Pred {
    match call {
        Call::Alloc(i, n) => m.alloc(*i, *n as i64),
        Call::AllocTokens(i, n) => m.alloc_tokens(*i, *n),
        Call::AllocWithVirtual(i, vs) => m.alloc_with_virtual(*i, vs),
        Call::Extend(i, pre, seq, last) => m.alloc_extend(*i, pre, seq, last.as_deref(), false),
        Call::Decode(i, seq, last) => m.alloc_decode(*i, seq, last.as_deref(), false),
        Call::Free(i, t) => m.free(*i, t),
        Call::GroupBegin(i) => m.group_begin(*i),
        Call::GroupEnd(i) => m.group_end(*i),
        Call::Flush(pool, urgent) => m.flush(*pool, *urgent),
        Call::SetLatest(t) => m.set_latest(*t),
        Call::Inflight(i, t, toks) => m.inflight(*i, *t, toks),
        Call::Retire(t) => m.retire(*t),
        Call::Clear(i) => m.clear(*i),
        Call::SwaAlloc(n) => {
            let ps = m.pools[FULL].ps;
            if !m.swa || *n < 0 || n % ps != 0 {
                Pred::err(Kind::Argument)
            } else {
                m.swa_alloc(n / ps)
            }
        }
        Call::SwaExtend(pre, seq, last) => m.alloc_extend(FULL, pre, seq, last.as_deref(), true),
        Call::SwaDecode(seq, last) => m.alloc_decode(FULL, seq, last.as_deref(), true),
        Call::SwaFree(t) => m.swa_free(t),
        Call::SwaFreeNonowner(t) => m.swa_free_nonowner(t),
        Call::Transfer(from, to) => m.transfer(from, to),
    }
}

/// The pools on which a successful call binds the plan's pages.
fn bound_pools(call: &Call) -> Vec<usize> {
    match call {
        Call::Alloc(i, _)
        | Call::AllocTokens(i, _)
        | Call::AllocWithVirtual(i, _)
        | Call::Extend(i, ..)
        | Call::Decode(i, ..) => vec![*i],
        Call::SwaAlloc(_) | Call::SwaExtend(..) | Call::SwaDecode(..) => vec![FULL, SWA],
        _ => Vec::new(),
    }
}

/// The shared buffer in 16-byte cells, driven only by plans, plus what each live page must
/// hold.
struct Bytes {
    cells: Vec<u64>,
    expect: HashMap<(usize, i64), u64>,
    next_marker: u64,
}

impl Bytes {
    fn new(total: u64) -> Self {
        Bytes {
            cells: vec![0; (total / CELL) as usize],
            expect: HashMap::new(),
            next_marker: 1,
        }
    }

    fn cells_of(pb: u64, page: i64) -> std::ops::Range<usize> {
        let start = (page as u64 * pb / CELL) as usize;
        start..start + (pb / CELL) as usize
    }

    /// Run a plan: all moves of a pool at once (read every source, then write), pool after
    /// pool in the arena's move order, then the forward writes the newly bound pages of the
    /// pools in `bound`.
    fn apply(&mut self, a: &Arena, bound: &[usize]) {
        for &i in a.move_order() {
            let p = &a.plan().pools[i];
            let pb = a.pool(i).geometry().page_bytes;
            let srcs: BTreeSet<i64> = p.src.iter().copied().collect();
            assert!(
                p.dst.iter().all(|d| !srcs.contains(d)) && srcs.len() == p.src.len(),
                "pool {i}: a plan's sources and destinations must be distinct"
            );
            let data: Vec<Vec<u64>> = p
                .src
                .iter()
                .map(|&s| self.cells[Self::cells_of(pb, s)].to_vec())
                .collect();
            for (&d, v) in p.dst.iter().zip(data) {
                self.cells[Self::cells_of(pb, d)].copy_from_slice(&v);
            }
        }
        for &i in bound {
            let pb = a.pool(i).geometry().page_bytes;
            for &v in &a.plan().pages {
                let marker = self.next_marker;
                self.next_marker += 1;
                let ph = a.pool(i).v2p()[v as usize];
                self.cells[Self::cells_of(pb, ph)].fill(marker);
                self.expect.insert((i, v), marker);
            }
        }
    }

    /// Every live page holds its own marker in every cell; forget pages that died.
    fn check(&mut self, a: &Arena) {
        self.expect
            .retain(|&(i, v), _| a.pool(i).v2p()[v as usize] >= 0);
        for (&(i, v), &marker) in &self.expect {
            let pb = a.pool(i).geometry().page_bytes;
            let ph = a.pool(i).v2p()[v as usize];
            let cells = &self.cells[Self::cells_of(pb, ph)];
            assert!(
                cells.iter().all(|&c| c == marker),
                "pool {i} page v{v} at p{ph}: data lost"
            );
        }
    }

    /// Markers by (pool, virtual page), for comparing two runs.
    fn live_data(&self, a: &Arena) -> BTreeMap<(usize, i64), u64> {
        self.expect
            .iter()
            .map(|(&(i, v), _)| {
                let pb = a.pool(i).geometry().page_bytes;
                let ph = a.pool(i).v2p()[v as usize];
                ((i, v), self.cells[Self::cells_of(pb, ph).start])
            })
            .collect()
    }
}

/// A live allocation the random ops can refer to. Requests (`growable`) only grow and are
/// freed whole; plain batches can be freed in parts.
#[derive(Clone, Debug)]
struct Batch {
    pool: usize,
    tokens: Vec<i64>,
    growable: bool,
}

struct Harness {
    arena: Arena,
    model: Model,
    bytes: Bytes,
    mirror: Vec<(Vec<i64>, Vec<i64>)>,
    batches: Vec<Batch>,
    swa: bool,
    n: usize,
    ops: usize,
}

impl Harness {
    fn new(cfg: &Cfg, lazy: bool) -> Self {
        let arena = cfg.arena(lazy);
        let n = cfg.num_pools();
        let mirror = (0..n)
            .map(|i| (arena.pool(i).v2p().to_vec(), arena.pool(i).p2v().to_vec()))
            .collect();
        Harness {
            model: Model::new(cfg, lazy),
            bytes: Bytes::new(arena.total_bytes()),
            arena,
            mirror,
            batches: Vec::new(),
            swa: cfg.swa,
            n,
            ops: 0,
        }
    }

    /// Run one call on both sides and compare everything observable.
    fn call(&mut self, call: Call) -> Result<i64, Kind> {
        self.ops += 1;
        let before: Plan = self.arena.plan().clone();
        let got = run_real(&mut self.arena, &call);
        let pred = run_model(&mut self.model, &call);
        let got_res = got.as_ref().map(|&v| v).map_err(kind_of);
        assert_eq!(Some(got_res), pred.res, "{call:?}: result {got:?}");
        let plan = self.arena.plan();
        if pred.keeps_plan {
            assert_eq!(plan, &before, "{call:?} must leave the last plan alone");
        } else {
            assert_eq!(plan.pages, pred.pages, "{call:?}: pages");
            assert_eq!(plan.tokens, pred.tokens, "{call:?}: tokens");
            assert_eq!(plan.token_req, pred.token_req, "{call:?}: token_req");
            assert_eq!(
                plan.wait_tokens, pred.waits,
                "{call:?}: wait tokens, each once, in order"
            );
            for i in 0..self.n {
                let got_moves: Vec<(i64, i64)> = plan.pools[i]
                    .src
                    .iter()
                    .copied()
                    .zip(plan.pools[i].dst.iter().copied())
                    .collect();
                assert_eq!(got_moves, pred.moves[i], "{call:?}: moves of pool {i}");
                assert_eq!(plan.pools[i].reset, pred.reset[i], "{call:?}: reset flag");
                let rows = &plan.pools[i].p2v_rows;
                let distinct: BTreeSet<i64> = rows.iter().copied().collect();
                let v2p_distinct: BTreeSet<i64> = plan.pools[i].v2p_rows.iter().copied().collect();
                // A row listed twice must carry one value (the device applies rows unordered).
                let consistent = |rows: &[i64], vals: &[i64]| {
                    let mut seen = BTreeMap::new();
                    rows.iter()
                        .zip(vals)
                        .all(|(r, v)| *seen.entry(*r).or_insert(*v) == *v)
                };
                assert!(
                    consistent(rows, &plan.pools[i].p2v_vals)
                        && consistent(&plan.pools[i].v2p_rows, &plan.pools[i].v2p_vals),
                    "{call:?}: pool {i} lists a row twice with different values ({} p2v rows, {} distinct; {} v2p distinct)",
                    rows.len(),
                    distinct.len(),
                    v2p_distinct.len()
                );
            }
        }
        let mid_moves = self
            .model
            .mid
            .map_or(0, |m| self.arena.plan().pools[m].num_moves());
        count(
            &call,
            &got_res,
            self.arena.plan().num_moves(),
            pred.keeps_plan,
            (self.model.mid.is_some(), mid_moves),
        );
        self.compare(&call, pred.keeps_plan);
        if !pred.keeps_plan {
            let bound = if got_res == Ok(1) {
                bound_pools(&call)
            } else {
                Vec::new()
            };
            self.bytes.apply(&self.arena, &bound);
        }
        if let (Call::Transfer(from, to), Ok(_)) = (&call, got_res) {
            // The page keeps its bytes under its new owner.
            for (&f, &t) in from.iter().zip(to) {
                if let Some(marker) = self.bytes.expect.remove(&(SWA, f)) {
                    self.bytes.expect.insert((SWA, t), marker);
                }
            }
        }
        self.bytes.check(&self.arena);
        got_res
    }

    fn compare(&mut self, call: &Call, keeps_plan: bool) {
        let (a, m) = (&self.arena, &self.model);
        a.check_invariants()
            .unwrap_or_else(|e| panic!("{call:?}: {e}"));
        assert!(m.layout_ok(), "{call:?}: model layout");
        assert_eq!(a.latest_token(), m.latest, "{call:?}: latest token");
        for (i, mp) in m.pools.iter().enumerate() {
            let p = a.pool(i);
            let mut v2p = vec![TOMBSTONE; mp.num_virt as usize + 1];
            v2p[0] = 0;
            for (&v, &ph) in &mp.v2p {
                v2p[v as usize] = ph;
            }
            let mut p2v = vec![TOMBSTONE; mp.num_pages as usize + 1];
            p2v[0] = 0;
            for (&ph, &v) in &mp.p2v {
                p2v[ph as usize] = v;
            }
            assert_eq!(p.v2p(), &v2p[..], "{call:?}: pool {i} v2p");
            assert_eq!(p.p2v(), &p2v[..], "{call:?}: pool {i} p2v");
            assert_eq!(p.watermark(), mp.wm, "{call:?}: pool {i} watermark");
            assert_eq!(p.span_pages(), mp.span(), "{call:?}: pool {i} span");
            assert_eq!(p.live_pages() as i64, mp.live(), "{call:?}: pool {i} live");
            assert_eq!(p.num_holes(), mp.holes.len(), "{call:?}: pool {i} holes");
            assert_eq!(
                p.num_pending(),
                mp.pending_pages(),
                "{call:?}: pool {i} pending"
            );
            assert!(
                p.free_ids().eq(mp.free_ids.iter().copied()),
                "{call:?}: pool {i} free ids"
            );
            assert_eq!(
                a.available_pages(i),
                m.available(i),
                "{call:?}: pool {i} available"
            );
            assert_eq!(
                a.schedulable_pages(i),
                m.schedulable(i),
                "{call:?}: pool {i} schedulable"
            );
            if mp.span() > 0 || !mp.mid {
                assert_eq!(
                    (p.low_byte(), p.high_byte()),
                    (m.low_byte(i), m.high_byte(i)),
                    "{call:?}: pool {i} band bytes"
                );
            }
            assert_eq!(a.gap_bytes(i), m.gap_bytes(i), "{call:?}: pool {i} gap");
            assert_eq!(a.in_free_group(i), mp.group.is_some());
            let s = p.stats();
            assert_eq!(
                (s.pages_moved, s.compactions, s.flushes),
                (mp.moved, mp.compactions, mp.flushes),
                "{call:?}: pool {i} stats"
            );
            assert_eq!(s.bytes_moved, s.pages_moved * mp.pb);
            // The device mirror, updated from the plan rows only.
            if keeps_plan {
                continue;
            }
            let plan = &a.plan().pools[i];
            let mirror = &mut self.mirror[i];
            if plan.reset {
                mirror.0 = p.v2p().to_vec();
                mirror.1 = p.p2v().to_vec();
            }
            for (&r, &v) in plan.v2p_rows.iter().zip(&plan.v2p_vals) {
                mirror.0[r as usize] = v;
            }
            for (&r, &v) in plan.p2v_rows.iter().zip(&plan.p2v_vals) {
                mirror.1[r as usize] = v;
            }
            assert_eq!(mirror.0, p.v2p(), "{call:?}: pool {i} v2p mirror");
            assert_eq!(mirror.1, p.p2v(), "{call:?}: pool {i} p2v mirror");
        }
        self.probe_contracts(call);
        // Costly (two arena copies per pool pair): on every third call.
        if self.ops % 3 == 0 {
            self.probe_shortage(call);
        }
        self.check_translate_slots(call);
    }

    /// `shortage_pages(i, k, donor)`: after the donor frees that many of its live pages,
    /// `alloc(i, k)` succeeds; after one fewer it does not (when the donor's frees release
    /// nothing elsewhere); None: not even freeing all of them is enough.
    fn probe_shortage(&self, call: &Call) {
        let (a, m) = (&self.arena, &self.model);
        let k_extra = 1 + (self.ops / 3 % 3) as i64;
        for i in (0..self.n).filter(|&i| m.pools[i].owner) {
            let k = m.schedulable(i) + k_extra;
            for donor in (0..self.n).filter(|&d| d != i) {
                let got = a.shortage_pages(i, k, donor).unwrap();
                let fits_after = |r: usize| {
                    let mut probe = a.clone();
                    let dp = &m.pools[donor];
                    let pages: Vec<i64> = dp.v2p.keys().take(r).map(|v| v * dp.ps).collect();
                    if !pages.is_empty() && dp.group.is_none() {
                        probe.free(donor, &pages).unwrap();
                    }
                    probe.alloc(i, k as usize).unwrap()
                };
                let free_ids = m.pools[i].free_ids.len() as i64;
                match got {
                    Some(r) => {
                        assert!(r >= 1, "{call:?}: shortage {r} for k above schedulable");
                        if m.pools[donor].group.is_none() {
                            assert!(
                                fits_after(r as usize),
                                "{call:?}: shortage({i}, {k}, {donor}) = {r} is not enough"
                            );
                            let frees_elsewhere = self.swa && donor == FULL;
                            if !frees_elsewhere {
                                assert!(
                                    !fits_after(r as usize - 1),
                                    "{call:?}: shortage({i}, {k}, {donor}) = {r} is not the least"
                                );
                            }
                        }
                    }
                    None => {
                        let all = m.pools[donor].live() as usize;
                        let enough = k <= free_ids
                            && m.pools[donor].group.is_none()
                            && !(self.swa && donor == FULL)
                            && fits_after(all);
                        assert!(
                            !enough,
                            "{call:?}: shortage({i}, {k}, {donor}) = None but freeing all fits"
                        );
                    }
                }
            }
        }
    }

    /// `translate_slots`: physical slot of each live id, −1 for padding and unbound ids,
    /// an error for anything else.
    fn check_translate_slots(&self, call: &Call) {
        let (a, m) = (&self.arena, &self.model);
        for (i, p) in m.pools.iter().enumerate() {
            let mut ids: Vec<i64> = vec![TOMBSTONE];
            ids.extend(p.v2p.keys().take(3).map(|v| v * p.ps + (v % p.ps)));
            ids.extend(
                (p.min_virt..p.num_virt)
                    .filter(|v| !p.v2p.contains_key(v))
                    .take(2)
                    .map(|v| v * p.ps),
            );
            let want: Vec<i64> = ids
                .iter()
                .map(|&t| {
                    if t < 0 {
                        return TOMBSTONE;
                    }
                    p.v2p
                        .get(&(t / p.ps))
                        .map_or(TOMBSTONE, |&ph| ph * p.ps + t % p.ps)
                })
                .collect();
            let mut out = Vec::new();
            a.translate_slots(i, &ids, &mut out).unwrap();
            assert_eq!(out, want, "{call:?}: translate_slots on pool {i}");
            for bad in [-2, p.num_virt * p.ps] {
                let e = a.translate_slots(i, &[bad], &mut out).unwrap_err();
                assert_eq!(
                    kind_of(&e),
                    Kind::InvalidId,
                    "{call:?}: translate_slots({bad})"
                );
            }
        }
    }

    /// The feasibility contract, on copies of the arena: `schedulable` pages (joint:
    /// `joint_schedulable_pages`) fit; one page more returns false and changes nothing.
    fn probe_contracts(&self, call: &Call) {
        let (a, m) = (&self.arena, &self.model);
        for i in 0..self.n {
            if !m.pools[i].owner {
                continue;
            }
            let n = m.schedulable(i).min(m.pools[i].free_ids.len() as i64) as usize;
            let mut probe = a.clone();
            assert!(
                probe.alloc(i, n).unwrap(),
                "{call:?}: alloc({n}) <= schedulable failed on pool {i}"
            );
            let mut probe = a.clone();
            assert!(
                !probe.alloc(i, n + 1).unwrap(),
                "{call:?}: alloc({}) > schedulable succeeded on pool {i}",
                n + 1
            );
            assert_same_tables(a, &probe);
        }
        if !self.swa {
            assert_eq!(a.joint_schedulable_pages(FULL, SWA), 0);
            return;
        }
        let now = a.joint_available_pages(FULL, SWA);
        let sched = a.joint_schedulable_pages(FULL, SWA);
        assert!(
            m.swa_fits(now, false) && !m.swa_fits(now + 1, false),
            "{call:?}: joint available {now} is not the model's"
        );
        assert!(
            m.swa_fits(sched, true) && !m.swa_fits(sched + 1, true),
            "{call:?}: joint schedulable {sched} is not the model's"
        );
        if !m.pools[FULL].lazy {
            assert_eq!(now, sched, "{call:?}: eager joint capacities differ");
        }
        if m.mid.is_none() {
            // (With a middle band in the pair, a joint allocation may pack it by sliding it,
            // which its own allocation never does: the joint value can then exceed its own.)
            assert!(now <= a.available_pages(FULL).min(a.available_pages(SWA)));
        }
        let mut probe = a.clone();
        assert!(
            probe.swa_alloc(FULL, SWA, sched as usize).unwrap(),
            "{call:?}: swa_alloc({sched}) <= joint schedulable failed"
        );
        probe.check_invariants().unwrap();
        let mut probe = a.clone();
        assert!(
            !probe.swa_alloc(FULL, SWA, sched as usize + 1).unwrap(),
            "{call:?}: swa_alloc({}) > joint schedulable succeeded",
            sched + 1
        );
        assert_same_tables(a, &probe);
    }

    fn pages_of(&self, i: usize, tokens: &[i64]) -> Vec<i64> {
        let ps = self.model.pools[i].ps;
        let mut seen = BTreeSet::new();
        tokens
            .iter()
            .map(|&t| t / ps)
            .filter(|v| seen.insert(*v))
            .collect()
    }

    fn pick_batch(&self, pool: usize, sel: u16, growable: Option<bool>) -> Option<usize> {
        let idx: Vec<usize> = (0..self.batches.len())
            .filter(|&k| {
                self.batches[k].pool == pool
                    && growable.map_or(true, |g| self.batches[k].growable == g)
            })
            .collect();
        (!idx.is_empty()).then(|| idx[sel as usize % idx.len()])
    }

    /// Forget the batch tokens whose pages pool `i` no longer holds (or has queued in a
    /// free group). A request that lost part of its tokens is no longer a valid request: it
    /// stops being tracked (its remaining pages are freed by the final drain).
    fn prune(&mut self, i: usize) {
        let m = &self.model.pools[i];
        let alive = |t: &i64| {
            let v = t / m.ps;
            m.v2p.contains_key(&v) && !m.group.as_ref().is_some_and(|g| g.contains(&v))
        };
        self.batches.retain_mut(|b| {
            if b.pool != i {
                return true;
            }
            let before = b.tokens.len();
            b.tokens.retain(alive);
            let damaged = b.growable && b.tokens.len() != before;
            !b.tokens.is_empty() && !damaged
        });
    }

    /// Track the plan's tokens as a new batch of pool `i` after a successful allocation.
    fn track(&mut self, i: usize, res: Result<i64, Kind>, n: i64) {
        if res == Ok(1) && n > 0 {
            let tokens = self.arena.plan().tokens.clone();
            self.batches.push(Batch {
                pool: i,
                tokens,
                growable: false,
            });
        }
    }

    fn op(&mut self, op: &Op) {
        let n = self.n;
        match *op {
            Op::Alloc { pool, n: k } => {
                let i = pool as usize % n;
                let res = self.call(Call::Alloc(i, k as usize));
                self.track(i, res, k as i64);
            }
            Op::AllocNear { pool, delta, sched } => {
                let i = pool as usize % n;
                let base = if sched {
                    self.model.schedulable(i)
                } else {
                    self.model.available(i)
                };
                let k = (base + delta as i64).max(0);
                let res = self.call(Call::Alloc(i, k as usize));
                self.track(i, res, k);
            }
            Op::AllocTokens { pool, n: k } => {
                let i = pool as usize % n;
                let res = self.call(Call::AllocTokens(i, k as i64));
                self.track(i, res, k as i64);
            }
            Op::BindSwa { ref pick, bad } => self.bind_swa(pick, bad),
            Op::Extend {
                pool,
                ref reqs,
                host,
            } => self.extend(pool as usize % n, reqs, host, false),
            Op::Decode {
                pool,
                ref sel,
                host,
            } => self.decode(pool as usize % n, sel, host, false),
            Op::Free {
                pool,
                batch,
                part,
                dup,
            } => self.free(pool as usize % n, batch, part, dup),
            Op::FreeBad { pool, kind, sel } => self.free_bad(pool as usize % n, kind, sel),
            Op::GroupBegin(pool) => {
                self.call(Call::GroupBegin(pool as usize % n)).ok();
            }
            Op::GroupEnd(pool) => {
                self.call(Call::GroupEnd(pool as usize % n)).ok();
            }
            Op::Flush { urgent, pool } => {
                self.call(Call::Flush(pool.map(|p| p as usize % n), urgent))
                    .unwrap();
            }
            Op::SetLatest(t) => {
                self.call(Call::SetLatest(t.map(u64::from))).unwrap();
            }
            Op::Inflight { pool, token, batch } => {
                let i = pool as usize % n;
                let mut toks = self
                    .pick_batch(i, batch, None)
                    .map_or(Vec::new(), |k| self.batches[k].tokens.clone());
                toks.push(-1);
                self.call(Call::Inflight(i, u64::from(token), toks))
                    .unwrap();
            }
            Op::Retire(t) => {
                self.call(Call::Retire(u64::from(t))).unwrap();
            }
            Op::Clear(pool) => {
                let i = pool as usize % n;
                self.call(Call::Clear(i)).unwrap();
                let both = i == FULL && self.swa;
                self.batches
                    .retain(|b| b.pool != i && !(both && b.pool == SWA));
            }
            Op::SwaAlloc { n: k, near, sched } => {
                let ps = self.model.pools[FULL].ps;
                let pages = match near {
                    Some(delta) if self.swa => {
                        let j = if sched {
                            self.arena.joint_schedulable_pages(FULL, SWA)
                        } else {
                            self.arena.joint_available_pages(FULL, SWA)
                        };
                        (j + delta as i64).max(0)
                    }
                    _ => k as i64,
                };
                let res = self.call(Call::SwaAlloc(pages * ps));
                self.track(FULL, res, pages);
            }
            Op::SwaExtend { ref reqs, host } => self.extend(FULL, reqs, host, true),
            Op::SwaDecode { ref sel, host } => self.decode(FULL, sel, host, true),
            Op::SwaFree { batch, part, dup } => self.swa_free(batch, part, dup),
            Op::SwaFreeWindow {
                sel,
                part,
                dup,
                bad,
            } => self.swa_free_window(sel, part, dup, bad),
            Op::Transfer {
                ref pick,
                bad,
                declare,
            } => self.transfer(pick, bad, declare),
        }
    }

    /// Hand SWA pages from bound ids to live owner ids without one; `bad` breaks the call
    /// one way or another; `declare` first reports a forward writing the `from` pages and
    /// flushes the SWA side after the transfer, which shows whether the report followed
    /// the page (the written page must not move).
    fn transfer(&mut self, pick: &[u16], bad: u8, declare: Option<u8>) {
        let (owner, swa) = (&self.model.pools[FULL], &self.model.pools[SWA]);
        let queued = |p: &MPool, v: &i64| p.group.as_ref().is_some_and(|g| g.contains(v));
        let bound: Vec<i64> = swa
            .v2p
            .keys()
            .copied()
            .filter(|v| !queued(swa, v))
            .collect();
        let free: Vec<i64> = owner
            .v2p
            .keys()
            .copied()
            .filter(|v| !swa.v2p.contains_key(v) && !queued(owner, v))
            .collect();
        let (mut from, mut to) = (Vec::new(), Vec::new());
        for &k in pick {
            if bound.is_empty() || free.is_empty() {
                break;
            }
            let (f, t) = (
                bound[k as usize % bound.len()],
                free[k as usize / 7 % free.len()],
            );
            if !from.contains(&f) && !to.contains(&t) {
                from.push(f);
                to.push(t);
            }
        }
        // A bad `from` entry goes in as an extra pair (the `from` list is checked first); a
        // bad `to` entry replaces the last pair's (the `from` list stays good).
        let bad_from = match bad {
            0 => free.first().copied(),
            1 => from.first().copied(),
            2 => swa.group.as_ref().and_then(|g| g.first().copied()),
            3 => Some(0),
            _ => None,
        };
        let bad_to = match bad {
            4 => bound.last().copied(),
            5 => Some(swa.num_virt),
            6 => from.first().copied(),
            7 => Some(-1 - i64::from(pick[0])),
            8 => owner.group.as_ref().and_then(|g| g.first().copied()),
            9 => to.first().copied().filter(|_| to.len() > 1),
            _ => None,
        };
        if let Some(f) = bad_from {
            from.push(f);
            to.push(0);
        }
        if let (Some(t), Some(last)) = (bad_to, to.last_mut()) {
            *last = t;
        }
        if bad == 10 {
            to.pop();
        }
        if let Some(token) = declare {
            let ps = swa.ps;
            let toks = from.iter().map(|v| v * ps).collect();
            self.call(Call::Inflight(SWA, u64::from(token), toks))
                .unwrap();
        }
        let ok = self.call(Call::Transfer(from, to)).is_ok();
        if ok && declare.is_some() {
            self.call(Call::Flush(Some(SWA), false)).unwrap();
        }
    }

    fn bind_swa(&mut self, pick: &[u16], bad: u8) {
        let (owner, swa) = (&self.model.pools[FULL], &self.model.pools[SWA]);
        let cands: Vec<i64> = owner
            .v2p
            .keys()
            .copied()
            .filter(|v| !swa.v2p.contains_key(v))
            .collect();
        let mut vs: Vec<i64> = Vec::new();
        if !cands.is_empty() {
            for &k in pick {
                let v = cands[k as usize % cands.len()];
                if !vs.contains(&v) {
                    vs.push(v);
                }
            }
        }
        match bad {
            0 => vs.extend(swa.v2p.keys().next().copied()),
            1 => vs.extend(vs.first().copied()),
            2 => vs.push(swa.num_virt),
            _ => {}
        }
        // On a mamba arena this exercises the owner-pool error.
        self.call(Call::AllocWithVirtual(SWA, vs)).ok();
    }

    fn extend(&mut self, i: usize, reqs: &[(u16, u8)], host: bool, joint: bool) {
        let mut chosen: Vec<Option<usize>> = Vec::new();
        let (mut pre, mut seq, mut last) = (Vec::new(), Vec::new(), Vec::new());
        for &(sel, grow) in reqs {
            let k = self.pick_batch(i, sel, Some(true)).filter(|_| sel % 3 != 0);
            if k.is_some() && chosen.contains(&k) {
                continue;
            }
            let toks = k.map_or(&[][..], |k| &self.batches[k].tokens[..]);
            chosen.push(k);
            pre.push(toks.len() as i64);
            seq.push(toks.len() as i64 + grow as i64);
            last.push(toks.last().copied().unwrap_or(-1));
        }
        let host_last = host.then(|| last.clone());
        let call = if joint {
            Call::SwaExtend(pre.clone(), seq.clone(), host_last)
        } else {
            Call::Extend(i, pre.clone(), seq.clone(), host_last)
        };
        if self.call(call) == Ok(1) {
            self.grow_requests(i, &chosen, &pre, &seq, &last);
        }
    }

    fn decode(&mut self, i: usize, sel: &[u16], host: bool, joint: bool) {
        let mut chosen: Vec<Option<usize>> = Vec::new();
        let (mut seq, mut last, mut pre) = (Vec::new(), Vec::new(), Vec::new());
        for &s in sel {
            let k = self.pick_batch(i, s, Some(true)).filter(|_| s % 4 != 0);
            if k.is_some() && chosen.contains(&k) {
                continue;
            }
            let toks = k.map_or(&[][..], |k| &self.batches[k].tokens[..]);
            chosen.push(k);
            pre.push(toks.len() as i64);
            seq.push(toks.len() as i64 + 1);
            last.push(toks.last().copied().unwrap_or(-1));
        }
        let host_last = host.then(|| last.clone());
        let call = if joint {
            Call::SwaDecode(seq.clone(), host_last)
        } else {
            Call::Decode(i, seq.clone(), host_last)
        };
        if self.call(call) == Ok(1) {
            self.grow_requests(i, &chosen, &pre, &seq, &last);
        }
    }

    /// Append the new tokens of a successful extend/decode to their requests.
    fn grow_requests(
        &mut self,
        i: usize,
        chosen: &[Option<usize>],
        pre: &[i64],
        seq: &[i64],
        last: &[i64],
    ) {
        let resolved = common::finish_tokens(&self.arena, i, last);
        let mut at = 0;
        for (r, k) in chosen.iter().enumerate() {
            let n = (seq[r] - pre[r]) as usize;
            let new = &resolved[at..at + n];
            at += n;
            match k {
                Some(k) => self.batches[*k].tokens.extend_from_slice(new),
                None if n > 0 => self.batches.push(Batch {
                    pool: i,
                    tokens: new.to_vec(),
                    growable: true,
                }),
                None => {}
            }
        }
        for &t in &resolved {
            assert!(
                self.arena.is_token_allocated(i, t),
                "extend/decode handed out dead token {t}"
            );
        }
    }

    /// The tokens of a free: a whole request, or a part of a plain batch; `dup == 0`
    /// repeats the first token.
    fn free_tokens(&self, k: usize, part: u8, dup: u8) -> Vec<i64> {
        let b = &self.batches[k];
        let mut toks = if b.growable {
            b.tokens.clone()
        } else {
            let len = b.tokens.len();
            let n = 1 + part as usize % len;
            let start = (part as usize / 7) % (len - n + 1);
            b.tokens[start..start + n].to_vec()
        };
        if dup == 0 {
            toks.push(toks[0]);
        }
        toks
    }

    fn free(&mut self, i: usize, batch: u16, part: u8, dup: u8) {
        if self.swa && i == SWA {
            return self.free_swa(batch, part, dup);
        }
        let Some(k) = self.pick_batch(i, batch, None) else {
            return;
        };
        let toks = self.free_tokens(k, part, dup);
        // By hand, what the composite free does: the swa side of the same ids first.
        if self.swa && i == FULL {
            let swa = &self.model.pools[SWA];
            let queued = swa.group.clone().unwrap_or_default();
            let pages: Vec<i64> = self
                .pages_of(FULL, &toks)
                .into_iter()
                .filter(|v| swa.v2p.contains_key(v) && !queued.contains(v))
                .collect();
            let ps = swa.ps;
            if !pages.is_empty() {
                self.call(Call::Free(
                    SWA,
                    pages.iter().map(|v| v * ps + (v % ps)).collect(),
                ))
                .unwrap();
            }
        }
        if self.call(Call::Free(i, toks)).is_ok() {
            self.prune(i);
        }
    }

    /// The composite free of a batch of the owner (both sides in one plan).
    fn swa_free(&mut self, batch: u16, part: u8, dup: u8) {
        let toks = match self.pick_batch(FULL, batch, None) {
            Some(k) => self.free_tokens(k, part, dup),
            None => vec![part as i64],
        };
        if self.call(Call::SwaFree(toks)).is_ok() {
            self.prune(FULL);
            if self.swa {
                self.prune(SWA);
            }
        }
    }

    /// Tokens that left the sliding window, through the composite: live owner ids (some
    /// already released on the swa side); `bad` adds an id that is dead on the owner or
    /// out of range.
    fn swa_free_window(&mut self, sel: u16, part: u8, dup: u8, bad: u8) {
        let owner = &self.model.pools[FULL];
        let live: Vec<i64> = owner.v2p.keys().copied().collect();
        let ps = owner.ps;
        let mut toks: Vec<i64> = if live.is_empty() {
            Vec::new()
        } else {
            let n = 1 + part as usize % live.len().min(5);
            let start = sel as usize % (live.len() - n + 1);
            live[start..start + n]
                .iter()
                .map(|v| v * ps + sel as i64 % ps)
                .collect()
        };
        if dup == 0 && !toks.is_empty() {
            toks.push(toks[0]);
        }
        match bad {
            0 => {
                let dead = (owner.min_virt..owner.num_virt).find(|v| !owner.v2p.contains_key(v));
                toks.extend(dead.map(|v| v * ps));
            }
            1 => toks.push(owner.num_virt * ps),
            2 => toks.push(-2),
            _ => {}
        }
        self.call(Call::SwaFreeNonowner(toks)).ok();
    }

    /// Tokens that left the sliding window: free a few swa pages, the ids stay live on full.
    fn free_swa(&mut self, sel: u16, part: u8, dup: u8) {
        let swa = &self.model.pools[SWA];
        let queued = swa.group.clone().unwrap_or_default();
        let live: Vec<i64> = swa
            .v2p
            .keys()
            .copied()
            .filter(|v| !queued.contains(v))
            .collect();
        if live.is_empty() {
            return;
        }
        let n = 1 + part as usize % live.len().min(4);
        let start = sel as usize % (live.len() - n + 1);
        let ps = swa.ps;
        let mut toks: Vec<i64> = live[start..start + n]
            .iter()
            .map(|v| v * ps + sel as i64 % ps)
            .collect();
        if dup == 0 {
            toks.push(toks[0]);
        }
        self.call(Call::Free(SWA, toks)).ok();
    }

    fn free_bad(&mut self, i: usize, kind: u8, sel: u16) {
        let m = &self.model.pools[i];
        let valid: Vec<i64> = self
            .pick_batch(i, sel, Some(false))
            .map_or(Vec::new(), |k| self.batches[k].tokens.clone());
        let mut toks: Vec<i64> = valid.iter().take(3).copied().collect();
        match kind {
            0 => {
                let dead = (m.min_virt..m.num_virt)
                    .find(|v| !m.v2p.contains_key(v) && v % 5 == (sel % 5) as i64);
                toks.push(dead.unwrap_or(m.min_virt) * m.ps);
            }
            1 => toks.push(-1 - sel as i64),
            2 => toks.push(m.num_virt * m.ps + sel as i64),
            3 => toks.push(sel as i64 % (m.min_virt * m.ps)),
            _ => toks.extend(valid.first().copied()),
        }
        if self.call(Call::Free(i, toks)).is_ok() {
            self.prune(i);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        pool: u8,
        n: u8,
    },
    AllocNear {
        pool: u8,
        delta: i8,
        sched: bool,
    },
    AllocTokens {
        pool: u8,
        n: u8,
    },
    BindSwa {
        pick: Vec<u16>,
        bad: u8,
    },
    Extend {
        pool: u8,
        reqs: Vec<(u16, u8)>,
        host: bool,
    },
    Decode {
        pool: u8,
        sel: Vec<u16>,
        host: bool,
    },
    Free {
        pool: u8,
        batch: u16,
        part: u8,
        dup: u8,
    },
    FreeBad {
        pool: u8,
        kind: u8,
        sel: u16,
    },
    GroupBegin(u8),
    GroupEnd(u8),
    Flush {
        urgent: bool,
        pool: Option<u8>,
    },
    SetLatest(Option<u8>),
    Inflight {
        pool: u8,
        token: u8,
        batch: u16,
    },
    Retire(u8),
    Clear(u8),
    /// Joint allocation of `n` pages, or (`near`) of the joint capacity plus a delta.
    SwaAlloc {
        n: u8,
        near: Option<i8>,
        sched: bool,
    },
    SwaExtend {
        reqs: Vec<(u16, u8)>,
        host: bool,
    },
    SwaDecode {
        sel: Vec<u16>,
        host: bool,
    },
    SwaFree {
        batch: u16,
        part: u8,
        dup: u8,
    },
    SwaFreeWindow {
        sel: u16,
        part: u8,
        dup: u8,
        bad: u8,
    },
    Transfer {
        pick: Vec<u16>,
        bad: u8,
        declare: Option<u8>,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..6u8, 0..8u8).prop_map(|(pool, n)| Op::Alloc { pool, n }),
        2 => (0..6u8, -2..=2i8, any::<bool>()).prop_map(|(pool, delta, sched)| Op::AllocNear { pool, delta, sched }),
        1 => (0..6u8, 0..40u8).prop_map(|(pool, n)| Op::AllocTokens { pool, n }),
        3 => (prop::collection::vec(any::<u16>(), 1..6), 0..10u8).prop_map(|(pick, bad)| Op::BindSwa { pick, bad }),
        3 => (0..6u8, prop::collection::vec((any::<u16>(), 0..24u8), 1..5), any::<bool>())
            .prop_map(|(pool, reqs, host)| Op::Extend { pool, reqs, host }),
        3 => (0..6u8, prop::collection::vec(any::<u16>(), 1..6), any::<bool>())
            .prop_map(|(pool, sel, host)| Op::Decode { pool, sel, host }),
        9 => (0..6u8, any::<u16>(), any::<u8>(), 0..8u8).prop_map(|(pool, batch, part, dup)| Op::Free { pool, batch, part, dup }),
        1 => (0..6u8, 0..5u8, any::<u16>()).prop_map(|(pool, kind, sel)| Op::FreeBad { pool, kind, sel }),
        1 => (0..6u8).prop_map(Op::GroupBegin),
        1 => (0..6u8).prop_map(Op::GroupEnd),
        4 => (any::<bool>(), prop::option::of(0..6u8)).prop_map(|(urgent, pool)| Op::Flush { urgent, pool }),
        2 => prop::option::of(1..5u8).prop_map(Op::SetLatest),
        2 => (0..6u8, 1..5u8, any::<u16>()).prop_map(|(pool, token, batch)| Op::Inflight { pool, token, batch }),
        2 => (1..5u8).prop_map(Op::Retire),
        1 => (0..6u8).prop_map(Op::Clear),
        5 => (0..8u8, prop::option::weighted(0.3, -2..=2i8), any::<bool>())
            .prop_map(|(n, near, sched)| Op::SwaAlloc { n, near, sched }),
        2 => (prop::collection::vec((any::<u16>(), 0..24u8), 1..5), any::<bool>())
            .prop_map(|(reqs, host)| Op::SwaExtend { reqs, host }),
        2 => (prop::collection::vec(any::<u16>(), 1..6), any::<bool>())
            .prop_map(|(sel, host)| Op::SwaDecode { sel, host }),
        4 => (any::<u16>(), any::<u8>(), 0..8u8).prop_map(|(batch, part, dup)| Op::SwaFree { batch, part, dup }),
        3 => (any::<u16>(), any::<u8>(), 0..8u8, 0..8u8)
            .prop_map(|(sel, part, dup, bad)| Op::SwaFreeWindow { sel, part, dup, bad }),
        4 => (prop::collection::vec(any::<u16>(), 1..5), 0..16u8, prop::option::of(1..5u8))
            .prop_map(|(pick, bad, declare)| Op::Transfer { pick, bad, declare }),
    ]
}

/// A fixed case count; failures print the shrunk case instead of writing a regression file
/// next to the sources.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..ProptestConfig::default()
    }
}

/// Drain everything at the end: close groups, free all, retire tokens, flush urgently; the
/// arena must be empty and packed.
fn drain(h: &mut Harness) {
    for i in 0..h.n {
        if h.model.pools[i].group.is_some() {
            h.call(Call::GroupEnd(i)).unwrap();
        }
    }
    for i in (0..h.n).rev() {
        let live: Vec<i64> = h.model.pools[i].v2p.keys().copied().collect();
        let ps = h.model.pools[i].ps;
        if !live.is_empty() {
            h.call(Call::Free(i, live.iter().map(|v| v * ps).collect()))
                .unwrap();
        }
    }
    h.call(Call::Flush(None, true)).unwrap();
    for i in 0..h.n {
        let p = h.arena.pool(i);
        assert_eq!(
            (
                p.live_pages(),
                p.num_holes(),
                p.num_pending(),
                p.span_pages()
            ),
            (0, 0, 0, 0)
        );
    }
}

proptest! {
    #![proptest_config(config(MODEL_CASES))]

    /// Eager and lazy, both directions (and every placement of a middle band), page sizes
    /// 1/8/16, entry sizes that do not divide each other, mamba-like (two owners) and
    /// SWA-like (non-owner) pools, the SWA composite operations.
    #[test]
    fn arena_matches_the_reference_model(cfg in cfg_strategy(), ops in prop::collection::vec(op_strategy(), 40..110)) {
        let mut h = Harness::new(&cfg, cfg.lazy);
        for op in &ops {
            h.op(op);
        }
        drain(&mut h);
        OPS.fetch_add(h.ops, std::sync::atomic::Ordering::Relaxed);
    }
}

static OPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Outcome counters, to see what the random traces exercise (printed by `zz_report`).
static COUNTS: [std::sync::atomic::AtomicUsize; 13] =
    [const { std::sync::atomic::AtomicUsize::new(0) }; 13];
const COUNT_NAMES: [&str; 13] = [
    "calls",
    "allocs ok",
    "allocs not fitting",
    "errors",
    "frees ok",
    "plans with moves",
    "page moves",
    "flushes",
    "joint allocs ok",
    "joint allocs not fitting",
    "calls on three-band arenas",
    "allocs that slid the middle band",
    "transfers ok",
];

fn count(call: &Call, res: &Result<i64, Kind>, moves: usize, kept: bool, mid: (bool, usize)) {
    use std::sync::atomic::Ordering::Relaxed;
    let is_alloc = !bound_pools(call).is_empty();
    let joint = bound_pools(call).len() == 2;
    let slots = [
        true,
        is_alloc && *res == Ok(1),
        is_alloc && *res == Ok(0),
        res.is_err(),
        matches!(
            call,
            Call::Free(..) | Call::SwaFree(..) | Call::SwaFreeNonowner(..)
        ) && res.is_ok(),
        !kept && moves > 0,
        false,
        matches!(call, Call::Flush(..)),
        joint && *res == Ok(1),
        joint && *res == Ok(0),
        mid.0,
        is_alloc && *res == Ok(1) && !kept && mid.1 > 0,
        matches!(call, Call::Transfer(..)) && res.is_ok(),
    ];
    for (k, &on) in slots.iter().enumerate() {
        if on {
            COUNTS[k].fetch_add(1, Relaxed);
        }
    }
    if !kept {
        COUNTS[6].fetch_add(moves, Relaxed);
    }
}

// ----- lazy vs eager equivalence -----------------------------------------------------------

#[derive(Clone, Debug)]
enum TraceOp {
    Alloc { pool: u8, n: u8 },
    Free { pool: u8, batch: u16, part: u8 },
    Flush,
    SetLatest(u8),
    Retire(u8),
}

fn trace_strategy() -> impl Strategy<Value = Vec<TraceOp>> {
    prop::collection::vec(
        prop_oneof![
            6 => (0..6u8, 0..7u8).prop_map(|(pool, n)| TraceOp::Alloc { pool, n }),
            5 => (0..6u8, any::<u16>(), any::<u8>()).prop_map(|(pool, batch, part)| TraceOp::Free { pool, batch, part }),
            2 => Just(TraceOp::Flush),
            1 => (1..4u8).prop_map(TraceOp::SetLatest),
            1 => (1..4u8).prop_map(TraceOp::Retire),
        ],
        20..120,
    )
}

proptest! {
    #![proptest_config(config(EQUIV_CASES))]

    /// The same trace, without memory pressure, on an eager and a lazy arena: the same ids
    /// and outcomes at every step, and after a final urgent flush the same live set, the
    /// same data and the same (packed) footprint.
    #[test]
    fn lazy_and_eager_agree_without_pressure(cfg in cfg_strategy(), trace in trace_strategy()) {
        let n = cfg.num_pools();
        let allocs: u64 = trace.iter().map(|op| match op {
            TraceOp::Alloc { n, .. } => u64::from(*n),
            _ => 0,
        }).sum();
        // Room for every page the trace ever allocates on every side, twice over (a middle
        // band anchored in the middle of the gap): no alloc ever has to flush or slide, so
        // the two modes must agree on everything the caller sees.
        let cfg = Cfg { swa: false, units: cfg.units + 2 * n as u64 * allocs + 2, ..cfg };
        let mut eager = Harness::new(&cfg, false);
        let mut lazy = Harness::new(&cfg, true);
        for op in &trace {
            for h in [&mut eager, &mut lazy] {
                match *op {
                    TraceOp::Alloc { pool, n } => h.op(&Op::Alloc { pool, n }),
                    TraceOp::Free { pool, batch, part } => h.op(&Op::Free { pool, batch, part, dup: 1 }),
                    TraceOp::Flush => h.op(&Op::Flush { urgent: false, pool: None }),
                    TraceOp::SetLatest(t) => h.op(&Op::SetLatest(Some(t))),
                    TraceOp::Retire(t) => h.op(&Op::Retire(t)),
                }
            }
            prop_assert_eq!(eager.arena.plan().pages.clone(), lazy.arena.plan().pages.clone());
            for i in 0..n {
                prop_assert!(eager.arena.pool(i).free_ids().eq(lazy.arena.pool(i).free_ids()));
            }
        }
        lazy.call(Call::Flush(None, true)).unwrap();
        for i in 0..n {
            let live = |h: &Harness| h.model.pools[i].v2p.keys().copied().collect::<Vec<_>>();
            prop_assert_eq!(live(&eager), live(&lazy));
            prop_assert_eq!(eager.arena.pool(i).span_pages(), lazy.arena.pool(i).span_pages());
        }
        prop_assert_eq!(eager.bytes.live_data(&eager.arena), lazy.bytes.live_data(&lazy.arena));
        OPS.fetch_add(eager.ops + lazy.ops, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs after the properties in the same binary when run single-threaded; with parallel
/// test threads it only reports what has been counted so far.
#[test]
fn zz_report_op_count() {
    let n = OPS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("model calls so far: {n}");
    for (name, c) in COUNT_NAMES.iter().zip(&COUNTS) {
        eprintln!("  {name}: {}", c.load(std::sync::atomic::Ordering::Relaxed));
    }
}
