//! cargo-fuzz target; the property lives in `ua::fuzzing::agent`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ua::fuzzing::agent(data);
});
