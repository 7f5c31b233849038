//! Requests to us (RFC 3261 §17.2): a new INVITE goes to the user (with
//! 100 Trying at once), who rings, accepts or rejects it; ACK, BYE,
//! CANCEL, OPTIONS and what we refuse are answered here; a retransmitted
//! request gets the last answer again.

use std::net::SocketAddr;
use std::time::Instant;

use sip_core::transaction::{Answered, Resend, ServerInvite, ServerNonInvite};
use sip_core::{Message, Method, StatusCode};

use super::dialog::{self, Answering, Side};
use super::{Agent, AgentError, Event, MAX_CALLS};
use crate::sip;

/// What we answer OPTIONS with, and name in 405s.
const ALLOW: &str = "INVITE, ACK, BYE, CANCEL, OPTIONS";
/// Non-INVITE answers kept for retransmissions (timer J) at most: a
/// flood pushes the oldest out early, never memory up.
pub const MAX_ANSWERS: usize = 256;

/// One non-INVITE request answered.
#[derive(Debug)]
struct Answer {
    branch: String,
    method: String,
    machine: ServerNonInvite,
    response: Vec<u8>,
    to: SocketAddr,
}

/// Non-INVITE requests answered, until their timer J.
#[derive(Debug, Default)]
pub(super) struct Answers(Vec<Answer>);

impl Answers {
    /// How many are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.0
            .iter()
            .filter_map(|a| a.machine.next_deadline())
            .min()
    }

    fn expire(&mut self, now: Instant) {
        self.0.retain_mut(|a| {
            let due = a.machine.next_deadline().is_some_and(|d| now >= d);
            !(due && a.machine.on_timer(now).terminated)
        });
    }
}

/// A method with no borrowed text (an extension method is reported as
/// `Extension("")`).
fn owned(m: Method<'_>) -> Method<'static> {
    match m {
        Method::Invite => Method::Invite,
        Method::Ack => Method::Ack,
        Method::Bye => Method::Bye,
        Method::Cancel => Method::Cancel,
        Method::Register => Method::Register,
        Method::Options => Method::Options,
        Method::Prack => Method::Prack,
        Method::Subscribe => Method::Subscribe,
        Method::Notify => Method::Notify,
        Method::Publish => Method::Publish,
        Method::Info => Method::Info,
        Method::Refer => Method::Refer,
        Method::Message => Method::Message,
        Method::Update => Method::Update,
        Method::Extension(_) => Method::Extension(""),
    }
}

impl Agent {
    pub(super) fn on_request(&mut self, m: &Message<'_>, from: SocketAddr, now: Instant) {
        let branch = m.top_via().branch().unwrap_or("");
        let method = m.method();
        if method == Method::Ack {
            self.on_ack(m, branch, now);
            return;
        }
        if self.retransmitted(m, branch) {
            return;
        }
        match method {
            Method::Invite if dialog::in_dialog(m) => {
                // We do not renegotiate a session (RFC 3261 §14.2): the
                // call goes on as it was.
                let code = if self.dialog_of(m).is_some() {
                    488
                } else {
                    481
                };
                self.refuse(m, code, from);
            }
            Method::Invite => self.new_call(m, from, now),
            Method::Cancel => self.on_cancel(m, branch, from, now),
            Method::Bye => match self.dialog_of(m) {
                Some(i) => {
                    self.dialogs.remove(i);
                    self.answer(m, 200, from, now);
                }
                None => self.answer(m, 481, from, now),
            },
            Method::Options => self.answer(m, 200, from, now),
            _ if dialog::in_dialog(m) && self.dialog_of(m).is_none() => {
                self.answer(m, 481, from, now)
            }
            _ => self.answer(m, 405, from, now),
        }
    }

    /// A request seen before: its last answer again.
    fn retransmitted(&mut self, m: &Message<'_>, branch: &str) -> bool {
        if m.method() == Method::Invite {
            let Some(a) = self.answering(m.call_id(), branch) else {
                return false;
            };
            if a.machine.on_request_retransmission().retransmit {
                let (to, last) = (a.reply_to, a.last.clone());
                self.send(to, last);
            }
            return true;
        }
        let method = m.method();
        let Some(a) = self
            .answers
            .0
            .iter_mut()
            .find(|a| a.branch == branch && a.method == method.as_str())
        else {
            return false;
        };
        if a.machine.on_request_retransmission().retransmit {
            let (to, bytes) = (a.to, a.response.clone());
            self.send(to, bytes);
        }
        true
    }

    /// The call a request belongs to: its Call-ID, our tag in To, theirs
    /// in From (RFC 3261 §12.2.2).
    fn dialog_of(&self, m: &Message<'_>) -> Option<usize> {
        self.dialogs.iter().position(|d| {
            d.call_id == m.call_id()
                && m.to().tag() == Some(d.local.1.as_str())
                && m.from().tag() == d.remote.1.as_deref()
        })
    }

    fn answering(&mut self, call_id: &str, branch: &str) -> Option<&mut Answering> {
        self.dialogs.iter_mut().find_map(|d| match &mut d.side {
            Side::Callee(a) if d.call_id == call_id && a.branch == branch => Some(a.as_mut()),
            _ => None,
        })
    }

    /// Answers a non-INVITE request and keeps the answer for its
    /// retransmissions.
    fn answer(&mut self, m: &Message<'_>, code: u16, from: SocketAddr, now: Instant) {
        let tag = self.tokens.hex(4);
        let reason = StatusCode::new(code).map_or("", |s| s.reason());
        let allow: &[(&str, &str)] = if matches!(code, 200 | 405) {
            &[("Allow", ALLOW)]
        } else {
            &[]
        };
        let response = sip::response_with(m, (code, reason), Some(&tag), None, None, allow);
        let mut machine = ServerNonInvite::new(self.setup.reliable, self.setup.timers);
        if let Some(status) = StatusCode::new(code) {
            machine.on_tu_response(status, now);
        }
        self.send(from, response.clone());
        if self.answers.0.len() >= MAX_ANSWERS {
            self.answers.0.remove(0);
        }
        self.answers.0.push(Answer {
            branch: m.top_via().branch().unwrap_or("").to_owned(),
            method: m.method().as_str().to_owned(),
            machine,
            response,
            to: from,
        });
        self.events.push_back(Event::Request {
            call_id: m.call_id().to_owned(),
            method: owned(m.method()),
            answered: Some(code),
        });
    }

    /// An INVITE refused without keeping a transaction: its
    /// retransmissions are refused again.
    fn refuse(&mut self, m: &Message<'_>, code: u16, from: SocketAddr) {
        self.answer_statelessly(m, code, from);
        self.events.push_back(Event::Request {
            call_id: m.call_id().to_owned(),
            method: Method::Invite,
            answered: Some(code),
        });
    }

    fn answer_statelessly(&mut self, m: &Message<'_>, code: u16, from: SocketAddr) {
        let reason = StatusCode::new(code).map_or("", |s| s.reason());
        let tag = self.tokens.hex(4);
        self.send(from, sip::response(m, code, reason, Some(&tag), None, None));
    }

    fn new_call(&mut self, m: &Message<'_>, from: SocketAddr, now: Instant) {
        if self
            .callers
            .as_ref()
            .is_some_and(|ips| !ips.contains(&from.ip().to_canonical()))
        {
            self.answer_statelessly(m, 403, from);
            self.events.push_back(Event::Stranger {
                call_id: m.call_id().to_owned(),
                from,
            });
            return;
        }
        let merged = self
            .dialogs
            .iter()
            .any(|d| d.call_id == m.call_id() && d.remote.1.as_deref() == m.from().tag());
        if merged {
            // The same request by another path (RFC 3261 §8.2.2.2).
            return self.refuse(m, 482, from);
        }
        if self.dialogs.len() >= MAX_CALLS {
            return self.refuse(m, 486, from);
        }
        let mut machine = ServerInvite::new(self.setup.reliable, self.setup.timers);
        let trying = sip::response(m, 100, "Trying", None, None, None);
        machine.on_tu_response(StatusCode::TRYING, now);
        self.send(from, trying.clone());
        let answering = Answering {
            machine,
            request: m.as_bytes().to_vec(),
            branch: m.top_via().branch().unwrap_or("").to_owned(),
            reply_to: from,
            last: trying,
            answered: false,
            resend: None,
        };
        let tag = self.tokens.hex(4);
        let d = dialog::of_invite(m, tag, from, Side::Callee(Box::new(answering)));
        self.dialogs.push(d);
        self.events.push_back(Event::Incoming {
            call_id: m.call_id().to_owned(),
            from,
            message: m.as_bytes().to_vec(),
        });
    }

    /// Rings the incoming call `call_id` (180 with our Contact).
    pub fn ring(&mut self, call_id: &str, now: Instant) -> Result<(), AgentError> {
        self.respond(call_id, 180, None, now)
    }

    /// Answers the incoming call `call_id` 200 with `body` (content type,
    /// text); the 200 goes again until its ACK.
    pub fn accept(
        &mut self,
        call_id: &str,
        body: Option<(String, String)>,
        now: Instant,
    ) -> Result<(), AgentError> {
        self.respond(call_id, 200, body, now)
    }

    /// Refuses the incoming call `call_id` with a final `code` ≥ 300.
    pub fn reject(&mut self, call_id: &str, code: u16, now: Instant) -> Result<(), AgentError> {
        if code < 300 {
            return Err(AgentError::NoCall(format!(
                "{call_id}: {code} is no refusal"
            )));
        }
        self.respond(call_id, code, None, now)
    }

    fn respond(
        &mut self,
        call_id: &str,
        code: u16,
        body: Option<(String, String)>,
        now: Instant,
    ) -> Result<(), AgentError> {
        let contact = self.setup.contact.clone();
        let (reliable, timers) = (self.setup.reliable, self.setup.timers);
        let d = self
            .dialogs
            .iter_mut()
            .find(|d| d.call_id == call_id && matches!(&d.side, Side::Callee(a) if !a.answered))
            .ok_or_else(|| AgentError::NoCall(call_id.to_owned()))?;
        let Side::Callee(a) = &mut d.side else {
            return Err(AgentError::NoCall(call_id.to_owned()));
        };
        let status = StatusCode::new(code).ok_or_else(|| AgentError::NoCall(call_id.into()))?;
        let Ok(invite) = Message::parse(&a.request) else {
            return Err(AgentError::NoCall(call_id.to_owned()));
        };
        let contact = (code < 300).then_some(contact.as_str());
        let body = body.as_ref().map(|(t, b)| (t.as_str(), b.as_str()));
        let bytes = sip::response(
            &invite,
            code,
            status.reason(),
            Some(&d.local.1),
            contact,
            body,
        );
        if a.machine.on_tu_response(status, now).send_response {
            a.last = bytes.clone();
            a.answered = status.is_final();
            if status.is_success() {
                a.resend = Some(Answered::new(now, reliable, timers));
            }
            let to = a.reply_to;
            self.send(to, bytes);
        }
        Ok(())
    }

    fn on_ack(&mut self, m: &Message<'_>, branch: &str, now: Instant) {
        let Some(a) = self.dialogs.iter_mut().find_map(|d| match &mut d.side {
            Side::Callee(a) if d.call_id == m.call_id() && a.answered => Some(a.as_mut()),
            _ => None,
        }) else {
            return;
        };
        // The ACK for a 2xx is a transaction of its own (another branch);
        // the ACK for a refusal shares the INVITE's.
        let first = match a.resend.as_mut() {
            Some(r) => {
                let first = !r.is_done();
                r.on_ack();
                first
            }
            None => a.branch == branch && a.machine.on_ack(now).ack_received,
        };
        if first {
            self.events.push_back(Event::Request {
                call_id: m.call_id().to_owned(),
                method: Method::Ack,
                answered: None,
            });
        }
    }

    fn on_cancel(&mut self, m: &Message<'_>, branch: &str, from: SocketAddr, now: Instant) {
        let call_id = m.call_id().to_owned();
        let Some(a) = self.answering(&call_id, branch) else {
            return self.answer(m, 481, from, now);
        };
        let ringing = !a.answered;
        self.answer(m, 200, from, now);
        if ringing {
            // RFC 3261 §9.2: the INVITE is answered 487.
            let _ = self.respond(&call_id, 487, None, now);
        }
    }

    pub(super) fn server_timers(&mut self, now: Instant) {
        self.answers.expire(now);
        let mut events = Vec::new();
        let mut resend = Vec::new();
        self.dialogs.retain_mut(|d| {
            let Side::Callee(a) = &mut d.side else {
                return true;
            };
            let due = |t: Option<Instant>| t.is_some_and(|t| now >= t);
            let mut keep = true;
            if due(a.machine.next_deadline()) {
                let out = a.machine.on_timer(now);
                if out.retransmit {
                    resend.push((a.reply_to, a.last.clone()));
                }
                // A refusal's transaction ending ends the call.
                keep &= !(out.terminated && a.resend.is_none());
            }
            if due(a.resend.as_ref().and_then(Answered::next_deadline)) {
                match a.resend.as_mut().map(|r| r.on_timer(now)) {
                    Some(Resend::Again) => resend.push((a.reply_to, a.last.clone())),
                    Some(Resend::GiveUp) => {
                        events.push(Event::AckTimeout {
                            call_id: d.call_id.clone(),
                        });
                        keep = false;
                    }
                    _ => {}
                }
            }
            keep
        });
        for (to, bytes) in resend {
            self.send(to, bytes);
        }
        self.events.extend(events);
    }
}
