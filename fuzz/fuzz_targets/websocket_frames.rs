//! cargo-fuzz target; the property lives in `sipsec_server::fuzzing::websocket`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sipsec_server::fuzzing::websocket(data));
