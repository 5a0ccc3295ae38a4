//! `ukv._core`: PyO3 bindings of `ukv-core`. This crate only converts arguments, hands
//! data over without per-element Python work, and maps errors; the logic lives in the core.

mod arena;
mod convert;
mod errors;

use pyo3::prelude::*;

/// The native module. Registers the `Arena` class and re-exports the exception classes of
/// `ukv.errors` so both names refer to the same objects.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<arena::PyArena>()?;
    m.add("TOMBSTONE", ukv_core::TOMBSTONE)?;
    m.add(
        "DEFAULT_MAX_MOVES_PER_FLUSH",
        ukv_core::DEFAULT_MAX_MOVES_PER_FLUSH,
    )?;
    for name in errors::EXCEPTION_NAMES {
        m.add(name, errors::exception_class(m.py(), name)?)?;
    }
    Ok(())
}
