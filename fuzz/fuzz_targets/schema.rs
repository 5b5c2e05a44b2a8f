//! Fuzz target `schema`: [`fuzz::schema`] under libFuzzer (`cargo xtask fuzz --target schema`).
#![no_main]
#![forbid(unsafe_code)]

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::schema(data));
