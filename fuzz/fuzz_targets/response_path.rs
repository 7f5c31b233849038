//! cargo-fuzz target; the property lives in
//! `sipsec_server::fuzzing::response_path`: a response no request led to
//! is relayed nowhere, whatever its Vias.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sipsec_server::fuzzing::response_path(data));
