//! The one error type of the core.
//!
//! Variants carry the numbers a caller needs to act on them; messages are lower-case and
//! name the offending value. Every operation that returns an error has left the arena
//! exactly as it was before the call.

use std::fmt;

/// Everything that can go wrong in a call into the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UkvError {
    /// A pool or arena parameter is invalid.
    Config {
        /// The offending field, e.g. `"entry_bytes"`.
        field: &'static str,
        /// The value that was given, rendered.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// An id is negative, out of range, or reserved (the padding sink).
    InvalidId {
        /// Name of the sub-pool.
        pool: String,
        /// The offending id (token or page, see `unit`).
        id: i64,
        /// `"token"` or `"page"`.
        unit: &'static str,
        /// Why it is rejected.
        reason: String,
    },
    /// An id is not live: already freed, never allocated, or repeated in one call.
    DoubleFree {
        /// Name of the sub-pool.
        pool: String,
        /// The offending id (token or page, see `unit`).
        id: i64,
        /// `"token"` or `"page"`.
        unit: &'static str,
        /// What exactly happened.
        reason: String,
    },
    /// An argument is malformed (length mismatch, not a page multiple, wrong role...).
    Argument {
        /// The argument's name.
        arg: &'static str,
        /// The value that was given, rendered.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// An internal invariant does not hold; `detail` prints the out-of-sync values.
    Invariant {
        /// Name of the sub-pool (or `"arena"`).
        pool: String,
        /// The out-of-sync values.
        detail: String,
    },
}

impl fmt::Display for UkvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UkvError::Config {
                field,
                value,
                reason,
            } => write!(f, "invalid {field} = {value}: {reason}"),
            UkvError::InvalidId {
                pool,
                id,
                unit,
                reason,
            } => write!(f, "sub-pool {pool:?}: invalid {unit} id {id}: {reason}"),
            UkvError::DoubleFree {
                pool,
                id,
                unit,
                reason,
            } => write!(f, "sub-pool {pool:?}: {unit} id {id} is not live: {reason}"),
            UkvError::Argument { arg, value, reason } => {
                write!(f, "bad argument {arg} = {value}: {reason}")
            }
            UkvError::Invariant { pool, detail } => {
                write!(f, "invariant broken in {pool:?}: {detail}")
            }
        }
    }
}

impl std::error::Error for UkvError {}

/// Result alias used throughout the core.
pub type Result<T> = std::result::Result<T, UkvError>;
