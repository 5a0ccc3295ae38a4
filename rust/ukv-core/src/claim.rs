//! Caller-chosen virtual ids on an owner pool: bind given free ids to fresh physical pages
//! ([`Arena::alloc_at`]), and hand a live page over from one id to another
//! ([`Arena::rebind`]). An engine whose allocator picks its own ids (SGLang's
//! `take_physical` + `bind`) drives these; ordinary allocation mints ids from the free
//! queue instead.

use crate::arena::Arena;
use crate::error::{Result, UkvError};
use crate::subpool::{SubPool, TOMBSTONE};

impl Arena {
    /// Bind the given free virtual pages of owner pool `i` to physical pages (holes first,
    /// then a fresh extension, as [`Arena::alloc`] does); they leave the free queue. Returns
    /// false, with nothing changed, when they do not fit even after an urgent flush of the
    /// neighbour (checked before the ids, so a request too large for the pool is a plain
    /// false). On success `plan().pages` holds the pages and `plan().tokens` their tokens.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad or non-owner pool, or a page that is live, queued in
    /// a free group or repeated; [`UkvError::InvalidId`] for a page outside the id space.
    pub fn alloc_at(&mut self, i: usize, pages: &[i64]) -> Result<bool> {
        self.require_owner(i, "alloc_at")?;
        self.plan.reset();
        if pages.len() > self.pools[i].free_ids.len() {
            self.finish_plan();
            return Ok(false);
        }
        self.pools[i].check_claimable(pages)?;
        if !self.make_room(i, pages.len() as i64) {
            self.finish_plan();
            return Ok(false);
        }
        self.pools[i].take_free_ids(pages);
        self.plan.pages.extend_from_slice(pages);
        self.bind_pages(i);
        self.expand_tokens(i);
        self.finish_plan();
        Ok(true)
    }

    /// Hand each live page of `from[k]` over to the free id `to[k]` on owner pool `i`: the
    /// physical page keeps its bytes and changes its name; `from[k]` goes back to the
    /// front of the free queue (in order), as if it had never been taken. Nothing changes
    /// on error.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad or non-owner pool, lists of different lengths, a
    /// `from` page that is not live (or queued in a free group, or bound by a dependent
    /// pool), a `to` page that is not free, or a page repeated on either side;
    /// [`UkvError::InvalidId`] for a page outside the id space.
    pub fn rebind(&mut self, i: usize, from: &[i64], to: &[i64]) -> Result<()> {
        self.require_owner(i, "rebind")?;
        if from.len() != to.len() {
            return Err(UkvError::Argument {
                arg: "to",
                value: to.len().to_string(),
                reason: format!("must name as many pages as from ({})", from.len()),
            });
        }
        for (d, dep) in self.pools.iter().enumerate() {
            if dep.owner == Some(i) {
                if let Some(&v) = from.iter().find(|&&v| dep.v2p[v as usize] != TOMBSTONE) {
                    return Err(arg("from", v, &format!("is bound by dependent pool {d}")));
                }
            }
        }
        self.pools[i].check_handover(from, to)?;
        self.plan.reset();
        let pool = &mut self.pools[i];
        let plan = &mut self.plan.pools[i];
        for (&f, &t) in from.iter().zip(to) {
            let p = pool.v2p[f as usize];
            pool.v2p[f as usize] = TOMBSTONE;
            pool.v2p[t as usize] = p;
            pool.p2v[p as usize] = t;
            plan.set_v2p(f, TOMBSTONE);
            plan.set_v2p(t, p);
            plan.set_p2v(p, t);
        }
        pool.take_free_ids(to);
        from.iter().rev().for_each(|&f| pool.free_ids.push_front(f));
        self.finish_plan();
        Ok(())
    }
}

impl SubPool {
    /// Each page a real, free (unbound, not queued) id of this owner pool, none repeated.
    fn check_claimable(&mut self, pages: &[i64]) -> Result<()> {
        let gen = self.next_mark_gen();
        for &v in pages {
            self.check_virtual_page(v, v, "page")?;
            if self.v2p[v as usize] != TOMBSTONE {
                return Err(arg(
                    "virtual_pages",
                    v,
                    "is live (bound to a physical page)",
                ));
            }
            self.mark_once(v, gen, "virtual_pages")?;
        }
        Ok(())
    }

    /// `from` live and not queued, `to` free; no page twice in either list or across them.
    fn check_handover(&mut self, from: &[i64], to: &[i64]) -> Result<()> {
        let gen = self.next_mark_gen();
        for &v in from {
            self.check_virtual_page(v, v, "page")?;
            if self.v2p[v as usize] == TOMBSTONE || self.group_contains(v) {
                return Err(arg("from", v, "is not a live page"));
            }
            self.mark_once(v, gen, "from")?;
        }
        for &v in to {
            self.check_virtual_page(v, v, "page")?;
            if self.v2p[v as usize] != TOMBSTONE {
                return Err(arg("to", v, "is live (bound to a physical page)"));
            }
            self.mark_once(v, gen, "to")?;
        }
        Ok(())
    }

    fn mark_once(&mut self, v: i64, gen: u32, what: &'static str) -> Result<()> {
        let mark = &mut self.marks[v as usize];
        if *mark == gen {
            return Err(arg(what, v, "is repeated in the same call"));
        }
        *mark = gen;
        Ok(())
    }

    /// Drop these ids (known free and unique) from the free queue, keeping its order.
    fn take_free_ids(&mut self, pages: &[i64]) {
        let gen = self.next_mark_gen();
        for &v in pages {
            self.marks[v as usize] = gen;
        }
        let marks = &self.marks;
        self.free_ids.retain(|&v| marks[v as usize] != gen);
    }
}

fn arg(name: &'static str, v: i64, reason: &str) -> UkvError {
    UkvError::Argument {
        arg: name,
        value: v.to_string(),
        reason: format!("page {v} {reason}"),
    }
}
