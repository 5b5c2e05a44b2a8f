//! Fuzz target `frames`: [`fuzz::frames`] under libFuzzer (`cargo xtask fuzz --target frames`).
#![no_main]
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::frames(data));
