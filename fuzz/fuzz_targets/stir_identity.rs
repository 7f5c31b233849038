//! cargo-fuzz target; the property lives in `stir::fuzzing::identity`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stir::fuzzing::identity(data));
