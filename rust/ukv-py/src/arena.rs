//! `ukv._core.Arena`: the core arena behind a Python class. Methods convert arguments,
//! call the core once, and convert the result; the logic lives in `ukv-core`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ukv_core::{Arena, ArenaConfig, Direction, PoolSpec};

use crate::convert::{borrowed_view, ids, optional_ids, optional_slice, to_numpy};
use crate::errors::{argument, raise, to_py};

/// One sub-pool as Python declares it: (name, entry_bytes, page_size, "up"|"down", id_owner).
type PoolTuple = (String, u64, u64, String, Option<usize>);

/// A NumPy int64 array owned by Python.
type Arr<'py> = Bound<'py, PyArray1<i64>>;

/// `pack_plan`'s layout: (len, tokens_at, num_tokens, req_at, num_req, per-pool sections).
type PackedTuple = (
    usize,
    usize,
    usize,
    usize,
    usize,
    Vec<(usize, usize, usize, usize, usize, usize, usize)>,
);

/// Token ids of a token-level allocation, and (without host `last_loc`) the request column.
type TokenResult<'py> = Option<(Bound<'py, PyArray1<i64>>, Option<Bound<'py, PyArray1<i64>>>)>;

/// The two-ended arena (see `ukv_core::Arena`).
#[pyclass(name = "Arena", module = "ukv._core")]
pub struct PyArena {
    inner: Arena,
    /// Set once, by the first panic caught; the arena then refuses every call.
    poisoned: OnceLock<String>,
}

impl PyArena {
    /// Run `f` on the arena; a panic poisons the arena instead of reaching Python.
    fn call<T>(&mut self, f: impl FnOnce(&mut Arena) -> ukv_core::Result<T>) -> PyResult<T> {
        self.usable()?;
        let caught = catch_unwind(AssertUnwindSafe(|| f(&mut self.inner)));
        self.settle(caught)
    }

    /// [`Self::call`] over two id lists, `from_pages` and `to_pages`, converted first.
    fn call_pairs<T>(
        &mut self,
        from_pages: &Bound<'_, PyAny>,
        to_pages: &Bound<'_, PyAny>,
        f: impl FnOnce(&mut Arena, &[i64], &[i64]) -> ukv_core::Result<T>,
    ) -> PyResult<T> {
        let from = ids(from_pages, "from_pages")?;
        let to = ids(to_pages, "to_pages")?;
        let (from, to) = (from.as_slice()?, to.as_slice()?);
        self.call(|a| f(a, from, to))
    }

    fn usable(&self) -> PyResult<()> {
        match self.poisoned.get() {
            Some(why) => Err(raise(
                "PoolPoisonedError",
                format!("the arena is unusable: {why}"),
            )),
            None => Ok(()),
        }
    }

    /// Map a caught core result; a panic poisons the arena.
    fn settle<T>(&self, caught: std::thread::Result<ukv_core::Result<T>>) -> PyResult<T> {
        match caught {
            Ok(r) => r.map_err(to_py),
            Err(payload) => {
                let why = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "internal panic".into());
                let _ = self.poisoned.set(format!("internal error: {why}"));
                Err(raise(
                    "PoolPoisonedError",
                    format!("internal error, arena poisoned: {why}"),
                ))
            }
        }
    }

    fn check_pool(&self, pool: usize) -> PyResult<()> {
        self.inner.try_pool(pool).map(|_| ()).map_err(to_py)
    }

    fn tokens_out<'py>(
        &self,
        py: Python<'py>,
    ) -> (Bound<'py, PyArray1<i64>>, Option<Bound<'py, PyArray1<i64>>>) {
        let plan = self.inner.plan();
        let req = (!plan.token_req.is_empty()).then(|| to_numpy(py, &plan.token_req));
        (to_numpy(py, &plan.tokens), req)
    }
}

fn direction(s: &str) -> PyResult<Direction> {
    match s {
        "up" => Ok(Direction::Up),
        "down" => Ok(Direction::Down),
        "middle" => Ok(Direction::Middle),
        other => Err(raise(
            "PoolConfigError",
            format!("invalid grow = {other:?}: must be \"up\", \"down\" or \"middle\""),
        )),
    }
}

fn grow_name(d: Direction) -> &'static str {
    match d {
        Direction::Up => "up",
        Direction::Middle => "middle",
        Direction::Down => "down",
    }
}

#[pymethods]
impl PyArena {
    /// Arena(total_bytes, pools, lazy=False, max_moves_per_flush=4096)
    #[new]
    #[pyo3(signature = (total_bytes, pools, lazy=false, max_moves_per_flush=ukv_core::DEFAULT_MAX_MOVES_PER_FLUSH))]
    fn new(
        total_bytes: u64,
        pools: Vec<PoolTuple>,
        lazy: bool,
        max_moves_per_flush: usize,
    ) -> PyResult<Self> {
        let specs = pools
            .into_iter()
            .map(|(name, entry_bytes, page_size, grow, id_owner)| {
                Ok(PoolSpec {
                    name,
                    entry_bytes,
                    page_size,
                    direction: direction(&grow)?,
                    id_owner,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let cfg = ArenaConfig {
            total_bytes,
            pools: specs,
            lazy,
            max_moves_per_flush,
        };
        let inner = Arena::new(cfg).map_err(to_py)?;
        Ok(PyArena {
            inner,
            poisoned: OnceLock::new(),
        })
    }

    /// Allocate `num_tokens` tokens; the virtual token ids, or None when they do not fit.
    fn alloc<'py>(
        &mut self,
        py: Python<'py>,
        pool: usize,
        num_tokens: i64,
    ) -> PyResult<Option<Bound<'py, PyArray1<i64>>>> {
        let ok = self.call(|a| a.alloc_tokens(pool, num_tokens))?;
        Ok(ok.then(|| to_numpy(py, &self.inner.plan().tokens)))
    }

    /// Bind owner-minted virtual pages on a non-owner pool; False when they do not fit.
    fn alloc_with_virtual(&mut self, pool: usize, pages: &Bound<'_, PyAny>) -> PyResult<bool> {
        let pages = ids(pages, "virtual_pages")?;
        let pages = pages.as_slice()?;
        self.call(|a| a.alloc_with_virtual(pool, pages))
    }

    /// Bind caller-chosen free virtual pages of an owner pool; False when they do not fit.
    fn alloc_at(&mut self, pool: usize, pages: &Bound<'_, PyAny>) -> PyResult<bool> {
        let pages = ids(pages, "virtual_pages")?;
        let pages = pages.as_slice()?;
        self.call(|a| a.alloc_at(pool, pages))
    }

    /// Hand each live page of `from_pages[k]` over to the free id `to_pages[k]`.
    fn rebind(
        &mut self,
        pool: usize,
        from_pages: &Bound<'_, PyAny>,
        to_pages: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.call_pairs(from_pages, to_pages, |a, from, to| a.rebind(pool, from, to))
    }

    /// On a dependent pool, hand the page of `from_pages[k]` over to `to_pages[k]`.
    fn transfer(
        &mut self,
        pool: usize,
        from_pages: &Bound<'_, PyAny>,
        to_pages: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.call_pairs(from_pages, to_pages, |a, from, to| {
            a.transfer(pool, from, to)
        })
    }

    /// Token-level extend; (tokens, token_req or None) or None when it does not fit.
    #[pyo3(signature = (pool, prefix_lens, seq_lens, last_loc=None))]
    fn alloc_extend<'py>(
        &mut self,
        py: Python<'py>,
        pool: usize,
        prefix_lens: &Bound<'py, PyAny>,
        seq_lens: &Bound<'py, PyAny>,
        last_loc: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<TokenResult<'py>> {
        let pre = ids(prefix_lens, "prefix_lens_cpu")?;
        let seq = ids(seq_lens, "seq_lens_cpu")?;
        let last = optional_ids(last_loc, "last_loc")?;
        let (pre, seq, last) = (pre.as_slice()?, seq.as_slice()?, optional_slice(&last)?);
        let ok = self.call(|a| a.alloc_extend(pool, pre, seq, last))?;
        Ok(ok.then(|| self.tokens_out(py)))
    }

    /// Token-level decode; (tokens, token_req or None) or None when it does not fit.
    #[pyo3(signature = (pool, seq_lens, last_loc=None))]
    fn alloc_decode<'py>(
        &mut self,
        py: Python<'py>,
        pool: usize,
        seq_lens: &Bound<'py, PyAny>,
        last_loc: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<TokenResult<'py>> {
        let seq = ids(seq_lens, "seq_lens_cpu")?;
        let last = optional_ids(last_loc, "last_loc")?;
        let (seq, last) = (seq.as_slice()?, optional_slice(&last)?);
        let ok = self.call(|a| a.alloc_decode(pool, seq, last))?;
        Ok(ok.then(|| self.tokens_out(py)))
    }

    /// Free the pages of these virtual tokens.
    fn free(&mut self, pool: usize, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        let tokens = ids(tokens, "ids")?;
        let tokens = tokens.as_slice()?;
        self.call(|a| a.free(pool, tokens))
    }

    fn free_group_begin(&mut self, pool: usize) -> PyResult<()> {
        self.call(|a| a.free_group_begin(pool))
    }

    fn free_group_end(&mut self, pool: usize) -> PyResult<()> {
        self.call(|a| a.free_group_end(pool))
    }

    fn in_free_group(&self, pool: usize) -> bool {
        self.inner.in_free_group(pool)
    }

    /// Flush every lazy pool; returns the page moves.
    #[pyo3(signature = (urgent=false))]
    fn flush(&mut self, urgent: bool) -> PyResult<usize> {
        self.call(|a| Ok(a.flush(urgent)))
    }

    /// The page-move cap of one non-urgent flush.
    fn max_moves_per_flush(&self) -> usize {
        self.inner.max_moves_per_flush()
    }

    /// Change the page-move cap of one non-urgent flush (from the next flush on).
    fn set_max_moves_per_flush(&mut self, max_moves: usize) -> PyResult<()> {
        self.call(|a| a.set_max_moves_per_flush(max_moves))
    }

    #[pyo3(signature = (pool, urgent=false))]
    fn flush_pool(&mut self, pool: usize, urgent: bool) -> PyResult<usize> {
        self.call(|a| a.flush_pool(pool, urgent))
    }

    fn set_latest_token(&mut self, token: Option<u64>) -> PyResult<()> {
        self.call(|a| {
            a.set_latest_token(token);
            Ok(())
        })
    }

    fn latest_token(&self) -> Option<u64> {
        self.inner.latest_token()
    }

    fn set_inflight_writes(
        &mut self,
        pool: usize,
        token: u64,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let tokens = ids(tokens, "out_cache_loc")?;
        let tokens = tokens.as_slice()?;
        self.call(|a| a.set_inflight_writes(pool, token, tokens))
    }

    fn retire_token(&mut self, token: u64) -> PyResult<()> {
        self.call(|a| {
            a.retire_token(token);
            Ok(())
        })
    }

    fn clear(&mut self, pool: usize) -> PyResult<()> {
        self.call(|a| a.clear(pool))
    }

    /// Reads every table (seconds at tens of millions of pages), so it runs without the
    /// GIL. The arena stays borrowed meanwhile: a mutating call on this object from another
    /// thread raises instead of racing (UnifiedKVPool holds its lock around both).
    fn check_invariants(&self, py: Python<'_>) -> PyResult<()> {
        self.usable()?;
        let inner = &self.inner;
        let caught =
            py.allow_threads(|| catch_unwind(AssertUnwindSafe(|| inner.check_invariants())));
        self.settle(caught)
    }

    fn available_pages(&self, pool: usize) -> PyResult<i64> {
        self.check_pool(pool)?;
        Ok(self.inner.available_pages(pool))
    }

    fn schedulable_pages(&self, pool: usize) -> PyResult<i64> {
        self.check_pool(pool)?;
        Ok(self.inner.schedulable_pages(pool))
    }

    fn gap_bytes(&self, pool: usize) -> PyResult<u64> {
        self.check_pool(pool)?;
        Ok(self.inner.gap_bytes(pool))
    }

    fn is_token_allocated(&self, pool: usize, token: i64) -> bool {
        self.inner.is_token_allocated(pool, token)
    }

    fn num_pools(&self) -> usize {
        self.inner.num_pools()
    }

    fn total_bytes(&self) -> u64 {
        self.inner.total_bytes()
    }

    fn reserved_floor(&self) -> u64 {
        self.inner.reserved_floor()
    }

    /// Immutable geometry of one pool, as a dict.
    fn pool_info<'py>(&self, py: Python<'py>, pool: usize) -> PyResult<Bound<'py, PyDict>> {
        let p = self.inner.try_pool(pool).map_err(to_py)?;
        let g = p.geometry();
        let d = PyDict::new(py);
        d.set_item("name", p.name())?;
        d.set_item("entry_bytes", g.entry_bytes)?;
        d.set_item("page_size", g.page_size)?;
        d.set_item("page_bytes", g.page_bytes)?;
        d.set_item("num_pages", g.num_pages)?;
        d.set_item("min_page_index", g.min_page_index)?;
        d.set_item("num_virtual_pages", g.num_virtual_pages)?;
        d.set_item("min_virtual_page", g.min_virtual_page)?;
        d.set_item("grow", grow_name(g.direction))?;
        d.set_item("lazy", p.is_lazy())?;
        d.set_item("id_owner", p.is_id_owner())?;
        Ok(d)
    }

    /// Mutable state of one pool: (watermark, live_pages, holes, pending, span_pages).
    fn pool_state(&self, pool: usize) -> PyResult<(i64, usize, usize, usize, i64)> {
        let p = self.inner.try_pool(pool).map_err(to_py)?;
        Ok((
            p.watermark(),
            p.live_pages(),
            p.num_holes(),
            p.num_pending(),
            p.span_pages(),
        ))
    }

    /// Running counters: (pages_moved, bytes_moved, compactions, flushes).
    fn pool_stats(&self, pool: usize) -> PyResult<(u64, u64, u64, u64)> {
        let s = self.inner.try_pool(pool).map_err(to_py)?.stats();
        Ok((s.pages_moved, s.bytes_moved, s.compactions, s.flushes))
    }

    /// The free virtual page ids in hand-out order (a copy; for tests and debugging).
    fn free_ids<'py>(&self, py: Python<'py>, pool: usize) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let p = self.inner.try_pool(pool).map_err(to_py)?;
        Ok(PyArray1::from_iter(py, p.free_ids()))
    }

    /// Zero-copy view of a pool's v2p table (read-only by contract; fixed address).
    fn v2p<'py>(slf: Bound<'py, Self>, pool: usize) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let this = slf.borrow();
        this.check_pool(pool)?;
        let data: &[i64] = this.inner.pool(pool).v2p();
        // SAFETY: the table is allocated once at construction with a fixed length and is
        // never reallocated (clear() fills it in place); `slf` owns it and is kept alive.
        Ok(unsafe { borrowed_view(data, slf.clone().into_any()) })
    }

    /// Zero-copy view of a pool's p2v table (read-only by contract; fixed address).
    fn p2v<'py>(slf: Bound<'py, Self>, pool: usize) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let this = slf.borrow();
        this.check_pool(pool)?;
        let data: &[i64] = this.inner.pool(pool).p2v();
        // SAFETY: as for v2p.
        Ok(unsafe { borrowed_view(data, slf.clone().into_any()) })
    }

    // ----- hybrid composites (API.md §5) ------------------------------------------------
    // The SWA pair's joint operations (one plan for both sides), the joint capacity, the
    // Mamba slot translate and the shortage report; `move_order` for three-band plans.

    /// Joint alloc of `num_tokens` tokens on owner `full` and its SWA pool `swa`; the
    /// virtual token ids, or None (nothing changed) when both sides cannot take them.
    fn swa_alloc<'py>(
        &mut self,
        py: Python<'py>,
        full: usize,
        swa: usize,
        num_tokens: i64,
    ) -> PyResult<Option<Arr<'py>>> {
        let ok = self.call(|a| a.swa_alloc_tokens(full, swa, num_tokens))?;
        Ok(ok.then(|| to_numpy(py, &self.inner.plan().tokens)))
    }

    /// Joint token-level extend; (tokens, token_req or None) or None when it does not fit.
    #[pyo3(signature = (full, swa, prefix_lens, seq_lens, last_loc=None))]
    fn swa_alloc_extend<'py>(
        &mut self,
        py: Python<'py>,
        full: usize,
        swa: usize,
        prefix_lens: &Bound<'py, PyAny>,
        seq_lens: &Bound<'py, PyAny>,
        last_loc: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<TokenResult<'py>> {
        let pre = ids(prefix_lens, "prefix_lens_cpu")?;
        let seq = ids(seq_lens, "seq_lens_cpu")?;
        let last = optional_ids(last_loc, "last_loc")?;
        let (pre, seq, last) = (pre.as_slice()?, seq.as_slice()?, optional_slice(&last)?);
        let ok = self.call(|a| a.swa_alloc_extend(full, swa, pre, seq, last))?;
        Ok(ok.then(|| self.tokens_out(py)))
    }

    /// Joint token-level decode; (tokens, token_req or None) or None when it does not fit.
    #[pyo3(signature = (full, swa, seq_lens, last_loc=None))]
    fn swa_alloc_decode<'py>(
        &mut self,
        py: Python<'py>,
        full: usize,
        swa: usize,
        seq_lens: &Bound<'py, PyAny>,
        last_loc: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<TokenResult<'py>> {
        let seq = ids(seq_lens, "seq_lens_cpu")?;
        let last = optional_ids(last_loc, "last_loc")?;
        let (seq, last) = (seq.as_slice()?, optional_slice(&last)?);
        let ok = self.call(|a| a.swa_alloc_decode(full, swa, seq, last))?;
        Ok(ok.then(|| self.tokens_out(py)))
    }

    /// Free these tokens' pages on both sides (SWA pages already released are skipped).
    fn swa_free(&mut self, full: usize, swa: usize, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        let tokens = ids(tokens, "ids")?;
        let tokens = tokens.as_slice()?;
        self.call(|a| a.swa_free(full, swa, tokens))
    }

    /// Open both sides' free groups (both checked closed first).
    fn swa_free_group_begin(&mut self, full: usize, swa: usize) -> PyResult<()> {
        self.call(|a| a.swa_free_group_begin(full, swa))
    }

    /// Close both sides' free groups in one plan (both checked open first).
    fn swa_free_group_end(&mut self, full: usize, swa: usize) -> PyResult<()> {
        self.call(|a| a.swa_free_group_end(full, swa))
    }

    /// Free only the SWA side of these tokens' pages; the ids stay live on `full`.
    fn swa_free_nonowner(
        &mut self,
        full: usize,
        swa: usize,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let tokens = ids(tokens, "ids")?;
        let tokens = tokens.as_slice()?;
        self.call(|a| a.swa_free_nonowner(full, swa, tokens))
    }

    /// Free the SWA side of those tokens' pages still bound there, skipping the others.
    fn swa_free_window(
        &mut self,
        full: usize,
        swa: usize,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let tokens = ids(tokens, "ids")?;
        let tokens = tokens.as_slice()?;
        self.call(|a| a.swa_free_window(full, swa, tokens))
    }

    /// Pages a joint alloc can take now, without compacting anything.
    fn joint_available_pages(&self, full: usize, swa: usize) -> PyResult<i64> {
        self.inner.check_swa_pair(full, swa).map_err(to_py)?;
        Ok(self.inner.joint_available_pages(full, swa))
    }

    /// Pages a joint alloc is guaranteed to get (exact: one page more returns None).
    fn joint_schedulable_pages(&self, full: usize, swa: usize) -> PyResult<i64> {
        self.inner.check_swa_pair(full, swa).map_err(to_py)?;
        Ok(self.inner.joint_schedulable_pages(full, swa))
    }

    /// Physical slots of virtual slots; -1 (padding) and unbound slots give -1.
    fn translate_slots<'py>(
        &self,
        py: Python<'py>,
        pool: usize,
        slots: &Bound<'py, PyAny>,
    ) -> PyResult<Arr<'py>> {
        let slots = ids(slots, "ids")?;
        let slots = slots.as_slice()?;
        let mut out = Vec::new();
        self.inner
            .translate_slots(pool, slots, &mut out)
            .map_err(to_py)?;
        Ok(to_numpy(py, &out))
    }

    /// Pages `donor` must release for `k` more pages to fit on `pool`, or None when no
    /// number of them is enough.
    fn shortage_pages(&self, pool: usize, k: i64, donor: usize) -> PyResult<Option<i64>> {
        self.inner.shortage_pages(pool, k, donor).map_err(to_py)
    }

    /// Pool indices in the order a plan's page moves must run (a middle band last).
    fn move_order(&self) -> Vec<usize> {
        self.inner.move_order().to_vec()
    }

    // ----- the last operation's plan ------------------------------------------------------

    /// Page moves of the last operation: a list of (pool, src pages, dst pages), in the
    /// order the pools' moves must run (`move_order`: a middle band last).
    fn plan_moves<'py>(&self, py: Python<'py>) -> Vec<(usize, Arr<'py>, Arr<'py>)> {
        let plan = self.inner.plan();
        self.inner
            .move_order()
            .iter()
            .map(|&i| (i, &plan.pools[i]))
            .filter(|(_, p)| p.num_moves() > 0)
            .map(|(i, p)| (i, to_numpy(py, &p.src), to_numpy(py, &p.dst)))
            .collect()
    }

    /// Changed table rows of one pool as (rows, values) over the concatenation
    /// `[v2p | p2v]` (p2v rows are offset by len(v2p)), or None when nothing changed.
    fn plan_table_updates<'py>(
        &self,
        py: Python<'py>,
        pool: usize,
    ) -> PyResult<Option<(Arr<'py>, Arr<'py>)>> {
        self.check_pool(pool)?;
        let p = &self.inner.plan().pools[pool];
        if p.v2p_rows.is_empty() && p.p2v_rows.is_empty() {
            return Ok(None);
        }
        let offset = self.inner.pool(pool).v2p().len() as i64;
        let rows: Vec<i64> = p
            .v2p_rows
            .iter()
            .copied()
            .chain(p.p2v_rows.iter().map(|r| r + offset))
            .collect();
        let vals: Vec<i64> = p.v2p_vals.iter().chain(&p.p2v_vals).copied().collect();
        Ok(Some((to_numpy(py, &rows), to_numpy(py, &vals))))
    }

    /// Write the last plan's payload into `out` (a writable int64 array, e.g. a slice of
    /// pinned staging memory) as `Plan::pack_into` lays it out, and return the layout:
    /// `(len, tokens_at, num_tokens, req_at, num_req, [(pool, src_at, dst_at, rows_at,
    /// vals_at, num_moves, num_rows), ...])`. Nothing is written when `len > out.len()`.
    #[pyo3(signature = (out, tokens=true, rows=true))]
    fn pack_plan(
        &self,
        mut out: numpy::PyReadwriteArray1<'_, i64>,
        tokens: bool,
        rows: bool,
    ) -> PyResult<PackedTuple> {
        let out = out
            .as_slice_mut()
            .map_err(|_| argument("out", "a strided array", "must be contiguous"))?;
        let lens: Vec<usize> = (0..self.inner.num_pools())
            .map(|i| self.inner.pool(i).v2p().len())
            .collect();
        let l = self.inner.plan().pack_into(out, &lens, tokens, rows);
        let pools = l
            .pools
            .iter()
            .map(|s| (s.pool, s.src, s.dst, s.rows, s.vals, s.moves, s.num_rows))
            .collect();
        let (t, nt) = l.tokens;
        let (r, nr) = l.token_req;
        Ok((l.len, t, nt, r, nr, pools))
    }

    /// Pools whose tables were rewritten whole by the last operation (`clear`).
    fn plan_resets(&self) -> Vec<usize> {
        let plan = self.inner.plan();
        (0..plan.pools.len())
            .filter(|&i| plan.pools[i].reset)
            .collect()
    }

    /// Completion tokens the caller's stream must wait on before executing the moves.
    fn plan_waits(&self) -> Vec<u64> {
        self.inner.plan().wait_tokens.clone()
    }

    /// What the last operation left to do, as bit flags: 1 waits, 2 page moves, 4 table
    /// resets, 8 changed table rows (one cheap call on the hot path).
    fn plan_flags(&self) -> u32 {
        let plan = self.inner.plan();
        let mut flags = 0;
        if !plan.wait_tokens.is_empty() {
            flags |= 1;
        }
        for p in &plan.pools {
            if p.num_moves() > 0 {
                flags |= 2;
            }
            if p.reset {
                flags |= 4;
            }
            if !p.v2p_rows.is_empty() || !p.p2v_rows.is_empty() {
                flags |= 8;
            }
        }
        flags
    }

    /// Virtual pages bound by the last operation.
    fn plan_pages<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        to_numpy(py, &self.inner.plan().pages)
    }

    /// Whether the last operation changed any table row or moved any page in `pool`.
    fn plan_touches(&self, pool: usize) -> PyResult<bool> {
        self.check_pool(pool)?;
        Ok(!self.inner.plan().pools[pool].is_empty())
    }

    /// Check a pool index without doing anything else (used by validating wrappers).
    fn validate_pool(&self, pool: usize) -> PyResult<()> {
        self.check_pool(pool)
    }

    /// Test hook: panic inside the core-call guard, to prove a panic poisons the arena
    /// instead of reaching Python. Never called by ukv itself.
    fn _debug_panic(&mut self) -> PyResult<()> {
        self.call(|_| -> ukv_core::Result<()> {
            std::panic::panic_any("debug panic requested".to_string())
        })
    }

    /// Make every later call raise `PoolPoisonedError` with `why` (used by the Python
    /// pool when executing a plan failed, so host tables and device bytes may disagree).
    fn poison(&self, why: String) {
        let _ = self.poisoned.set(why);
    }

    /// Whether an internal failure has made this arena refuse further calls.
    fn is_poisoned(&self) -> bool {
        self.poisoned.get().is_some()
    }

    fn __repr__(&self) -> String {
        format!(
            "Arena(total_bytes={}, pools={})",
            self.inner.total_bytes(),
            self.inner.num_pools()
        )
    }
}
