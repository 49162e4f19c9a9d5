//! `cargo fuzz run bulk_answer`: the body is `sluice::fuzz_targets::bulk_answer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz_targets::bulk_answer(data));
