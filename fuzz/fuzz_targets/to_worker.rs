//! Fuzz target `to_worker`: [`fuzz::to_worker`] under libFuzzer (`cargo xtask fuzz --target to_worker`).
#![no_main]
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::to_worker(data));
