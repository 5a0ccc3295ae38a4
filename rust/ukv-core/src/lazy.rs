//! Lazy compaction: frees leave holes inside the band, and a flush later absorbs holes at
//! the boundary and walks the topmost survivors into the deepest holes.
//!
//! Two hazards come from a forward pass that is still running on the device:
//! * it may be about to **write** a page the flush wants to move (its new tokens): a
//!   non-urgent flush stops before such a page; an urgent one waits for the forward first;
//! * it may still **read** a page the flush vacates: the vacated page is parked in a
//!   pending batch under the forward's completion token and becomes a hole only when that
//!   token is retired (or an urgent flush waits on it).
//!
//! Pending batches are a list, so any number of flushes under one token keep all their
//! pages (the reference kept one batch per token and leaked the earlier ones).

use crate::geometry::Direction;
use crate::plan::PoolPlan;
use crate::subpool::{PendingBatch, SubPool, TOMBSTONE};

/// How a flush may behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlushMode {
    /// Pack fully now, waiting on every outstanding token instead of avoiding hazards.
    pub urgent: bool,
    /// Most page moves a non-urgent flush may record.
    pub max_moves: usize,
}

impl SubPool {
    /// One flush pass. `latest` is the completion token of the newest forward still in
    /// flight (None when the device is idle). Tokens the caller must wait on are pushed to
    /// `waits`. Returns the number of page moves.
    pub(crate) fn flush(
        &mut self,
        mode: FlushMode,
        latest: &mut Option<u64>,
        plan: &mut PoolPlan,
        waits: &mut Vec<u64>,
    ) -> usize {
        if !self.lazy {
            return 0;
        }
        self.stats.flushes += 1;
        if mode.urgent {
            self.drain_all_pending(waits);
        }
        self.sort_holes();
        self.absorb_boundary_holes();
        if self.holes.is_empty() {
            return 0;
        }
        if mode.urgent {
            // Settle both hazards at once: after this wait nothing in flight touches the band.
            if let Some(t) = latest.take() {
                waits.push(t);
            }
            self.write_set.clear();
            self.write_token = None;
        }
        let moves = self.walk_survivors(mode);
        let released = self.commit_moves(moves, plan, *latest);
        if mode.urgent {
            // Every interior hole and vacated source now lies beyond the frontier.
            self.holes.clear();
            let packed = self.live as i64;
            self.wm = match self.geo.direction {
                Direction::Up => self.geo.min_page_index + packed,
                Direction::Down => self.geo.num_pages - 1 - packed,
            };
        } else if released {
            self.sort_holes();
            self.absorb_boundary_holes();
        }
        moves
    }

    fn sort_holes(&mut self) {
        self.holes.make_contiguous().sort_unstable();
    }

    /// Move the watermark inwards over holes that touch it.
    fn absorb_boundary_holes(&mut self) {
        match self.geo.direction {
            Direction::Up => {
                while self.holes.back() == Some(&(self.wm - 1)) {
                    self.holes.pop_back();
                    self.wm -= 1;
                }
            }
            Direction::Down => {
                while self.holes.front() == Some(&(self.wm + 1)) {
                    self.holes.pop_front();
                    self.wm += 1;
                }
            }
        }
    }

    /// Pair the topmost survivors with the deepest holes (holes are sorted ascending)
    /// until the cursors cross, the move cap is reached, or (non-urgent) the next survivor
    /// is about to be written by the in-flight forward. The pairs go to `self.scratch` as
    /// `[src0, dst0, src1, dst1, ...]`; returns how many.
    fn walk_survivors(&mut self, mode: FlushMode) -> usize {
        let blockers = if mode.urgent {
            Vec::new()
        } else {
            self.physical_write_set()
        };
        let cap = if mode.urgent { usize::MAX } else { mode.max_moves };
        let mut pairs = std::mem::take(&mut self.scratch);
        pairs.clear();
        let n_holes = self.holes.len();
        let (mut src, step): (i64, i64) = match self.geo.direction {
            Direction::Up => (self.wm - 1, -1),
            Direction::Down => (self.wm + 1, 1),
        };
        let mut count = 0;
        while count < n_holes && count < cap {
            let dst = match self.geo.direction {
                Direction::Up => self.holes[count],
                Direction::Down => self.holes[n_holes - 1 - count],
            };
            while self.in_band(src) && self.p2v[src as usize] == TOMBSTONE {
                src += step;
            }
            let crossed = match self.geo.direction {
                Direction::Up => src < dst,
                Direction::Down => src > dst,
            };
            if crossed || !self.in_band(src) || blockers.binary_search(&src).is_ok() {
                break;
            }
            pairs.push(src);
            pairs.push(dst);
            src += step;
            count += 1;
        }
        self.scratch = pairs;
        count
    }

    /// Physical pages the in-flight forward writes, sorted.
    fn physical_write_set(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self
            .write_set
            .iter()
            .map(|&v| self.v2p[v as usize])
            .filter(|&p| p != TOMBSTONE)
            .collect();
        out.sort_unstable();
        out
    }

    /// Apply the walked pairs to the tables and the plan; dispose of the vacated sources.
    /// Returns true when the sources became holes at once.
    fn commit_moves(&mut self, moves: usize, plan: &mut PoolPlan, latest: Option<u64>) -> bool {
        if moves == 0 {
            return false;
        }
        let pairs = std::mem::take(&mut self.scratch);
        let mut vacated = Vec::with_capacity(moves);
        for pair in pairs.chunks_exact(2) {
            let (src, dst) = (pair[0], pair[1]);
            let v = self.p2v[src as usize];
            self.v2p[v as usize] = dst;
            self.p2v[dst as usize] = v;
            self.p2v[src as usize] = TOMBSTONE;
            plan.v2p_rows.push(v);
            plan.p2v_rows.push(dst);
            plan.p2v_rows.push(src);
            plan.push_move(src, dst);
            vacated.push(src);
        }
        self.scratch = pairs;
        self.record_moves(moves as u64);
        // The consumed destinations are the first `moves` holes (up) or the last (down).
        match self.geo.direction {
            Direction::Up => drop(self.holes.drain(..moves)),
            Direction::Down => self.holes.truncate(self.holes.len() - moves),
        }
        match latest {
            None => {
                self.holes.extend(vacated);
                true
            }
            Some(token) => {
                self.pending_pages += vacated.len();
                self.pending.push(PendingBatch {
                    token,
                    pages: vacated,
                });
                false
            }
        }
    }

    /// Release every pending batch into the holes; their tokens must be waited on.
    fn drain_all_pending(&mut self, waits: &mut Vec<u64>) {
        for batch in self.pending.drain(..) {
            if !waits.contains(&batch.token) {
                waits.push(batch.token);
            }
            self.holes.extend(batch.pages);
        }
        self.pending_pages = 0;
    }

    /// A forward with this completion token has finished: its pending pages become holes
    /// and its write set no longer blocks moves.
    pub(crate) fn retire(&mut self, token: u64) {
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].token == token {
                let batch = self.pending.swap_remove(i);
                self.pending_pages -= batch.pages.len();
                self.holes.extend(batch.pages);
            } else {
                i += 1;
            }
        }
        if self.write_token == Some(token) {
            self.write_set.clear();
            self.write_token = None;
        }
    }

    /// Record the virtual tokens an in-flight forward writes (padding and out-of-range
    /// entries are ignored: they land in the sink).
    pub(crate) fn set_write_set(&mut self, token: u64, tokens: &[i64]) {
        let ps = self.geo.page_size as i64;
        self.write_set.clear();
        self.write_set.extend(
            tokens
                .iter()
                .filter(|&&t| t >= 0 && t / ps < self.geo.num_virtual_pages)
                .map(|&t| t / ps),
        );
        self.write_token = Some(token);
    }
}
