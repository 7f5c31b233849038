//! cargo-fuzz target; the property lives in `sipsec_server::fuzzing::dns_answer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sipsec_server::fuzzing::dns_answer(data));
