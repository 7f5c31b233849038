//! What steering by Call-ID costs the kernel (`udp_balance = "call"`):
//! the SO_REUSEPORT program run on typical SIP datagrams through
//! `BPF_PROG_TEST_RUN`, nanoseconds a datagram. On a real interface that
//! time is spent in the receiving CPU's softirq, before any worker
//! wakes; on loopback it lands on the sender's CPU, so a server's own
//! CPU per call does not show it.

use std::time::Duration;

pub use sip_udp::Bound;
use sip_udp::CallSteering;

/// A datagram to steer.
pub struct Sample {
    /// What it is, for the table.
    pub name: &'static str,
    /// The UDP payload.
    pub bytes: Vec<u8>,
}

impl Sample {
    /// The socket of `workers` its Call-ID hashes to.
    pub fn index(&self, workers: u32) -> u32 {
        let text = String::from_utf8_lossy(&self.bytes);
        let call_id = text
            .lines()
            .find_map(|l| l.strip_prefix("Call-ID: "))
            .unwrap_or_default();
        CallSteering::index_of(call_id.as_bytes(), workers)
    }

    /// Bytes the program reads: through the byte that ends the
    /// Call-ID's value.
    pub fn scanned(&self) -> usize {
        let Some(at) = find(&self.bytes, b"\nCall-ID:") else {
            return self.bytes.len();
        };
        find(&self.bytes[at..], b"\r\n").map_or(self.bytes.len(), |e| at + e + 1)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A REGISTER as `sipsec bench` sends it, an INVITE with SDP that a
/// proxy passed on (two Vias, a Record-Route), its 180, and a request
/// whose Call-ID is its last field (the whole header section read).
pub fn samples() -> Vec<Sample> {
    let via = "Via: SIP/2.0/UDP 127.0.0.1:40001;branch=z9hG4bK-1f2e3d4c-00000001;rport\r\n";
    let register = format!(
        "REGISTER sip:127.0.0.1:5060 SIP/2.0\r\n{via}Max-Forwards: 70\r\n\
         From: <sip:user00042@127.0.0.1:5060>;tag=6b8b4567-327b23c6\r\n\
         To: <sip:user00042@127.0.0.1:5060>\r\nCall-ID: 643c9869-66334873@127.0.0.1\r\n\
         CSeq: 1 REGISTER\r\nContact: <sip:user00042@127.0.0.1:40001>\r\nExpires: 3600\r\n\
         Content-Length: 0\r\n\r\n"
    );
    let sdp = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
               m=audio 40000 RTP/AVP 0 8 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n\
               a=rtpmap:101 telephone-event/8000\r\n";
    let dialog = "Record-Route: <sip:198.51.100.1;lr>\r\n\
                  Via: SIP/2.0/UDP 198.51.100.1;branch=z9hG4bK-proxy-7c1a\r\n\
                  Via: SIP/2.0/UDP 192.0.2.10:5060;received=192.0.2.10;rport=5060;branch=z9hG4bK-ua-41d2\r\n\
                  From: \"Alice\" <sip:alice@example.com>;tag=1928301774\r\n\
                  To: <sip:bob@example.org>";
    let invite = format!(
        "INVITE sip:bob@203.0.113.5:5060 SIP/2.0\r\n{dialog}\r\nMax-Forwards: 69\r\n\
         Call-ID: a84b4c76e66710@pc33.example.com\r\nCSeq: 314159 INVITE\r\n\
         Contact: <sip:alice@192.0.2.10:5060>\r\nContent-Type: application/sdp\r\n\
         Content-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    );
    let ringing = format!(
        "SIP/2.0 180 Ringing\r\n{dialog};tag=314159\r\n\
         Call-ID: a84b4c76e66710@pc33.example.com\r\nCSeq: 314159 INVITE\r\n\
         Contact: <sip:bob@203.0.113.5:5060>\r\nContent-Length: 0\r\n\r\n"
    );
    let last = format!(
        "OPTIONS sip:127.0.0.1:5060 SIP/2.0\r\n{via}Max-Forwards: 70\r\n\
         From: <sip:monitor@127.0.0.1>;tag=99\r\nTo: <sip:127.0.0.1:5060>\r\nCSeq: 7 OPTIONS\r\n\
         Accept: application/sdp\r\nUser-Agent: sipsec-monitor\r\nContent-Length: 0\r\n\
         Call-ID: options-7@127.0.0.1\r\n\r\n"
    );
    [
        ("REGISTER", register),
        ("INVITE with SDP, via a proxy", invite),
        ("180 Ringing", ringing),
        ("Call-ID last", last),
    ]
    .into_iter()
    .map(|(name, m)| Sample {
        name,
        bytes: m.into_bytes(),
    })
    .collect()
}

/// One sample's cost: the program's mean time a run over `runs` runs,
/// for each of `rounds` rounds.
pub struct Cost {
    /// The datagram.
    pub sample: Sample,
    /// The mean time a run, a round each.
    pub rounds: Vec<Duration>,
}

/// Loads the program for `workers` sockets, its loops bounded as
/// `bound` says (`None`: as the server would, the first the kernel
/// accepts), and times it on each sample; an error (no `CAP_BPF` and
/// `CAP_PERFMON`, a kernel without the bound) says why.
pub fn measure(
    workers: u32,
    runs: u32,
    rounds: usize,
    bound: Option<Bound>,
) -> std::io::Result<(Bound, Vec<Cost>)> {
    let program = match bound {
        Some(b) => CallSteering::load_bounded(workers, b)?,
        None => CallSteering::load(workers)?,
    };
    let mut costs = Vec::new();
    for sample in samples() {
        if program.pick(&sample.bytes)? != Some(sample.index(workers)) {
            return Err(std::io::Error::other(format!(
                "the program did not steer the {} sample by its Call-ID",
                sample.name
            )));
        }
        let rounds = (0..rounds.max(1))
            .map(|_| program.time(&sample.bytes, runs))
            .collect::<std::io::Result<_>>()?;
        costs.push(Cost { sample, rounds });
    }
    Ok((program.bound(), costs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `measure` checks each sample's pick against its Call-ID's hash,
    /// with each bound here (root in CI).
    #[test]
    fn every_sample_is_steered_by_its_call_id() {
        for bound in [None, Some(Bound::Helper)] {
            let (_, costs) = measure(4, 10, 1, bound)
                .expect("the program loads (needs CAP_BPF and CAP_PERFMON)");
            assert_eq!(costs.len(), 4);
            for c in &costs {
                assert!(c.sample.scanned() <= c.sample.bytes.len());
            }
            let last = &costs[3].sample;
            assert_eq!(last.scanned(), last.bytes.len() - 3, "read to its end");
        }
    }
}
