//! `cargo fuzz run decode_record`: the body is `sluice::fuzz_targets::decode_record`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz_targets::decode_record(data));
