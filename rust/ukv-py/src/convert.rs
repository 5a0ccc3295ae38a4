//! Zero-copy handoff between NumPy and the core.
//!
//! In: 1-D int64 arrays are read in place (a borrowed slice, no per-element work); int32
//! arrays are widened in Rust in one pass. Out: results are copied once from the core's
//! reusable plan buffers into a new NumPy array that owns its memory (the caller may keep
//! it as long as it likes; `torch.from_numpy` views it without a copy). The v2p/p2v tables
//! are exported as NumPy views *borrowing* the core's memory, kept alive by the arena
//! object; their address is fixed for the arena's lifetime.

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::errors::argument;

/// Ids borrowed from NumPy, or widened from int32.
pub enum Ids<'py> {
    /// An int64 array read in place.
    Borrowed(PyReadonlyArray1<'py, i64>),
    /// An int32 array widened once.
    Widened(Vec<i64>),
}

impl Ids<'_> {
    /// The ids as a slice.
    pub fn as_slice(&self) -> PyResult<&[i64]> {
        match self {
            Ids::Borrowed(a) => a
                .as_slice()
                .map_err(|_| argument("ids", "a strided array", "must be contiguous")),
            Ids::Widened(v) => Ok(v),
        }
    }
}

/// Read an optional 1-D int32/int64 NumPy array argument called `name` (`last_loc`).
pub fn optional_ids<'py>(
    obj: Option<&Bound<'py, PyAny>>,
    name: &str,
) -> PyResult<Option<Ids<'py>>> {
    obj.map(|o| ids(o, name)).transpose()
}

/// The slice of an optional argument read by [`optional_ids`].
pub fn optional_slice<'a>(ids: &'a Option<Ids<'_>>) -> PyResult<Option<&'a [i64]>> {
    ids.as_ref().map(Ids::as_slice).transpose()
}

/// Read a 1-D int32/int64 NumPy array argument called `name`.
pub fn ids<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Ids<'py>> {
    if let Ok(a) = obj.downcast::<PyArray1<i64>>() {
        check_contiguous(a.is_contiguous(), name)?;
        return Ok(Ids::Borrowed(a.readonly()));
    }
    if let Ok(a) = obj.downcast::<PyArray1<i32>>() {
        check_contiguous(a.is_contiguous(), name)?;
        let ro = a.readonly();
        let s = ro
            .as_slice()
            .map_err(|_| argument(name, "a strided array", "must be contiguous"))?;
        return Ok(Ids::Widened(s.iter().map(|&x| i64::from(x)).collect()));
    }
    let desc = describe(obj);
    Err(argument(name, desc, "must be a 1-D int32 or int64 array"))
}

fn check_contiguous(ok: bool, name: &str) -> PyResult<()> {
    if ok {
        Ok(())
    } else {
        Err(argument(name, "a strided array", "must be contiguous"))
    }
}

fn describe(obj: &Bound<'_, PyAny>) -> String {
    let shape = obj
        .getattr("shape")
        .map(|s| s.to_string())
        .unwrap_or_default();
    let dtype = obj
        .getattr("dtype")
        .map(|s| s.to_string())
        .unwrap_or_default();
    match (shape.is_empty(), dtype.is_empty()) {
        (false, false) => format!("array of shape {shape} and dtype {dtype}"),
        _ => obj
            .get_type()
            .name()
            .map(|n| format!("a {n}"))
            .unwrap_or_else(|_| "an object".into()),
    }
}

/// Copy a slice into a new NumPy array that owns its memory.
pub fn to_numpy<'py>(py: Python<'py>, data: &[i64]) -> Bound<'py, PyArray1<i64>> {
    PyArray1::from_slice(py, data)
}

/// A NumPy view of `data` that keeps `owner` alive instead of copying.
///
/// # Safety
/// `data` must live inside `owner` and keep its address and length while `owner` lives.
pub unsafe fn borrowed_view<'py>(
    data: &[i64],
    owner: Bound<'py, PyAny>,
) -> Bound<'py, PyArray1<i64>> {
    let view = numpy::ndarray::ArrayView1::from(data);
    // SAFETY: forwarded to the caller.
    unsafe { PyArray1::borrow_from_array(&view, owner) }
}
