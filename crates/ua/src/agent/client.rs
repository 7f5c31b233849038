//! Our requests (RFC 3261 §17.1): REGISTER, INVITE with a ring time and
//! CANCEL, BYE; their retransmissions and timeouts on sip-core's
//! machines, one answer to a digest challenge, and the ACK for every
//! final response to an INVITE.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sip_core::auth::Challenge;
use sip_core::transaction::Client;
use sip_core::{HeaderName, Message, Method};

use super::dialog::{self, Dialog, Side};
use super::{status_of, Agent, AgentError, Event, Identity, Transmit, Tx, MAX_CALLS, MAX_REQUESTS};
use crate::sip::Request;

/// One request of ours in flight.
#[derive(Debug)]
pub(super) struct Outgoing {
    pub(super) tx: Tx,
    pub(super) req: Request,
    bytes: Vec<u8>,
    dest: SocketAddr,
    machine: Client,
    /// One challenge was answered already: a second is a refusal.
    challenged: bool,
    /// The digest username to show.
    shown: Option<String>,
    /// INVITE: how long it may ring before we CANCEL, from when it went.
    ring: Option<(Instant, Duration)>,
    /// INVITE: a provisional response came (a CANCEL may go).
    ringing: bool,
    /// INVITE: CANCEL asked for, sent once a provisional comes.
    cancel: Cancel,
    /// INVITE: a final response came.
    answered: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cancel {
    No,
    Wanted,
    /// Sent; without a final response by then the INVITE is over.
    Sent {
        give_up_at: Instant,
    },
}

impl Outgoing {
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let ring = match (self.ring, self.ringing, self.cancel, self.answered) {
            (Some((at, d)), true, Cancel::No, false) => Some(at + d),
            _ => None,
        };
        let give_up = match self.cancel {
            Cancel::Sent { give_up_at } if !self.answered => Some(give_up_at),
            _ => None,
        };
        [self.machine.next_deadline(), ring, give_up]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Agent {
    /// Registers our Contact at `registrar` for `expires` seconds (0
    /// removes it), with `extra` header lines.
    pub fn register(
        &mut self,
        registrar: SocketAddr,
        who: &Identity,
        expires: u32,
        extra: Vec<String>,
        now: Instant,
    ) -> Result<Tx, AgentError> {
        let uri = format!("sip:{}", self.setup.domain);
        let (call_id, tag) = self.register_ids.clone();
        let mut req = self.request(
            Method::Register,
            &uri,
            (&who.from, &who.from),
            (&call_id, &tag),
        );
        req.contact = Some(self.setup.contact.clone());
        req.extra.push(format!("Expires: {expires}"));
        req.extra.extend(extra);
        self.start(req, registrar, who.shown.clone(), None, now)
    }

    /// A request outside any dialog (OPTIONS, MESSAGE, …) to `uri`
    /// through `dest`, with `extra` header lines: fresh Call-ID and tag.
    pub fn request_to(
        &mut self,
        method: Method<'static>,
        (dest, uri): (SocketAddr, &str),
        who: &Identity,
        extra: Vec<String>,
        now: Instant,
    ) -> Result<Tx, AgentError> {
        let (call_id, tag) = (self.tokens.hex(12), self.tokens.hex(4));
        let mut req = self.request(
            method,
            uri,
            (&who.from, &format!("<{uri}>")),
            (&call_id, &tag),
        );
        req.extra = extra;
        self.start(req, dest, who.shown.clone(), None, now)
    }

    /// A new INVITE to `uri` (Request-URI and To) with an optional body:
    /// fresh Call-ID and tag. Not sent: see [`Agent::invite`].
    pub fn new_invite(
        &mut self,
        who: &Identity,
        uri: &str,
        body: Option<(String, String)>,
    ) -> Request {
        let (call_id, tag) = (self.tokens.hex(12), self.tokens.hex(4));
        let mut req = self.request(
            Method::Invite,
            uri,
            (&who.from, &format!("<{uri}>")),
            (&call_id, &tag),
        );
        req.contact = Some(self.setup.contact.clone());
        req.body = body;
        req
    }

    /// Calls `uri` through `dest`: the INVITE goes, and CANCEL follows
    /// when it rings longer than `ring`. Returns the request and the
    /// call's Call-ID.
    pub fn invite(
        &mut self,
        dest: SocketAddr,
        who: &Identity,
        uri: &str,
        body: Option<(String, String)>,
        ring: Option<Duration>,
        now: Instant,
    ) -> Result<(Tx, String), AgentError> {
        if self.dialogs.len() >= MAX_CALLS {
            return Err(AgentError::Full(MAX_CALLS));
        }
        let req = self.new_invite(who, uri, body);
        let call_id = req.call_id.clone();
        let (local, remote) = (
            (req.from.clone(), req.from_tag.clone()),
            (req.to.clone(), None),
        );
        let tx = self.start(req, dest, who.shown.clone(), ring, now)?;
        self.dialogs.push(Dialog {
            call_id: call_id.clone(),
            local,
            remote,
            target: uri.to_owned(),
            routes: Vec::new(),
            fallback: dest,
            side: Side::Caller {
                invite: tx,
                ack: None,
            },
        });
        Ok((tx, call_id))
    }

    /// Cancels our ringing INVITE of `call_id` (RFC 3261 §9.1): at once
    /// when a provisional response came, else as soon as one does.
    pub fn cancel(&mut self, call_id: &str, now: Instant) -> Result<(), AgentError> {
        let i = self
            .outgoing
            .iter()
            .position(|o| o.req.method == Method::Invite && o.req.call_id == call_id && !o.answered)
            .ok_or_else(|| AgentError::NoCall(call_id.to_owned()))?;
        if self.outgoing[i].cancel == Cancel::No {
            self.outgoing[i].cancel = Cancel::Wanted;
            if self.outgoing[i].ringing {
                self.send_cancel(i, now);
            }
        }
        Ok(())
    }

    /// Hangs up the confirmed call `call_id`: BYE along its route set.
    pub fn bye(&mut self, call_id: &str, now: Instant) -> Result<Tx, AgentError> {
        let i = self
            .dialogs
            .iter()
            .position(|d| d.call_id == call_id && d.remote.1.is_some())
            .ok_or_else(|| AgentError::NoCall(call_id.to_owned()))?;
        let d = self.dialogs.remove(i);
        let (cseq, via, branch) = (self.next_cseq(), self.via(), self.branch());
        let bye = d.request(via, branch, Method::Bye, cseq);
        self.start(bye, d.next_hop(), None, None, now)
    }

    fn start(
        &mut self,
        req: Request,
        dest: SocketAddr,
        shown: Option<String>,
        ring: Option<Duration>,
        now: Instant,
    ) -> Result<Tx, AgentError> {
        if self.outgoing.len() >= MAX_REQUESTS {
            return Err(AgentError::Full(MAX_REQUESTS));
        }
        let tx = self.new_tx();
        let bytes = req.to_bytes();
        let invite = req.method == Method::Invite;
        let machine = Client::new(invite, now, self.setup.reliable, self.setup.timers);
        self.send(dest, bytes.clone());
        self.outgoing.push(Outgoing {
            tx,
            req,
            bytes,
            dest,
            machine,
            challenged: false,
            shown,
            ring: ring.map(|r| (now, r)),
            ringing: false,
            cancel: Cancel::No,
            answered: false,
        });
        Ok(tx)
    }

    fn send_cancel(&mut self, i: usize, now: Instant) {
        let o = &mut self.outgoing[i];
        o.cancel = Cancel::Sent {
            give_up_at: now + self.setup.timers.timeout(),
        };
        let (cancel, dest, tx) = (
            dialog::same_transaction(&o.req, Method::Cancel, None),
            o.dest,
            o.tx,
        );
        // A full table leaves the INVITE to its give-up time.
        let _ = self.start(cancel, dest, None, None, now);
        self.events.push_back(Event::Cancelling { tx });
    }

    /// A response: to the transaction its branch and CSeq method name.
    pub(super) fn on_response(&mut self, m: &Message<'_>, now: Instant) -> bool {
        let (Some(status), Some(branch)) = (m.status(), m.top_via().branch()) else {
            return false;
        };
        let method = m.cseq().method;
        let Some(i) = self.outgoing.iter().position(|o| {
            o.req.branch == branch && o.req.method == method && o.req.call_id == m.call_id()
        }) else {
            return false;
        };
        let out = self.outgoing[i].machine.on_response(status, now);
        if out.send_ack {
            let o = &self.outgoing[i];
            let ack = dialog::same_transaction(&o.req, Method::Ack, m.to().tag());
            self.send(o.dest, ack.to_bytes());
        }
        let invite = method == Method::Invite;
        // A 2xx again (its ACK was lost): acknowledged again, not news.
        let again = invite && status.is_success() && self.ack_2xx(i, m);
        if !out.deliver || again {
            return true;
        }
        if invite {
            self.invite_progress(i, status.is_provisional(), now);
        }
        let (code, reason) = status_of(m);
        let retried = matches!(code, 401 | 407) && self.answer_challenge(i, m, now);
        let o = &self.outgoing[i];
        if invite && status.is_final() && !status.is_success() && !retried {
            let call_id = o.req.call_id.clone();
            self.dialogs.retain(|d| d.call_id != call_id);
        }
        self.events.push_back(Event::Response {
            tx: o.tx,
            method: o.req.method,
            code,
            reason,
            message: m.as_bytes().to_vec(),
            retried,
        });
        true
    }

    fn invite_progress(&mut self, i: usize, provisional: bool, now: Instant) {
        let o = &mut self.outgoing[i];
        if !provisional {
            o.answered = true;
            return;
        }
        let first = !o.ringing;
        o.ringing = true;
        if first && o.cancel == Cancel::Wanted {
            self.send_cancel(i, now);
        }
    }

    /// Every 2xx to our INVITE is acknowledged end to end (RFC 3261
    /// §13.2.2.4); the first confirms the call. `true`: this 2xx came
    /// before (its ACK went again).
    fn ack_2xx(&mut self, i: usize, ok: &Message<'_>) -> bool {
        let (tx, cseq) = (self.outgoing[i].tx, self.outgoing[i].req.cseq);
        let Some(d) = self
            .dialogs
            .iter()
            .position(|d| matches!(d.side, Side::Caller { invite, .. } if invite == tx))
        else {
            return false;
        };
        if let Side::Caller { ack: Some(t), .. } = &self.dialogs[d].side {
            let t = t.clone();
            self.send(t.to, t.bytes);
            return true;
        }
        dialog::confirm(&mut self.dialogs[d], ok);
        let (via, branch) = (self.via(), self.branch());
        let dl = &mut self.dialogs[d];
        let ack = Transmit {
            to: dl.next_hop(),
            bytes: dl.request(via, branch, Method::Ack, cseq).to_bytes(),
        };
        dl.side = Side::Caller {
            invite: tx,
            ack: Some(ack.clone()),
        };
        self.send(ack.to, ack.bytes);
        false
    }

    /// Answers a 401/407 once, when we have a password and can answer
    /// it: the request again with credentials, a new CSeq and branch.
    fn answer_challenge(&mut self, i: usize, m: &Message<'_>, now: Instant) -> bool {
        let o = &self.outgoing[i];
        let Some(password) = self.setup.password.as_deref() else {
            return false;
        };
        if o.challenged {
            return false;
        }
        let (field, header) = if m.status().map(|s| s.as_u16()) == Some(407) {
            (HeaderName::ProxyAuthenticate, "Proxy-Authorization")
        } else {
            (HeaderName::WwwAuthenticate, "Authorization")
        };
        let who = sip_core::digest::Answerer {
            shown: o.shown.as_deref(),
            ..sip_core::digest::Answerer::new(&self.setup.user, password)
        };
        let cnonce = self.tokens.hex(8);
        let Some(value) = m.headers_named(field).find_map(|h| {
            let c = Challenge::parse(h.value).ok()?;
            sip_core::digest::authorization(&c, &who, o.req.method.as_str(), &o.req.uri, &cnonce, 1)
        }) else {
            return false;
        };
        let mut req = o.req.clone();
        req.extra
            .retain(|e| !e.starts_with("Authorization:") && !e.starts_with("Proxy-Authorization:"));
        req.extra.push(format!("{header}: {value}"));
        req.cseq = self.next_cseq();
        req.branch = self.branch();
        let bytes = req.to_bytes();
        let invite = req.method == Method::Invite;
        let o = &mut self.outgoing[i];
        o.machine = Client::new(invite, now, self.setup.reliable, self.setup.timers);
        o.req = req;
        o.bytes = bytes.clone();
        o.challenged = true;
        o.ringing = false;
        o.answered = false;
        o.ring = o.ring.map(|(_, d)| (now, d));
        let dest = o.dest;
        self.send(dest, bytes);
        true
    }

    pub(super) fn client_timers(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.outgoing.len() {
            if self.client_timer(i, now) {
                let o = self.outgoing.remove(i);
                if o.req.method == Method::Invite && !o.answered {
                    self.dialogs.retain(|d| d.call_id != o.req.call_id);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Runs the timers of request `i`; `true` when it is over.
    fn client_timer(&mut self, i: usize, now: Instant) -> bool {
        let o = &self.outgoing[i];
        let (tx, method) = (o.tx, o.req.method);
        if let Cancel::Sent { give_up_at } = o.cancel {
            if !o.answered && now >= give_up_at {
                self.events.push_back(Event::Timeout { tx, method });
                return true;
            }
        }
        if let (Some((at, d)), true, Cancel::No, false) = (o.ring, o.ringing, o.cancel, o.answered)
        {
            if now >= at + d {
                self.outgoing[i].cancel = Cancel::Wanted;
                self.send_cancel(i, now);
            }
        }
        let o = &mut self.outgoing[i];
        if o.machine.next_deadline().is_none_or(|d| now < d) {
            return false;
        }
        let out = o.machine.on_timer(now);
        if out.retransmit {
            let (dest, bytes) = (o.dest, o.bytes.clone());
            self.send(dest, bytes);
        }
        if out.timeout {
            self.events.push_back(Event::Timeout { tx, method });
        }
        out.terminated
    }
}
