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
        let (mut req, me) = self.invite(&target, body)?;
        let (call_id, tag, to) = (req.call_id.clone(), req.from_tag.clone(), req.to.clone());
        let started = Instant::now();
        let mut challenged = false;
        let ring = Some(Duration::from_secs(self.cfg.ring_timeout));
        let (out, provisional) = loop {
            let out = self.transact(dest, &req, ring)?;
            let m = Message::parse(&out.bytes).map_err(|e| PhoneError::Invalid(e.to_string()))?;
            let (code, reason) = status_of(&m);
            if code >= 300 {
                self.ack_error(dest, &req, &m);
            }
            match code {
                200..=299 => break (out.bytes.clone(), out.provisional),
                // (A 403 is policy, e.g. relaying denied: reported below
                // with its Warning.)
                401 | 407 => {
                    self.rechallenge(&mut req, &m, &mut challenged, me.shown.as_deref())?
                }

                486 | 600 => return Err(PhoneError::Busy(format!("{target} ({code} {reason})"))),
                404 | 604 => {
                    return Err(PhoneError::NotFound(format!("{target} ({code} {reason})")))
                }
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
        };
        let setup_s = started.elapsed().as_secs_f64();
        let m = Message::parse(&out).map_err(|e| PhoneError::Invalid(e.to_string()))?;
        let to_tag = m.to().tag().map(str::to_owned);
        let remote_target = m
            .contacts()
            .next()
            .map(|c| c.addr.uri().as_str().to_owned())
            .unwrap_or_else(|| target.clone());
        let mut routes = sip::record_routes(&m);
        routes.reverse();
        let answer = sdp::parse(std::str::from_utf8(m.body()).unwrap_or(""));
        let in_dialog = |phone: &mut Self, method: Method<'static>, cseq: u32| {
            let mut r = phone.base_request(
                method,
                &remote_target,
                (&me.from, &to),
                &call_id,
                &tag,
                cseq,
            );
            r.to_tag = to_tag.clone();
            r.routes = routes.clone();
            r
        };
        let next_hop = match routes.first() {
            Some(r) if r.contains(";lr") => self.resolve_uri(sip::addr_uri(r)).unwrap_or(dest),
            _ => self.resolve_uri(&remote_target).unwrap_or(dest),
        };
        let ack = in_dialog(self, Method::Ack, cseq_of(&m));
        self.sig.send_to(&ack.to_bytes(), next_hop)?;
        // The answer decides the media; a bad one ends the call at once.
        let negotiated = answer
            .map_err(PhoneError::from)
            .and_then(|a| self.negotiate_answer(&a, &ours).map(|c| (a, c)));
        let (answer, crypto) = match negotiated {
            Ok(x) => x,
            Err(e) => {
                let cseq = self.next_cseq();
                let bye = in_dialog(self, Method::Bye, cseq);
                let _ = self.transact(next_hop, &bye, None);
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
            let cseq = self.next_cseq();
            let bye = in_dialog(self, Method::Bye, cseq);
            let _ = self.transact(next_hop, &bye, None);
        }
        Ok(CallReport {
            peer: target,
            provisional,
            setup_s,
            hangup: hangup.into(),
            media: running.finish(),
        })
    }

    /// A new INVITE to `target` with an SDP `body`, and who it says we
    /// are: fresh Call-ID, tag and (under PrivaSIP) pseudonyms.
    pub(super) fn invite(
        &mut self,
        target: &str,
        body: String,
    ) -> Result<(Request, Identity), PhoneError> {
        let me = self.identity(true)?;
        let uri = self.callee_uri(target)?;
        let (call_id, tag) = (sip::token(12), sip::token(4));
        let cseq = self.next_cseq();
        let mut req = self.base_request(
            Method::Invite,
            &uri,
            (&me.from, &format!("<{uri}>")),
            &call_id,
            &tag,
            cseq,
        );
        req.contact = Some(self.contact());
        req.body = Some(("application/sdp".into(), body));
        Ok((req, me))
    }

    /// The bytes of the INVITE a call to `target` would start with: what
    /// the INVITE preparation experiment times (PrivaSIP encryption
    /// included).
    pub fn prepare_invite(&mut self, target: &str, sdp: &str) -> Result<Vec<u8>, PhoneError> {
        Ok(self.invite(target, sdp.to_string())?.0.to_bytes())
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

    /// Waits while media flows: answers BYE (remote hang-up) or, when
    /// `hang_up_after_send`, returns once every packet went out.
    pub(super) fn wait_media(
        &mut self,
        running: &session::Running,
        call_id: &str,
        hang_up_after_send: bool,
    ) -> Result<&'static str, PhoneError> {
        let mut idle_since: Option<Instant> = None;
        loop {
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
            let Some((data, from)) = self.sig.recv(Duration::from_millis(50))? else {
                continue;
            };
            let Ok(m) = Message::parse(&data) else {
                continue;
            };
            if !m.is_request() {
                continue;
            }
            if m.method() == Method::Bye && m.call_id() == call_id {
                let ok = sip::response(&m, 200, "OK", None, None, None);
                self.sig.send_to(&ok, from)?;
                (self.log)("remote hung up");
                return Ok("remote");
            }
            if m.method() == Method::Ack && m.call_id() == call_id {
                continue;
            }
            self.stray_request(&m, from);
        }
    }
}
