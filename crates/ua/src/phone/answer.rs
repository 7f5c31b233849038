//! Answering calls: waiting for an INVITE, 180/200 with an SDP answer,
//! the media, BYE either way.

use super::*;
use sip_core::transaction::{Answered, Resend, TimerConfig};

impl Phone {
    /// Waits up to `wait` for a call, answers it at once and plays
    /// `packets` packets of `source` until the caller hangs up.
    pub fn answer(
        &mut self,
        wait: Duration,
        source: Source,
        packets: u64,
    ) -> Result<CallReport, PhoneError> {
        let (bytes, from) = self.wait_for_invite(wait)?;
        let m = Message::parse(&bytes).map_err(|e| PhoneError::Invalid(e.to_string()))?;
        let to_tag = sip::token(4);
        let trying = sip::response(&m, 100, "Trying", None, None, None);
        self.sig.send_to(&trying, from)?;
        let peer = sip::addr_uri(m.from().as_str()).to_string();
        let offer = sdp::parse(std::str::from_utf8(m.body()).unwrap_or(""));
        let refuse = |phone: &mut Self, code: u16, reason: &str| {
            let r = sip::response(&m, code, reason, Some(&to_tag), None, None);
            let _ = phone.sig.send_to(&r, from);
        };
        let offer = match offer {
            Ok(o) => o,
            Err(e) => {
                refuse(self, 488, "Not Acceptable Here");
                return Err(e.into());
            }
        };
        let Some(law) = [self.cfg.law, Law::Pcmu, Law::Pcma]
            .into_iter()
            .find(|l| offer.payloads.contains(&l.payload_type()))
        else {
            refuse(self, 488, "Not Acceptable Here");
            return Err(PhoneError::NoCommonSuite(
                "the offer has no G.711 payload".into(),
            ));
        };
        let sockets = Sockets::bind(self.local.ip(), self.cfg.rtp_port)?;
        let mut answer = Audio {
            addr: self.local.ip(),
            port: sockets.port(),
            savp: offer.savp,
            payloads: vec![law.payload_type()],
            crypto: Vec::new(),
        };
        let crypto = if self.cfg.srtp.is_empty() {
            if offer.savp {
                refuse(self, 488, "Not Acceptable Here");
                return Err(PhoneError::NoCommonSuite(
                    "the caller requires SRTP; start with --srtp".into(),
                ));
            }
            None
        } else {
            let Some(theirs) = sdes::choose(&offer.crypto, &self.cfg.srtp) else {
                refuse(self, 488, "Not Acceptable Here");
                return Err(PhoneError::NoCommonSuite(format!(
                    "{peer} offered {}",
                    offer
                        .crypto
                        .iter()
                        .map(|c| c.suite_name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            let mut key = vec![0u8; theirs.suite.key_len() + theirs.suite.salt_len()];
            getrandom::fill(&mut key)
                .map_err(|e| PhoneError::Invalid(format!("no randomness: {e}")))?;
            let mine = theirs
                .answer(key)
                .map_err(|e| PhoneError::Invalid(e.to_string()))?;
            answer.crypto.push(mine.clone());
            Some(contexts(&mine, theirs)?)
        };
        let ringing = sip::response(
            &m,
            180,
            "Ringing",
            Some(&to_tag),
            Some(&self.contact()),
            None,
        );
        self.sig.send_to(&ringing, from)?;
        let body = sdp::write(u64::from(std::process::id()), 1, &answer);
        let ok = sip::response(
            &m,
            200,
            "OK",
            Some(&to_tag),
            Some(&self.contact()),
            Some(("application/sdp", &body)),
        );
        let call_id = m.call_id().to_string();
        self.send_until_acked(&ok, from, &call_id)?;
        let remote = SocketAddr::new(offer.addr, offer.port);
        let media = Media {
            sockets,
            remote,
            law,
            source,
            packets,
            crypto,
        };
        let (running, hangup) = self.run_media(media, &call_id, false)?;
        Ok(CallReport {
            peer,
            provisional: Vec::new(),
            setup_s: 0.0,
            hangup: hangup.into(),
            media: running.finish(),
        })
    }

    /// The first INVITE to arrive within `wait`, and its source; other
    /// requests meanwhile get their usual answers.
    fn wait_for_invite(&mut self, wait: Duration) -> Result<(Vec<u8>, SocketAddr), PhoneError> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PhoneError::Timeout(format!(
                    "an incoming call ({} s)",
                    wait.as_secs()
                )));
            }
            let due = self.upkeep()?.unwrap_or(left);
            let Some((data, from)) = self
                .sig
                .recv(left.min(due).min(Duration::from_millis(500)))?
            else {
                continue;
            };
            if sip_core::stun::is_stun(&data) {
                self.on_stun(&data)?;
                continue;
            }
            let Ok(m) = Message::parse(&data) else {
                continue;
            };
            if m.is_request() && m.method() == Method::Invite {
                return Ok((data.clone(), from));
            }
            if m.is_request() {
                self.stray_request(&m, from);
            }
        }
    }

    /// Sends the 200 `ok` to `from`, again at T1 doubling to T2 over an
    /// unreliable transport, until its ACK comes or 64·T1 pass (RFC 3261
    /// §13.3.1.4, `sip_core::transaction::Answered`).
    fn send_until_acked(
        &mut self,
        ok: &[u8],
        from: SocketAddr,
        call_id: &str,
    ) -> Result<(), PhoneError> {
        self.sig.send_to(ok, from)?;
        let reliable = self.sig.reliable();
        let mut timer = Answered::new(Instant::now(), reliable, TimerConfig::RFC3261);
        while let Some(next) = timer.next_deadline() {
            let left = next.saturating_duration_since(Instant::now());
            if let Some((data, src)) = self.sig.recv(left)? {
                let Ok(r) = Message::parse(&data) else {
                    continue;
                };
                if r.is_request() && r.call_id() == call_id && r.method() == Method::Ack {
                    return Ok(());
                }
                if r.is_request() && !(r.method() == Method::Invite && r.call_id() == call_id) {
                    self.stray_request(&r, src);
                }
                continue;
            }
            match timer.on_timer(Instant::now()) {
                Resend::Again => self.sig.send_to(ok, from)?,
                Resend::GiveUp => break,
                Resend::Wait => {}
            }
        }
        Err(PhoneError::Timeout("the ACK for our 200 OK".into()))
    }
}
