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
        let uri = format!("sip:{}", self.cfg.domain);
        let (call_id, tag) = (self.register_call_id.clone(), self.register_tag.clone());
        let cseq = self.next_cseq();
        let me = self.identity()?;
        let mut req = self.base_request(
            Method::Register,
            &uri,
            (&me.from, &me.from),
            &call_id,
            &tag,
            cseq,
        );
        req.contact = Some(self.contact());
        req.extra.push(format!("Expires: {expires}"));
        let mut challenged = false;
        loop {
            let out = self.transact(server, &req, None)?;
            let m = Message::parse(&out.bytes).map_err(|e| PhoneError::Invalid(e.to_string()))?;
            let (code, reason) = status_of(&m);
            match code {
                200..=299 => {
                    let granted = m
                        .contacts()
                        .find(|c| c.addr.uri().as_str().contains(&Self::host(self.local)))
                        .and_then(|c| c.expires)
                        .or(m.expires())
                        .unwrap_or(expires);
                    return Ok(granted);
                }
                401 | 407 => {
                    self.rechallenge(&mut req, &m, &mut challenged, me.shown.as_deref())?
                }
                403 if challenged => {
                    return Err(PhoneError::AuthFailed(format!("REGISTER: {code} {reason}")))
                }
                _ => {
                    return Err(PhoneError::Status {
                        what: "REGISTER".into(),
                        code,
                        reason,
                    })
                }
            }
        }
    }
}
