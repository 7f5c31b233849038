//! Receive-side call quality: packet inter-arrival delta, interarrival
//! jitter (RFC 3550 §6.4.1, computed as in its A.8), throughput at IP
//! level and of the payload, loss, reordering, duplicates, and an E-model
//! (ITU-T G.107) MOS estimate.

use serde::Serialize;

/// IPv4 and UDP header bytes added to each RTP datagram on the wire.
pub const IP_UDP_OVERHEAD: usize = 28;
const HISTORY: usize = 1024;

/// Statistics of one received RTP stream.
#[derive(Debug, Clone)]
pub struct ReceiveStats {
    clock_rate: f64,
    received: u64,
    duplicates: u64,
    reordered: u64,
    min_ext: u64,
    max_ext: u64,
    /// Slot `ext % HISTORY` holds the extended sequence number last seen there.
    seen: Vec<u64>,
    first_arrival: f64,
    prev_arrival: Option<f64>,
    prev_timestamp: u32,
    delta_sum: f64,
    delta_max: f64,
    deltas: u64,
    jitter: f64,
    jitter_sum: f64,
    jitter_max: f64,
    last_arrival: f64,
    payload_bytes: u64,
    wire_bytes: u64,
    /// The first packet's bytes (payload, wire): it opens the measured
    /// interval, so throughput counts the others only.
    first_bytes: (u64, u64),
}

/// A summary, ready for tables and JSON.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Distinct packets received.
    pub packets: u64,
    /// Packets expected from the sequence numbers seen.
    pub expected: u64,
    /// Packets lost (expected − received).
    pub lost: u64,
    /// Loss in percent of expected.
    pub loss_percent: f64,
    /// Copies of packets already received.
    pub duplicates: u64,
    /// Packets that arrived after a later one.
    pub reordered: u64,
    /// Largest gap between consecutive arrivals, ms.
    pub delta_max_ms: f64,
    /// Mean gap between consecutive arrivals, ms.
    pub delta_mean_ms: f64,
    /// Largest interarrival jitter estimate, ms.
    pub jitter_max_ms: f64,
    /// Mean interarrival jitter estimate over the packets, ms.
    pub jitter_mean_ms: f64,
    /// Throughput counting IP, UDP and (S)RTP headers, bit/s: the bytes
    /// of every packet after the first over the first to last arrival
    /// (n packets span n − 1 intervals).
    pub ip_bps: f64,
    /// Throughput of the payload alone, bit/s, counted the same way.
    pub payload_bps: f64,
    /// First to last arrival, s.
    pub duration_s: f64,
    /// E-model MOS estimate (see [`mos`]); `None` when no packet arrived,
    /// since a silent call has no quality to estimate.
    pub mos: Option<f64>,
}

impl Summary {
    /// The MOS with two decimals, or `n/a` without media.
    pub fn mos_text(&self) -> String {
        self.mos
            .map_or_else(|| "n/a".to_owned(), |m| format!("{m:.2}"))
    }
}

impl ReceiveStats {
    /// Statistics for a stream with an RTP clock of `clock_rate` Hz.
    pub fn new(clock_rate: u32) -> Self {
        Self {
            clock_rate: f64::from(clock_rate),
            received: 0,
            duplicates: 0,
            reordered: 0,
            min_ext: 0,
            max_ext: 0,
            seen: vec![u64::MAX; HISTORY],
            first_arrival: 0.0,
            first_bytes: (0, 0),
            prev_arrival: None,
            prev_timestamp: 0,
            delta_sum: 0.0,
            delta_max: 0.0,
            deltas: 0,
            jitter: 0.0,
            jitter_sum: 0.0,
            jitter_max: 0.0,
            last_arrival: 0.0,
            payload_bytes: 0,
            wire_bytes: 0,
        }
    }

    /// Records a packet arriving `arrival` seconds after any fixed origin,
    /// with its sequence number, RTP timestamp, payload length and length
    /// on the wire (RTP or SRTP, without IP/UDP).
    pub fn on_packet(
        &mut self,
        arrival: f64,
        seq: u16,
        timestamp: u32,
        payload: usize,
        wire: usize,
    ) {
        // Extended sequence number: the candidate nearest the highest so far.
        let ext = if self.received == 0 && self.duplicates == 0 {
            (1u64 << 16) | u64::from(seq)
        } else {
            let base = (self.max_ext & !0xffff) | u64::from(seq);
            [base.wrapping_sub(1 << 16), base, base + (1 << 16)]
                .into_iter()
                .min_by_key(|c| c.abs_diff(self.max_ext))
                .unwrap_or(base)
        };
        let slot = (ext % HISTORY as u64) as usize;
        if self.seen[slot] == ext {
            self.duplicates += 1;
            return;
        }
        self.seen[slot] = ext;
        if self.received == 0 {
            self.min_ext = ext;
            self.max_ext = ext;
            self.first_arrival = arrival;
            self.first_bytes = (payload as u64, (wire + IP_UDP_OVERHEAD) as u64);
        } else if ext < self.max_ext {
            self.reordered += 1;
            self.min_ext = self.min_ext.min(ext);
        } else {
            self.max_ext = ext;
        }
        self.received += 1;
        self.payload_bytes += payload as u64;
        self.wire_bytes += (wire + IP_UDP_OVERHEAD) as u64;
        if let Some(prev) = self.prev_arrival {
            let delta = (arrival - prev) * 1_000.0;
            self.delta_sum += delta;
            self.delta_max = self.delta_max.max(delta);
            self.deltas += 1;
            // RFC 3550 A.8: D = (Rj − Ri) − (Sj − Si) in timestamp units.
            let sent = f64::from(timestamp.wrapping_sub(self.prev_timestamp) as i32);
            let d = ((arrival - prev) * self.clock_rate - sent).abs();
            self.jitter += (d - self.jitter) / 16.0;
        }
        let jitter_ms = self.jitter / self.clock_rate * 1_000.0;
        self.jitter_sum += jitter_ms;
        self.jitter_max = self.jitter_max.max(jitter_ms);
        self.prev_arrival = Some(arrival);
        self.prev_timestamp = timestamp;
        self.last_arrival = self.last_arrival.max(arrival);
    }

    /// The jitter estimate now, in timestamp units (for RTCP reports).
    pub fn jitter_units(&self) -> u32 {
        self.jitter as u32
    }

    /// Extended highest sequence number (for RTCP reports).
    pub fn highest_seq(&self) -> u32 {
        self.max_ext as u32
    }

    /// The summary; `network_delay_ms` is the one-way network delay to
    /// assume for the MOS (0 on loopback).
    pub fn summary(&self, network_delay_ms: f64) -> Summary {
        let expected = if self.received == 0 {
            0
        } else {
            self.max_ext - self.min_ext + 1
        };
        let lost = expected.saturating_sub(self.received);
        let loss_percent = if expected == 0 {
            0.0
        } else {
            100.0 * lost as f64 / expected as f64
        };
        // n packets arrive over n − 1 intervals: the bytes after the first
        // packet over the time from the first arrival to the last.
        let duration = self.last_arrival - self.first_arrival;
        let per_s = |bytes: u64| {
            if duration > 0.0 {
                bytes as f64 * 8.0 / duration
            } else {
                0.0
            }
        };
        let jitter_mean = if self.received == 0 {
            0.0
        } else {
            self.jitter_sum / self.received as f64
        };
        // Mouth-to-ear: 20 ms packetisation, a jitter buffer of twice the
        // mean jitter (at least one packet), and the network.
        let delay = 20.0 + (2.0 * jitter_mean).max(20.0) + network_delay_ms;
        Summary {
            packets: self.received,
            expected,
            lost,
            loss_percent,
            duplicates: self.duplicates,
            reordered: self.reordered,
            delta_max_ms: self.delta_max,
            delta_mean_ms: if self.deltas == 0 {
                0.0
            } else {
                self.delta_sum / self.deltas as f64
            },
            jitter_max_ms: self.jitter_max,
            jitter_mean_ms: jitter_mean,
            ip_bps: per_s(self.wire_bytes - self.first_bytes.1),
            payload_bps: per_s(self.payload_bytes - self.first_bytes.0),
            duration_s: duration,
            mos: (self.received > 0).then(|| mos(loss_percent, delay)),
        }
    }
}

/// E-model MOS for G.711 (ITU-T G.107 with its default values, so
/// R = 93.2 − Id − Ie,eff): Id from the one-way delay `delay_ms` (the
/// usual simplification 0.024·d + 0.11·(d − 177.3) above 177.3 ms),
/// Ie,eff = 95·Ppl / (Ppl + Bpl) with G.711's Ie = 0 and Bpl = 4.3
/// (G.113: no packet loss concealment, random loss); R mapped to MOS by
/// G.107 Annex B.
pub fn mos(loss_percent: f64, delay_ms: f64) -> f64 {
    let id = 0.024 * delay_ms
        + if delay_ms > 177.3 {
            0.11 * (delay_ms - 177.3)
        } else {
            0.0
        };
    let ppl = loss_percent.clamp(0.0, 100.0);
    let ie_eff = 95.0 * ppl / (ppl + 4.3);
    let r = 93.2 - id - ie_eff;
    if r <= 0.0 {
        1.0
    } else if r >= 100.0 {
        4.5
    } else {
        // The polynomial dips just below 1 for R under about 6.5.
        (1.0 + 0.035 * r + r * (r - 60.0) * (100.0 - r) * 7e-6).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifty_packets_of_an_80_kbit_stream_measure_80_kbit() {
        // 50 packets 20 ms apart span 49 intervals (0.98 s); counting all
        // 50 packets' bytes over them would say 81.63 kbit/s.
        let mut s = ReceiveStats::new(8_000);
        for i in 0..50u32 {
            s.on_packet(1.5 + f64::from(i) * 0.02, i as u16, i * 160, 160, 172);
        }
        let m = s.summary(0.0);
        assert!((m.duration_s - 0.98).abs() < 1e-9);
        assert!(
            (m.ip_bps - 80_000.0).abs() <= 80.0,
            "80.0 kbit/s within 0.1 %: {}",
            m.ip_bps
        );
        let one = {
            let mut s = ReceiveStats::new(8_000);
            s.on_packet(1.0, 7, 0, 160, 172);
            s.summary(0.0)
        };
        assert_eq!(one.ip_bps, 0.0, "one packet spans no interval");
    }

    #[test]
    fn perfect_stream_every_20_ms() {
        let mut s = ReceiveStats::new(8_000);
        for i in 0..500u32 {
            let seq = (65_500 + i) as u16; // wraps
            s.on_packet(f64::from(i) * 0.02, seq, i * 160, 160, 172);
        }
        let m = s.summary(0.0);
        assert_eq!(
            (m.packets, m.expected, m.lost, m.duplicates, m.reordered),
            (500, 500, 0, 0, 0)
        );
        assert!((m.delta_mean_ms - 20.0).abs() < 1e-9 && (m.delta_max_ms - 20.0).abs() < 1e-9);
        assert!(m.jitter_max_ms < 1e-9);
        // 200 bytes per 20 ms on the wire: 80 kbit/s; 64 kbit/s payload.
        assert!((m.ip_bps - 80_000.0).abs() < 1e-6, "{}", m.ip_bps);
        assert!((m.payload_bps - 64_000.0).abs() < 1e-6);
        assert!(m.mos.is_some_and(|m| m > 4.3), "{:?}", m.mos);
    }

    #[test]
    fn loss_reordering_duplicates_and_jitter() {
        let mut s = ReceiveStats::new(8_000);
        let mut t = 0.0;
        for i in 0..100u32 {
            if i % 10 == 5 {
                continue; // lost
            }
            // Every other packet 4 ms late: jitter builds up.
            let late = if i % 2 == 1 { 0.004 } else { 0.0 };
            t = f64::from(i) * 0.02 + late;
            s.on_packet(t, i as u16, i * 160, 160, 172);
        }
        s.on_packet(t + 0.001, 50, 50 * 160, 160, 172); // duplicate
        s.on_packet(t + 0.002, 95, 95 * 160, 160, 172); // late arrival of a "lost" one
        let m = s.summary(0.0);
        assert_eq!(m.duplicates, 1);
        assert_eq!(m.reordered, 1);
        assert_eq!((m.expected, m.packets, m.lost), (100, 91, 9));
        assert!((m.loss_percent - 9.0).abs() < 1e-9);
        assert!(
            m.jitter_max_ms > 2.0 && m.jitter_max_ms < 10.0,
            "{}",
            m.jitter_max_ms
        );
        assert!(
            m.mos.is_some_and(|m| m < 3.0),
            "9 % loss without concealment: {:?}",
            m.mos
        );
    }

    #[test]
    fn mos_is_bounded_and_falls_with_loss_and_delay() {
        assert!(mos(0.0, 0.0) <= 4.5 && mos(0.0, 0.0) > 4.3);
        assert!(mos(1.0, 40.0) < mos(0.0, 40.0));
        assert!(mos(0.0, 400.0) < mos(0.0, 40.0));
        assert_eq!(mos(100.0, 0.0), 1.0);
    }
}
