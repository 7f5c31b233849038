//! REGISTER (RFC 3261 §10.2), with digest authentication.

use super::*;

impl Phone {
    /// Registers the phone's Contact for `expires` seconds (0 removes it).
    /// Returns the lifetime the registrar granted.
    pub fn register(&mut self, expires: u32) -> Result<u32, PhoneError> {
        let server = self
            .cfg
            .server
            .ok_or_else(|| PhoneError::Invalid("registering needs --server".into()))?;
        let me = self.identity(false)?;
        let enrollment = self.enrollment()?;
        let extra = enrollment
            .iter()
            .map(|(_, sealed)| format!("Privasip-Enroll: {sealed}"))
            .collect();
        let tx = self
            .agent
            .register(server, &me, expires, extra, Instant::now())
            .map_err(|e| PhoneError::Invalid(e.to_string()))?;
        let f = self.final_response(tx)?;
        match f.code {
            200..=299 => {
                let m =
                    Message::parse(&f.message).map_err(|e| PhoneError::Invalid(e.to_string()))?;
                if let Some((e, _)) = &enrollment {
                    self.keep_tickets(e, &m)?;
                }
                let granted = m
                    .contacts()
                    .find(|c| c.addr.uri().as_str().contains(&agent::host(self.local)))
                    .and_then(|c| c.expires)
                    .or(m.expires())
                    .unwrap_or(expires);
                self.kept_for(expires, granted);
                Ok(granted)
            }
            401 | 407 => Err(self.refused("REGISTER", &f)),
            403 if f.challenged => Err(PhoneError::AuthFailed(format!(
                "REGISTER: {} {}",
                f.code, f.reason
            ))),
            code => Err(PhoneError::Status {
                what: "REGISTER".into(),
                code,
                reason: f.reason,
            }),
        }
    }

    /// A registration for `expires` was granted `granted` seconds: it is
    /// kept alive from now on, when asked ([`Phone::keep_alive`]).
    fn kept_for(&mut self, expires: u32, granted: u32) {
        let Some(every) = self.keepalive.filter(|_| granted > 0) else {
            self.kept = None;
            return;
        };
        let now = Instant::now();
        let mapped = self.kept.as_ref().and_then(|k| k.mapped);
        self.kept = Some(Kept {
            expires,
            refresh_at: now + Duration::from_secs(u64::from(granted / 2).max(1)),
            next_ping: now + every,
            txid: [0; 12],
            mapped,
        });
    }

    /// While waiting: refreshes the registration when due, and sends the
    /// keep-alive when due (a STUN binding request over UDP, a double
    /// CRLF over a connection: RFC 5626 §4.4.1). Returns how long until
    /// the next of them (`None`: nothing kept).
    pub(super) fn upkeep(&mut self) -> Result<Option<Duration>, PhoneError> {
        let (Some(k), Some(every), Some(server)) =
            (self.kept.as_ref(), self.keepalive, self.cfg.server)
        else {
            return Ok(None);
        };
        let now = Instant::now();
        if std::mem::take(&mut self.remapped) {
            let expires = k.expires;
            self.register(expires)?;
        } else if now >= k.refresh_at {
            let expires = k.expires;
            (self.log)("refreshing the registration");
            self.register(expires)?;
        } else if now >= k.next_ping {
            let ping = if self.sig.reliable() {
                b"\r\n\r\n".to_vec()
            } else {
                let mut txid = [0u8; 12];
                let _ = getrandom::fill(&mut txid);
                if let Some(k) = self.kept.as_mut() {
                    k.txid = txid;
                }
                sip_core::stun::binding_request(txid)
            };
            self.sig.send_to(&ping, server)?;
            if let Some(k) = self.kept.as_mut() {
                k.next_ping = now + every;
            }
        }
        Ok(self.kept.as_ref().map(|k| {
            k.refresh_at
                .min(k.next_ping)
                .saturating_duration_since(Instant::now())
        }))
    }

    /// A STUN packet arrived: the answer to our keep-alive says where
    /// the server sees us. `true` when that moved (the NAT's mapping
    /// changed): the phone then registers again (RFC 5626 §4.4.1).
    pub(super) fn on_stun(&mut self, packet: &[u8]) -> bool {
        let Some(k) = self.kept.as_mut() else {
            return false;
        };
        let Ok(mapped) = sip_core::stun::parse_response(packet, &k.txid) else {
            return false;
        };
        let moved = k.mapped.is_some_and(|m| m != mapped);
        k.mapped = Some(mapped);
        if moved {
            (self.log)(&format!(
                "our address seen by the server moved to {mapped}: registering again"
            ));
        }
        moved
    }

    /// Under PrivaSIP-3: a fresh enrollment for this registration and its
    /// header value (the secret sealed to the home proxy's HPKE key).
    fn enrollment(&self) -> Result<Option<(privacy::tickets::Enrollment, String)>, PhoneError> {
        let Some(p) = self.cfg.privacy.as_ref().filter(|p| p.tickets) else {
            return Ok(None);
        };
        let (e, text) = privacy::tickets::Enrollment::new(p.home.as_ref(), p.pq.as_deref())
            .map_err(|e| PhoneError::Privacy(e.to_string()))?;
        Ok(Some((e, text)))
    }

    /// The tickets a 200 to our enrolling REGISTER handed out replace the
    /// ones left; none is an error (the proxy does not do PrivaSIP-3).
    fn keep_tickets(
        &mut self,
        e: &privacy::tickets::Enrollment,
        ok: &Message<'_>,
    ) -> Result<(), PhoneError> {
        let value = ok
            .headers_named(sip_core::HeaderName::Other)
            .find(|h| h.raw_name.eq_ignore_ascii_case("Privasip-Tickets"))
            .map(|h| h.value)
            .ok_or_else(|| {
                PhoneError::Privacy("the home proxy handed out no PrivaSIP-3 tickets".into())
            })?;
        let batch = privacy::Encoding::decode_any(value)
            .ok_or_else(|| PhoneError::Privacy("Privasip-Tickets: not base32".into()))?;
        let tickets = e
            .tickets(&self.cfg.user, &batch)
            .map_err(|e| PhoneError::Privacy(format!("Privasip-Tickets: {e}")))?;
        let encoding = self
            .cfg
            .privacy
            .as_ref()
            .map_or(privacy::Encoding::Base32, |p| p.encoding);
        self.tickets = tickets.iter().map(|t| encoding.encode(t)).collect();
        (self.log)(&format!("PrivaSIP-3: {} tickets", self.tickets.len()));
        Ok(())
    }
}
