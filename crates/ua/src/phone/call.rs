//! Placing a call: INVITE with an SDP offer (SDES keys for SRTP), the
//! answer, the media and BYE.

use super::*;

impl Phone {
    pub(super) fn offer(&self, rtp_port: u16) -> Result<(Audio, Vec<Crypto>), PhoneError> {
        let mut ours = Vec::new();
        for (i, p) in self.cfg.srtp.iter().enumerate() {
            let mut key = vec![0u8; p.key_len() + p.salt_len()];
            getrandom::fill(&mut key)
                .map_err(|e| PhoneError::Invalid(format!("no randomness for SRTP keys: {e}")))?;
            ours.push(
                Crypto::new(i as u32 + 1, *p, key)
                    .map_err(|e| PhoneError::Invalid(e.to_string()))?,
            );
        }
        let other = match self.cfg.law {
            Law::Pcmu => Law::Pcma,
            Law::Pcma => Law::Pcmu,
        };
        Ok((
            Audio {
                addr: self.local.ip(),
                port: rtp_port,
                savp: !ours.is_empty(),
                payloads: vec![self.cfg.law.payload_type(), other.payload_type()],
                crypto: ours.clone(),
            },
            ours,
        ))
    }

    pub(super) fn resolve_uri(&self, uri: &str) -> Result<SocketAddr, PhoneError> {
        let parsed = sip_core::Uri::parse(uri, sip_core::UriContext::Header)
            .map_err(|e| PhoneError::Invalid(format!("{uri}: {e}")))?;
        let host = parsed
            .host()
            .ok_or_else(|| PhoneError::Invalid(format!("{uri}: no host")))?
            .to_string();
        crate::resolve::resolve(
            &host,
            parsed.port(),
            false,
            crate::resolve::system_nameserver(),
        )
        .map_err(|e| PhoneError::Invalid(e.to_string()))?
        .into_iter()
        .next()
        .ok_or_else(|| PhoneError::Invalid(format!("{uri}: no address")))
    }

    /// Calls `target` (a SIP URI): through the server when one is set,
    /// else straight to the URI's host. Sends `packets` packets of
    /// `source`, then hangs up (unless the callee does first).
    pub fn call(
        &mut self,
        target: &str,
        source: Source,
        packets: u64,
    ) -> Result<CallReport, PhoneError> {
        let target = if target.starts_with("sip:") || target.starts_with("sips:") {
            target.to_string()
        } else {
            format!("sip:{target}")
        };
        let dest = match self.cfg.server {
            Some(s) => s,
            None => self.resolve_uri(&target)?,
        };
        let sockets = Sockets::bind(self.local.ip(), self.cfg.rtp_port)
            .or_else(|_| Sockets::bind(self.cfg.bind.ip(), self.cfg.rtp_port))?;
        let (audio, ours) = self.offer(sockets.port())?;
        let session_id = u64::from_str_radix(&sip::token(4), 16).unwrap_or(1);
        let body = sdp::write(session_id, 1, &audio);
        let me = self.identity(true)?;
        let uri = self.callee_uri(&target)?;
        let started = Instant::now();
        let ring = Some(Duration::from_secs(self.cfg.ring_timeout));
        let sdp = Some(("application/sdp".to_string(), body));
        let (tx, call_id) = self
            .agent
            .invite(dest, &me, &uri, sdp, ring, started)
            .map_err(|e| PhoneError::Invalid(e.to_string()))?;
        let f = self.final_response(tx)?;
        let (code, reason) = (f.code, f.reason.clone());
        match code {
            200..=299 => {}
            487 if f.cancelled => return Err(PhoneError::NoAnswer(self.cfg.ring_timeout)),
            // (A 403 is policy, e.g. relaying denied: reported below
            // with its Warning.)
            401 | 407 => return Err(self.refused("INVITE", &f)),
            486 | 600 => return Err(PhoneError::Busy(format!("{target} ({code} {reason})"))),
            404 | 604 => return Err(PhoneError::NotFound(format!("{target} ({code} {reason})"))),
            488 | 606 => {
                return Err(PhoneError::NoCommonSuite(format!(
                    "{target} answered {code} {reason}"
                )))
            }
            _ => {
                return Err(PhoneError::Status {
                    what: "INVITE".into(),
                    code,
                    reason,
                })
            }
        }
        let setup_s = started.elapsed().as_secs_f64();
        let m = Message::parse(&f.message).map_err(|e| PhoneError::Invalid(e.to_string()))?;
        // The agent sent the ACK. The answer decides the media; a bad one
        // ends the call at once.
        let negotiated = sdp::parse(std::str::from_utf8(m.body()).unwrap_or(""))
            .map_err(PhoneError::from)
            .and_then(|a| self.negotiate_answer(&a, &ours).map(|c| (a, c)));
        let (answer, crypto) = match negotiated {
            Ok(x) => x,
            Err(e) => {
                self.hang_up(&call_id);
                return Err(e);
            }
        };
        let law = answer.law().unwrap_or(self.cfg.law);
        let remote = SocketAddr::new(answer.addr, answer.port);
        let media = Media {
            sockets,
            remote,
            law,
            source,
            packets,
            crypto,
        };
        let (running, hangup) = self.run_media(media, &call_id, true)?;
        if hangup == "local" {
            self.hang_up(&call_id);
        }
        Ok(CallReport {
            peer: target,
            provisional: f.provisional,
            setup_s,
            hangup: hangup.into(),
            media: running.finish(),
        })
    }

    /// Hangs up `call_id` (BYE), waiting for its answer; a BYE nobody
    /// answers still ends the call here.
    fn hang_up(&mut self, call_id: &str) {
        if let Ok(tx) = self.agent.bye(call_id, Instant::now()) {
            let _ = self.final_response(tx);
        }
    }

    /// The bytes of the INVITE a call to `target` would start with: what
    /// the INVITE preparation experiment times (PrivaSIP encryption
    /// included).
    pub fn prepare_invite(&mut self, target: &str, sdp: &str) -> Result<Vec<u8>, PhoneError> {
        let me = self.identity(true)?;
        let uri = self.callee_uri(target)?;
        let body = Some(("application/sdp".to_string(), sdp.to_string()));
        Ok(self.agent.new_invite(&me, &uri, body).to_bytes())
    }

    /// Keys from the answer: our offered key for the tag it picked (send)
    /// and its key (receive).
    pub(super) fn negotiate_answer(
        &self,
        answer: &Audio,
        ours: &[Crypto],
    ) -> Result<Option<session::Crypto>, PhoneError> {
        if ours.is_empty() {
            return Ok(None);
        }
        let theirs = answer
            .crypto
            .iter()
            .find(|c| ours.iter().any(|o| o.tag == c.tag && o.suite == c.suite))
            .ok_or_else(|| {
                PhoneError::NoCommonSuite("the answer has no a=crypto matching our offer".into())
            })?;
        let mine = ours
            .iter()
            .find(|o| o.tag == theirs.tag)
            .ok_or_else(|| PhoneError::NoCommonSuite("tag".into()))?;
        contexts(mine, theirs).map(Some)
    }

    /// Starts the media of an established call and waits while it flows
    /// (see [`Phone::wait_media`]).
    pub(super) fn run_media(
        &mut self,
        m: Media,
        call_id: &str,
        hang_up_after_send: bool,
    ) -> Result<(session::Running, &'static str), PhoneError> {
        (self.log)("call established");
        let running = session::start(
            m.sockets,
            m.remote,
            m.law,
            m.source,
            m.packets,
            m.crypto,
            self.cname(),
        )?;
        let hangup = self.wait_media(&running, call_id, hang_up_after_send)?;
        Ok((running, hangup))
    }

    /// Waits while media flows: the peer's BYE (the agent answered it)
    /// or, when `hang_up_after_send`, every packet gone out.
    pub(super) fn wait_media(
        &mut self,
        running: &session::Running,
        call_id: &str,
        hang_up_after_send: bool,
    ) -> Result<&'static str, PhoneError> {
        let mut idle_since: Option<Instant> = None;
        loop {
            if let Some(i) = self.hung_up.iter().position(|c| c == call_id) {
                self.hung_up.remove(i);
                (self.log)("remote hung up");
                return Ok("remote");
            }
            if running.sender_done() {
                if hang_up_after_send {
                    // Let the last packets land.
                    std::thread::sleep(Duration::from_millis(300));
                    return Ok("local");
                }
                // The callee waits for the caller's BYE, but not forever.
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(30) {
                    return Ok("local");
                }
            }
            let tick = Instant::now() + Duration::from_millis(50);
            let bye = self.drive(Some(tick), |_, e| match e {
                Event::Request {
                    call_id: c,
                    method: Method::Bye,
                    answered: Some(200),
                } if c == call_id => Ok(Step::Done(())),
                other => Ok(Step::Other(other)),
            })?;
            if bye.is_some() {
                (self.log)("remote hung up");
                return Ok("remote");
            }
        }
    }
}
