//! cargo-fuzz target; the property lives in `media::fuzzing::packets`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| media::fuzzing::packets(data));
