//! cargo-fuzz target; the property lives in `sip_core::fuzzing::bencode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sip_core::fuzzing::bencode(data));
