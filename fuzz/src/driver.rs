//! Operation-sequence driver for `ukv-core`, shared by the `cargo fuzz` target
//! (`fuzz/fuzz_targets/arena_ops.rs`) and by `rust/ukv-core/tests/fuzz_replay.rs`, which
//! replays the committed seeds and crash regressions and a seeded random stream under a
//! plain `cargo test`.
//!
//! The input bytes choose an arena configuration (eager or lazy, page sizes 1..16, a
//! state pool or a SWA pool that binds the owner's ids, sizes from tiny to near
//! `u64::MAX`, and sometimes a raw, possibly invalid, configuration), then a sequence of
//! operations with valid, invalid and absurd arguments: bad pool indices, negative,
//! reserved, out-of-range, dead, repeated and queued ids, sizes near `i64::MAX` and
//! `usize::MAX`, mismatched lengths, foreign `last_loc`s, misuse of free groups.
//!
//! After every operation it checks, and panics (a fuzz crash) on any violation:
//! * `check_invariants()` holds, whether the call succeeded or failed;
//! * a call that returned an error left the arena exactly as it was (tables, watermarks,
//!   counts, free ids, free group, and the previous plan), and arguments the driver built
//!   to be invalid were rejected, while arguments it built to be valid were accepted;
//! * an allocation that returned false changed nothing, and feasibility holds:
//!   `n <= schedulable` (and enough free ids) implies success, and eager success is exact;
//! * the plan is well formed (paired, duplicate-free, disjoint src/dst) and executing it
//!   on a shadow copy keeps every live page's marker and makes mirror tables, updated
//!   only from the plan's changed rows, equal to the real tables (what a device mirror
//!   sees); counters agree with the moves the plans carried;
//! * token ids handed out are live, above the padding sink, fresh, at the right page
//!   offset, and continue each request's last page;
//! * non-urgent flushes never move a page the in-flight forward writes;
//! * the live pages of the two pools never share a byte and stay above the floor.
//!
//! No dependency beyond `ukv-core` and `std`, so the same file compiles in both crates.

use std::collections::HashSet;

use ukv_core::{Arena, ArenaConfig, Direction, Plan, PoolSpec, UkvError, TOMBSTONE};

/// Operations run per input at most (the fuzzer's inputs end long before, usually).
pub const MAX_STEPS: usize = 4096;

/// Tables larger than this are not built by the driver (libFuzzer's malloc limit); the
/// huge-size paths are covered by explicit regression tests instead.
const MAX_PAGES: u64 = 4096;

/// What one or more runs did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Inputs run.
    pub inputs: u64,
    /// Inputs whose configuration the arena rejected (or the driver skipped as too large).
    pub configs_rejected: u64,
    /// Operations issued against an arena.
    pub ops: u64,
    /// Operations whose arguments the driver built to be invalid or absurd.
    pub bad_inputs: u64,
    /// Operations that returned an error.
    pub errors: u64,
    /// Allocations that returned false (did not fit).
    pub refusals: u64,
    /// Page moves executed on the shadow copy.
    pub moves: u64,
}

impl Tally {
    /// Add another tally.
    pub fn add(&mut self, o: &Tally) {
        self.inputs += o.inputs;
        self.configs_rejected += o.configs_rejected;
        self.ops += o.ops;
        self.bad_inputs += o.bad_inputs;
        self.errors += o.errors;
        self.refusals += o.refusals;
        self.moves += o.moves;
    }
}

/// Run one input; panics on any violation.
pub fn run(data: &[u8]) -> Tally {
    let mut input = Input { data, pos: 0 };
    let mut tally = Tally {
        inputs: 1,
        ..Tally::default()
    };
    let Some(cfg) = config(&mut input, &mut tally) else {
        tally.configs_rejected += 1;
        return tally;
    };
    if std::env::var_os("UKV_FUZZ_TRACE").is_some() {
        eprintln!("[fuzz] {cfg:?}");
    }
    let arena = match Arena::new(cfg.clone()) {
        Ok(a) => a,
        Err(e) => {
            assert!(
                matches!(e, UkvError::Config { .. }),
                "Arena::new returned a non-config error {e:?} for {cfg:?}"
            );
            tally.configs_rejected += 1;
            return tally;
        }
    };
    arena
        .check_invariants()
        .unwrap_or_else(|e| panic!("fresh arena breaks an invariant: {e}"));
    let owner_of = cfg.pools.iter().map(|p| p.id_owner).collect();
    let mut h = Harness::new(arena, owner_of, tally);
    let mut steps = 0;
    while !input.done() && steps < MAX_STEPS {
        h.step(&mut input);
        steps += 1;
    }
    h.tally
}

// ----- input decoding ----------------------------------------------------------------------

/// Bytes as a stream of small decisions; reads past the end give zeros.
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from(self.byte()) | (u16::from(self.byte()) << 8)
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |acc, i| acc | (u64::from(self.byte()) << (8 * i)))
    }

    fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A value in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        if n <= 256 {
            self.byte() as usize % n
        } else {
            self.u16() as usize % n
        }
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// An arena configuration from the input, or None when the driver will not build it.
fn config(input: &mut Input<'_>, tally: &mut Tally) -> Option<ArenaConfig> {
    let mode = input.byte();
    if mode % 16 == 0 {
        tally.bad_inputs += 1;
        return raw_config(input);
    }
    let dir0 = if input.bool() {
        Direction::Up
    } else {
        Direction::Down
    };
    let dir1 = match dir0 {
        Direction::Up => Direction::Down,
        Direction::Down | Direction::Middle => Direction::Up,
    };
    let ps0 = input.pick(&[1u64, 1, 2, 4, 16, 16]);
    let kind = input.below(3); // 0: state pool (ps 1), 1: second KV pool, 2: SWA (binds ids)
    let ps1 = if kind == 0 { 1 } else { ps0 };
    let scale = input.pick(&[0u32, 0, 0, 0, 20, 40, 56]);
    let e0 = input.pick(&[16u64, 24, 32, 48, 64]) << scale;
    let e1 = input.pick(&[16u64, 24, 40, 64, 160]) << scale;
    let pools = vec![
        PoolSpec {
            name: "kv".into(),
            entry_bytes: e0,
            page_size: ps0,
            direction: dir0,
            id_owner: None,
        },
        PoolSpec {
            name: "side".into(),
            entry_bytes: e1,
            page_size: ps1,
            direction: dir1,
            id_owner: (kind == 2).then_some(0),
        },
    ];
    let big = match (e0.checked_mul(ps0), e1.checked_mul(ps1)) {
        (Some(a), Some(b)) => a.max(b),
        _ => u64::MAX, // the arena must reject it
    };
    let units = 1 + input.below(48) as u64;
    let slack = u64::from(input.byte()) << scale;
    let total = big
        .checked_mul(units + 1)
        .and_then(|t| t.checked_add(slack))
        .unwrap_or(u64::MAX);
    let lazy = input.bool();
    let max_moves = input.pick(&[1usize, 2, 3, 4096]);
    let cfg = ArenaConfig {
        total_bytes: total,
        pools,
        lazy,
        max_moves_per_flush: max_moves,
    };
    small_enough(&cfg).then_some(cfg)
}

/// A configuration from raw values, valid or not (never one with huge tables).
fn raw_config(input: &mut Input<'_>) -> Option<ArenaConfig> {
    const SIZES: [u64; 12] = [
        0,
        1,
        16,
        24,
        160,
        4096,
        1 << 32,
        1 << 40,
        1 << 62,
        i64::MAX as u64,
        u64::MAX / 2,
        u64::MAX,
    ];
    const PAGE: [u64; 8] = [0, 1, 2, 16, 3, 1 << 32, i64::MAX as u64, u64::MAX];
    let n = input.pick(&[0usize, 1, 2, 2, 2, 3]);
    let names = ["a", "b", "a", ""];
    let pools = (0..n)
        .map(|_| PoolSpec {
            name: input.pick(&names).to_string(),
            entry_bytes: input.pick(&SIZES),
            page_size: input.pick(&PAGE),
            direction: if input.bool() {
                Direction::Up
            } else {
                Direction::Down
            },
            id_owner: input.pick(&[None, None, Some(0), Some(1), Some(7)]),
        })
        .collect();
    let total = if input.bool() {
        input.pick(&SIZES)
    } else {
        input.u64()
    };
    let cfg = ArenaConfig {
        total_bytes: total,
        pools,
        lazy: input.bool(),
        max_moves_per_flush: input.pick(&[0usize, 1, 4096, usize::MAX]),
    };
    small_enough(&cfg).then_some(cfg)
}

/// Whether every table the arena would build is small.
fn small_enough(cfg: &ArenaConfig) -> bool {
    cfg.pools.iter().all(|p| {
        match p.entry_bytes.checked_mul(p.page_size) {
            Some(0) | None => true, // rejected before any table is built
            Some(pb) => cfg.total_bytes / pb <= MAX_PAGES,
        }
    })
}

// ----- the harness -------------------------------------------------------------------------

/// A request being extended token by token (owner pools only).
#[derive(Debug, Clone)]
struct Req {
    pool: usize,
    tokens: Vec<i64>,
}

/// Everything a failed call must leave unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    pools: Vec<PoolSnap>,
    latest: Option<u64>,
    plan: Plan,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PoolSnap {
    v2p: Vec<i64>,
    p2v: Vec<i64>,
    wm: i64,
    live: usize,
    holes: usize,
    pending: usize,
    free_ids: Vec<i64>,
    in_group: bool,
    stats: (u64, u64, u64),
}

/// What the driver expects of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Ok,
    Err,
    Either,
}

/// How an operation may have flushed (for the write-set rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlushKind {
    None,
    NonUrgent,
    Urgent,
}

struct Harness {
    arena: Arena,
    n: usize,
    ps: Vec<i64>,
    page_bytes: Vec<u64>,
    nvp: Vec<i64>,
    minv: Vec<i64>,
    owner: Vec<bool>,
    /// The pool whose ids a non-owner pool binds.
    owner_of: Vec<Option<usize>>,
    mirror_v2p: Vec<Vec<i64>>,
    mirror_p2v: Vec<Vec<i64>>,
    /// Shadow page contents per pool, indexed by physical page.
    content: Vec<Vec<u64>>,
    /// Expected marker per pool, indexed by virtual page (0: not live).
    marker: Vec<Vec<u64>>,
    next_mark: u64,
    /// Pages moved per pool according to the plans.
    moved: Vec<u64>,
    reqs: Vec<Req>,
    /// Virtual pages queued in an open free group, per pool (None: no group).
    queued: Vec<Option<HashSet<i64>>>,
    /// The in-flight write set per pool: (token, virtual pages).
    writes: Vec<Option<(u64, HashSet<i64>)>>,
    tally: Tally,
    /// `UKV_FUZZ_TRACE=1`: print every operation and its arguments (for minimising).
    trace: bool,
}

impl Harness {
    fn new(arena: Arena, owner_of: Vec<Option<usize>>, tally: Tally) -> Self {
        let n = arena.num_pools();
        let geo = |i: usize| arena.pool(i).geometry().clone();
        let ps = (0..n).map(|i| geo(i).page_size as i64).collect();
        let page_bytes = (0..n).map(|i| geo(i).page_bytes).collect();
        let nvp = (0..n).map(|i| geo(i).num_virtual_pages).collect();
        let minv = (0..n).map(|i| geo(i).min_virtual_page).collect();
        let owner = (0..n).map(|i| arena.pool(i).is_id_owner()).collect();
        let mirror_v2p = (0..n).map(|i| arena.pool(i).v2p().to_vec()).collect();
        let mirror_p2v = (0..n).map(|i| arena.pool(i).p2v().to_vec()).collect();
        let content = (0..n)
            .map(|i| vec![0; geo(i).num_pages as usize + 1])
            .collect();
        let marker = (0..n)
            .map(|i| vec![0; geo(i).num_virtual_pages as usize + 1])
            .collect();
        Harness {
            arena,
            n,
            ps,
            page_bytes,
            nvp,
            minv,
            owner,
            owner_of,
            mirror_v2p,
            mirror_p2v,
            content,
            marker,
            next_mark: 1,
            moved: vec![0; n],
            reqs: Vec::new(),
            queued: vec![None; n],
            writes: vec![None; n],
            tally,
            trace: std::env::var_os("UKV_FUZZ_TRACE").is_some(),
        }
    }

    fn note(&self, what: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("[fuzz] {}", what());
        }
    }

    fn snapshot(&self) -> Snapshot {
        let pools = (0..self.n)
            .map(|i| {
                let p = self.arena.pool(i);
                let s = p.stats();
                PoolSnap {
                    v2p: p.v2p().to_vec(),
                    p2v: p.p2v().to_vec(),
                    wm: p.watermark(),
                    live: p.live_pages(),
                    holes: p.num_holes(),
                    pending: p.num_pending(),
                    free_ids: p.free_ids().collect(),
                    in_group: self.arena.in_free_group(i),
                    stats: (s.pages_moved, s.bytes_moved, s.compactions),
                }
            })
            .collect();
        Snapshot {
            pools,
            latest: self.arena.latest_token(),
            plan: self.arena.plan().clone(),
        }
    }

    // ----- argument helpers ------------------------------------------------------------

    /// A pool index: mostly valid, sometimes out of range.
    fn pool_arg(&mut self, input: &mut Input<'_>) -> (usize, bool) {
        match input.byte() % 16 {
            0..=6 => (0, true),
            7..=13 => (1 % self.n, true),
            14 => (self.n, false),
            _ => (usize::MAX, false),
        }
    }

    fn owner_pools(&self) -> Vec<usize> {
        (0..self.n).filter(|&i| self.owner[i]).collect()
    }

    fn live_pages(&self, i: usize) -> Vec<i64> {
        let v2p = self.arena.pool(i).v2p();
        (self.minv[i]..self.nvp[i])
            .filter(|&v| v2p[v as usize] != TOMBSTONE)
            .collect()
    }

    fn is_queued(&self, i: usize, page: i64) -> bool {
        self.queued[i].as_ref().is_some_and(|q| q.contains(&page))
    }

    /// Up to `k` distinct live, not-queued pages of pool `i`, starting at a random place.
    fn some_live_pages(&self, input: &mut Input<'_>, i: usize, k: usize) -> Vec<i64> {
        let live: Vec<i64> = self
            .live_pages(i)
            .into_iter()
            .filter(|&v| !self.is_queued(i, v))
            .collect();
        if live.is_empty() {
            return live;
        }
        let start = input.below(live.len());
        live.iter()
            .cycle()
            .skip(start)
            .take(k.min(live.len()))
            .copied()
            .collect()
    }

    /// A dead (never allocated or freed) real virtual page of pool `i`, if any.
    fn dead_page(&self, input: &mut Input<'_>, i: usize) -> Option<i64> {
        let v2p = self.arena.pool(i).v2p();
        let dead: Vec<i64> = (self.minv[i]..self.nvp[i])
            .filter(|&v| v2p[v as usize] == TOMBSTONE)
            .collect();
        (!dead.is_empty()).then(|| dead[input.below(dead.len())])
    }

    /// Drop requests with a page that is no longer live or is queued for freeing.
    fn prune_reqs(&mut self) {
        let arena = &self.arena;
        let queued = &self.queued;
        self.reqs.retain(|r| {
            let ps = arena.pool(r.pool).geometry().page_size as i64;
            r.tokens.iter().all(|&t| {
                arena.is_token_allocated(r.pool, t)
                    && !queued[r.pool]
                        .as_ref()
                        .is_some_and(|q| q.contains(&(t / ps)))
            })
        });
    }

    // ----- one step ----------------------------------------------------------------------

    fn step(&mut self, input: &mut Input<'_>) {
        const WEIGHTS: [(u8, u32); 16] = [
            (0, 20), // alloc_tokens
            (1, 3),  // alloc (page count)
            (2, 12), // alloc_with_virtual
            (3, 20), // alloc_extend
            (4, 15), // alloc_decode
            (5, 25), // free, valid
            (6, 14), // free, invalid
            (7, 5),  // free_group_begin
            (8, 6),  // free_group_end
            (9, 12), // flush
            (10, 5), // flush_pool
            (11, 6), // set_latest_token
            (12, 6), // set_inflight_writes
            (13, 6), // retire_token
            (14, 1), // clear
            (15, 6), // queries
        ];
        let total: u32 = WEIGHTS.iter().map(|w| w.1).sum();
        let mut r = u32::from(input.u16()) % total;
        let mut op = 0;
        for (o, w) in WEIGHTS {
            if r < w {
                op = o;
                break;
            }
            r -= w;
        }
        self.tally.ops += 1;
        match op {
            0 => self.op_alloc_tokens(input),
            1 => self.op_alloc_pages(input),
            2 => self.op_alloc_with_virtual(input),
            3 => self.op_alloc_extend(input),
            4 => self.op_alloc_decode(input),
            5 => self.op_free_valid(input),
            6 => self.op_free_invalid(input),
            7 => self.op_group_begin(input),
            8 => self.op_group_end(input),
            9 => {
                let urgent = input.bool();
                let before = self.snapshot();
                self.note(|| format!("flush({urgent})"));
                let moves = self.arena.flush(urgent);
                let kind = if urgent {
                    FlushKind::Urgent
                } else {
                    FlushKind::NonUrgent
                };
                self.after_ok(&before, kind);
                assert_eq!(
                    moves,
                    self.arena.plan().num_moves(),
                    "flush count != plan moves"
                );
                if !self.arena.pool(0).is_lazy() {
                    assert_eq!(moves, 0, "an eager flush moved pages");
                }
            }
            10 => {
                let (i, valid) = self.pool_arg(input);
                let urgent = input.bool();
                let before = self.snapshot();
                self.note(|| format!("flush_pool({i}, {urgent})"));
                let res = self.arena.flush_pool(i, urgent);
                let kind = if urgent {
                    FlushKind::Urgent
                } else {
                    FlushKind::NonUrgent
                };
                self.settle(&before, res.map(|_| ()), expect(valid), kind);
            }
            11 => {
                let t = match input.byte() % 6 {
                    0 => None,
                    b => Some(u64::from(b)),
                };
                self.note(|| format!("set_latest_token({t:?})"));
                self.arena.set_latest_token(t);
                assert_eq!(self.arena.latest_token(), t);
                self.check_all();
            }
            12 => self.op_inflight(input),
            13 => {
                let t = u64::from(input.byte() % 6);
                self.note(|| format!("retire_token({t})"));
                self.arena.retire_token(t);
                for w in &mut self.writes {
                    if w.as_ref().is_some_and(|(tok, _)| *tok == t) {
                        *w = None;
                    }
                }
                assert_ne!(
                    self.arena.latest_token(),
                    Some(t),
                    "retired token still latest"
                );
                self.check_all();
            }
            14 => {
                let (i, valid) = self.pool_arg(input);
                let before = self.snapshot();
                self.note(|| format!("clear({i})"));
                let res = self.arena.clear(i);
                // Clearing an owner also clears every pool that binds its ids.
                let cleared: Vec<usize> = (0..self.n)
                    .filter(|&j| j == i || self.owner_of[j] == Some(i))
                    .collect();
                if res.is_ok() {
                    for &j in &cleared {
                        self.queued[j] = None;
                        self.writes[j] = None;
                        self.reqs.retain(|r| r.pool != j);
                    }
                }
                self.settle(&before, res, expect(valid), FlushKind::None);
                if valid {
                    for &j in &cleared {
                        let p = self.arena.pool(j);
                        assert_eq!((p.live_pages(), p.span_pages()), (0, 0), "clear left pages");
                    }
                }
            }
            _ => self.op_queries(input),
        }
    }

    fn op_alloc_tokens(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let ps = if pool_ok { self.ps[i] } else { 1 };
        let max_pages = if pool_ok { self.nvp[i] } else { 4 };
        let (n, n_ok) = match input.byte() % 10 {
            0..=5 => (ps * input.below(9) as i64, true),
            6 => (ps * (max_pages - 1 + input.below(3) as i64), true),
            7 if ps > 1 => (
                ps * input.below(5) as i64 + 1 + input.below(ps as usize - 1) as i64,
                false,
            ),
            7 | 8 => (-1 - input.below(1000) as i64, false),
            _ => {
                let n = input.pick(&[i64::MAX, i64::MIN, i64::MAX / ps * ps, i64::MIN + 1]);
                (n, n >= 0 && n % ps == 0)
            }
        };
        let valid = pool_ok && n_ok && self.owner[i];
        if !valid {
            self.tally.bad_inputs += 1;
        }
        let n_pages = if valid { (n / ps) as usize } else { 0 };
        let pre = valid.then(|| self.capacity(i));
        let before = self.snapshot();
        self.note(|| format!("alloc_tokens({i}, {n}) valid={valid}"));
        let res = self.arena.alloc_tokens(i, n);
        self.after_alloc(&before, res, expect(valid), pre.map(|c| (i, n_pages, c)));
        if valid && self.arena.plan().pages.len() == n_pages && n_pages > 0 {
            self.check_whole_page_tokens(i);
            let tokens = self.arena.plan().tokens.clone();
            self.reqs.push(Req { pool: i, tokens });
        }
    }

    fn op_alloc_pages(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let big = if pool_ok { self.nvp[i] as usize } else { 3 };
        let n = input.pick(&[
            usize::MAX,
            i64::MAX as usize + 1,
            big,
            big + 1,
            1usize << 40,
        ]);
        let valid = pool_ok && self.owner[i];
        self.tally.bad_inputs += 1;
        let pre = valid.then(|| self.capacity(i));
        let before = self.snapshot();
        self.note(|| format!("alloc({i}, {n})"));
        let res = self.arena.alloc(i, n);
        self.after_alloc(&before, res, expect(valid), pre.map(|c| (i, n, c)));
        if valid && self.arena.plan().pages.len() == n && n > 0 {
            self.check_whole_page_tokens(i);
            let tokens = self.arena.plan().tokens.clone();
            self.reqs.push(Req { pool: i, tokens });
        }
    }

    fn op_alloc_with_virtual(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let Some(owner) = pool_ok.then(|| self.owner_of[i]).flatten() else {
            // An owner pool or a bad index: always rejected.
            self.tally.bad_inputs += 1;
            let pages = vec![1i64, 2];
            let before = self.snapshot();
            self.note(|| format!("alloc_with_virtual({i}, {pages:?}) bad pool/owner"));
            let res = self.arena.alloc_with_virtual(i, &pages);
            self.after_alloc(&before, res, Expect::Err, None);
            return;
        };
        // Owner-live pages that this pool has not bound yet.
        let bound = self.arena.pool(i).v2p().to_vec();
        let mut cands: Vec<i64> = self
            .live_pages(owner)
            .into_iter()
            .filter(|&v| bound[v as usize] == TOMBSTONE)
            .collect();
        let k = input.below(5);
        if !cands.is_empty() {
            let s = input.below(cands.len());
            cands.rotate_left(s);
        }
        cands.truncate(k);
        let mut valid = true;
        match input.byte() % 8 {
            0 => {
                // a page this pool already bound
                if let Some(v) =
                    (self.minv[i]..self.nvp[i]).find(|&v| bound[v as usize] != TOMBSTONE)
                {
                    cands.push(v);
                    valid = false;
                }
            }
            1 if !cands.is_empty() => {
                cands.push(cands[0]);
                valid = false;
            }
            2 => {
                let bad = input.pick(&[0, -1, self.nvp[i], self.nvp[i] + 7, i64::MAX, i64::MIN]);
                let at = input.below(cands.len() + 1);
                cands.insert(at, bad);
                valid = false;
            }
            _ => {}
        }
        if !valid {
            self.tally.bad_inputs += 1;
        }
        let pre = valid.then(|| self.capacity(i));
        let before = self.snapshot();
        let n = cands.len();
        self.note(|| format!("alloc_with_virtual({i}, {cands:?}) valid={valid}"));
        let res = self.arena.alloc_with_virtual(i, &cands);
        self.after_alloc(&before, res, expect(valid), pre.map(|c| (i, n, c)));
        if valid && self.arena.plan().pages == cands && n > 0 {
            self.check_whole_page_tokens(i);
        }
    }

    fn op_alloc_extend(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let pool_ok = pool_ok && self.owner[i];
        self.prune_reqs();
        let ps = if pool_ok { self.ps[i] } else { 1 };
        let batch = 1 + input.below(3);
        let mut pre = Vec::new();
        let mut seq = Vec::new();
        let mut last = Vec::new();
        let mut who: Vec<Option<usize>> = Vec::new();
        let mut used = HashSet::new();
        for _ in 0..batch {
            let existing = if pool_ok && input.bool() {
                let mine: Vec<usize> = (0..self.reqs.len())
                    .filter(|&r| self.reqs[r].pool == i && !used.contains(&r))
                    .collect();
                (!mine.is_empty()).then(|| mine[input.below(mine.len())])
            } else {
                None
            };
            let grow = input.below(2 * ps as usize + 2) as i64;
            match existing {
                Some(r) => {
                    used.insert(r);
                    let len = self.reqs[r].tokens.len() as i64;
                    pre.push(len);
                    seq.push(len + grow);
                    last.push(*self.reqs[r].tokens.last().unwrap_or(&-1));
                }
                None => {
                    pre.push(0);
                    seq.push(grow);
                    last.push(-1);
                }
            }
            who.push(existing);
        }
        let mut valid = pool_ok;
        let mut either = false;
        let mut last_bad = false;
        match input.byte() % 12 {
            0 => {
                seq.push(1);
                valid = false;
            }
            1 => {
                let r = input.below(batch);
                seq[r] = pre[r] - 1 - input.below(3) as i64;
                valid = false;
            }
            2 => {
                let r = input.below(batch);
                pre[r] = -1 - input.below(3) as i64;
                valid = false;
            }
            3 => {
                // Bad last_loc where it matters: a dead token, the sink page, or a live
                // token at the wrong page offset.
                if let Some(r) = (0..batch).find(|&r| pre[r] % ps != 0 && pre[r] < seq[r]) {
                    let want_off = (pre[r] - 1) % ps;
                    let bad = match input.byte() % 3 {
                        0 => self.dead_page(input, i).map(|v| v * ps + want_off),
                        1 => Some(want_off),
                        _ => self
                            .some_live_pages(input, i, 1)
                            .first()
                            .map(|&v| v * ps + (want_off + 1) % ps),
                    };
                    if let Some(b) = bad {
                        last[r] = b;
                        valid = false;
                        last_bad = true;
                    }
                }
            }
            4 => {
                let r = input.below(batch);
                pre[r] = i64::MAX - input.below(40) as i64;
                seq[r] = i64::MAX;
                last[r] = -1;
                either = true;
            }
            5 => {
                let r = input.below(batch);
                seq[r] = i64::MAX - input.below(3) as i64;
                either = true;
            }
            6 => {
                last.pop();
                valid = false;
                last_bad = true;
            }
            _ => {}
        }
        let host_last = input.byte() % 3 != 0;
        let expect_kind = if either {
            Expect::Either
        } else if !host_last && valid_without_last(&pre, &seq, pool_ok) {
            Expect::Ok
        } else {
            expect(valid)
        };
        if expect_kind != Expect::Ok {
            self.tally.bad_inputs += 1;
        }
        let new_pages: usize = pre
            .iter()
            .zip(&seq)
            .map(|(&p, &s)| (ceil_div(s, ps) - ceil_div(p, ps)).max(0) as usize)
            .fold(0usize, usize::saturating_add);
        let pre_cap = (expect_kind == Expect::Ok).then(|| self.capacity(i));
        let before = self.snapshot();
        self.note(|| format!("alloc_extend({i}, pre={pre:?}, seq={seq:?}, last={last:?} host={host_last}) expect={expect_kind:?}"));
        let res = self
            .arena
            .alloc_extend(i, &pre, &seq, host_last.then_some(&last[..]));
        let got = res == Ok(true);
        self.after_alloc(
            &before,
            res,
            expect_kind,
            pre_cap.map(|c| (i, new_pages, c)),
        );
        if expect_kind == Expect::Ok && got && !last_bad {
            let tokens = self.resolve_tokens(i, &last);
            self.check_request_tokens(i, &pre, &seq, &last, &tokens, &before);
            self.extend_reqs(i, &who, &pre, &seq, &tokens);
        }
    }

    fn op_alloc_decode(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let pool_ok = pool_ok && self.owner[i];
        self.prune_reqs();
        let ps = if pool_ok { self.ps[i] } else { 1 };
        let batch = 1 + input.below(4);
        let mut seq = Vec::new();
        let mut last = Vec::new();
        let mut who = Vec::new();
        let mut used = HashSet::new();
        for _ in 0..batch {
            let mine: Vec<usize> = (0..self.reqs.len())
                .filter(|&r| self.reqs[r].pool == i && !used.contains(&r) && pool_ok)
                .collect();
            let existing =
                (!mine.is_empty() && input.byte() % 4 != 0).then(|| mine[input.below(mine.len())]);
            match existing {
                Some(r) => {
                    used.insert(r);
                    seq.push(self.reqs[r].tokens.len() as i64 + 1);
                    last.push(*self.reqs[r].tokens.last().unwrap_or(&-1));
                }
                None => {
                    seq.push(1);
                    last.push(-1);
                }
            }
            who.push(existing);
        }
        let mut valid = pool_ok;
        let mut either = false;
        let mut last_bad = false;
        match input.byte() % 10 {
            0 => {
                let r = input.below(batch);
                seq[r] = input.pick(&[0, -1, i64::MIN]);
                valid = false;
            }
            1 => {
                last.push(3);
                valid = false;
            }
            2 => {
                if let Some(r) = (0..batch).find(|&r| (seq[r] - 1) % ps != 0) {
                    let want_off = (seq[r] - 2) % ps;
                    let bad = match input.byte() % 3 {
                        0 => self.dead_page(input, i).map(|v| v * ps + want_off),
                        1 => Some(want_off),
                        _ => self
                            .some_live_pages(input, i, 1)
                            .first()
                            .map(|&v| v * ps + (want_off + 1) % ps),
                    };
                    if let Some(b) = bad {
                        last[r] = b;
                        valid = false;
                        last_bad = true;
                    }
                }
            }
            3 => {
                let r = input.below(batch);
                seq[r] = i64::MAX - input.below(3) as i64;
                last[r] = -1;
                either = true;
            }
            _ => {}
        }
        let host_last = input.byte() % 3 != 0;
        let expect_kind = if either {
            Expect::Either
        } else if !host_last && pool_ok && seq.iter().all(|&s| s >= 1) {
            Expect::Ok
        } else {
            expect(valid)
        };
        if expect_kind != Expect::Ok {
            self.tally.bad_inputs += 1;
        }
        let new_pages = seq.iter().filter(|&&s| s >= 1 && (s - 1) % ps == 0).count();
        let pre_cap = (expect_kind == Expect::Ok).then(|| self.capacity(i));
        let before = self.snapshot();
        self.note(|| format!("alloc_decode({i}, seq={seq:?}, last={last:?} host={host_last}) expect={expect_kind:?}"));
        let res = self
            .arena
            .alloc_decode(i, &seq, host_last.then_some(&last[..]));
        let got = res == Ok(true);
        self.after_alloc(
            &before,
            res,
            expect_kind,
            pre_cap.map(|c| (i, new_pages, c)),
        );
        if expect_kind == Expect::Ok && got && !last_bad {
            let tokens = self.resolve_tokens(i, &last);
            let pre: Vec<i64> = seq.iter().map(|s| s - 1).collect();
            self.check_request_tokens(i, &pre, &seq, &last, &tokens, &before);
            self.extend_reqs(i, &who, &pre, &seq, &tokens);
        }
    }

    /// The plan's token ids on pool `i`, continuations finished from `last` as a device
    /// would ([`Arena::finish_tokens`]; a valid `last` must never be rejected).
    fn resolve_tokens(&self, i: usize, last: &[i64]) -> Vec<i64> {
        let plan = self.arena.plan();
        if !plan.token_req.is_empty() {
            assert_eq!(plan.token_req.len(), plan.tokens.len(), "token_req length");
        }
        let done = self.arena.finish_tokens(i, last).expect("owner pool");
        done.into_iter()
            .map(|t| t.expect("a valid last_loc rejected"))
            .collect()
    }

    /// Check the ids of a token-level allocation against the requests' positions.
    fn check_request_tokens(
        &self,
        i: usize,
        pre: &[i64],
        seq: &[i64],
        last: &[i64],
        tokens: &[i64],
        before: &Snapshot,
    ) {
        let ps = self.ps[i];
        let want: i64 = pre.iter().zip(seq).map(|(p, s)| s - p).sum();
        assert_eq!(tokens.len() as i64, want, "token count");
        let mut seen = HashSet::new();
        let mut k = 0;
        for r in 0..pre.len() {
            for pos in pre[r]..seq[r] {
                let t = tokens[k];
                k += 1;
                assert!(seen.insert(t), "token {t} handed out twice in one call");
                assert!(self.arena.is_token_allocated(i, t), "token {t} is not live");
                assert!(
                    t / ps >= self.minv[i] && t / ps < self.nvp[i],
                    "token {t} lies in the padding sink or beyond (pool {i}, ps {ps})"
                );
                assert_eq!(
                    t % ps,
                    pos % ps,
                    "token {t} at the wrong page offset for position {pos}"
                );
                let tail = pre[r] % ps != 0 && pos < ceil_div(pre[r], ps) * ps;
                if tail {
                    assert_eq!(
                        t / ps,
                        last[r] / ps,
                        "tail token {t} left the last page of request {r}"
                    );
                } else {
                    let was = before.pools[i].v2p[(t / ps) as usize];
                    assert_eq!(
                        was, TOMBSTONE,
                        "token {t} is on a page that was already live"
                    );
                }
            }
        }
    }

    fn extend_reqs(
        &mut self,
        i: usize,
        who: &[Option<usize>],
        pre: &[i64],
        seq: &[i64],
        tokens: &[i64],
    ) {
        let mut k = 0;
        for r in 0..pre.len() {
            let n = (seq[r] - pre[r]) as usize;
            let new = tokens[k..k + n].to_vec();
            k += n;
            match who[r] {
                Some(idx) => self.reqs[idx].tokens.extend(new),
                None if n > 0 => self.reqs.push(Req {
                    pool: i,
                    tokens: new,
                }),
                None => {}
            }
        }
    }

    /// Tokens of a whole-page allocation: ascending inside each new page.
    fn check_whole_page_tokens(&self, i: usize) {
        let plan = self.arena.plan();
        let ps = self.ps[i];
        assert_eq!(
            plan.tokens.len() as i64,
            plan.pages.len() as i64 * ps,
            "token count"
        );
        for (k, &t) in plan.tokens.iter().enumerate() {
            assert_eq!(
                t,
                plan.pages[k / ps as usize] * ps + k as i64 % ps,
                "token order"
            );
        }
    }

    fn op_free_valid(&mut self, input: &mut Input<'_>) {
        self.prune_reqs();
        let mut i = input.below(self.n);
        let tokens: Vec<i64> = match input.byte() % 3 {
            0 if !self.reqs.is_empty() => {
                let r = input.below(self.reqs.len());
                let req = self.reqs.swap_remove(r);
                i = req.pool;
                req.tokens
            }
            _ => {
                let k = 1 + input.below(6);
                let pages = self.some_live_pages(input, i, k);
                let ps = self.ps[i];
                let mut out: Vec<i64> = pages
                    .iter()
                    .map(|&v| v * ps + input.below(ps as usize) as i64)
                    .collect();
                if ps > 1 && !pages.is_empty() && input.bool() {
                    // two tokens of one page: legal, the page goes once
                    out.push(pages[0] * ps + (ps - 1));
                }
                out
            }
        };
        let pages: HashSet<i64> = tokens.iter().map(|t| t / self.ps[i]).collect();
        let before = self.snapshot();
        self.note(|| format!("free({i}, {tokens:?})"));
        let res = self.arena.free(i, &tokens);
        if res.is_ok() {
            if let Some(q) = self.queued[i].as_mut() {
                q.extend(pages.iter().copied());
            }
        }
        self.settle(&before, res, Expect::Ok, FlushKind::None);
        let in_group = self.queued[i].is_some();
        for &v in &pages {
            assert_eq!(
                self.arena.pool(i).v2p()[v as usize] == TOMBSTONE,
                !in_group,
                "page {v} of pool {i} after free (in group: {in_group})"
            );
        }
    }

    fn op_free_invalid(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let (ps, nvp) = if pool_ok {
            (self.ps[i], self.nvp[i])
        } else {
            (1, 8)
        };
        let mut tokens: Vec<i64> = if pool_ok {
            let k = input.below(4);
            let pages = self.some_live_pages(input, i, k);
            pages.iter().map(|&v| v * ps).collect()
        } else {
            vec![1]
        };
        let mut valid = pool_ok;
        let bad: Option<i64> = match input.byte() % 9 {
            0 => Some(-1 - input.below(100) as i64),
            1 => Some(input.below(ps as usize) as i64), // the sink page
            2 => Some(nvp * ps + input.below(100) as i64),
            3 => Some(input.pick(&[i64::MAX, i64::MIN, i64::MIN + 1, i64::MAX - 1])),
            4 if pool_ok => self
                .dead_page(input, i)
                .map(|v| v * ps + input.below(ps as usize) as i64),
            5 if ps == 1 && !tokens.is_empty() => Some(tokens[0]), // repeated at page size 1
            6 if pool_ok => self.queued[i]
                .as_ref()
                .and_then(|q| q.iter().next().copied())
                .map(|v| v * ps),
            7 => {
                tokens.clear(); // empty: a legal no-op
                None
            }
            _ => None,
        };
        if let Some(b) = bad {
            let at = input.below(tokens.len() + 1);
            tokens.insert(at, b);
            valid = false;
        }
        if !valid {
            self.tally.bad_inputs += 1;
        }
        let pages: HashSet<i64> = tokens.iter().map(|t| t / ps).collect();
        let before = self.snapshot();
        self.note(|| format!("free({i}, {tokens:?})"));
        let res = self.arena.free(i, &tokens);
        if res.is_ok() {
            if let Some(q) = self.queued[i].as_mut() {
                q.extend(pages.iter().copied());
            }
        }
        self.settle(&before, res, expect(valid), FlushKind::None);
    }

    fn op_group_begin(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let valid = pool_ok && self.queued[i].is_none();
        if !valid {
            self.tally.bad_inputs += 1;
        }
        let before = self.snapshot();
        self.note(|| format!("free_group_begin({i})"));
        let res = self.arena.free_group_begin(i);
        if res.is_ok() {
            self.queued[i] = Some(HashSet::new());
        }
        self.settle(&before, res, expect(valid), FlushKind::None);
        if pool_ok {
            assert!(self.arena.in_free_group(i));
        }
    }

    fn op_group_end(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let valid = pool_ok && self.queued[i].is_some();
        if !valid {
            self.tally.bad_inputs += 1;
        }
        let before = self.snapshot();
        self.note(|| format!("free_group_end({i})"));
        let res = self.arena.free_group_end(i);
        let freed = if res.is_ok() {
            self.queued[i].take()
        } else {
            None
        };
        self.settle(&before, res, expect(valid), FlushKind::None);
        if let Some(q) = freed {
            for v in q {
                assert_eq!(
                    self.arena.pool(i).v2p()[v as usize],
                    TOMBSTONE,
                    "queued page {v} survived"
                );
            }
        }
        if pool_ok {
            assert!(!self.arena.in_free_group(i));
        }
    }

    fn op_inflight(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let token = u64::from(input.byte() % 6);
        self.prune_reqs();
        let mut tokens: Vec<i64> = Vec::new();
        if pool_ok {
            let mine: Vec<&Req> = self.reqs.iter().filter(|r| r.pool == i).collect();
            if !mine.is_empty() {
                let r = mine[input.below(mine.len())];
                let k = r.tokens.len();
                tokens.extend(&r.tokens[k.saturating_sub(1 + input.below(4))..]);
            }
            if input.byte() % 4 == 0 {
                tokens.extend([-1, 0, i64::MAX, i64::MIN, self.nvp[i] * self.ps[i]]);
            }
        } else {
            self.tally.bad_inputs += 1;
        }
        let before = self.snapshot();
        self.note(|| format!("set_inflight_writes({i}, {token}, {tokens:?})"));
        let res = self.arena.set_inflight_writes(i, token, &tokens);
        if res.is_ok() {
            let ps = self.ps[i];
            let nvp = self.nvp[i];
            let pages = tokens
                .iter()
                .filter(|&&t| t >= 0 && t / ps < nvp)
                .map(|&t| t / ps)
                .collect();
            self.writes[i] = Some((token, pages));
            self.check_all();
        } else {
            self.settle(&before, res, Expect::Err, FlushKind::None);
        }
    }

    fn op_queries(&mut self, input: &mut Input<'_>) {
        let (i, pool_ok) = self.pool_arg(input);
        let t = match input.byte() % 4 {
            0 => input.pick(&[i64::MIN, -1, 0, i64::MAX]),
            _ => input.u16() as i64,
        };
        let live = self.arena.is_token_allocated(i, t);
        if !pool_ok || t < 0 {
            assert!(!live, "is_token_allocated({i}, {t}) is true");
        }
        assert_eq!(self.arena.try_pool(i).is_ok(), pool_ok);
        assert_eq!(
            self.arena.in_free_group(i),
            pool_ok && self.queued[i].is_some()
        );
        if pool_ok {
            let a = self.arena.available_pages(i);
            let s = self.arena.schedulable_pages(i);
            assert!(0 <= a && a <= s, "available {a} schedulable {s}");
            let _ = self.arena.gap_bytes(i);
        } else {
            self.tally.bad_inputs += 1;
            let none = (
                self.arena.available_pages(i),
                self.arena.schedulable_pages(i),
            );
            assert_eq!(none, (0, 0), "capacity of a pool that does not exist");
            assert_eq!(self.arena.gap_bytes(i), 0);
        }
        self.check_all();
    }

    // ----- checks after a call ---------------------------------------------------------

    /// (available pages, schedulable pages, free ids) of pool `i` before an allocation.
    fn capacity(&self, i: usize) -> (i64, i64, usize) {
        let free = if self.owner[i] {
            self.arena.pool(i).free_ids().count()
        } else {
            usize::MAX
        };
        (
            self.arena.available_pages(i),
            self.arena.schedulable_pages(i),
            free,
        )
    }

    fn after_alloc(
        &mut self,
        before: &Snapshot,
        res: Result<bool, UkvError>,
        want: Expect,
        cap: Option<(usize, usize, (i64, i64, usize))>,
    ) {
        let outcome = res.as_ref().ok().copied();
        match res {
            Ok(false) => {
                self.tally.refusals += 1;
                let mut now = self.snapshot();
                now.plan = before.plan.clone();
                assert!(
                    now.pools == before.pools && now.latest == before.latest,
                    "an allocation that did not fit changed the arena"
                );
                assert!(
                    self.arena.plan().num_moves() == 0,
                    "a refused allocation planned moves"
                );
                assert!(want != Expect::Err, "accepted invalid allocation arguments");
                self.check_all();
            }
            other => self.settle(before, other.map(|_| ()), want, FlushKind::Urgent),
        }
        if let (Some((i, n, (avail, sched, free))), Some(ok)) = (cap, outcome) {
            let n64 = i64::try_from(n).unwrap_or(i64::MAX);
            if n64 <= sched && n <= free {
                assert!(ok, "alloc of {n} pages on pool {i} failed with schedulable {sched}, free ids {free}");
            }
            let eager = !self.arena.pool(i).is_lazy();
            if eager && ok {
                assert!(
                    n64 <= avail || n == 0,
                    "eager alloc of {n} pages beyond available {avail}"
                );
            }
        }
    }

    /// Check a call's outcome against the expectation, then apply its plan (on success) or
    /// check that nothing changed (on error), then check everything.
    fn settle(
        &mut self,
        before: &Snapshot,
        res: Result<(), UkvError>,
        want: Expect,
        kind: FlushKind,
    ) {
        match res {
            Ok(()) => {
                assert!(
                    want != Expect::Err,
                    "the core accepted arguments the driver built to be invalid"
                );
                self.after_ok(before, kind);
            }
            Err(e) => {
                self.tally.errors += 1;
                assert!(
                    want != Expect::Ok,
                    "the core rejected arguments the driver built to be valid: {e}"
                );
                assert!(
                    !matches!(e, UkvError::Invariant { .. }),
                    "an operation reported {e}"
                );
                let now = self.snapshot();
                assert!(
                    now == *before,
                    "a call that returned an error changed the arena: {e}"
                );
                self.check_all();
            }
        }
    }

    /// Execute the last plan on the shadow state and check it.
    fn after_ok(&mut self, before: &Snapshot, kind: FlushKind) {
        let plan = self.arena.plan().clone();
        assert_eq!(plan.pools.len(), self.n);
        for i in 0..self.n {
            let pp = &plan.pools[i];
            assert_eq!(pp.src.len(), pp.dst.len(), "unpaired moves");
            let src: HashSet<i64> = pp.src.iter().copied().collect();
            let dst: HashSet<i64> = pp.dst.iter().copied().collect();
            assert_eq!(src.len(), pp.src.len(), "a page moved twice");
            assert_eq!(dst.len(), pp.dst.len(), "two pages moved to one place");
            assert!(src.is_disjoint(&dst), "src and dst overlap in one plan");
            for &s in &pp.src {
                let v = before.pools[i].p2v[s as usize];
                assert!(v != TOMBSTONE, "moved a page ({s}) that held nothing");
                if kind == FlushKind::NonUrgent {
                    if let Some((_, ws)) = &self.writes[i] {
                        assert!(
                            !ws.contains(&v),
                            "non-urgent flush moved page {s} (virtual {v}) the forward writes"
                        );
                    }
                }
            }
            // Execute the moves all at once on the shadow contents.
            let vals: Vec<u64> = pp
                .src
                .iter()
                .map(|&s| self.content[i][s as usize])
                .collect();
            for (&d, v) in pp.dst.iter().zip(vals) {
                self.content[i][d as usize] = v;
            }
            self.moved[i] += pp.src.len() as u64;
            self.tally.moves += pp.src.len() as u64;
            if kind == FlushKind::Urgent && !pp.src.is_empty() {
                self.writes[i] = None; // an urgent pass waited for the forward
            }
            // Mirror tables updated from the changed rows only.
            assert_eq!(pp.v2p_rows.len(), pp.v2p_vals.len());
            assert_eq!(pp.p2v_rows.len(), pp.p2v_vals.len());
            if pp.reset {
                self.mirror_v2p[i] = self.arena.pool(i).v2p().to_vec();
                self.mirror_p2v[i] = self.arena.pool(i).p2v().to_vec();
            } else {
                for (&r, &v) in pp.v2p_rows.iter().zip(&pp.v2p_vals) {
                    self.mirror_v2p[i][r as usize] = v;
                }
                for (&r, &v) in pp.p2v_rows.iter().zip(&pp.p2v_vals) {
                    self.mirror_p2v[i][r as usize] = v;
                }
            }
            assert!(
                self.mirror_v2p[i] == self.arena.pool(i).v2p(),
                "v2p mirror diverged (pool {i})"
            );
            assert!(
                self.mirror_p2v[i] == self.arena.pool(i).p2v(),
                "p2v mirror diverged (pool {i})"
            );
            // Newly bound pages get fresh markers (the caller writes after the plan ran).
            let v2p = self.arena.pool(i).v2p();
            for v in self.minv[i]..self.nvp[i] {
                let (was, now) = (before.pools[i].v2p[v as usize], v2p[v as usize]);
                if was == TOMBSTONE && now != TOMBSTONE {
                    self.next_mark += 1;
                    self.marker[i][v as usize] = self.next_mark;
                    self.content[i][now as usize] = self.next_mark;
                } else if now == TOMBSTONE {
                    self.marker[i][v as usize] = 0;
                }
            }
        }
        self.check_all();
    }

    /// Invariants, data markers, counters and byte disjointness.
    fn check_all(&self) {
        if let Err(e) = self.arena.check_invariants() {
            panic!("{e}");
        }
        for i in 0..self.n {
            let p = self.arena.pool(i);
            let v2p = p.v2p();
            for v in self.minv[i]..self.nvp[i] {
                let ph = v2p[v as usize];
                if ph != TOMBSTONE {
                    assert_eq!(
                        self.content[i][ph as usize], self.marker[i][v as usize],
                        "pool {i}: virtual page {v} at physical {ph} lost its data"
                    );
                }
            }
            let s = p.stats();
            assert_eq!(
                s.pages_moved, self.moved[i],
                "pool {i}: pages_moved != moves in plans"
            );
            assert_eq!(
                s.bytes_moved,
                s.pages_moved.saturating_mul(self.page_bytes[i]),
                "pool {i}: bytes_moved"
            );
        }
        self.check_bytes_disjoint();
    }

    /// The live pages of the two pools never share a byte and lie above the floor.
    fn check_bytes_disjoint(&self) {
        let floor = self.arena.reserved_floor();
        let mut ranges: Vec<(u64, u64, usize)> = Vec::new();
        for i in 0..self.n {
            let pb = self.page_bytes[i];
            let v2p = self.arena.pool(i).v2p();
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            for v in self.minv[i]..self.nvp[i] {
                let ph = v2p[v as usize];
                if ph != TOMBSTONE {
                    let start = ph as u64 * pb;
                    assert!(start >= floor, "pool {i}: live page {ph} below the floor");
                    assert!(
                        start + pb <= self.arena.total_bytes(),
                        "pool {i}: page {ph} past the end"
                    );
                    lo = lo.min(start);
                    hi = hi.max(start + pb);
                }
            }
            if hi > 0 {
                ranges.push((lo, hi, i));
            }
        }
        if let [a, b] = ranges[..] {
            let (x, y) = if a.0 <= b.0 { (a, b) } else { (b, a) };
            assert!(
                x.1 <= y.0,
                "live bytes of pools {} and {} overlap: {x:?} {y:?}",
                x.2,
                y.2
            );
        }
    }
}

fn expect(valid: bool) -> Expect {
    if valid {
        Expect::Ok
    } else {
        Expect::Err
    }
}

/// Without host `last_loc`, only lengths are checked.
fn valid_without_last(pre: &[i64], seq: &[i64], pool_ok: bool) -> bool {
    pool_ok && pre.len() == seq.len() && pre.iter().zip(seq).all(|(&p, &s)| 0 <= p && p <= s)
}

fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b != 0)
}

// ----- a seeded random stream for replay tests ------------------------------------------

/// SplitMix64: a tiny deterministic generator for replaying random inputs without a
/// fuzzer.
pub struct SplitMix(pub u64);

impl SplitMix {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}
