//! `cargo fuzz run file_lines`: the body is `sluice::source::file::fuzzing::lines`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::source::file::fuzzing::lines(data));
