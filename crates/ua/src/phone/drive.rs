//! The blocking driver: datagrams and timers into the agent, its sends
//! out, its events to whichever step of the phone waits for them.

use super::*;
use crate::agent::Tx;

/// What a waiting step made of an event.
pub(super) enum Step<T> {
    /// What it waited for.
    Done(T),
    /// Its own, and it waits on.
    Used,
    /// Not its own: the phone's default applies.
    Other(Event),
}

/// The final response to one of our requests.
pub(super) struct Final {
    pub(super) code: u16,
    pub(super) reason: String,
    pub(super) message: Vec<u8>,
    /// Provisional responses before it.
    pub(super) provisional: Vec<u16>,
    /// A challenge was answered on the way.
    pub(super) challenged: bool,
    /// The agent cancelled the INVITE (it rang too long).
    pub(super) cancelled: bool,
}

/// How long one wait for a datagram may last, at most.
const POLL: Duration = Duration::from_millis(500);

impl Phone {
    /// Sends what the agent has to send.
    pub(super) fn flush(&mut self) -> Result<(), PhoneError> {
        while let Some(t) = self.agent.poll_transmit() {
            self.sig.send_to(&t.bytes, t.to)?;
        }
        Ok(())
    }

    /// Runs the agent — datagrams in, due timers, sends out — handing
    /// each event to `pick` until it is `Done`, or until `deadline`
    /// (then `None`).
    pub(super) fn drive<T>(
        &mut self,
        deadline: Option<Instant>,
        mut pick: impl FnMut(&mut Self, Event) -> Result<Step<T>, PhoneError>,
    ) -> Result<Option<T>, PhoneError> {
        loop {
            self.flush()?;
            while let Some(e) = self.agent.poll_event() {
                match pick(self, e)? {
                    Step::Done(t) => {
                        self.flush()?;
                        return Ok(Some(t));
                    }
                    Step::Used => {}
                    Step::Other(e) => self.by_default(e),
                }
            }
            self.flush()?;
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let due = self.agent.next_deadline();
            if due.is_some_and(|d| now >= d) {
                self.agent.on_timer(now);
                continue;
            }
            let wait = [due, deadline]
                .into_iter()
                .flatten()
                .min()
                .map_or(POLL, |d| d.saturating_duration_since(now))
                .clamp(Duration::from_millis(1), POLL);
            let Some((data, from)) = self.sig.recv(wait)? else {
                continue;
            };
            if sip_core::stun::is_stun(&data) {
                self.remapped |= self.on_stun(&data);
            } else {
                self.agent.handle(&data, from, Instant::now());
            }
        }
    }

    /// Events no step waits for: a call that comes while the phone is
    /// not waiting for one is refused busy (486); while it is, calls queue
    /// (a few: more are busy too). Calls the agent refused because they
    /// came from an address that may not ring the phone ([`Callers`])
    /// are said at the 1st, 2nd, 4th, 8th… (a scanner's flood stays a
    /// few lines).
    fn by_default(&mut self, e: Event) {
        match e {
            Event::Stranger { from, .. } => {
                self.strangers += 1;
                if self.strangers.is_power_of_two() {
                    (self.log)(&format!(
                        "refused a call from {from}: not through the server (--trust {} lets it ring); {} refused so far",
                        from.ip(),
                        self.strangers
                    ));
                }
            }
            Event::Incoming {
                call_id,
                from,
                message,
            } => {
                if self.accepting && self.invites.len() < 4 {
                    self.invites.push_back((call_id, from, message));
                } else {
                    let _ = self.agent.reject(&call_id, 486, Instant::now());
                }
            }
            // The peer hung up before the media began (while the phone
            // waited for the ACK): the media step sees it at once.
            Event::Request {
                call_id,
                method: Method::Bye,
                answered: Some(200),
            } => {
                if self.hung_up.len() >= 4 {
                    self.hung_up.pop_front();
                }
                self.hung_up.push_back(call_id);
            }
            _ => {}
        }
    }

    /// Waits for the final response to `tx`, reporting provisional ones.
    pub(super) fn final_response(&mut self, tx: Tx) -> Result<Final, PhoneError> {
        let (mut provisional, mut challenged, mut cancelled) = (Vec::new(), false, false);
        let got = self.drive(None, |phone, e| match e {
            Event::Response {
                tx: t,
                code,
                reason,
                message,
                retried,
                ..
            } if t == tx => {
                if retried {
                    challenged = true;
                    return Ok(Step::Used);
                }
                if code < 200 {
                    if code > 100 {
                        (phone.log)(&format!("{code} {reason}"));
                    }
                    provisional.push(code);
                    return Ok(Step::Used);
                }
                Ok(Step::Done((code, reason, message)))
            }
            Event::Timeout { tx: t, method } if t == tx => {
                Err(PhoneError::Timeout(method.to_string()))
            }
            Event::Cancelling { tx: t } if t == tx => {
                cancelled = true;
                Ok(Step::Used)
            }
            other => Ok(Step::Other(other)),
        })?;
        let (code, reason, message) =
            got.ok_or_else(|| PhoneError::Timeout("a final response".into()))?;
        Ok(Final {
            code,
            reason,
            message,
            provisional,
            challenged,
            cancelled,
        })
    }

    /// The refusal a 401/407 that stands means: our credentials, or the
    /// lack of a password.
    pub(super) fn refused(&self, what: &str, f: &Final) -> PhoneError {
        if self.cfg.password.is_none() {
            return PhoneError::AuthFailed(format!(
                "{}: the server wants a password (--password-file FILE or $SIPSEC_PASSWORD)",
                f.code
            ));
        }
        PhoneError::AuthFailed(format!("{what}: {} {}", f.code, f.reason))
    }
}
