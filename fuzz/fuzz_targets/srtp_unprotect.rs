//! cargo-fuzz target; the property lives in `srtp::fuzzing::unprotect`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| srtp::fuzzing::unprotect(data));
