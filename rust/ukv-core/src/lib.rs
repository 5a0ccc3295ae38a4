//! # ukv-core
//!
//! Bookkeeping for a unified KV-cache pool: one byte buffer shared by sub-pools that grow
//! from its two ends (full-attention KV at one end, Mamba state or sliding-window KV at the
//! other), optionally with a third band floating between them. Callers hold stable
//! **virtual** page ids; the bytes behind them live at **physical** pages that compaction
//! may move. This crate decides everything (which page, which moves, which table rows
//! change) and moves no bytes: every operation leaves a [`Plan`] that the caller executes
//! on its device. The hybrid composites' operations (a SWA pair's joint allocation and
//! capacity, the Mamba slot translate and shortage report) are single plans too.
//!
//! It has no Python dependency and is tested, fuzzed and benchmarked with plain cargo.
//!
//! ```
//! use ukv_core::{Arena, ArenaConfig, Direction, PoolSpec};
//!
//! let full = PoolSpec { name: "full".into(), entry_bytes: 64, page_size: 1,
//!                       direction: Direction::Up, id_owner: None };
//! let state = PoolSpec { name: "mamba".into(), entry_bytes: 160, page_size: 1,
//!                        direction: Direction::Down, id_owner: None };
//! let mut arena = Arena::new(ArenaConfig::new(64 * 64 + 16 * 160, vec![full, state])).unwrap();
//! assert!(arena.alloc(0, 3).unwrap());
//! let ids = arena.plan().tokens.clone();
//! arena.free(0, &ids[..1]).unwrap();          // eager: compacts at once
//! assert_eq!(arena.plan().pools[0].num_moves(), 1);
//! arena.check_invariants().unwrap();
//! ```

#![warn(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod arena;
mod capacity;
mod claim;
mod composite;
mod error;
mod geometry;
mod invariants;
mod lazy;
mod middle;
mod paged;
mod plan;
mod subpool;
mod transfer;

pub use arena::{Arena, ArenaConfig, DEFAULT_MAX_MOVES_PER_FLUSH};
pub use error::{Result, UkvError};
pub use geometry::{reserved_floor, Direction, Geometry, PoolSpec};
pub use paged::continue_token;
pub use plan::{PackedLayout, PackedPool, Plan, PoolPlan};
pub use subpool::{PoolStats, SubPool, TOMBSTONE};
