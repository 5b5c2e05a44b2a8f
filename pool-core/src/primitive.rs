//! The atomics of the protocols model-checked here (the env phases and
//! worker liveness): std's, or loom's under `cfg(loom)`, in the manner of
//! crossbeam-utils' `mod primitive` (and `exchange`'s).

#[cfg(not(loom))]
pub(crate) mod sync {
    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
    }
}

#[cfg(loom)]
pub(crate) mod sync {
    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
    }
}
