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
            self.settle_hazards(latest, waits);
        }
        let base = plan.src.len();
        let moves = self.walk_survivors(mode, plan);
        self.apply_moves(base, plan);
        if mode.urgent {
            // Every interior hole and vacated source now lies beyond the frontier.
            self.holes.clear();
            let packed = self.live as i64;
            self.wm = match self.geo.direction {
                Direction::Up | Direction::Middle => self.base + packed,
                Direction::Down => self.geo.num_pages - 1 - packed,
            };
        } else if self.dispose_vacated(&plan.src[base..], *latest) {
            self.sort_holes();
            self.absorb_boundary_holes();
        }
        moves
    }

    /// Settle both hazards at once before moving pages urgently: the caller waits on the
    /// newest forward in flight, after which nothing in flight touches the band.
    pub(crate) fn settle_hazards(&mut self, latest: &mut Option<u64>, waits: &mut Vec<u64>) {
        if let Some(t) = latest.take() {
            if !waits.contains(&t) {
                waits.push(t);
            }
        }
        self.write_sets.clear();
    }

    fn sort_holes(&mut self) {
        let holes = self.holes.make_contiguous();
        if !crate::subpool::is_ascending(holes) {
            holes.sort_unstable();
        }
    }

    /// Move the watermark inwards over holes that touch it; a middle band also raises its
    /// base over holes at its low end (both ends of a floating band are frontiers).
    fn absorb_boundary_holes(&mut self) {
        // Holes are sorted ascending and distinct here: the ones that touch a frontier are
        // a run at one end of the list, counted first and dropped at once.
        match self.geo.direction {
            Direction::Up | Direction::Middle => {
                let wm = self.wm;
                let k = run_len(self.holes.iter().rev(), |j| wm - 1 - j);
                self.holes.truncate(self.holes.len() - k);
                self.wm -= k as i64;
                if self.geo.direction == Direction::Middle {
                    let base = self.base;
                    let k = run_len(self.holes.iter(), |j| base + j);
                    self.holes.drain(..k);
                    self.base += k as i64;
                }
            }
            Direction::Down => {
                let wm = self.wm;
                let k = run_len(self.holes.iter(), |j| wm + 1 + j);
                self.holes.drain(..k);
                self.wm += k as i64;
            }
        }
    }

    /// Pair the topmost survivors with the deepest holes (holes are sorted ascending)
    /// until the cursors cross, the move cap is reached, or (non-urgent) the next survivor
    /// is about to be written by the in-flight forward. The pairs are appended to the
    /// plan's move lists; returns how many. A documented hot path: one loop per direction,
    /// over the contiguous hole list.
    fn walk_survivors(&mut self, mode: FlushMode, plan: &mut PoolPlan) -> usize {
        let blockers = if mode.urgent {
            Vec::new()
        } else {
            self.physical_write_set()
        };
        let blocked = |p: i64| !blockers.is_empty() && blockers.binary_search(&p).is_ok();
        let cap = if mode.urgent {
            usize::MAX
        } else {
            mode.max_moves
        };
        let base = plan.src.len();
        let holes = self.holes.make_contiguous();
        let n = holes.len().min(cap);
        let p2v = &self.p2v;
        match self.geo.direction {
            Direction::Up | Direction::Middle => {
                // Survivors from the top of the band down; holes from the lowest up.
                let floor = self.base;
                let mut src = self.wm - 1;
                for &dst in &holes[..n] {
                    while src >= floor && p2v[src as usize] == TOMBSTONE {
                        src -= 1;
                    }
                    if src < dst || blocked(src) {
                        break; // crossed (or ran out of band), or about to be written
                    }
                    plan.push_move(src, dst);
                    src -= 1;
                }
            }
            Direction::Down => {
                // Survivors from the bottom of the band up; holes from the highest down.
                let top = self.geo.num_pages;
                let mut src = self.wm + 1;
                for &dst in holes[holes.len() - n..].iter().rev() {
                    while src < top && p2v[src as usize] == TOMBSTONE {
                        src += 1;
                    }
                    if src > dst || src >= top || blocked(src) {
                        break;
                    }
                    plan.push_move(src, dst);
                    src += 1;
                }
            }
        }
        let moves = plan.src.len() - base;
        // The consumed destinations are the first `moves` holes (up) or the last (down).
        match self.geo.direction {
            Direction::Up | Direction::Middle => drop(self.holes.drain(..moves)),
            Direction::Down => self.holes.truncate(self.holes.len() - moves),
        }
        moves
    }

    /// Physical pages any unretired forward writes, sorted.
    fn physical_write_set(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self
            .write_sets
            .iter()
            .flat_map(|(_, set)| set.iter())
            .map(|&v| self.v2p[v as usize])
            .filter(|&p| p != TOMBSTONE)
            .collect();
        out.sort_unstable();
        out
    }

    /// Apply the moves recorded in the plan from index `base` on to the tables, and record
    /// the changed rows: v2p of each moved id, p2v of each destination and source.
    pub(crate) fn apply_moves(&mut self, base: usize, plan: &mut PoolPlan) {
        let n = plan.src.len() - base;
        if n == 0 {
            return;
        }
        let first = plan.v2p_rows.len();
        plan.v2p_rows.reserve(n);
        for (&src, &dst) in plan.src[base..].iter().zip(&plan.dst[base..]) {
            let v = self.p2v[src as usize];
            self.v2p[v as usize] = dst;
            self.p2v[dst as usize] = v;
            self.p2v[src as usize] = TOMBSTONE;
            plan.v2p_rows.push(v);
        }
        plan.v2p_vals.extend_from_slice(&plan.dst[base..]);
        plan.p2v_rows.extend_from_slice(&plan.dst[base..]);
        plan.p2v_vals.extend_from_slice(&plan.v2p_rows[first..]);
        plan.p2v_rows.extend_from_slice(&plan.src[base..]);
        plan.p2v_vals.resize(plan.p2v_vals.len() + n, TOMBSTONE);
        self.record_moves(n as u64);
    }

    /// The sources a non-urgent pass vacated become holes at once when nothing is in
    /// flight (returns true), or a pending batch under the in-flight token.
    fn dispose_vacated(&mut self, vacated: &[i64], latest: Option<u64>) -> bool {
        if vacated.is_empty() {
            return false;
        }
        match latest {
            None => {
                self.holes.extend(vacated.iter());
                true
            }
            Some(token) => {
                self.pending_pages += vacated.len();
                self.pending.push(PendingBatch {
                    token,
                    pages: vacated.to_vec(),
                });
                false
            }
        }
    }

    /// Release every pending batch into the holes; their tokens must be waited on.
    pub(crate) fn drain_all_pending(&mut self, waits: &mut Vec<u64>) {
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
        self.write_sets.retain(|(t, _)| *t != token);
    }

    /// Record the virtual tokens the in-flight forward `token` writes (padding and
    /// out-of-range entries are ignored: they land in the sink). Sets of other unretired
    /// forwards stay; a second report for the same token replaces its set.
    pub(crate) fn set_write_set(&mut self, token: u64, tokens: &[i64]) {
        let ps = self.geo.page_size as i64;
        let pages: Vec<i64> = tokens
            .iter()
            .filter(|&&t| t >= 0 && t / ps < self.geo.num_virtual_pages)
            .map(|&t| t / ps)
            .collect();
        match self.write_sets.iter_mut().find(|(t, _)| *t == token) {
            Some((_, set)) => *set = pages,
            None => self.write_sets.push((token, pages)),
        }
    }
}

/// How many leading `pages` are `expected(0), expected(1), ...`.
fn run_len<'a>(pages: impl Iterator<Item = &'a i64>, expected: impl Fn(i64) -> i64) -> usize {
    pages
        .zip(0..)
        .take_while(|&(&p, j)| p == expected(j))
        .count()
}
