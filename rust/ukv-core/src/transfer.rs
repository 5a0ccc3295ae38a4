//! Page ownership moving between ids on a dependent pool ([`Arena::transfer`]): the SWA side
//! of a SWA pair hands the physical page bound to one of the full side's ids over to
//! another. A radix cache that finds a prefix it keeps under old ids while a request has
//! just written the same tokens under new ones (SGLang's recovery of evicted SWA pages)
//! lets the kept ids take over the new pages: no byte moves, no page is allocated or freed.

use std::collections::HashMap;

use crate::arena::{two_pools, Arena};
use crate::error::{Result, UkvError};
use crate::subpool::{SubPool, TOMBSTONE};

impl Arena {
    /// On dependent pool `i` (one that binds its owner's ids, the SWA side of a SWA pair),
    /// hand the physical page bound to `from[k]` over to `to[k]`, for every `k`: afterwards
    /// `to[k]` maps to that page and `from[k]` has none here (it stays live on the owner).
    /// The page keeps its bytes; no page moves, is allocated or freed, so the live count,
    /// the watermark, holes, pending pages and the counters are unchanged. The plan holds
    /// the changed table rows only (no pages, no moves).
    ///
    /// Deferred work touching the pages: holes and pending pages are unbound pages, so no
    /// transferred page is among them; a `from` page queued in this pool's open free group
    /// is refused (it is being released). An in-flight forward that reported `from[k]` in
    /// its write set (`set_inflight_writes`) writes the page now bound to `to[k]`: the
    /// report is renamed to `to[k]`, so a non-urgent flush still leaves that page where it
    /// is until the forward retires. After the call `from[k]` reads as unbound.
    ///
    /// # Errors
    /// Nothing changes on error. [`UkvError::Argument`] for a bad pool, an owner pool,
    /// lists of different lengths, a `from` page with no page here (or queued in this
    /// pool's free group), a `to` page that is not live on the owner (or queued in the
    /// owner's free group) or already has a page here, or a page repeated within or across
    /// the two lists; [`UkvError::InvalidId`] for a page outside the owner's id space.
    pub fn transfer(&mut self, i: usize, from: &[i64], to: &[i64]) -> Result<()> {
        let owner = self.try_pool(i)?.owner.ok_or_else(|| UkvError::Argument {
            arg: "pool",
            value: self.pools[i].name.clone(),
            reason: "transfer needs a sub-pool that binds another pool's ids".into(),
        })?;
        if from.len() != to.len() {
            return Err(UkvError::Argument {
                arg: "to",
                value: to.len().to_string(),
                reason: format!("must name as many pages as from ({})", from.len()),
            });
        }
        let (o, p) = two_pools(&mut self.pools, owner, i);
        p.check_transfer(from, to, o)?;
        self.plan.reset();
        let pool = &mut self.pools[i];
        let plan = &mut self.plan.pools[i];
        for (&f, &t) in from.iter().zip(to) {
            let page = pool.v2p[f as usize];
            pool.v2p[f as usize] = TOMBSTONE;
            pool.v2p[t as usize] = page;
            pool.p2v[page as usize] = t;
            plan.set_v2p(f, TOMBSTONE);
            plan.set_v2p(t, page);
            plan.set_p2v(page, t);
        }
        pool.rename_write_sets(from, to);
        self.finish_plan();
        Ok(())
    }
}

impl SubPool {
    /// `from` bound here and not queued; `to` live (not queued) on `owner` and unbound
    /// here; no page twice in either list or across them.
    fn check_transfer(&mut self, from: &[i64], to: &[i64], owner: &SubPool) -> Result<()> {
        let gen = self.next_mark_gen();
        for &v in from {
            self.check_virtual_page(v, v, "page")?;
            if self.v2p[v as usize] == TOMBSTONE {
                return Err(arg("from", v, &format!("has no page on {:?}", self.name)));
            }
            if self.group_contains(v) {
                return Err(arg("from", v, "is queued in the open free group"));
            }
            self.mark(v, gen, "from")?;
        }
        for &v in to {
            self.check_virtual_page(v, v, "page")?;
            if owner.v2p[v as usize] == TOMBSTONE || owner.group_contains(v) {
                return Err(arg(
                    "to",
                    v,
                    &format!("is not live on the owner {:?}", owner.name),
                ));
            }
            if self.v2p[v as usize] != TOMBSTONE {
                return Err(arg(
                    "to",
                    v,
                    &format!("already has a page on {:?}", self.name),
                ));
            }
            self.mark(v, gen, "to")?;
        }
        Ok(())
    }

    fn mark(&mut self, v: i64, gen: u32, what: &'static str) -> Result<()> {
        let mark = &mut self.marks[v as usize];
        if *mark == gen {
            return Err(arg(what, v, "is repeated in the same call"));
        }
        *mark = gen;
        Ok(())
    }

    /// Every unretired forward's report of `from[k]` now names `to[k]` (the page it writes).
    fn rename_write_sets(&mut self, from: &[i64], to: &[i64]) {
        if self.write_sets.is_empty() {
            return;
        }
        let renamed: HashMap<i64, i64> = from.iter().copied().zip(to.iter().copied()).collect();
        for (_, set) in &mut self.write_sets {
            for v in set.iter_mut() {
                if let Some(&t) = renamed.get(v) {
                    *v = t;
                }
            }
        }
    }
}

fn arg(name: &'static str, v: i64, reason: &str) -> UkvError {
    UkvError::Argument {
        arg: name,
        value: v.to_string(),
        reason: format!("page {v} {reason}"),
    }
}
