// Included by build.rs, and by the tests in src/io/process.rs.

/// The version's build metadata for the flags rustc is given
/// (`CARGO_ENCODED_RUSTFLAGS`, separated by 0x1f): `+instrumented` for a
/// build that collects a profile, `+pgo` for one guided by a profile,
/// nothing otherwise.
fn build_metadata(encoded_rustflags: &str) -> &'static str {
    // `-Cprofile-use=F`, or `-C` and `profile-use=F` as two flags.
    let named = |what: &str| {
        encoded_rustflags
            .split('\x1f')
            .any(|f| f.trim_start_matches("-C").starts_with(what))
    };
    if named("profile-generate") {
        "+instrumented"
    } else if named("profile-use") {
        "+pgo"
    } else {
        ""
    }
}
