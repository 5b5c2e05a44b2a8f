//! Fuzz target `from_worker`: [`fuzz::from_worker`] under libFuzzer (`cargo xtask fuzz --target from_worker`).
#![no_main]
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::from_worker(data));
