//! cargo-fuzz target; the property lives in `sip_core::fuzzing::dns_answer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sip_core::fuzzing::dns_answer(data));
