//! WebSocket connections on a reactor: frames in, SIP messages out
//! (RFC 6455, RFC 7118), and the pace of their keep-alives.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use mio::Token;
use sip_core::framing::{frame, Frame};
use sip_core::writer::write_error_response;
use sip_core::{ErrorKind, Limits};

use crate::proto::metrics::CloseReason;
use sip_core::websocket::server::{self as websocket, Upgrade};

use super::shared::*;

impl Reactor {
    /// Handles every complete message at the start of `bytes`; returns
    /// how many bytes they took. `crlf` carries the CR/LF bytes a read
    /// ended with to the next. `Err`: why the connection must close: the
    /// stream cannot be framed (answered when possible), or it pings far
    /// beyond the keep-alive pace.
    pub(super) fn handle_frames(
        &mut self,
        conn: &Arc<Conn>,
        bytes: &[u8],
        crlf: &mut u8,
    ) -> Result<usize, CloseReason> {
        let limits = Limits::DEFAULT;
        let mut at = 0;
        loop {
            match frame(&bytes[at..], &limits) {
                Ok(Frame::KeepAlive(n)) => {
                    if !self.keepalive(conn, 1) {
                        return Err(CloseReason::KeepaliveFlood);
                    }
                    // RFC 5626 §3.5.1: a CRLFCRLF ping gets a CRLF pong,
                    // also when its halves come in two reads.
                    *crlf = crlf.saturating_add(u8::try_from(n).unwrap_or(u8::MAX));
                    if *crlf >= 4 {
                        *crlf = 0;
                        let _ = lock(&conn.tx).queue(b"\r\n", self.hub.limits.queue_bytes);
                    }
                    at += n;
                }
                Ok(Frame::Message(n)) => {
                    *crlf = 0;
                    self.handle_message(conn, &bytes[at..at + n]);
                    at += n;
                }
                Err(e) if e.kind == ErrorKind::Incomplete => return Ok(at),
                Err(e) => {
                    self.out.clear();
                    if write_error_response(&bytes[at..], &e, &mut self.out) {
                        let _ = lock(&conn.tx).queue(&self.out, self.hub.limits.queue_bytes);
                    }
                    return Err(CloseReason::BadFraming);
                }
            }
            if at == bytes.len() {
                return Ok(at);
            }
        }
    }

    /// `n` bytes arrived on a WebSocket connection: its upgrade request,
    /// then frames, each message one SIP message (RFC 7118 §5.1).
    /// `false`: the connection was closed.
    pub(super) fn received_ws(&mut self, t: Token, n: usize) -> bool {
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        let now = Instant::now();
        l.last_read = now;
        let conn = l.conn.clone();
        let mut inbuf = std::mem::take(&mut l.inbuf);
        let Some(mut state) = l.ws.take() else {
            return false;
        };
        inbuf.extend_from_slice(&self.scratch[..n]);
        let hub = self.hub.clone();
        let limit = hub.limits.queue_bytes;
        let settings = &hub.shared.config.websocket;
        let mut used = 0;
        if state.is_none() {
            match websocket::upgrade(&inbuf, &settings.origins) {
                Upgrade::Incomplete => {}
                Upgrade::Refuse { response, why } => {
                    hub.shared
                        .metrics
                        .ws_upgrades_refused
                        .fetch_add(1, Ordering::Relaxed);
                    let _ = lock(&conn.tx).queue_raw(&[&response], limit);
                    crate::io::log::connection_trouble(&format!(
                        "{}: WebSocket upgrade refused: {why}",
                        conn.peer
                    ));
                    self.close(t, CloseReason::WebSocket);
                    return false;
                }
                Upgrade::Accept { used: u, response } => {
                    let mut tx = lock(&conn.tx);
                    let sent = tx.queue_raw(&[&response], limit);
                    tx.wire = Wire::Frames;
                    drop(tx);
                    if sent.is_err() {
                        self.close(t, CloseReason::Error);
                        return false;
                    }
                    hub.shared
                        .metrics
                        .ws_upgrades
                        .fetch_add(1, Ordering::Relaxed);
                    *state = Some(websocket::Decoder::default());
                    used = u;
                }
            }
        }
        let mut peer_closed = None;
        let mut violation = None;
        let mut flooded = false;
        if let Some(decoder) = state.as_mut() {
            match decoder.decode(&mut inbuf[used..], settings.max_message, |e| match e {
                websocket::Event::Message(m) => self.handle_message(&conn, m),
                websocket::Event::Ping(p) => {
                    if !flooded && self.keepalive(&conn, 1) {
                        let _ = lock(&conn.tx).queue_raw(&[&websocket::pong(p)], limit);
                    } else {
                        flooded = true;
                    }
                }
                websocket::Event::Close(code) => peer_closed = Some(code),
            }) {
                Ok(u) => used += u,
                Err(v) => violation = Some(v),
            }
        }
        if flooded {
            let code = websocket::close::POLICY_VIOLATION;
            let _ = lock(&conn.tx).queue_raw(&[&websocket::close_frame(code)], limit);
            self.close(t, CloseReason::KeepaliveFlood);
            return false;
        }
        if let Some(v) = violation {
            let _ = lock(&conn.tx).queue_raw(&[&websocket::close_frame(v.code)], limit);
            crate::io::log::connection_trouble(&format!(
                "{}: WebSocket closed with {}: {}",
                conn.peer, v.code, v.why
            ));
            self.close(t, CloseReason::WebSocket);
            return false;
        }
        if let Some(code) = peer_closed {
            // RFC 6455 §5.5.1: answer the close, then end the connection.
            let echo = code
                .filter(|c| (1000..5000).contains(c) && !matches!(c, 1004..=1006 | 1015))
                .unwrap_or(websocket::close::NORMAL);
            let _ = lock(&conn.tx).queue_raw(&[&websocket::close_frame(echo)], limit);
            self.close(t, CloseReason::Peer);
            return false;
        }
        let Some(l) = self.locals.get_mut(&t) else {
            return false;
        };
        inbuf.drain(..used);
        let midway = state.as_ref().as_ref().is_some_and(|d| d.is_midway());
        if inbuf.is_empty() && !midway {
            l.message_start = None;
            l.inbuf = Vec::new();
        } else {
            l.message_start.get_or_insert(now);
            if inbuf.is_empty() {
                inbuf = Vec::new();
            }
            l.inbuf = inbuf;
        }
        l.ws = Some(state);
        true
    }

    /// Counts `n` keep-alives (CRLF or WebSocket pings) from `conn`
    /// against its pace and its source's request rate; `false` when the
    /// connection pings far beyond RFC 5626's pace and must close.
    pub(super) fn keepalive(&mut self, conn: &Conn, n: u32) -> bool {
        let m = &self.hub.shared.metrics;
        m.conn_keepalives.fetch_add(u64::from(n), Ordering::Relaxed);
        let rate = self.hub.limits.keepalive_rate;
        let Some(l) = self.locals.get_mut(&conn.token) else {
            return false;
        };
        let now = Instant::now();
        let mut allowed = l.pings.refill(now, f64::from(rate), ping_burst(rate));
        for _ in 0..n {
            if allowed == 0 {
                return false;
            }
            allowed -= 1;
            l.pings.tokens -= 1.0;
            // The source's request rate pays for them too (the guard).
            if self.hub.shared.guard.admit(
                conn.peer.ip(),
                crate::proto::guard::Scope::of(conn.transport),
                crate::io::clock::now().unix_ms,
            ) != crate::proto::guard::Verdict::Admit
            {
                m.rate_limited.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        true
    }
}
