//! `cargo fuzz run wire_record`: the body is `sluice::fuzz_targets::wire_record`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz_targets::wire_record(data));
