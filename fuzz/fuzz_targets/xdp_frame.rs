//! cargo-fuzz target; the property lives in `sip_udp::fuzzing::xdp_frame`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sip_udp::fuzzing::xdp_frame(data));
