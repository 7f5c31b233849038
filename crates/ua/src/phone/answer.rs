//! Answering calls: waiting for an INVITE, 180/200 with an SDP answer,
//! the media, BYE either way.

use super::*;

impl Phone {
    /// Waits up to `wait` for a call, answers it at once and plays
    /// `packets` packets of `source` until the caller hangs up.
    pub fn answer(
        &mut self,
        wait: Duration,
        source: Source,
        packets: u64,
    ) -> Result<CallReport, PhoneError> {
        let (call_id, _, bytes) = self.wait_for_invite(wait)?;
        let m = Message::parse(&bytes).map_err(|e| PhoneError::Invalid(e.to_string()))?;
        let peer = sip::addr_uri(m.from().as_str()).to_string();
        let offer = sdp::parse(std::str::from_utf8(m.body()).unwrap_or(""));
        let refuse = |phone: &mut Self, code: u16, _reason: &str| {
            let _ = phone.agent.reject(&call_id, code, Instant::now());
            let _ = phone.flush();
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
        let body = sdp::write(u64::from(std::process::id()), 1, &answer);
        let now = Instant::now();
        let answered = self.agent.ring(&call_id, now).and_then(|()| {
            self.agent
                .accept(&call_id, Some(("application/sdp".into(), body)), now)
        });
        answered.map_err(|e| PhoneError::Invalid(e.to_string()))?;
        self.acked(&call_id)?;
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

    /// The first call to come within `wait`, as the agent handed it
    /// over; the registration is kept alive meanwhile.
    fn wait_for_invite(&mut self, wait: Duration) -> Result<Incoming, PhoneError> {
        self.accepting = true;
        let got = self.next_invite(wait);
        self.accepting = false;
        got
    }

    fn next_invite(&mut self, wait: Duration) -> Result<Incoming, PhoneError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(call) = self.invites.pop_front() {
                return Ok(call);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PhoneError::Timeout(format!(
                    "an incoming call ({} s)",
                    wait.as_secs()
                )));
            }
            let due = self.upkeep()?.unwrap_or(left);
            let until = Instant::now() + left.min(due).min(Duration::from_millis(500));
            let call = self.drive(Some(until), |_, e| match e {
                Event::Incoming {
                    call_id,
                    from,
                    message,
                } => Ok(Step::Done((call_id, from, message))),
                other => Ok(Step::Other(other)),
            })?;
            if let Some(call) = call {
                return Ok(call);
            }
        }
    }

    /// Waits for the ACK of our 2xx (the agent sends the 2xx again until
    /// it comes, RFC 3261 §13.3.1.4, or gives up after 64·T1).
    fn acked(&mut self, call_id: &str) -> Result<(), PhoneError> {
        let got = self.drive(None, |_, e| match e {
            Event::Request {
                call_id: c,
                method: Method::Ack,
                ..
            } if c == call_id => Ok(Step::Done(())),
            Event::AckTimeout { call_id: c } if c == call_id => {
                Err(PhoneError::Timeout("the ACK for our 200 OK".into()))
            }
            other => Ok(Step::Other(other)),
        })?;
        got.ok_or_else(|| PhoneError::Timeout("the ACK for our 200 OK".into()))
    }
}
