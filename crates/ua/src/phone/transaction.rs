//! Client transactions on sip-core's RFC 3261 §17.1 machines, digest
//! challenges, and requests nobody asked for.

use super::*;

impl Phone {
    /// Answers requests that arrive while we wait for something else.
    pub(super) fn stray_request(&mut self, m: &Message<'_>, from: SocketAddr) {
        let reply = match m.method().as_str() {
            "ACK" => return,
            "OPTIONS" => sip::response(m, 200, "OK", Some(&sip::token(4)), None, None),
            "INVITE" => sip::response(m, 486, "Busy Here", Some(&sip::token(4)), None, None),
            _ => sip::response(m, 481, "Call/Transaction Does Not Exist", None, None, None),
        };
        let _ = self.sig.send_to(&reply, from);
    }

    /// Runs a client transaction on sip-core's RFC 3261 §17.1 machines
    /// (timers A/E retransmit over UDP, B/F give up; reliable transports
    /// send once) and returns the final response. INVITE ringing past
    /// `ring` is cancelled.
    pub(super) fn transact(
        &mut self,
        dest: SocketAddr,
        req: &Request,
        ring: Option<Duration>,
    ) -> Result<Outcome, PhoneError> {
        let bytes = req.to_bytes();
        let started = Instant::now();
        let reliable = self.sig.reliable();
        let mut machine = Client::new(req.method == Method::Invite, started, reliable, TIMERS);
        self.sig.send_to(&bytes, dest)?;
        let mut provisional = Vec::new();
        let mut cancelled = false;
        loop {
            let now = Instant::now();
            if machine.next_deadline().is_some_and(|d| now >= d) {
                let o = machine.on_timer(now);
                if o.retransmit && !cancelled {
                    self.sig.send_to(&bytes, dest)?;
                }
                if o.timeout {
                    return Err(PhoneError::Timeout(req.method.to_string()));
                }
            }
            if let (Some(limit), false, false) = (ring, provisional.is_empty(), cancelled) {
                if now.duration_since(started) > limit {
                    let mut cancel = req.clone();
                    cancel.method = Method::Cancel;
                    cancel.body = None;
                    cancel.contact = None;
                    cancel.extra.clear();
                    self.transact(dest, &cancel, None)?;
                    cancelled = true;
                }
            }
            if now.duration_since(started) > Duration::from_secs(600) {
                return Err(PhoneError::Timeout(req.method.to_string()));
            }
            let wait = machine
                .next_deadline()
                .map_or(T1, |d| d.saturating_duration_since(Instant::now()))
                .clamp(Duration::from_millis(5), T1);
            let Some((data, from)) = self.sig.recv(wait)? else {
                continue;
            };
            let Ok(m) = Message::parse(&data) else {
                continue;
            };
            if m.is_request() {
                self.stray_request(&m, from);
                continue;
            }
            if m.top_via().branch() != Some(req.branch.as_str()) || m.cseq().method != req.method {
                continue;
            }
            let Some(status) = m.status() else {
                continue;
            };
            machine.on_response(status, Instant::now());
            let (code, reason) = status_of(&m);
            if code < 200 {
                if code > 100 {
                    (self.log)(&format!("{code} {reason}"));
                }
                provisional.push(code);
                continue;
            }
            if cancelled && code == 487 {
                self.ack_error(dest, req, &m);
                return Err(PhoneError::NoAnswer(ring.map_or(0, |r| r.as_secs())));
            }
            return Ok(Outcome {
                bytes: data.clone(),
                provisional,
            });
        }
    }

    /// The ACK for a non-2xx final response to INVITE (§17.1.1.3).
    pub(super) fn ack_error(&mut self, dest: SocketAddr, invite: &Request, resp: &Message<'_>) {
        let mut ack = invite.clone();
        ack.method = Method::Ack;
        ack.to_tag = resp.to().tag().map(str::to_owned);
        ack.body = None;
        ack.contact = None;
        ack.extra.clear();
        let _ = self.sig.send_to(&ack.to_bytes(), dest);
    }

    /// Adds credentials answering the challenge in `resp` to `req`.
    pub(super) fn authorize(
        &self,
        req: &mut Request,
        resp: &Message<'_>,
        shown: Option<&str>,
    ) -> Result<(), PhoneError> {
        let code = resp.status().map(|s| s.as_u16()).unwrap_or(0);
        let (field, header) = if code == 407 {
            (HeaderName::ProxyAuthenticate, "Proxy-Authorization")
        } else {
            (HeaderName::WwwAuthenticate, "Authorization")
        };
        let password = self.cfg.password.as_deref().ok_or_else(|| {
            PhoneError::AuthFailed(format!(
                "{code}: the server wants a password (--password-file FILE or $SIPSEC_PASSWORD)"
            ))
        })?;
        let value = resp
            .headers_named(field)
            .find_map(|h| {
                let c = Challenge::parse(h.value).ok()?;
                let who = sip_core::digest::Answerer {
                    shown,
                    ..sip_core::digest::Answerer::new(&self.cfg.user, password)
                };
                sip_core::digest::authorization(
                    &c,
                    &who,
                    req.method.as_str(),
                    &req.uri,
                    &sip::token(8),
                    1,
                )
            })
            .ok_or_else(|| PhoneError::AuthFailed(format!("{code}: no challenge we can answer")))?;
        req.extra
            .retain(|e| !e.starts_with("Authorization:") && !e.starts_with("Proxy-Authorization:"));
        req.extra.push(format!("{header}: {value}"));
        Ok(())
    }

    /// After a 401/407: the request again with credentials, a new CSeq
    /// and branch, the first time; a second challenge means our
    /// credentials were refused.
    pub(super) fn rechallenge(
        &mut self,
        req: &mut Request,
        resp: &Message<'_>,
        challenged: &mut bool,
        shown: Option<&str>,
    ) -> Result<(), PhoneError> {
        if *challenged {
            let (code, reason) = status_of(resp);
            return Err(PhoneError::AuthFailed(format!(
                "{}: {code} {reason}",
                req.method
            )));
        }
        *challenged = true;
        self.authorize(req, resp, shown)?;
        req.cseq = self.next_cseq();
        req.branch = sip::branch();
        Ok(())
    }
}
