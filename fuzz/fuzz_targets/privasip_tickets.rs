//! cargo-fuzz target; the property lives in `privacy::fuzzing::tickets`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| privacy::fuzzing::tickets(data));
