//! The atomics of the exchange protocol: std's, or loom's under `cfg(loom)`.
//!
//! Every clock, command word and doorbell of the protocol is an atomic from
//! this module, so that `RUSTFLAGS="--cfg loom"` swaps them all for loom's
//! model-checked ones (`cargo xtask loom`), in the manner of crossbeam-utils'
//! `mod primitive`.
//!
//! One kind is never switched: [`raw`], the std atomics that the relaxed
//! copies of slot bytes in [`seqlock`](crate::seqlock) make out of raw
//! pointers into shared memory (`AtomicU64::from_ptr`), which loom cannot
//! model. The loom tests therefore copy a record held in loom atomics instead;
//! the byte copies themselves are tested with real threads.

#[cfg(not(loom))]
pub(crate) mod sync {
    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
    }
    pub(crate) mod hint {
        pub(crate) use std::hint::spin_loop;
    }
}

#[cfg(loom)]
pub(crate) mod sync {
    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
    }
    pub(crate) mod hint {
        // loom's spin_loop yields to the model's scheduler, so a spinning
        // thread lets the others make progress.
        pub(crate) use loom::hint::spin_loop;
    }
}

/// Atomics made from raw pointers into slot memory: always std's, even under
/// loom, which has no atomics over foreign memory.
pub(crate) mod raw {
    pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8};
}
