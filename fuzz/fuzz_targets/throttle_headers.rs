//! `cargo fuzz run throttle_headers`: the body is `sluice::fuzz_targets::throttle_headers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz_targets::throttle_headers(data));
