//! The one place where core errors become Python exceptions.
//!
//! The exception classes are defined in Python (`ukv/errors.py`) because they need two
//! bases each (`PoolConfigError(UkvError, ValueError)`, ...), which PyO3's
//! `create_exception!` cannot express; this module looks them up once and raises them.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;
use ukv_core::UkvError;

/// Names of the exception classes the native module re-exports.
pub const EXCEPTION_NAMES: [&str; 7] = [
    "UkvError",
    "PoolConfigError",
    "InvalidIdError",
    "DoubleFreeError",
    "ArgumentError",
    "InvariantError",
    "PoolPoisonedError",
];

static ERRORS_MODULE: GILOnceCell<Py<PyModule>> = GILOnceCell::new();

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS_MODULE
        .get_or_try_init(py, || Ok(py.import("ukv.errors")?.unbind()))
        .map(|m| m.bind(py))
}

/// The exception class called `name` in `ukv.errors`.
pub fn exception_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(errors_module(py)?
        .getattr(name)?
        .downcast_into::<PyType>()?)
}

/// Build a `PyErr` of class `name` with `message`.
pub fn raise(name: &str, message: String) -> PyErr {
    Python::with_gil(|py| match exception_class(py, name) {
        Ok(cls) => PyErr::from_type(cls, message),
        Err(e) => {
            PyRuntimeError::new_err(format!("{message} (and ukv.errors failed to import: {e})"))
        }
    })
}

/// Map a core error onto the Python hierarchy of API.md §6.
pub fn to_py(err: UkvError) -> PyErr {
    let class = match &err {
        UkvError::Config { .. } => "PoolConfigError",
        UkvError::InvalidId { .. } => "InvalidIdError",
        UkvError::DoubleFree { .. } => "DoubleFreeError",
        UkvError::Argument { .. } => "ArgumentError",
        UkvError::Invariant { .. } => "InvariantError",
    };
    raise(class, err.to_string())
}

/// An argument error naming `arg` and `value`.
pub fn argument(arg: &str, value: impl std::fmt::Display, reason: &str) -> PyErr {
    raise(
        "ArgumentError",
        format!("bad argument {arg} = {value}: {reason}"),
    )
}
