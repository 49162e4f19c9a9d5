//! `cargo fuzz run response_contract`: the body is `sluice::fuzz_targets::response_contract`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz_targets::response_contract(data));
