//! Token-level allocation for paged sub-pools: extend a batch of requests by new tokens,
//! reusing the free tail of each request's last page before taking new pages.
//!
//! Page counts come from host-side lengths only, so the caller never has to read device
//! memory. The ids of tokens that continue a request's partial last page depend on that
//! request's `last_loc` (the virtual id of its last existing token). When the caller has
//! `last_loc` on the host it passes it, the core checks it and the caller gets final ids.
//! Otherwise the plan carries, per output token, the request whose `last_loc` it continues
//! (`token_req`) and an encoded continuation (`tokens`): the distance `k >= 1` from
//! `last_loc` plus `page_size` times the in-page offset `last_loc` must have. The caller
//! finishes such tokens on its device with [`continue_token`], which also rejects a
//! `last_loc` that cannot be the request's last token (-1, the padding page, out of range,
//! or at another in-page offset) without anyone reading device memory on the host.

use crate::arena::Arena;
use crate::error::{Result, UkvError};

impl Arena {
    /// Allocate the new tokens of a prefill/extend batch on owner pool `i`.
    ///
    /// Request `r` grows from `prefix_lens[r]` to `seq_lens[r]` tokens; its new tokens are
    /// returned contiguously, requests in order. Returns false, with nothing changed, when
    /// the new pages do not fit.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for mismatched lengths, negative lengths, or a prefix longer
    /// than its sequence.
    pub fn alloc_extend(
        &mut self,
        i: usize,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: Option<&[i64]>,
    ) -> Result<bool> {
        self.require_owner_pub(i, "alloc_extend")?;
        let new_pages = self.extend_new_pages(i, prefix_lens, seq_lens, last_loc)?;
        self.plan_mut().reset();
        let ok = self.alloc_pages(i, new_pages);
        if ok {
            self.fill_extend_tokens(i, prefix_lens, seq_lens, last_loc);
        }
        self.finish_plan();
        Ok(ok)
    }

    /// Validate an extend batch on owner pool `i` and count the new pages it needs.
    pub(crate) fn extend_new_pages(
        &self,
        i: usize,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: Option<&[i64]>,
    ) -> Result<usize> {
        check_same_len("seq_lens", seq_lens.len(), prefix_lens.len())?;
        if let Some(l) = last_loc {
            check_same_len("last_loc", l.len(), prefix_lens.len())?;
        }
        let ps = self.pool(i).geometry().page_size as i64;
        let mut new_pages = 0usize;
        for (r, (&pre, &seq)) in prefix_lens.iter().zip(seq_lens).enumerate() {
            if pre < 0 || seq < pre {
                return Err(UkvError::Argument {
                    arg: "seq_lens",
                    value: format!("{seq} (prefix {pre}, request {r})"),
                    reason: "need 0 <= prefix_len <= seq_len".into(),
                });
            }
            // Saturates on absurd lengths: the sum then cannot fit and the call returns false.
            new_pages = new_pages.saturating_add((ceil_div(seq, ps) - ceil_div(pre, ps)) as usize);
            if pre % ps != 0 && pre < seq {
                self.check_last_loc(i, last_loc, r, pre - 1)?;
            }
        }
        Ok(new_pages)
    }

    /// Write the extend batch's token ids into the plan, from the new pages it holds.
    pub(crate) fn fill_extend_tokens(
        &mut self,
        i: usize,
        prefix_lens: &[i64],
        seq_lens: &[i64],
        last_loc: Option<&[i64]>,
    ) {
        let ps = self.pool(i).geometry().page_size as i64;
        let plan = self.plan_mut();
        let mut pages = plan.pages.iter();
        for (r, (&pre, &seq)) in prefix_lens.iter().zip(seq_lens).enumerate() {
            // Part 1: the free tail of the prefix's last page continues after last_loc
            // (final ids with a host last_loc, else offsets tagged with the request).
            let tail_end = pre.saturating_add((ps - pre % ps) % ps).min(seq);
            let offset = match last_loc {
                Some(l) => l[r],
                // Only read when tail_end > pre, i.e. pre % ps != 0 (so pre >= 1).
                None => encode_offset(pre - 1, ps),
            };
            plan.tokens.extend((1..=tail_end - pre).map(|k| offset + k));
            if last_loc.is_none() {
                let len = plan.token_req.len() + (tail_end - pre) as usize;
                plan.token_req.resize(len, r as i64);
            }
            // Part 2: whole and partial new pages, in order; `tail_end` is page-aligned.
            let mut pos = tail_end;
            while pos < seq {
                let Some(&page) = pages.next() else { break };
                let n = (seq - pos).min(ps);
                plan.tokens.extend(page * ps..page * ps + n);
                pos += n;
            }
            if last_loc.is_none() {
                let len = plan.token_req.len() + (seq - tail_end) as usize;
                plan.token_req.resize(len, -1);
            }
        }
    }

    /// Allocate one decode token per request on owner pool `i`; `seq_lens[r]` is the
    /// length including the new token. A request whose new token starts a page takes a
    /// new page; the others continue at `last_loc[r] + 1`. Valid at every page size.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for mismatched lengths or a length below 1.
    pub fn alloc_decode(
        &mut self,
        i: usize,
        seq_lens: &[i64],
        last_loc: Option<&[i64]>,
    ) -> Result<bool> {
        self.require_owner_pub(i, "alloc_decode")?;
        let new_pages = self.decode_new_pages(i, seq_lens, last_loc)?;
        self.plan_mut().reset();
        let ok = self.alloc_pages(i, new_pages);
        if ok {
            self.fill_decode_tokens(i, seq_lens, last_loc);
        }
        self.finish_plan();
        Ok(ok)
    }

    /// Validate a decode batch on owner pool `i` and count the new pages it needs.
    pub(crate) fn decode_new_pages(
        &self,
        i: usize,
        seq_lens: &[i64],
        last_loc: Option<&[i64]>,
    ) -> Result<usize> {
        if let Some(l) = last_loc {
            check_same_len("last_loc", l.len(), seq_lens.len())?;
        }
        let ps = self.pool(i).geometry().page_size as i64;
        let mut new_pages = 0usize;
        for (r, &seq) in seq_lens.iter().enumerate() {
            if seq < 1 {
                return Err(UkvError::Argument {
                    arg: "seq_lens",
                    value: format!("{seq} (request {r})"),
                    reason: "a decode step needs seq_len >= 1".into(),
                });
            }
            if (seq - 1) % ps == 0 {
                new_pages += 1;
            } else {
                self.check_last_loc(i, last_loc, r, seq - 2)?;
            }
        }
        Ok(new_pages)
    }

    /// Write the decode batch's token ids into the plan, from the new pages it holds.
    pub(crate) fn fill_decode_tokens(
        &mut self,
        i: usize,
        seq_lens: &[i64],
        last_loc: Option<&[i64]>,
    ) {
        let ps = self.pool(i).geometry().page_size as i64;
        let plan = self.plan_mut();
        let mut pages = plan.pages.iter();
        for (r, &seq) in seq_lens.iter().enumerate() {
            // A new page's first token, or the token after last_loc (an offset tagged with
            // the request when last_loc is not on the host).
            let (token, req) = match ((seq - 1) % ps == 0, last_loc) {
                (true, _) => (pages.next().map_or(0, |&p| p * ps), -1),
                (false, Some(l)) => (l[r] + 1, -1),
                (false, None) => (encode_offset(seq - 2, ps) + 1, r as i64),
            };
            plan.tokens.push(token);
            if last_loc.is_none() {
                plan.token_req.push(req);
            }
        }
    }

    /// With host `last_loc`, request `r`'s last token must be live and sit at the page
    /// offset of position `last_pos`, or its continuation would land in a foreign page.
    fn check_last_loc(
        &self,
        i: usize,
        last_loc: Option<&[i64]>,
        r: usize,
        last_pos: i64,
    ) -> Result<()> {
        let Some(last) = last_loc else { return Ok(()) };
        let geo = self.pool(i).geometry();
        let ps = geo.page_size as i64;
        let t = last[r];
        // Page 0 counts as allocated (the padding anchor) but is the sink, never a
        // request's page: continuing it would hand out sink tokens.
        let in_sink = t / ps < geo.min_virtual_page;
        if !self.is_token_allocated(i, t) || in_sink || t % ps != last_pos % ps {
            return Err(UkvError::Argument {
                arg: "last_loc",
                value: format!("{t} (request {r})"),
                reason: format!(
                    "must be a live token at page offset {} (position {last_pos}, page size {ps})",
                    last_pos % ps
                ),
            });
        }
        Ok(())
    }

    /// The last plan's token ids on owner pool `i`, each continuation finished from
    /// `last_loc` the way a device finishes it: `None` where [`continue_token`] rejects the
    /// request's `last_loc` (or `last_loc` has no entry for it). For callers that keep
    /// `last_loc` on the host after an allocation made without it, and for tests.
    ///
    /// # Errors
    /// [`UkvError::Argument`] for a bad pool index.
    pub fn finish_tokens(&self, i: usize, last_loc: &[i64]) -> Result<Vec<Option<i64>>> {
        let geo = self.try_pool(i)?.geometry();
        let ps = geo.page_size as i64;
        let plan = &self.plan;
        let reqs = plan.token_req.iter().copied().chain(std::iter::repeat(-1));
        Ok(plan
            .tokens
            .iter()
            .zip(reqs)
            .map(|(&t, r)| {
                if r < 0 {
                    return Some(t);
                }
                let last = *last_loc.get(r as usize)?;
                continue_token(t, last, ps, geo.min_virtual_page, geo.num_virtual_pages)
            })
            .collect())
    }

    pub(crate) fn require_owner_pub(&self, i: usize, op: &str) -> Result<()> {
        let pool = self.try_pool(i)?;
        if !pool.is_id_owner() {
            return Err(UkvError::Argument {
                arg: "pool",
                value: pool.name().to_string(),
                reason: format!("{op} needs a sub-pool that mints its own ids"),
            });
        }
        Ok(())
    }
}

/// The part of an encoded continuation that names where `last_loc` must sit: `page_size`
/// times the in-page offset of position `last_pos` (the request's last existing token).
fn encode_offset(last_pos: i64, ps: i64) -> i64 {
    (last_pos % ps) * ps
}

/// Finish a token that continues a request's partial page (`token_req[i] >= 0`): its id is
/// `last_loc + k`, where `encoded = k + page_size * e`, `1 <= k < page_size`, and `last_loc`
/// must sit at in-page offset `e` of a real page of a pool whose virtual pages are
/// `[min_page, num_pages)`. Returns `None` when `last_loc` cannot be that request's last
/// token (negative, in the padding page, past the id space, or at another offset). A stale
/// `last_loc` that passes these checks (a live page at the same offset) is not detectable
/// from the plan alone; callers on a device also check that its page is bound.
#[must_use]
pub fn continue_token(
    encoded: i64,
    last_loc: i64,
    page_size: i64,
    min_page: i64,
    num_pages: i64,
) -> Option<i64> {
    if page_size < 2 || last_loc < 0 {
        return None;
    }
    let (k, e) = (encoded % page_size, encoded / page_size);
    let page = last_loc / page_size;
    let ok = k >= 1 && page >= min_page && page < num_pages && last_loc % page_size == e;
    ok.then(|| last_loc + k)
}

/// `ceil(a / b)` for `a >= 0`, `b > 0`, without overflowing near `i64::MAX`.
fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b != 0)
}

fn check_same_len(arg: &'static str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(UkvError::Argument {
            arg,
            value: format!("length {got}"),
            reason: format!("must match prefix/seq length {want}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::continue_token;

    #[test]
    fn continuations_accept_only_a_last_loc_at_its_offset_in_a_real_page() {
        // Page size 8, real pages [1, 10): the request's last token sits at offset 4.
        let enc = 4 * 8 + 2;
        assert_eq!(continue_token(enc, 3 * 8 + 4, 8, 1, 10), Some(3 * 8 + 6));
        for bad in [-1, 4, 3 * 8 + 3, 3 * 8 + 5, 10 * 8 + 4, i64::MIN, i64::MAX] {
            assert_eq!(continue_token(enc, bad, 8, 1, 10), None, "last_loc {bad}");
        }
        // No continuation at page size 1, and none with a zero distance.
        assert_eq!(continue_token(1, 5, 1, 1, 10), None);
        assert_eq!(continue_token(4 * 8, 3 * 8 + 4, 8, 1, 10), None);
    }
}
