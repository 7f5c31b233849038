//! `sipsec phone`: register, call and answer, with RTP or SRTP media.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use media::g711::Law;
use ua::phone::{CallReport, Config, Phone};
use ua::session::Source;

/// How `sipsec phone` reaches its server (the same `--transport` word as
/// `sipsec bench`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum PhoneTransport {
    Udp,
    Tls,
}
#[derive(Subcommand)]
pub enum PhoneCommand {
    /// Register with the server (digest authentication) and exit.
    Register {
        #[command(flatten)]
        who: Who,
        /// Remove the registration instead.
        #[arg(long)]
        unregister: bool,
    },
    /// Call a SIP URI: through --server, or straight to the URI's host.
    Call {
        /// Whom to call, e.g. sip:bob@127.0.0.1:5062.
        target: String,
        #[command(flatten)]
        who: Who,
        #[command(flatten)]
        media: MediaArgs,
        /// Register first (with --server).
        #[arg(long)]
        register: bool,
        /// Seconds to ring before CANCEL.
        #[arg(long, default_value_t = 30)]
        ring_timeout: u64,
    },
    /// Wait for a call and answer it at once (auto-answer).
    Answer {
        #[command(flatten)]
        who: Who,
        #[command(flatten)]
        media: MediaArgs,
        /// Register first (with --server).
        #[arg(long)]
        register: bool,
        /// Seconds to wait for the call.
        #[arg(long, default_value_t = 60)]
        wait: u64,
        /// While waiting, keep the registration alive through NAT: a
        /// keep-alive to the server every this many seconds (STUN over
        /// UDP, CRLF over TLS; RFC 5626 §4.4.1), re-registering when the
        /// address the server sees moves, and refreshing it at half its
        /// lifetime. 0: off.
        #[arg(long, default_value_t = 25)]
        keepalive: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LawArg {
    Pcmu,
    Pcma,
}

#[derive(Args)]
pub struct Who {
    /// Our user name.
    #[arg(long)]
    user: String,
    /// File holding the digest password (else $SIPSEC_PASSWORD).
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// Registrar and outbound proxy (UDP), e.g. 127.0.0.1:5060.
    #[arg(long)]
    server: Option<String>,
    /// With --server over UDP, also let calls from this address ring
    /// (repeated or comma-separated: the other nodes of the server's
    /// cluster). Calls from any other address than the server's are
    /// refused with 403: a call straight to the phone would bypass the
    /// server's authentication and policy.
    #[arg(long, value_delimiter = ',', conflicts_with = "insecure_any_caller")]
    trust: Vec<IpAddr>,
    /// With --server, let a call from any address ring, also one sent
    /// straight to the phone by whoever finds its port (scanners do).
    #[arg(long)]
    insecure_any_caller: bool,
    /// Our domain (default: the server's host, else our address).
    #[arg(long)]
    domain: Option<String>,
    /// Local SIP address (UDP).
    #[arg(long, default_value = "0.0.0.0:0")]
    bind: SocketAddr,
    /// Learn our public address from this STUN server (RFC 5389) for
    /// Contact and SDP.
    #[arg(long)]
    stun: Option<SocketAddr>,
    /// Registration lifetime, s.
    #[arg(long, default_value_t = 3600)]
    expires: u32,
    /// Signalling transport to --server: udp, or tls (--server is then the
    /// server's TLS address, --tls-ca needed); over TLS the SDES keys are
    /// protected in transit.
    #[arg(long, value_enum, default_value = "udp")]
    transport: PhoneTransport,
    /// The CA certificates (PEM) the server's certificate must chain to.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// The name the server's certificate must carry (default: --server's host).
    #[arg(long)]
    tls_name: Option<String>,
    /// Accept a server with a 1024-bit RSA key (too weak for new deployments).
    #[arg(long)]
    tls_allow_rsa_1024: bool,
    #[command(flatten)]
    privacy: PrivacyArgs,
}

/// Identity privacy (PrivaSIP), opt-in.
#[derive(Args)]
pub struct PrivacyArgs {
    /// PrivaSIP level: 1 encrypts our user (From, digest username) for our
    /// home proxy; 2 also the callee's (Request-URI, To) for theirs.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    privacy: Option<u8>,
    /// Our home proxy's public key or certificate (PEM): RSA gives
    /// RSA-OAEP, P-256 ECIES, X25519 HPKE.
    #[arg(long, requires = "privacy")]
    home_key: Option<PathBuf>,
    /// Encrypt for the home proxy with AES under a key from our password
    /// instead: gcm, or the published cbc.
    #[arg(long, conflicts_with = "home_key", requires = "privacy")]
    home_aes: Option<String>,
    /// The key id the home proxy publishes with its key.
    #[arg(long, default_value_t = 1)]
    home_key_id: u8,
    /// The callee's home proxy's public key or certificate (PrivaSIP-2).
    #[arg(long, requires = "privacy")]
    callee_key: Option<PathBuf>,
    /// The key id of --callee-key.
    #[arg(long, default_value_t = 1)]
    callee_key_id: u8,
    /// The home proxy's digest realm, for --home-aes [default: the domain].
    #[arg(long)]
    realm: Option<String>,
    /// Pseudonyms in base32 (shorter) instead of hex.
    #[arg(long)]
    base32: bool,
    /// PrivaSIP-3: enroll at registration (HPKE to --home-key, an X25519
    /// key) and use a fresh single-use ticket from the home proxy as our
    /// ID on each call: unlinkable calls for one symmetric operation at
    /// the proxy (server: `[privacy] tickets`).
    #[arg(long, requires = "home_key")]
    tickets: bool,
    /// The home proxy's ML-KEM-768 public key (`sipsec keygen mlkem`):
    /// PrivaSIP-3 enrollments become hybrid post-quantum (X25519 +
    /// ML-KEM-768), safe against a future quantum computer.
    #[arg(long, requires = "tickets")]
    home_pq_key: Option<PathBuf>,
}

fn read_cipher(path: &std::path::Path, key_id: u8) -> Result<ua::phone::IdCipher, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    privacy::keys::cipher_from_pem(&pem, key_id)
        .map(Arc::from)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The phone's PrivaSIP setup from the command line.
fn privacy_setup(
    a: &PrivacyArgs,
    user: &str,
    password: Option<&str>,
    domain: &str,
) -> Result<Option<ua::phone::PrivacySetup>, String> {
    let Some(level) = a.privacy else {
        return Ok(None);
    };
    let home: ua::phone::IdCipher = match (&a.home_key, a.home_aes.as_deref()) {
        (Some(k), _) => read_cipher(k, a.home_key_id)?,
        (None, Some(mode @ ("gcm" | "cbc"))) => {
            let password =
                password.ok_or("--home-aes derives its key from the password: give one")?;
            let realm = a.realm.as_deref().unwrap_or(domain);
            let ha1 =
                sip_core::digest::ha1(sip_core::digest::Algorithm::Sha256, user, realm, password);
            Arc::new(
                privacy::aes::AesId::new(ha1.as_str(), realm, a.home_key_id, mode == "cbc")
                    .map_err(|e| e.to_string())?,
            )
        }
        (None, Some(other)) => return Err(format!("--home-aes {other:?}: use gcm or cbc")),
        (None, None) => {
            return Err("--privacy needs the home proxy's key (--home-key) or --home-aes".into())
        }
    };
    let callee = match (level, &a.callee_key) {
        (2, Some(k)) => Some(read_cipher(k, a.callee_key_id)?),
        (2, None) => {
            return Err("--privacy 2 needs the callee's home proxy key (--callee-key)".into())
        }
        (_, Some(_)) => return Err("--callee-key is for --privacy 2".into()),
        _ => None,
    };
    Ok(Some(ua::phone::PrivacySetup {
        home,
        callee,
        encoding: if a.base32 {
            privacy::Encoding::Base32
        } else {
            privacy::Encoding::Hex
        },
        limit: 2048,
        tickets: a.tickets,
        pq: match &a.home_pq_key {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                Some(Arc::new(
                    privacy::pq::PqPublic::from_pem(&pem)
                        .map_err(|e| format!("{}: {e}", path.display()))?,
                ))
            }
            None => None,
        },
    }))
}

#[derive(Args)]
pub struct MediaArgs {
    /// SRTP suites to offer or accept, comma-separated SDES names
    /// (e.g. AES_CM_128_HMAC_SHA1_80,AES_192_CM_HMAC_SHA1_80,AEAD_AES_128_GCM).
    #[arg(long, value_delimiter = ',')]
    srtp: Vec<String>,
    /// Accept that SDES keys travel in clear SIP (UDP signalling).
    #[arg(long)]
    insecure_sdes: bool,
    /// Play this WAV file (8 kHz; looped).
    #[arg(long, conflicts_with = "tone")]
    play: Option<PathBuf>,
    /// Play a sine tone of this frequency (Hz).
    #[arg(long)]
    tone: Option<f64>,
    /// Record what we receive into this WAV file.
    #[arg(long)]
    record: Option<PathBuf>,
    /// RTP packets (20 ms each) to send.
    #[arg(long, default_value_t = 500)]
    packets: u64,
    /// Write the call's statistics as JSON here.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// The G.711 law to prefer.
    #[arg(long, value_enum, default_value_t = LawArg::Pcmu)]
    law: LawArg,
    /// RTP port (0: any free even port).
    #[arg(long, default_value_t = 0)]
    rtp_port: u16,
}

fn password(who: &Who) -> Result<Option<String>, String> {
    if let Some(p) = &who.password_file {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        return Ok(Some(text.trim_end_matches(['\r', '\n']).to_string()));
    }
    Ok(std::env::var("SIPSEC_PASSWORD").ok())
}

fn stun_ip(server: SocketAddr, bind: SocketAddr) -> Result<IpAddr, String> {
    let sock =
        UdpSocket::bind(SocketAddr::new(bind.ip(), 0)).map_err(|e| format!("STUN socket: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| e.to_string())?;
    let mut txid = [0u8; 12];
    getrandom::fill(&mut txid).map_err(|e| e.to_string())?;
    let req = sip_core::stun::binding_request(txid);
    let mut buf = [0u8; 1500];
    for _ in 0..4 {
        sock.send_to(&req, server)
            .map_err(|e| format!("STUN {server}: {e}"))?;
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            return sip_core::stun::parse_response(&buf[..n], &txid)
                .map(|a| a.ip())
                .map_err(|e| format!("STUN {server}: {e}"));
        }
    }
    Err(format!("STUN {server}: no answer"))
}

fn config(who: &Who, media: Option<&MediaArgs>, ring_timeout: u64) -> Result<Config, String> {
    let server = match &who.server {
        Some(s) => {
            let (host, port) = match s.rsplit_once(':') {
                Some((h, p)) if !h.ends_with(']') || s.starts_with('[') => (
                    h.to_string(),
                    Some(
                        p.parse::<u16>()
                            .map_err(|_| format!("--server {s}: bad port"))?,
                    ),
                ),
                _ => (s.clone(), None),
            };
            let addrs = ua::resolve::resolve(&host, port, false, ua::resolve::system_nameserver())
                .map_err(|e| format!("--server: {e}"))?;
            Some(addrs[0])
        }
        None => None,
    };
    let domain = who
        .domain
        .clone()
        .unwrap_or_else(|| match (&who.server, server) {
            (Some(s), _) if s.parse::<SocketAddr>().is_err() => {
                s.rsplit_once(':').map_or(s.clone(), |(h, _)| h.to_string())
            }
            (_, Some(a)) => a.ip().to_string(),
            _ => "127.0.0.1".to_string(),
        });
    let public_ip = who.stun.map(|s| stun_ip(s, who.bind)).transpose()?;
    let (srtp, insecure_sdes, law, rtp_port) = match media {
        Some(m) => (
            m.srtp
                .iter()
                .map(|n| {
                    srtp::Profile::parse(n).ok_or_else(|| format!("--srtp: unknown suite {n:?}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            m.insecure_sdes,
            match m.law {
                LawArg::Pcmu => Law::Pcmu,
                LawArg::Pcma => Law::Pcma,
            },
            m.rtp_port,
        ),
        None => (Vec::new(), false, Law::Pcmu, 0),
    };
    let tls = match (&who.tls_ca, who.transport) {
        (None, PhoneTransport::Tls) => {
            return Err(
                "--transport tls: give --tls-ca with the CA certificates (PEM) the server's certificate chains to"
                    .into(),
            )
        }
        (Some(ca), PhoneTransport::Tls) => {
            let config = sipsec_bench::link::client_config(ca, who.tls_allow_rsa_1024)
                .map_err(|e| format!("--tls-ca: {e}"))?;
            let name = who.tls_name.clone().unwrap_or_else(|| match &who.server {
                Some(s) => s
                    .rsplit_once(':')
                    .map_or(s.clone(), |(h, _)| h.trim_matches(['[', ']']).to_string()),
                None => String::new(),
            });
            Some(ua::phone::TlsSetup { config, name })
        }
        _ => None,
    };
    if !srtp.is_empty() && insecure_sdes && tls.is_none() {
        eprintln!("warning: SDES over UDP signalling: the SRTP keys travel in clear SIP");
    }
    let password = password(who)?;
    let privacy = privacy_setup(&who.privacy, &who.user, password.as_deref(), &domain)?;
    Ok(Config {
        user: who.user.clone(),
        password,
        privacy,
        domain,
        server,
        callers: if who.insecure_any_caller {
            ua::phone::Callers::Anyone
        } else {
            ua::phone::Callers::Server(who.trust.clone())
        },
        bind: who.bind,
        public_ip,
        rtp_port,
        srtp,
        insecure_sdes,
        law,
        expires: who.expires,
        ring_timeout,
        tls,
    })
}

fn source(m: &MediaArgs) -> Result<Source, String> {
    Ok(match (&m.play, m.tone) {
        (Some(p), _) => Source::Samples(Arc::new(media::wav::read(p).map_err(|e| e.to_string())?)),
        (None, Some(f)) if f > 0.0 && f < 4_000.0 => Source::Tone(f),
        (None, Some(f)) => return Err(format!("--tone {f}: between 0 and 4000 Hz")),
        (None, None) => Source::Silence,
    })
}

fn report(r: &CallReport, m: &MediaArgs) -> Result<(), String> {
    let s = &r.media.received;
    println!(
        "call with {}: {} hung up; srtp {}; law {}",
        r.peer,
        r.hangup,
        r.media.srtp.as_deref().unwrap_or("off"),
        r.media.law.name()
    );
    println!(
        "sent {} packets; received {} (lost {}, {:.2} %), {} duplicates, {} reordered, {} rejected",
        r.media.sent,
        s.packets,
        s.lost,
        s.loss_percent,
        s.duplicates,
        s.reordered,
        r.media.rejected
    );
    if s.packets > 0 {
        println!(
            "delta max {:.2} ms mean {:.2} ms; jitter max {:.2} ms mean {:.2} ms; {:.1} kbit/s IP, {:.1} kbit/s payload; MOS {}",
            s.delta_max_ms,
            s.delta_mean_ms,
            s.jitter_max_ms,
            s.jitter_mean_ms,
            s.ip_bps / 1000.0,
            s.payload_bps / 1000.0,
            s.mos_text()
        );
    }
    if let Some(p) = &m.record {
        media::wav::write(p, &r.media.recording).map_err(|e| e.to_string())?;
    }
    if let Some(p) = &m.stats {
        crate::provenance::write_json(p, r)?;
    }
    if s.packets == 0 && m.packets > 0 {
        // A call that carried nothing is not a good call: no MOS, and a
        // failure the caller's script can see.
        return Err(format!(
            "no media received from {} ({} packet(s) sent, none came back): check the media path (NAT, firewall, the SDP address)",
            r.peer, r.media.sent
        ));
    }
    Ok(())
}

fn phone(cfg: Config) -> Result<Phone, String> {
    let mut p = Phone::new(cfg).map_err(|e| e.to_string())?;
    if let Some(tls) = p.tls_session() {
        eprintln!("tls {tls}");
    }
    p.on_progress(|line| eprintln!("{line}"));
    Ok(p)
}

fn register(p: &mut Phone, expires: u32) -> Result<(), String> {
    let granted = p.register(expires).map_err(|e| e.to_string())?;
    eprintln!("registered for {granted} s");
    Ok(())
}

fn run_inner(cmd: PhoneCommand) -> Result<(), String> {
    match cmd {
        PhoneCommand::Register { who, unregister } => {
            let mut p = phone(config(&who, None, 30)?)?;
            let expires = if unregister { 0 } else { who.expires };
            let granted = p.register(expires).map_err(|e| e.to_string())?;
            println!(
                "{} {}",
                if unregister {
                    "unregistered"
                } else {
                    "registered for"
                },
                if unregister {
                    String::new()
                } else {
                    format!("{granted} s")
                }
            );
            Ok(())
        }
        PhoneCommand::Call {
            target,
            who,
            media,
            register: reg,
            ring_timeout,
        } => {
            let src = source(&media)?;
            let mut p = phone(config(&who, Some(&media), ring_timeout)?)?;
            if reg {
                register(&mut p, who.expires)?;
            }
            let r = p
                .call(&target, src, media.packets)
                .map_err(|e| e.to_string())?;
            report(&r, &media)
        }
        PhoneCommand::Answer {
            who,
            media,
            register: reg,
            wait,
            keepalive,
        } => {
            let src = source(&media)?;
            let mut p = phone(config(&who, Some(&media), 30)?)?;
            if keepalive > 0 {
                p.keep_alive(Duration::from_secs(keepalive));
            }
            if reg {
                register(&mut p, who.expires)?;
            }
            eprintln!("waiting for a call on {}", p.local_addr());
            let r = p
                .answer(Duration::from_secs(wait), src, media.packets)
                .map_err(|e| e.to_string());
            if reg {
                let _ = p.register(0);
            }
            report(&r?, &media)
        }
    }
}

pub fn run(cmd: PhoneCommand) -> ExitCode {
    match run_inner(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sipsec phone: {e}");
            ExitCode::FAILURE
        }
    }
}
