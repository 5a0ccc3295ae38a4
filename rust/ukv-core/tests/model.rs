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
//! A second property runs one trace on an eager and a lazy arena without memory pressure and
//! checks that they hand out the same ids and end with the same live set and data.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use proptest::prelude::*;
use ukv_core::{Arena, ArenaConfig, Direction, Plan, PoolSpec, UkvError, TOMBSTONE};

/// Granularity of the simulated buffer: every entry size used here is a multiple of it.
const CELL: u64 = 16;
/// Random cases per property (fixed here so `cargo test` runs the same amount everywhere).
const MODEL_CASES: u32 = 512;
const EQUIV_CASES: u32 = 96;

// ----- configuration ---------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Cfg {
    /// Direction of pool 0 (pool 1 grows the other way).
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
}

impl Cfg {
    fn specs(&self) -> Vec<PoolSpec> {
        let dir1 = match self.dir0 {
            Direction::Up => Direction::Down,
            Direction::Down | Direction::Middle => Direction::Up,
        };
        vec![
            PoolSpec {
                name: "kv".into(),
                entry_bytes: self.e0,
                page_size: self.ps0,
                direction: self.dir0,
                id_owner: None,
            },
            PoolSpec {
                name: if self.swa { "swa" } else { "state" }.into(),
                entry_bytes: self.e1,
                page_size: if self.swa { self.ps0 } else { 1 },
                direction: dir1,
                id_owner: if self.swa { Some(0) } else { None },
            },
        ]
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
        prop_oneof![Just(Direction::Up), Just(Direction::Down)],
        prop_oneof![Just(1u64), Just(8), Just(16)],
        prop_oneof![Just(48u64), Just(64), Just(80), Just(112)],
        prop_oneof![Just(48u64), Just(80), Just(112), Just(160)],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(1usize), Just(2), Just(3), Just(4096)],
        4u64..28,
        0u64..12,
    )
        .prop_map(|(dir0, ps0, e0, e1, swa, lazy, cap, units, slack)| Cfg {
            dir0,
            ps0,
            e0,
            e1,
            swa,
            lazy,
            cap,
            units,
            slack,
        })
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
    up: bool,
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
    free_ids: VecDeque<i64>,
    /// Reusable free pages inside the band, in the order alloc takes them.
    holes: Vec<i64>,
    pending: Vec<(u64, Vec<i64>)>,
    write: Option<(u64, Vec<i64>)>,
    group: Option<Vec<i64>>,
    moved: u64,
    compactions: u64,
    flushes: u64,
}

impl MPool {
    fn clear(&mut self) {
        self.v2p.clear();
        self.p2v.clear();
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
        self.write = None;
        self.group = None;
    }

    fn live(&self) -> i64 {
        self.v2p.len() as i64
    }

    fn pending_pages(&self) -> usize {
        self.pending.iter().map(|b| b.1.len()).sum()
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
    }

    /// Check a free call the way the arena promises to: token by token, first offender wins.
    fn validate_free(&self, tokens: &[i64]) -> Result<Vec<i64>, Kind> {
        let mut pages = Vec::new();
        let mut seen = BTreeSet::new();
        for &t in tokens {
            if t < 0 {
                return Err(Kind::InvalidId);
            }
            let v = t / self.ps;
            if v >= self.num_virt || v < self.min_virt {
                return Err(Kind::InvalidId);
            }
            if !self.v2p.contains_key(&v) {
                return Err(Kind::DoubleFree);
            }
            if self.group.as_ref().is_some_and(|g| g.contains(&v)) {
                return Err(Kind::DoubleFree);
            }
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
}

#[derive(Debug, Default)]
struct Pred {
    res: Option<Result<i64, Kind>>,
    pages: Vec<i64>,
    tokens: Vec<i64>,
    token_req: Vec<i64>,
    moves: [Vec<(i64, i64)>; 2],
    waits: Vec<u64>,
    reset: [bool; 2],
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
                    up: s.direction == Direction::Up,
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
                    free_ids: VecDeque::new(),
                    holes: Vec::new(),
                    pending: Vec::new(),
                    write: None,
                    group: None,
                    moved: 0,
                    compactions: 0,
                    flushes: 0,
                }
            })
            .collect();
        if cfg.swa {
            pools[1].num_virt = pools[0].num_pages;
            pools[1].min_virt = pools[0].min_page;
        }
        for p in &mut pools {
            p.clear();
        }
        Model {
            pools,
            latest: None,
            cap: cfg.cap,
        }
    }

    /// Fresh pages pool `i` may take: the index room, and the bytes up to the neighbour's
    /// frontier (its packed frontier when `packed`), both recomputed from scratch.
    fn room(&self, i: usize, packed: bool) -> i64 {
        let (p, n) = (&self.pools[i], &self.pools[1 - i]);
        let nb = if packed {
            n.packed_frontier()
        } else {
            n.frontier()
        };
        let by_bytes = if p.up {
            (nb / p.pb) as i64 - p.wm
        } else {
            p.wm + 1 - nb.div_ceil(p.pb) as i64
        };
        by_bytes.min(p.index_room()).max(0)
    }

    fn available(&self, i: usize) -> i64 {
        self.pools[i].holes.len() as i64 + self.room(i, false)
    }

    fn schedulable(&self, i: usize) -> i64 {
        self.pools[i].holes.len() as i64 + self.room(i, true)
    }

    /// Whether `n` pages fit on pool `i`, flushing the neighbour urgently when that helps.
    fn make_room(&mut self, i: usize, n: i64, pred: &mut Pred) -> bool {
        if n <= self.available(i) {
            return true;
        }
        if n > self.schedulable(i) {
            return false;
        }
        self.flush_pool(1 - i, true, pred);
        assert!(
            n <= self.available(i),
            "model: an urgent neighbour flush must make room"
        );
        true
    }

    /// Bind `vs` on pool `i`: holes first in list order, then fresh pages, ascending.
    fn bind_pages(&mut self, i: usize, vs: &[i64]) {
        let p = &mut self.pools[i];
        let n_holes = p.holes.len().min(vs.len());
        let holes: Vec<i64> = p.holes.drain(..n_holes).collect();
        let fresh = (vs.len() - n_holes) as i64;
        let start = if p.up { p.wm } else { p.wm - fresh + 1 };
        if p.up {
            p.wm += fresh;
        } else {
            p.wm -= fresh;
        }
        let phys = holes.into_iter().chain(start..start + fresh);
        for (&v, ph) in vs.iter().zip(phys) {
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
        let ps = self.pools[i].ps;
        pred.tokens = vs
            .iter()
            .flat_map(|&v| (0..ps).map(move |o| v * ps + o))
            .collect();
        pred.pages = vs;
        pred
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
        let mut seen = BTreeSet::new();
        for &v in vs {
            if v < 0 || v >= p.num_virt || v < p.min_virt {
                return Pred::err(Kind::InvalidId);
            }
            if p.v2p.contains_key(&v) || !seen.insert(v) {
                return Pred::err(Kind::Argument);
            }
        }
        let mut pred = Pred::ok(1);
        if !self.make_room(i, vs.len() as i64, &mut pred) {
            return Pred::ok(0);
        }
        self.bind_pages(i, vs);
        let ps = self.pools[i].ps;
        pred.tokens = vs
            .iter()
            .flat_map(|&v| (0..ps).map(move |o| v * ps + o))
            .collect();
        pred.pages = vs.to_vec();
        pred
    }

    /// Token allocation, position by position: a position inside the prefix's last page
    /// continues after `last_loc`; a position at a page start takes the next new page.
    /// `last[r]` is request r's last token (host side) or None for relative output.
    fn alloc_extend(&mut self, i: usize, pre: &[i64], seq: &[i64], last: Option<&[i64]>) -> Pred {
        if !self.pools[i].owner {
            return Pred::err(Kind::Argument);
        }
        let ps = self.pools[i].ps;
        let new_pages: i64 = pre
            .iter()
            .zip(seq)
            .map(|(&a, &b)| (b + ps - 1) / ps - (a + ps - 1) / ps)
            .sum();
        let mut pred = self.alloc(i, new_pages);
        if pred.res != Some(Ok(1)) {
            return pred;
        }
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
                    pred.tokens.push(pos - a + 1 + last.map_or(0, |l| l[r]));
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

    fn alloc_decode(&mut self, i: usize, seq: &[i64], last: Option<&[i64]>) -> Pred {
        let pre: Vec<i64> = seq.iter().map(|&s| s - 1).collect();
        self.alloc_extend(i, &pre, seq, last)
    }

    fn free(&mut self, i: usize, tokens: &[i64]) -> Pred {
        let pages = match self.pools[i].validate_free(tokens) {
            Ok(p) => p,
            Err(k) => return Pred::err(k),
        };
        let mut pred = Pred::ok(1);
        match self.pools[i].group.as_mut() {
            Some(g) => g.extend(pages),
            None => pred.moves[i] = self.release(i, &pages),
        }
        pred
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
        // Eager: the band shrinks by K; the survivors of the vacated stretch, ascending, go
        // to the freed pages left inside the new band, ascending.
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
        pred.moves[i] = self.release(i, &g);
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
            p.write = None;
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
        let blockers: BTreeSet<i64> = match &p.write {
            Some((_, vs)) if !urgent => vs.iter().filter_map(|v| p.v2p.get(v).copied()).collect(),
            _ => BTreeSet::new(),
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
        for j in pool.map_or(vec![0, 1], |j| vec![j]) {
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
        p.write = Some((t, vs));
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
            if p.write.as_ref().is_some_and(|w| w.0 == t) {
                p.write = None;
            }
        }
        if self.latest == Some(t) {
            self.latest = None;
        }
        Pred {
            keeps_plan: true,
            ..Pred::ok(1)
        }
    }

    /// Clearing an owner also clears the pool that binds its ids.
    fn clear(&mut self, i: usize) -> Pred {
        let mut pred = Pred::ok(1);
        for j in 0..self.pools.len() {
            if j == i || (i == 0 && !self.pools[j].owner) {
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
    }
}

fn run_model(m: &mut Model, call: &Call) -> Pred {
    match call {
        Call::Alloc(i, n) => m.alloc(*i, *n as i64),
        Call::AllocTokens(i, n) => m.alloc_tokens(*i, *n),
        Call::AllocWithVirtual(i, vs) => m.alloc_with_virtual(*i, vs),
        Call::Extend(i, pre, seq, last) => m.alloc_extend(*i, pre, seq, last.as_deref()),
        Call::Decode(i, seq, last) => m.alloc_decode(*i, seq, last.as_deref()),
        Call::Free(i, t) => m.free(*i, t),
        Call::GroupBegin(i) => m.group_begin(*i),
        Call::GroupEnd(i) => m.group_end(*i),
        Call::Flush(pool, urgent) => m.flush(*pool, *urgent),
        Call::SetLatest(t) => m.set_latest(*t),
        Call::Inflight(i, t, toks) => m.inflight(*i, *t, toks),
        Call::Retire(t) => m.retire(*t),
        Call::Clear(i) => m.clear(*i),
    }
}

fn pool_of(call: &Call) -> Option<usize> {
    match call {
        Call::Alloc(i, _)
        | Call::AllocTokens(i, _)
        | Call::AllocWithVirtual(i, _)
        | Call::Extend(i, ..)
        | Call::Decode(i, ..) => Some(*i),
        _ => None,
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

    /// Run a plan: all moves of a pool at once (read every source, then write), then the
    /// forward writes the newly bound pages of pool `bound`.
    fn apply(&mut self, a: &Arena, bound: Option<usize>) {
        for (i, p) in a.plan().pools.iter().enumerate() {
            let pb = a.pool(i).geometry().page_bytes;
            let data: Vec<Vec<u64>> = p
                .src
                .iter()
                .map(|&s| self.cells[Self::cells_of(pb, s)].to_vec())
                .collect();
            for (&d, v) in p.dst.iter().zip(data) {
                self.cells[Self::cells_of(pb, d)].copy_from_slice(&v);
            }
        }
        if let Some(i) = bound {
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
    ops: usize,
}

impl Harness {
    fn new(cfg: &Cfg, lazy: bool) -> Self {
        let arena = cfg.arena(lazy);
        let mirror = (0..2)
            .map(|i| (arena.pool(i).v2p().to_vec(), arena.pool(i).p2v().to_vec()))
            .collect();
        Harness {
            model: Model::new(cfg, lazy),
            bytes: Bytes::new(arena.total_bytes()),
            arena,
            mirror,
            batches: Vec::new(),
            swa: cfg.swa,
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
            for i in 0..2 {
                let got_moves: Vec<(i64, i64)> = plan.pools[i]
                    .src
                    .iter()
                    .copied()
                    .zip(plan.pools[i].dst.iter().copied())
                    .collect();
                assert_eq!(got_moves, pred.moves[i], "{call:?}: moves of pool {i}");
                assert_eq!(plan.pools[i].reset, pred.reset[i], "{call:?}: reset flag");
            }
        }
        count(
            &call,
            &got_res,
            self.arena.plan().num_moves(),
            pred.keeps_plan,
        );
        self.compare(&call, pred.keeps_plan);
        if !pred.keeps_plan {
            let bound = if got_res == Ok(1) {
                pool_of(&call)
            } else {
                None
            };
            self.bytes.apply(&self.arena, bound);
        }
        self.bytes.check(&self.arena);
        got_res
    }

    fn compare(&mut self, call: &Call, keeps_plan: bool) {
        let (a, m) = (&self.arena, &self.model);
        a.check_invariants()
            .unwrap_or_else(|e| panic!("{call:?}: {e}"));
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
            let low = a.pool(a.chain()[0]).high_byte();
            let high = a.pool(a.chain()[1]).low_byte();
            assert_eq!(a.gap_bytes(i), high.saturating_sub(low), "{call:?}: gap");
            assert_eq!(a.in_free_group(i), mp.group.is_some());
            let s = p.stats();
            assert_eq!(
                (s.pages_moved, s.compactions, s.flushes),
                (mp.moved, mp.compactions, mp.flushes)
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
        // The capacity contract: whatever `schedulable` promises, alloc delivers.
        for i in 0..2 {
            if m.pools[i].owner {
                let n = m.schedulable(i).min(m.pools[i].free_ids.len() as i64);
                let mut probe = self.arena.clone();
                assert!(
                    probe.alloc(i, n as usize).unwrap(),
                    "{call:?}: alloc({n}) <= schedulable failed"
                );
            }
        }
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

    fn op(&mut self, op: &Op) {
        match *op {
            Op::Alloc { pool, n } => {
                let i = pool as usize % 2;
                if self.call(Call::Alloc(i, n as usize)) == Ok(1) && n > 0 {
                    let tokens = self.arena.plan().tokens.clone();
                    self.batches.push(Batch {
                        pool: i,
                        tokens,
                        growable: false,
                    });
                }
            }
            Op::AllocNear { pool, delta, sched } => {
                let i = pool as usize % 2;
                let base = if sched {
                    self.model.schedulable(i)
                } else {
                    self.model.available(i)
                };
                let n = (base + delta as i64).max(0);
                if self.call(Call::Alloc(i, n as usize)) == Ok(1) && n > 0 {
                    let tokens = self.arena.plan().tokens.clone();
                    self.batches.push(Batch {
                        pool: i,
                        tokens,
                        growable: false,
                    });
                }
            }
            Op::AllocTokens { pool, n } => {
                let i = pool as usize % 2;
                if self.call(Call::AllocTokens(i, n as i64)) == Ok(1) && n > 0 {
                    let tokens = self.arena.plan().tokens.clone();
                    self.batches.push(Batch {
                        pool: i,
                        tokens,
                        growable: false,
                    });
                }
            }
            Op::BindSwa { ref pick, bad } => self.bind_swa(pick, bad),
            Op::Extend {
                pool,
                ref reqs,
                host,
            } => self.extend(pool as usize % 2, reqs, host),
            Op::Decode {
                pool,
                ref sel,
                host,
            } => self.decode(pool as usize % 2, sel, host),
            Op::Free {
                pool,
                batch,
                part,
                dup,
            } => self.free(pool as usize % 2, batch, part, dup),
            Op::FreeBad { pool, kind, sel } => self.free_bad(pool as usize % 2, kind, sel),
            Op::GroupBegin(pool) => {
                self.call(Call::GroupBegin(pool as usize % 2)).ok();
            }
            Op::GroupEnd(pool) => {
                self.call(Call::GroupEnd(pool as usize % 2)).ok();
            }
            Op::Flush { urgent, pool } => {
                self.call(Call::Flush(pool.map(|p| p as usize % 2), urgent))
                    .unwrap();
            }
            Op::SetLatest(t) => {
                self.call(Call::SetLatest(t.map(u64::from))).unwrap();
            }
            Op::Inflight { pool, token, batch } => {
                let i = pool as usize % 2;
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
                let i = pool as usize % 2;
                self.call(Call::Clear(i)).unwrap();
                let both = i == 0 && self.swa;
                self.batches
                    .retain(|b| b.pool != i && !(both && b.pool == 1));
            }
        }
    }

    fn bind_swa(&mut self, pick: &[u16], bad: u8) {
        let (owner, swa) = (&self.model.pools[0], &self.model.pools[1]);
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
        self.call(Call::AllocWithVirtual(1, vs)).ok();
    }

    fn extend(&mut self, i: usize, reqs: &[(u16, u8)], host: bool) {
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
        let call = Call::Extend(i, pre.clone(), seq.clone(), host.then(|| last.clone()));
        if self.call(call) == Ok(1) {
            self.grow_requests(i, &chosen, &pre, &seq, &last);
        }
    }

    fn decode(&mut self, i: usize, sel: &[u16], host: bool) {
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
        if self.call(Call::Decode(i, seq.clone(), host.then(|| last.clone()))) == Ok(1) {
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
        let plan = self.arena.plan();
        let resolved: Vec<i64> = if plan.token_req.is_empty() {
            plan.tokens.clone()
        } else {
            plan.tokens
                .iter()
                .zip(&plan.token_req)
                .map(|(&t, &r)| if r >= 0 { t + last[r as usize] } else { t })
                .collect()
        };
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

    fn free(&mut self, i: usize, batch: u16, part: u8, dup: u8) {
        if self.swa && i == 1 {
            return self.free_swa(batch, part, dup);
        }
        let Some(k) = self.pick_batch(i, batch, None) else {
            return;
        };
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
        // A SWA composite frees the swa side of the same ids first (what it still holds).
        if self.swa && i == 0 {
            let swa = &self.model.pools[1];
            let queued = swa.group.clone().unwrap_or_default();
            let pages: Vec<i64> = self
                .pages_of(0, &toks)
                .into_iter()
                .filter(|v| swa.v2p.contains_key(v) && !queued.contains(v))
                .collect();
            let ps = swa.ps;
            if !pages.is_empty() {
                self.call(Call::Free(
                    1,
                    pages.iter().map(|v| v * ps + (v % ps)).collect(),
                ))
                .unwrap();
            }
        }
        if self.call(Call::Free(i, toks)).is_ok() {
            self.prune(i);
        }
    }

    /// Tokens that left the sliding window: free a few swa pages, the ids stay live on full.
    fn free_swa(&mut self, sel: u16, part: u8, dup: u8) {
        let swa = &self.model.pools[1];
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
        self.call(Call::Free(1, toks)).ok();
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
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..2u8, 0..8u8).prop_map(|(pool, n)| Op::Alloc { pool, n }),
        2 => (0..2u8, -2..=2i8, any::<bool>()).prop_map(|(pool, delta, sched)| Op::AllocNear { pool, delta, sched }),
        1 => (0..2u8, 0..40u8).prop_map(|(pool, n)| Op::AllocTokens { pool, n }),
        3 => (prop::collection::vec(any::<u16>(), 1..6), 0..10u8).prop_map(|(pick, bad)| Op::BindSwa { pick, bad }),
        3 => (0..2u8, prop::collection::vec((any::<u16>(), 0..24u8), 1..5), any::<bool>())
            .prop_map(|(pool, reqs, host)| Op::Extend { pool, reqs, host }),
        3 => (0..2u8, prop::collection::vec(any::<u16>(), 1..6), any::<bool>())
            .prop_map(|(pool, sel, host)| Op::Decode { pool, sel, host }),
        9 => (0..2u8, any::<u16>(), any::<u8>(), 0..8u8).prop_map(|(pool, batch, part, dup)| Op::Free { pool, batch, part, dup }),
        1 => (0..2u8, 0..5u8, any::<u16>()).prop_map(|(pool, kind, sel)| Op::FreeBad { pool, kind, sel }),
        1 => (0..2u8).prop_map(Op::GroupBegin),
        1 => (0..2u8).prop_map(Op::GroupEnd),
        4 => (any::<bool>(), prop::option::of(0..2u8)).prop_map(|(urgent, pool)| Op::Flush { urgent, pool }),
        2 => prop::option::of(1..5u8).prop_map(Op::SetLatest),
        2 => (0..2u8, 1..5u8, any::<u16>()).prop_map(|(pool, token, batch)| Op::Inflight { pool, token, batch }),
        2 => (1..5u8).prop_map(Op::Retire),
        1 => (0..2u8).prop_map(Op::Clear),
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
    for i in 0..2 {
        if h.model.pools[i].group.is_some() {
            h.call(Call::GroupEnd(i)).unwrap();
        }
    }
    for i in [1, 0] {
        let live: Vec<i64> = h.model.pools[i].v2p.keys().copied().collect();
        let ps = h.model.pools[i].ps;
        if !live.is_empty() {
            h.call(Call::Free(i, live.iter().map(|v| v * ps).collect()))
                .unwrap();
        }
    }
    h.call(Call::Flush(None, true)).unwrap();
    for i in 0..2 {
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

    /// Eager and lazy, both directions, page sizes 1/8/16, entry sizes that do not divide
    /// each other, mamba-like (two owners) and SWA-like (non-owner) pools.
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
static COUNTS: [std::sync::atomic::AtomicUsize; 8] =
    [const { std::sync::atomic::AtomicUsize::new(0) }; 8];
const COUNT_NAMES: [&str; 8] = [
    "calls",
    "allocs ok",
    "allocs not fitting",
    "errors",
    "frees ok",
    "plans with moves",
    "page moves",
    "flushes",
];

fn count(call: &Call, res: &Result<i64, Kind>, moves: usize, kept: bool) {
    use std::sync::atomic::Ordering::Relaxed;
    let is_alloc = pool_of(call).is_some();
    let slots = [
        true,
        is_alloc && *res == Ok(1),
        is_alloc && *res == Ok(0),
        res.is_err(),
        matches!(call, Call::Free(..)) && res.is_ok(),
        !kept && moves > 0,
        false,
        matches!(call, Call::Flush(..)),
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
            6 => (0..2u8, 0..7u8).prop_map(|(pool, n)| TraceOp::Alloc { pool, n }),
            5 => (0..2u8, any::<u16>(), any::<u8>()).prop_map(|(pool, batch, part)| TraceOp::Free { pool, batch, part }),
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
        let allocs: [u64; 2] = [0, 1].map(|i| trace.iter().map(|op| match op {
            TraceOp::Alloc { pool, n } if *pool as usize == i => u64::from(*n),
            _ => 0,
        }).sum());
        // Room for every page the trace ever allocates on both sides: no alloc ever has to
        // flush, so the two modes must agree on everything the caller sees.
        let cfg = Cfg { swa: false, units: cfg.units + allocs[0] + allocs[1] + 2, ..cfg };
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
            for i in 0..2 {
                prop_assert!(eager.arena.pool(i).free_ids().eq(lazy.arena.pool(i).free_ids()));
            }
        }
        lazy.call(Call::Flush(None, true)).unwrap();
        for i in 0..2 {
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
