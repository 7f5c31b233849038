//! Parses a bench message N times; run under `valgrind --tool=callgrind`
//! for a deterministic instruction count per parse:
//! `cargo build --release --example parse_loop -p sip-core &&
//!  valgrind --tool=callgrind target/release/examples/parse_loop register 10000`

use std::hint::black_box;

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "register".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let msg: &[u8] = match which.as_str() {
        "register" => include_bytes!("../testdata/bench/register.sip"),
        "invite" => include_bytes!("../testdata/bench/invite.sip"),
        "ok200" => include_bytes!("../testdata/bench/ok200.sip"),
        other => {
            eprintln!("unknown message {other}: register, invite or ok200");
            std::process::exit(2);
        }
    };
    let mut total = 0;
    for _ in 0..n {
        total += sip_core::Message::parse(black_box(msg)).map_or(0, |m| m.len());
    }
    println!("{total}");
}
