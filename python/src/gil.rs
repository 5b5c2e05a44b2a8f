//! A thread state kept for good by each thread that runs Python envs.
//!
//! `Python::attach` on a thread that Python did not create makes a fresh
//! thread state and frees it again when it detaches (`PyGILState_Ensure`
//! and `PyGILState_Release`): on CPython 3.11 that is an `mmap` and a
//! `munmap` of the frame stack and a `gettid` per call, more than a cheap
//! env's step costs. [`keep_thread_state`], called before attaching, makes
//! this thread's state once and keeps it, so that later attaches only take
//! and drop the GIL.

use std::cell::Cell;

thread_local! {
    static KEPT: Cell<bool> = const { Cell::new(false) };
}

/// Makes this thread's Python thread state once and keeps it (for the
/// life of the interpreter: a thread that ends leaves it to the
/// interpreter's finalisation). Does nothing on a thread that holds the
/// GIL now, where releasing it would break the caller's own hold.
pub(crate) fn keep_thread_state() {
    if KEPT.with(Cell::get) {
        return;
    }
    // SAFETY: the interpreter is initialised (this extension module is
    // loaded). `PyGILState_Check` may be called without the GIL. When this
    // thread does not hold the GIL, `PyGILState_Ensure` takes it (making
    // this thread's state if it has none) and raises the state's count,
    // and `PyEval_SaveThread` releases the GIL again, keeping the state:
    // the thread ends as it began, without the GIL, and its state's count
    // stays one above what later `PyGILState_Ensure`/`Release` pairs (those
    // of `Python::attach`) bring it back to, so they never free it. The
    // state returned by `PyEval_SaveThread` is this thread's, reachable
    // again through `PyGILState_Ensure`; it need not be kept here.
    unsafe {
        if pyo3::ffi::PyGILState_Check() == 1 {
            return;
        }
        let _state = pyo3::ffi::PyGILState_Ensure();
        pyo3::ffi::PyEval_SaveThread();
    }
    KEPT.with(|kept| kept.set(true));
}
