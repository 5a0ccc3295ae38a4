//! Sub-pool geometry: how many pages a sub-pool's index space has, where its real pages
//! start, and how many bytes one page takes.
//!
//! Every sub-pool is anchored at byte 0 of the shared buffer: physical page `p` of a
//! sub-pool with `page_bytes = page_size * entry_bytes` occupies bytes
//! `[p * page_bytes, (p + 1) * page_bytes)`. Bytes `[0, reserved_floor)` are the padding
//! sink; a page is real only if it starts at or above the floor.

use crate::error::{Result, UkvError};

/// Most tokens one page may hold.
const MAX_PAGE_SIZE: u64 = 1 << 16;

/// Which end of the buffer a sub-pool grows from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Hands out pages `min_page_index, min_page_index + 1, ...` from the low end.
    Up,
    /// Floats between the grow-up and the grow-down band (an arena has at most one): its
    /// band `[base, watermark)` grows at either end and slides when an end band needs its
    /// bytes (see `middle.rs`). Declared between the ends, in band order: the hot
    /// paths then tell "grows upwards" (up or middle) from "down" with one compare.
    Middle,
    /// Hands out pages `num_pages - 1, num_pages - 2, ...` from the high end.
    Down,
}

/// What the caller declares about one sub-pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// Unique name, used in messages.
    pub name: String,
    /// Bytes of one slot across all its layers.
    pub entry_bytes: u64,
    /// Slots per page (1 for state pools).
    pub page_size: u64,
    /// Growth direction.
    pub direction: Direction,
    /// `None`: the pool mints its own virtual ids. `Some(i)`: the pool binds ids minted by
    /// pool `i` (the SWA side of a SWA hybrid), and its v2p table is sized by pool `i`'s id
    /// space.
    pub id_owner: Option<usize>,
}

/// Derived, immutable numbers of one sub-pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes of one slot.
    pub entry_bytes: u64,
    /// Slots per page.
    pub page_size: u64,
    /// Bytes of one page (`page_size * entry_bytes`).
    pub page_bytes: u64,
    /// Physical pages in the index space (`total_bytes / page_bytes`).
    pub num_pages: i64,
    /// First page at or above the reserved floor.
    pub min_page_index: i64,
    /// Number of virtual page ids the v2p table covers (the owner's `num_pages`).
    pub num_virtual_pages: i64,
    /// First valid virtual page id (the owner's `min_page_index`).
    pub min_virtual_page: i64,
    /// Growth direction.
    pub direction: Direction,
}

impl Geometry {
    /// Geometry of a pool that owns its ids.
    pub fn new(spec: &PoolSpec, total_bytes: u64, reserved_floor: u64) -> Result<Self> {
        if spec.entry_bytes == 0 {
            return Err(config("entry_bytes", 0, "must be positive"));
        }
        if spec.page_size == 0 {
            return Err(config("page_size", 0, "must be positive"));
        }
        // An allocation lists every token id of its pages: a huge page would need gigabytes
        // of ids per page (the allocation then aborted the process).
        if spec.page_size > MAX_PAGE_SIZE {
            return Err(config(
                "page_size",
                spec.page_size,
                &format!("at most {MAX_PAGE_SIZE} tokens per page"),
            ));
        }
        let page_bytes = spec
            .entry_bytes
            .checked_mul(spec.page_size)
            .ok_or_else(|| config("page_size", spec.page_size, "page bytes overflow u64"))?;
        let num_pages = total_bytes / page_bytes;
        let min_page_index = reserved_floor.div_ceil(page_bytes);
        if num_pages <= min_page_index {
            return Err(UkvError::Config {
                field: "total_bytes",
                value: total_bytes.to_string(),
                reason: format!(
                    "sub-pool {:?} fits {num_pages} pages of {page_bytes} bytes but the first \
                     {min_page_index} are the reserved floor ({reserved_floor} bytes); \
                     increase total_bytes",
                    spec.name
                ),
            });
        }
        // Token ids (`page * page_size + offset`) must fit i64.
        let slots_fit = num_pages
            .checked_mul(spec.page_size)
            .is_some_and(|slots| slots <= i64::MAX as u64 / 2);
        if num_pages > i64::MAX as u64 / 2 || !slots_fit {
            return Err(config("total_bytes", total_bytes, "too many pages"));
        }
        Ok(Geometry {
            entry_bytes: spec.entry_bytes,
            page_size: spec.page_size,
            page_bytes,
            num_pages: num_pages as i64,
            min_page_index: min_page_index as i64,
            num_virtual_pages: num_pages as i64,
            min_virtual_page: min_page_index as i64,
            direction: spec.direction,
        })
    }

    /// Slots in the index space (`num_pages * page_size`).
    pub fn max_slots(&self) -> i64 {
        self.num_pages * self.page_size as i64
    }

    /// First byte of page `p`.
    pub fn page_start(&self, p: i64) -> u64 {
        p as u64 * self.page_bytes
    }
}

/// The reserved floor: bytes `[0, floor)` are the padding sink. It must hold one whole page
/// of every paged pool (a store to physical token 0 touches the whole page-0 envelope) and
/// one entry of every state pool.
pub fn reserved_floor(specs: &[PoolSpec]) -> u64 {
    specs
        .iter()
        .map(|s| s.entry_bytes.saturating_mul(s.page_size))
        .max()
        .unwrap_or(0)
}

fn config(field: &'static str, value: impl ToString, reason: &str) -> UkvError {
    UkvError::Config {
        field,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}
