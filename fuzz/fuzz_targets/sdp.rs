//! cargo-fuzz target; the property lives in `ua::fuzzing::sdp`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ua::fuzzing::sdp(data));
