//! `cargo fuzz run limit_memory`: the body is `sluice::fuzz_targets::limit_memory`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz_targets::limit_memory(data));
