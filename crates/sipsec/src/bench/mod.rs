//! `sipsec bench`: load generation against any SIP server on loopback.

mod common;
mod compare;
mod connections;
mod peak;
mod peers;
mod privacy;
mod relay;
mod rsa;
mod run;
mod scale;
mod security;
mod srtp;
mod steer;
mod stir;
mod trunk;
mod xdp;

use std::process::ExitCode;

use clap::Subcommand;

use compare::{compare, CompareArgs};
use connections::{connections, phones, ConnectionsArgs};
use peak::{peak, PeakArgs};
use privacy::{privacy_prepare, privacy_route, PrivacyPrepareArgs, PrivacyRouteArgs};
use relay::{relay, RelayArgs};
use rsa::{rsa_variants, RsaVariantsArgs};
use run::{null, run_scenario, NullArgs, RunArgs};
use scale::{scale_bench, ScaleArgs};
use security::{security, SecurityArgs};
use srtp::{srtp_bench, SrtpArgs};
use steer::{steer_bench, SteerArgs};
use stir::{stir_bench, StirArgs};
use trunk::{trunk_bench, TrunkArgs};
use xdp::{xdp_bench, XdpArgs};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Run one scenario against a server and report calls/s, failures,
    /// latency (percentiles, published buckets, coefficient) and server CPU.
    Run(Box<RunArgs>),
    /// Ramp the offered rate until the server falls behind; report peak and
    /// sustainable throughput (the published lean-server study) with every step.
    Peak(Box<PeakArgs>),
    /// Run scenarios against sipsec and Kamailio (started here, same users)
    /// and print the ratio table: calls/s and server CPU µs per call.
    Compare(Box<CompareArgs>),
    /// Workers against throughput: each server with 1, 2, 4, … workers
    /// under one flow, a few and thousands of phones; calls/s sustained,
    /// CPU per call and each worker's share of it (imbalance shows).
    Scale(Box<ScaleArgs>),
    /// Phones held on TCP or TLS connections: open and register N (from
    /// several loopback sources), hold them, refresh each once; server
    /// memory and threads per connection, CPU per handshake and per
    /// refresh, handshakes/s, failures; sipsec and Kamailio side by side.
    Connections(Box<ConnectionsArgs>),
    /// Calls whose media crosses rtpengine through the stateful proxy
    /// (both started here): N calls held at once with 20 ms G.711 packets
    /// both ways; calls, packets, loss per direction, and the CPU of the
    /// proxy and of rtpengine.
    Relay(Box<RelayArgs>),
    /// What each security layer costs, in one run: a REGISTER and a call
    /// plain, with digest MD5 and SHA-256, over TCP and TLS; full TLS
    /// handshakes with each RSA variant and ECDSA, X25519 and
    /// X25519MLKEM768, and resumed; SRTP per packet in every profile;
    /// PrivaSIP per call; STIR/SHAKEN signing and verifying. sipsec
    /// beside Kamailio (libsrtp for SRTP) where they can do it.
    Security(Box<SecurityArgs>),
    /// What STIR/SHAKEN costs a proxy per call: forwarding, signing and
    /// verifying INVITEs, sipsec beside Kamailio with secsipid in the same
    /// run (both stateless, one worker; the certificate cached).
    Stir(Box<StirArgs>),
    /// What a call through a trunk costs a stateful proxy that follows
    /// its dialog and writes its record, sipsec beside Kamailio with
    /// dispatcher + dialog + acc in the same run.
    Trunk(Box<TrunkArgs>),
    /// One process of phones for `bench connections` (told what to do on
    /// stdin, answering on stdout).
    #[command(hide = true)]
    Phones,
    /// The RSA-variant experiment: sipsec's proxy over TLS with server keys
    /// in each variant and size, calls over new TLS connections inbound
    /// (private-key side) and outbound (public-key side); CPU % and
    /// response time per offered rate.
    RsaVariants(Box<RsaVariantsArgs>),
    /// The SRTP experiment: ns per packet protect and unprotect for every
    /// profile, ours against libsrtp 2.7 on OpenSSL in the same run, and
    /// ours broken down per internal step.
    Srtp(Box<SrtpArgs>),
    /// The PrivaSIP INVITE-preparation experiment (published Table 1): ms
    /// to build an INVITE for plain SIP and each scheme and level.
    PrivacyPrepare(Box<PrivacyPrepareArgs>),
    /// The PrivaSIP server experiment (published Tables 2–7): INVITE → 180
    /// through two proxies started here, N calls in flight, for plain SIP
    /// and each scheme, level and mode.
    PrivacyRoute(Box<PrivacyRouteArgs>),
    /// Answer every request with 200 at once, over UDP and, when asked,
    /// TCP and TLS (framed by Content-Length, no other state): the
    /// generator's own ceiling, and the floor a server is measured against.
    Null(Box<NullArgs>),
    /// A UDP path past the kernel's stack: the null responder over AF_XDP
    /// against the same responder over recvmmsg/sendmmsg, on a veth pair
    /// in a network namespace made for the run (root); CPU per answer on
    /// each path at each offered rate.
    Xdp(Box<XdpArgs>),
    /// What steering UDP datagrams by Call-ID (`udp_balance = "call"`)
    /// costs the kernel: the SO_REUSEPORT program on typical datagrams
    /// (BPF_PROG_TEST_RUN; root, or CAP_BPF and CAP_PERFMON), ns a datagram.
    Steer(Box<SteerArgs>),
}

pub fn run(cmd: BenchCommand) -> ExitCode {
    let result = match cmd {
        BenchCommand::Run(a) => run_scenario(*a),
        BenchCommand::Compare(a) => compare(*a),
        BenchCommand::Relay(a) => relay(*a),
        BenchCommand::Stir(a) => stir_bench(*a),
        BenchCommand::Security(a) => security(*a),
        BenchCommand::Trunk(a) => trunk_bench(*a),
        BenchCommand::Connections(a) => connections(*a),
        BenchCommand::Phones => phones(),
        BenchCommand::RsaVariants(a) => rsa_variants(*a),
        BenchCommand::Srtp(a) => srtp_bench(*a),
        BenchCommand::PrivacyPrepare(a) => privacy_prepare(*a),
        BenchCommand::PrivacyRoute(a) => privacy_route(*a),
        BenchCommand::Peak(a) => peak(*a),
        BenchCommand::Scale(a) => scale_bench(*a),
        BenchCommand::Null(a) => null(*a),
        BenchCommand::Xdp(a) => xdp_bench(*a),
        BenchCommand::Steer(a) => steer_bench(*a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
