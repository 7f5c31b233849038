//! The request-handling core stays sans-IO: the modules that decide what
//! to answer read no clock, open no file or socket, and do not reach up
//! into the transports that drive them. Time comes in as `core::Now`;
//! the only clock read on the request path is the metrics' stopwatch for
//! sampled stage timings.

/// The decision modules and what each may not contain outside its tests.
const CORE: [(&str, &str); 3] = [
    ("core.rs", include_str!("../src/core.rs")),
    ("stateful.rs", include_str!("../src/stateful.rs")),
    ("guard.rs", include_str!("../src/guard.rs")),
];

const FORBIDDEN: [&str; 11] = [
    "Instant::now",
    "SystemTime",
    "std::fs",
    "File::",
    "UdpSocket",
    "TcpStream",
    "TcpListener",
    "crate::udp",
    "crate::tcp",
    "crate::server",
    "crate::http",
];

#[test]
fn the_decision_modules_read_no_clock_and_touch_no_file_or_socket() {
    for (name, text) in CORE {
        let code = text.split("#[cfg(test)]").next().unwrap_or(text);
        for (n, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or(line);
            for f in FORBIDDEN {
                assert!(
                    !line.contains(f),
                    "{name}:{}: `{f}` in a sans-IO module: pass it in from the driver instead\n{line}",
                    n + 1
                );
            }
        }
    }
}
