//! `cargo fuzz run checkpoint`: the body is `sluice::source::file::fuzzing::checkpoint`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::source::file::fuzzing::checkpoint(data));
