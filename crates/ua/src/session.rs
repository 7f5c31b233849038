//! The media of one call: RTP (or SRTP) sent every 20 ms on a
//! drift-free grid from a tone, a recording or silence, received,
//! decoded, recorded and measured; RTCP (or SRTCP) sender reports every
//! 5 s and a BYE at the end. Two threads, one per direction.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use media::g711::Law;
use media::rtcp::{self, ReportBlock, SenderInfo};
use media::rtp::{self, Header, Pacer};
use media::stats::{ReceiveStats, Summary};
use media::tone::Tone;

/// What to send.
#[derive(Debug, Clone)]
pub enum Source {
    /// Silence.
    Silence,
    /// A sine tone at this frequency (Hz).
    Tone(f64),
    /// These samples (8 kHz), looped.
    Samples(Arc<Vec<i16>>),
}

/// The two sockets of one stream: RTP on an even port, RTCP on the next.
#[derive(Debug)]
pub struct Sockets {
    rtp: UdpSocket,
    rtcp: UdpSocket,
}

impl Sockets {
    /// Binds RTP at `port` (0: the first free even port from 20000) and
    /// RTCP at `port + 1` on `ip`.
    pub fn bind(ip: IpAddr, port: u16) -> std::io::Result<Self> {
        let pair = |p: u16| -> std::io::Result<Self> {
            Ok(Self {
                rtp: UdpSocket::bind((ip, p))?,
                rtcp: UdpSocket::bind((ip, p + 1))?,
            })
        };
        if port != 0 {
            return pair(port);
        }
        let mut offset = [0u8; 2];
        let _ = getrandom::fill(&mut offset);
        let start = 20_000 + (u16::from_be_bytes(offset) % 10_000) * 2;
        let mut last = None;
        for k in 0..500u16 {
            let p = 20_000 + (start - 20_000 + 2 * k) % 40_000;
            match pair(p) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free RTP port")))
    }

    /// The RTP port.
    pub fn port(&self) -> u16 {
        self.rtp.local_addr().map(|a| a.port()).unwrap_or(0)
    }
}

/// The SRTP contexts of a call, when it is secured.
pub struct Crypto {
    /// Protects what we send.
    pub tx: srtp::Context,
    /// Unprotects what we receive.
    pub rx: srtp::Context,
    /// The suite's name.
    pub suite: String,
}

/// What a call's media did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MediaReport {
    /// RTP packets sent.
    pub sent: u64,
    /// Receive statistics.
    pub received: Summary,
    /// Packets refused by SRTP (forged, replayed, wrong key), not RTP, or
    /// from another address than the call's media source (the first
    /// heard).
    pub rejected: u64,
    /// RTCP packets received and understood.
    pub rtcp_received: u64,
    /// The SRTP suite, when secured.
    pub srtp: Option<String>,
    /// The payload's law.
    pub law: Law,
    /// The decoded audio (not serialised).
    #[serde(skip)]
    pub recording: Vec<i16>,
}

/// Media running in the background.
pub struct Running {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    sender: JoinHandle<u64>,
    receiver: JoinHandle<(ReceiveStats, u64, u64, Vec<i16>)>,
    srtp: Option<String>,
    law: Law,
}

/// At most an hour of recording.
const MAX_RECORDING: usize = 3_600 * 8_000;

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    u32::from_be_bytes(b)
}

/// Starts sending `packets` packets to `remote` (RTP; RTCP on the next
/// port) and receiving on `sockets` until [`Running::finish`].
pub fn start(
    sockets: Sockets,
    remote: SocketAddr,
    law: Law,
    source: Source,
    packets: u64,
    crypto: Option<Crypto>,
    cname: String,
) -> std::io::Result<Running> {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let (tx_ctx, rx_ctx, suite) = match crypto {
        Some(c) => (Some(c.tx), Some(c.rx), Some(c.suite)),
        None => (None, None, None),
    };
    let reports = Arc::new(Mutex::new((0u32, 0u32))); // (highest seq, jitter) for reports
    let sending = Sending {
        rtp: sockets.rtp.try_clone()?,
        rtcp: sockets.rtcp.try_clone()?,
        remote,
        remote_rtcp: SocketAddr::new(remote.ip(), remote.port().wrapping_add(1)),
        ssrc: random_u32(),
        law,
        source,
        packets,
        cname,
        ctx: tx_ctx,
        stop: stop.clone(),
        sent: sent.clone(),
        reports: reports.clone(),
    };
    sockets
        .rtp
        .set_read_timeout(Some(Duration::from_millis(20)))?;
    sockets.rtcp.set_nonblocking(true)?;
    let receiving = Receiving {
        rtp: sockets.rtp,
        rtcp: sockets.rtcp,
        ctx: rx_ctx,
        stop: stop.clone(),
        reports,
    };
    Ok(Running {
        stop,
        sent,
        sender: std::thread::spawn(move || sending.run()),
        receiver: std::thread::spawn(move || receiving.run()),
        srtp: suite,
        law,
    })
}

/// The sending half of a session, on its own thread.
struct Sending {
    rtp: UdpSocket,
    rtcp: UdpSocket,
    remote: SocketAddr,
    remote_rtcp: SocketAddr,
    ssrc: u32,
    law: Law,
    source: Source,
    packets: u64,
    cname: String,
    ctx: Option<srtp::Context>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    /// What the receiving half last saw: (highest seq, jitter).
    reports: Arc<Mutex<(u32, u32)>>,
}

impl Sending {
    /// Sends every 20 ms until `packets` or the stop, an RTCP sender
    /// report every 5 s and a BYE at the end; returns the packets sent.
    fn run(mut self) -> u64 {
        let mut tone = match &self.source {
            Source::Tone(f) => Some(Tone::new(*f, media::RATE, 8_000.0)),
            _ => None,
        };
        let mut seq = random_u32() as u16;
        let mut ts = random_u32();
        let mut pcm = vec![0i16; media::SAMPLES_PER_PACKET];
        let mut at = 0usize;
        let mut octets = 0u32;
        let mut pacer = Pacer::new(Instant::now(), Duration::from_millis(20));
        let mut buf = Vec::with_capacity(256);
        for n in 0..self.packets {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let due = pacer.next_due();
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            match (&self.source, tone.as_mut()) {
                (_, Some(t)) => t.fill(&mut pcm),
                (Source::Samples(s), _) if !s.is_empty() => {
                    for x in pcm.iter_mut() {
                        *x = s[at % s.len()];
                        at += 1;
                    }
                }
                _ => pcm.fill(0),
            }
            buf.clear();
            Header {
                payload_type: self.law.payload_type(),
                marker: n == 0,
                seq,
                timestamp: ts,
                ssrc: self.ssrc,
            }
            .write(&mut buf);
            self.law.encode(&pcm, &mut buf);
            if let Some(c) = self.ctx.as_mut() {
                if c.protect(&mut buf).is_err() {
                    break;
                }
            }
            let _ = self.rtp.send_to(&buf, self.remote);
            octets = octets.wrapping_add(media::SAMPLES_PER_PACKET as u32);
            if n % 250 == 0 {
                self.report(n as u32 + 1, octets, ts, false);
            }
            pacer.sent();
            self.sent.fetch_add(1, Ordering::Relaxed);
            seq = seq.wrapping_add(1);
            ts = ts.wrapping_add(media::SAMPLES_PER_PACKET as u32);
        }
        let n = pacer.count();
        self.report(n as u32, octets, ts, true);
        n
    }

    /// An RTCP compound packet: sender report, source description, and
    /// BYE when `bye`.
    fn report(&mut self, packets: u32, octets: u32, ts: u32, bye: bool) {
        let (highest, jitter) = *self.reports.lock().unwrap_or_else(|e| e.into_inner());
        let block = ReportBlock {
            ssrc: 0,
            highest_seq: highest,
            jitter,
            ..ReportBlock::default()
        };
        let info = SenderInfo {
            ntp: rtcp::ntp(SystemTime::now()),
            rtp_timestamp: ts,
            packets,
            octets,
        };
        let mut p = rtcp::compound(self.ssrc, Some(&info), &[block], &self.cname, bye);
        if let Some(c) = self.ctx.as_mut() {
            if c.protect_rtcp(&mut p).is_err() {
                return;
            }
        }
        let _ = self.rtcp.send_to(&p, self.remote_rtcp);
    }
}

/// The receiving half of a session, on its own thread.
struct Receiving {
    rtp: UdpSocket,
    rtcp: UdpSocket,
    ctx: Option<srtp::Context>,
    stop: Arc<AtomicBool>,
    reports: Arc<Mutex<(u32, u32)>>,
}

/// Where a call's media comes from: the first address whose packet is
/// RTP of the call (authenticated, under SRTP). After it is heard,
/// packets from any other address are refused: whoever finds the port
/// cannot speak into the call (RTP injection), as a strict RTP endpoint
/// latches. Its RTCP is taken from the same host, at any port.
#[derive(Debug, Default)]
struct Latch(Option<SocketAddr>);

impl Latch {
    fn admits_rtp(&self, from: SocketAddr) -> bool {
        self.0.is_none_or(|s| s == from)
    }

    fn admits_rtcp(&self, from: SocketAddr) -> bool {
        self.0.is_none_or(|s| s.ip() == from.ip())
    }

    fn heard(&mut self, from: SocketAddr) {
        self.0.get_or_insert(from);
    }
}

/// Packets read after the stop, at most: what had arrived is heard,
/// and a flood cannot hold the call open.
const DRAIN: usize = 256;

impl Receiving {
    /// Receives until the stop, then what has arrived (up to [`DRAIN`]
    /// packets): statistics, packets rejected, RTCP packets read, and
    /// the decoded audio (placed by timestamp).
    fn run(mut self) -> (ReceiveStats, u64, u64, Vec<i16>) {
        let mut r = Received {
            origin: Instant::now(),
            stats: ReceiveStats::new(media::RATE),
            rejected: 0,
            rtcp_received: 0,
            recording: Vec::new(),
            first_ts: None,
            latch: Latch::default(),
            decoded: Vec::with_capacity(media::SAMPLES_PER_PACKET),
        };
        let mut buf = vec![0u8; 2048];
        let mut drained = 0;
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            if stopping && drained == 0 {
                let _ = self.rtp.set_nonblocking(true);
            }
            match self.rtp.recv_from(&mut buf) {
                Ok((n, from)) => r.rtp(&buf[..n], from, self.ctx.as_mut(), &self.reports),
                Err(_) if stopping => break,
                Err(_) => {}
            }
            while let Ok((n, from)) = self.rtcp.recv_from(&mut buf) {
                r.rtcp(&buf[..n], from, self.ctx.as_mut());
            }
            if stopping {
                drained += 1;
                if drained >= DRAIN {
                    break;
                }
            }
        }
        (r.stats, r.rejected, r.rtcp_received, r.recording)
    }
}

/// What the receiving half has heard so far.
struct Received {
    origin: Instant,
    stats: ReceiveStats,
    rejected: u64,
    rtcp_received: u64,
    recording: Vec<i16>,
    first_ts: Option<u32>,
    latch: Latch,
    decoded: Vec<i16>,
}

impl Received {
    /// A packet on the RTP port: RTP, or RTCP multiplexed (RFC 5761).
    fn rtp(
        &mut self,
        data: &[u8],
        from: SocketAddr,
        ctx: Option<&mut srtp::Context>,
        reports: &Mutex<(u32, u32)>,
    ) {
        if rtp::is_rtcp(data) {
            return self.rtcp(data, from, ctx);
        }
        if !self.latch.admits_rtp(from) {
            self.rejected += 1;
            return;
        }
        let arrival = self.origin.elapsed().as_secs_f64();
        let mut packet = data.to_vec();
        let wire = packet.len();
        if let Some(c) = ctx {
            if c.unprotect(&mut packet).is_err() {
                self.rejected += 1;
                return;
            }
        }
        let Some((h, payload)) = Header::parse(&packet) else {
            self.rejected += 1;
            return;
        };
        self.latch.heard(from);
        let Some(plaw) = Law::from_payload_type(h.payload_type) else {
            return; // telephone events, comfort noise
        };
        self.stats
            .on_packet(arrival, h.seq, h.timestamp, payload.len(), wire);
        *reports.lock().unwrap_or_else(|e| e.into_inner()) =
            (self.stats.highest_seq(), self.stats.jitter_units());
        self.decoded.clear();
        plaw.decode(&packet[payload], &mut self.decoded);
        let base = *self.first_ts.get_or_insert(h.timestamp);
        record(
            &mut self.recording,
            h.timestamp.wrapping_sub(base) as usize,
            &self.decoded,
        );
    }

    fn rtcp(&mut self, data: &[u8], from: SocketAddr, ctx: Option<&mut srtp::Context>) {
        match self.latch.admits_rtcp(from) && read_rtcp(data, ctx) {
            true => self.rtcp_received += 1,
            false => self.rejected += 1,
        }
    }
}

/// Puts `decoded` at sample `at` of the recording (at most an hour).
fn record(recording: &mut Vec<i16>, at: usize, decoded: &[i16]) {
    if at < MAX_RECORDING {
        let end = (at + decoded.len()).min(MAX_RECORDING);
        if recording.len() < end {
            recording.resize(end, 0);
        }
        recording[at..end].copy_from_slice(&decoded[..end - at]);
    }
}

/// Unprotects (when secured) and parses one RTCP packet.
fn read_rtcp(packet: &[u8], ctx: Option<&mut srtp::Context>) -> bool {
    let mut p = packet.to_vec();
    if let Some(c) = ctx {
        if c.unprotect_rtcp(&mut p).is_err() {
            return false;
        }
    }
    rtcp::parse(&p).is_some()
}

impl Running {
    /// Whether every packet asked for has been sent.
    pub fn sender_done(&self) -> bool {
        self.sender.is_finished()
    }

    /// Packets sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops both directions and reports.
    pub fn finish(self) -> MediaReport {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.sender.join().unwrap_or(0);
        let (stats, rejected, rtcp_received, recording) = self
            .receiver
            .join()
            .unwrap_or_else(|_| (ReceiveStats::new(media::RATE), 0, 0, Vec::new()));
        MediaReport {
            sent,
            received: stats.summary(0.0),
            rejected,
            rtcp_received,
            srtp: self.srtp,
            law: self.law,
            recording,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PCMU packet of 20 ms of `sample` (an encoded byte).
    fn packet(seq: u16, sample: u8) -> Vec<u8> {
        let mut b = Vec::new();
        Header {
            payload_type: 0,
            marker: false,
            seq,
            timestamp: u32::from(seq) * 160,
            ssrc: 7,
        }
        .write(&mut b);
        b.extend(std::iter::repeat_n(sample, media::SAMPLES_PER_PACKET));
        b
    }

    #[test]
    fn media_from_another_address_than_the_first_heard_is_refused() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        let ours = Sockets::bind(ip, 0).expect("sockets");
        let to = SocketAddr::new(ip, ours.port());
        let peer = UdpSocket::bind((ip, 0)).expect("peer");
        let intruder = UdpSocket::bind((ip, 0)).expect("intruder");
        let peer_at = peer.local_addr().expect("bound");
        let running = start(
            ours,
            peer_at,
            Law::Pcmu,
            Source::Tone(440.0),
            0,
            None,
            "t".into(),
        )
        .expect("started");
        // The peer speaks first; the intruder continues its sequence and
        // SSRC (what an injector forges), then the peer again. Loopback
        // delivers each before send_to returns, and the stop drains them.
        let (loud, silent) = (0x80u8, 0xffu8); // PCMU: near full scale, zero
        for seq in 0..10 {
            peer.send_to(&packet(seq, silent), to).expect("sent");
        }
        for seq in 10..30 {
            intruder.send_to(&packet(seq, loud), to).expect("sent");
        }
        for seq in 30..40 {
            peer.send_to(&packet(seq, silent), to).expect("sent");
        }
        let report = running.finish();
        assert_eq!(report.rejected, 20);
        assert_eq!(report.received.packets, 20);
        assert!(
            report.recording.iter().all(|&s| s.abs() < 100),
            "only silence heard"
        );
    }

    #[test]
    fn the_first_valid_packet_chooses_the_source() {
        let (a, b): (SocketAddr, SocketAddr) = (
            "192.0.2.1:4000".parse().expect("a"),
            "192.0.2.1:4002".parse().expect("b"),
        );
        let mut l = Latch::default();
        assert!(l.admits_rtp(a) && l.admits_rtp(b) && l.admits_rtcp(b));
        l.heard(a);
        l.heard(b);
        assert!(l.admits_rtp(a) && !l.admits_rtp(b));
        // RTCP from the source's host, at any port (RFC 3605 aside).
        assert!(l.admits_rtcp(b));
        assert!(!l.admits_rtcp("198.51.100.1:4001".parse().expect("c")));
    }
}
