//! cargo-fuzz target; the property lives in `stir::fuzzing::passport`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stir::fuzzing::passport(data));
