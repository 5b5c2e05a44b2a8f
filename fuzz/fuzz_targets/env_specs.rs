//! Fuzz target `env_specs`: [`fuzz::env_specs`] under libFuzzer (`cargo xtask fuzz --target env_specs`).
#![no_main]
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::env_specs(data));
