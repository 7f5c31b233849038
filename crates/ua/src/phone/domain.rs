//! PrivaSIP-3 for the callee's domain (level 2): the phone enrolls
//! anonymously with the callee's domain — an OPTIONS to the domain that
//! carries a secret sealed to its HPKE key — and keeps the domain tickets
//! the 200 hands out; each call seals the callee's ID under the next one
//! (`privacy::tickets::seal_callee`). A domain that hands out none is
//! called with PrivaSIP-2 pseudonyms (one HPKE seal per call) from then on.

use super::*;

/// The header that carries an enrollment, and the one that answers it.
const ENROLL: &str = "Privasip-Enroll";
const TICKETS: &str = "Privasip-Tickets";

impl Phone {
    /// The callee pseudonym for `user` at `domain` from one of that
    /// domain's tickets (enrolling first when none is left); `None` when
    /// PrivaSIP-3 is off, the callee key is not HPKE, or the domain hands
    /// out no tickets.
    pub(super) fn callee_ticket(
        &mut self,
        user: &str,
        domain: &str,
    ) -> Result<Option<String>, PhoneError> {
        let Some(p) = self.cfg.privacy.clone() else {
            return Ok(None);
        };
        let Some(callee) = p
            .callee
            .clone()
            .filter(|c| p.tickets && c.scheme() == privacy::Scheme::Hpke)
        else {
            return Ok(None);
        };
        let domain = domain.to_ascii_lowercase();
        if self.domains.without.contains(&domain) {
            return Ok(None);
        }
        if self
            .domains
            .tickets
            .get(&domain)
            .is_none_or(|q| q.is_empty())
        {
            match self.enroll_with(&domain, &callee)? {
                Some(entries) => {
                    (self.log)(&format!(
                        "PrivaSIP-3: {} tickets for calls to {domain}",
                        entries.len()
                    ));
                    self.domains.tickets.insert(domain.clone(), entries.into());
                }
                None => {
                    (self.log)(&format!(
                        "PrivaSIP-3: {domain} hands out no tickets; its callees get PrivaSIP-2 pseudonyms"
                    ));
                    self.domains.without.insert(domain);
                    return Ok(None);
                }
            }
        }
        let Some(entry) = self
            .domains
            .tickets
            .get_mut(&domain)
            .and_then(|q| q.pop_front())
        else {
            return Ok(None);
        };
        let raw = privacy::tickets::seal_callee(&entry, user)
            .map_err(|e| PhoneError::Privacy(e.to_string()))?;
        let text = p.encoding.encode(&raw);
        if text.len() > p.limit {
            return Err(PhoneError::Privacy(format!(
                "a callee pseudonym of {} characters is over the limit of {}",
                text.len(),
                p.limit
            )));
        }
        Ok(Some(text))
    }

    /// One batch of `domain`'s tickets for the callee key this phone
    /// has (each `ticket | key`, for `privacy::tickets::seal_callee`),
    /// enrolling anew; empty when the domain hands out none.
    pub fn domain_tickets(&mut self, domain: &str) -> Result<Vec<Vec<u8>>, PhoneError> {
        let Some(callee) = self.cfg.privacy.as_ref().and_then(|p| p.callee.clone()) else {
            return Err(PhoneError::Privacy(
                "domain tickets need the callee's domain key".into(),
            ));
        };
        Ok(self.enroll_with(domain, &callee)?.unwrap_or_default())
    }

    /// Enrolls with `domain` (an OPTIONS through the server, a secret
    /// sealed for `callee`): the domain tickets its 200 hands out, `None`
    /// when it answers without any or refuses.
    fn enroll_with(
        &mut self,
        domain: &str,
        callee: &IdCipher,
    ) -> Result<Option<Vec<Vec<u8>>>, PhoneError> {
        let (enrollment, sealed) = privacy::tickets::Enrollment::new(callee.as_ref(), None)
            .map_err(|e| PhoneError::Privacy(e.to_string()))?;
        let uri = format!("sip:{domain}");
        let dest = match self.cfg.server {
            Some(s) => s,
            None => self.resolve_uri(&uri)?,
        };
        let me = self.identity(false)?;
        let extra = vec![format!("{ENROLL}: {sealed}")];
        let tx = self
            .agent
            .request_to(Method::Options, (dest, &uri), &me, extra, Instant::now())
            .map_err(|e| PhoneError::Invalid(e.to_string()))?;
        let f = self.final_response(tx)?;
        let m = Message::parse(&f.message).map_err(|e| PhoneError::Invalid(e.to_string()))?;
        match (f.code, f.reason) {
            (200..=299, _) => {
                let Some(value) = m
                    .headers_named(sip_core::HeaderName::Other)
                    .find(|h| h.raw_name.eq_ignore_ascii_case(TICKETS))
                    .map(|h| h.value)
                else {
                    return Ok(None);
                };
                let batch = privacy::Encoding::decode_any(value)
                    .ok_or_else(|| PhoneError::Privacy(format!("{TICKETS}: not base32")))?;
                enrollment
                    .tickets(privacy::tickets::DOMAIN, &batch)
                    .map(Some)
                    .map_err(|e| PhoneError::Privacy(format!("{TICKETS} from {domain}: {e}")))
            }
            (code, reason) => {
                (self.log)(&format!(
                    "PrivaSIP-3: {domain} answered the enrollment {code} {reason}"
                ));
                Ok(None)
            }
        }
    }
}
/// The callee domains' tickets the phone holds, and the domains that
/// hand out none.
#[derive(Debug, Default)]
pub(super) struct Domains {
    tickets: std::collections::HashMap<String, std::collections::VecDeque<Vec<u8>>>,
    without: std::collections::HashSet<String>,
}
