//! The stateful proxy's side of relayed media (`[media]`): an offer
//! (INVITE or UPDATE with SDP) is parked on the relay's `offer` and
//! forwarded with the relay's session description; an answer (a 18x or
//! 2xx with SDP) is parked on `answer` and passed upstream the same way;
//! a BYE the peer confirmed (2xx), an accepted CANCEL and a failed INVITE
//! end the call at the relay (`delete`).
//! Which calls are relayed, and the flags of each leg, are
//! [`crate::proto::media`]'s.

use std::net::SocketAddr;

use sip_core::{Message, Method, StatusCode, Transport};

use crate::config_media::RelayFailure;
use crate::proto::branch::Key;
use crate::proto::ctx::Ctx;
use crate::proto::media::{self, Asked, Outcome};
use crate::proto::ng::Command;
use crate::proto::parked::Parked;
use crate::proto::proxy::Proxy;
use crate::proto::reply::{bump, Event, Reply};

/// Seconds a caller refused for want of a relay waits (503 Retry-After).
const RETRY_AFTER: &str = "5";

impl Proxy {
    /// The session description the relay gave the message being handed in
    /// again, which goes on in place of its own.
    pub(super) fn relayed_sdp(&self) -> Option<&str> {
        match &self.media {
            Some(Outcome::Sdp(sdp)) => Some(sdp),
            _ => None,
        }
    }

    /// Before `msg` (from `src`) is forwarded to a `to` leg: an offer the
    /// relay must see first is parked on it (`Some(Drop)`), a call it
    /// cannot take is answered (503, or 488 under `require_srtp`); `None`
    /// forwards it (with the relay's SDP when it is handed in again).
    /// `callee_nat`: the target's contact is not the address the request
    /// goes to.
    pub(super) fn relay_offer(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        to: Transport,
        callee_nat: bool,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let table = ctx.shared.media.as_ref()?;
        let method = msg.method();
        if !matches!(method, Method::Invite | Method::Update) {
            return None;
        }
        match &self.media {
            Some(Outcome::Sdp(_)) => {
                let from_tag = msg.from().tag().unwrap_or("");
                let srtp = media::sdp_of(msg).is_some_and(|s| !media::offers_plain_rtp(s));
                table.relaying(msg.call_id(), from_tag, srtp, ctx.now.mono);
                return None;
            }
            Some(Outcome::Failed(why)) => {
                let why = why.clone();
                return Self::relay_failed(ctx, msg, src, &why, out);
            }
            Some(Outcome::Refused(why)) => {
                let what = format!(
                    "{} refused (488): the media relay said {why:?}",
                    method.as_str()
                );
                ctx.events.push(Event::MediaFailed {
                    call_id: msg.call_id().to_owned(),
                    what,
                });
                return Some(ctx.respond(
                    msg,
                    StatusCode::NOT_ACCEPTABLE_HERE,
                    &[(
                        "Warning",
                        "399 sipsec \"the media relay refused the offer\"",
                    )],
                    src,
                    out,
                ));
            }
            None => {}
        }
        let sdp = media::sdp_of(msg)?;
        let settings = &ctx.shared.config.media;
        // The sender behind NAT: its media goes where its messages come from.
        let nat = media::behind_nat(msg, src, sdp);
        let relay = if msg.to().tag().is_some() {
            // In a dialog: its media is relayed when its offer was.
            table.call(msg.call_id()).is_some()
        } else {
            media::wanted(settings.mode, ctx.transport, to, nat || callee_nat)
        };
        if !relay {
            return None;
        }
        if settings.require_srtp && !media::browser(ctx.transport) && media::offers_plain_rtp(sdp) {
            bump(&table.counts.refused_unencrypted);
            return Some(ctx.respond(
                msg,
                StatusCode::NOT_ACCEPTABLE_HERE,
                &[("Warning", "399 sipsec \"SRTP required: offer RTP/SAVP\"")],
                src,
                out,
            ));
        }
        // A phone's leg keeps SRTP when a phone offered it (a browser's
        // DTLS-SRTP does not make a phone leg SRTP unless required).
        let srtp = settings.require_srtp
            || (!media::browser(ctx.transport) && !media::offers_plain_rtp(sdp));
        let command = Command::Offer(media::media(msg, sdp, true, to, srtp, nat, src.ip()));
        let question = Self::question(ctx, b'o', Self::branch(ctx, msg), 0, None);
        self.ask_relay(ctx, msg, src, question, command, out)
    }

    /// A response `msg` (from `src`) to this proxy's transaction `key`,
    /// before the transaction takes it: an answer for a relayed call is
    /// parked on the relay (`Some(Drop)`); a final failure of its INVITE,
    /// or a 2xx to its BYE, ends the call at the relay. `None`: the transaction takes it (with
    /// the relay's SDP when it is handed in again).
    pub(super) fn relay_answer(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        key: Key,
    ) -> Option<Reply> {
        let table = ctx.shared.media.as_ref()?;
        let status = msg.status()?;
        let method = msg.cseq().method;
        if method == Method::Bye && status.is_success() {
            // The peer confirmed the BYE of a dialog we forwarded it in:
            // the call ends at the relay (a BYE alone, which anyone who
            // saw the Call-ID could send, ends nothing here).
            let ours = ctx.shared.transactions.as_ref()?.knows(key);
            if ours && table.end(msg.call_id()) {
                ctx.sends.wake_media();
            }
            return None;
        }
        if !matches!(method, Method::Invite | Method::Update) || status == StatusCode::TRYING {
            return None;
        }
        let call = table.call(msg.call_id())?;
        if status.as_u16() >= 300 {
            if method == Method::Invite && !call.established && table.end(msg.call_id()) {
                ctx.sends.wake_media();
            }
            return None;
        }
        match &self.media {
            Some(Outcome::Sdp(_)) => {
                if status.is_success() && method == Method::Invite {
                    table.established(msg.call_id());
                }
                return None;
            }
            Some(Outcome::Failed(why) | Outcome::Refused(why)) => {
                let what = format!("{status} passed on unrelayed: {why}");
                bump(&table.counts.passed_unrelayed);
                ctx.events.push(Event::MediaFailed {
                    call_id: msg.call_id().to_owned(),
                    what,
                });
                return None;
            }
            None => {}
        }
        let sdp = media::sdp_of(msg)?;
        // Only a response to a transaction of ours is worth the relay's
        // question (and may change where the call's media goes).
        if !ctx.shared.transactions.as_ref()?.knows(key) {
            return None;
        }
        let to = msg.vias().nth(1).map_or(Transport::Udp, |v| v.transport());
        let nat = media::behind_nat(msg, src, sdp);
        // The caller's leg answers in the profile the caller offered.
        let srtp = ctx.shared.config.media.require_srtp || call.caller_srtp;
        let command = Command::Answer(media::media(msg, sdp, false, to, srtp, nat, src.ip()));
        let question = Self::question(ctx, b'a', key.branch, status.as_u16(), msg.to().tag());
        let mut none = Vec::new();
        match self.ask_relay(ctx, msg, src, question, command, &mut none) {
            Some(Reply::Drop) => Some(Reply::Drop),
            // No room: it goes on unrelayed.
            _ => None,
        }
    }

    /// A CANCEL for `msg`'s INVITE was accepted: its call ends at the relay.
    pub(super) fn media_cancelled(ctx: &mut Ctx, msg: &Message<'_>) {
        if let Some(table) = ctx.shared.media.as_ref() {
            if table.end(msg.call_id()) {
                ctx.sends.wake_media();
            }
        }
    }

    fn ask_relay(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        question: u64,
        command: Command,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let table = ctx.shared.media.as_ref()?;
        let parked = Parked {
            message: msg.as_bytes().to_vec(),
            src,
            arrived: ctx.transport,
        };
        match table.ask(question, command, parked, ctx.source_share(src)) {
            Asked::Parked => {
                ctx.sends.wake_media();
                Some(Reply::Drop)
            }
            // A retransmission of a message that waits: the relay's
            // answer will send that one on.
            Asked::Duplicate => Some(Reply::Drop),
            Asked::Full => {
                Self::relay_failed(ctx, msg, src, "too many calls wait on media relays", out)
            }
        }
    }

    /// No relay took the offer `msg`: 503 with Retry-After, or forwarded
    /// unrelayed, as configured.
    fn relay_failed(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        why: &str,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let table = ctx.shared.media.as_ref()?;
        let pass = ctx.shared.config.media.on_failure == RelayFailure::Pass;
        let (counter, what) = if pass {
            (&table.counts.passed_unrelayed, "passed on unrelayed")
        } else {
            (&table.counts.refused_no_relay, "refused (503)")
        };
        bump(counter);
        ctx.events.push(Event::MediaFailed {
            call_id: msg.call_id().to_owned(),
            what: format!("{} {what}: {why}", msg.method().as_str()),
        });
        if pass {
            return None;
        }
        Some(ctx.respond(
            msg,
            StatusCode::SERVICE_UNAVAILABLE,
            &[
                ("Retry-After", RETRY_AFTER),
                ("Warning", "399 sipsec \"media relay unavailable\""),
            ],
            src,
            out,
        ))
    }

    /// The question a message asks the relay: the same for its
    /// retransmissions, unguessable for anyone else (keyed).
    fn question(ctx: &Ctx, kind: u8, branch: u64, status: u16, to_tag: Option<&str>) -> u64 {
        use std::hash::BuildHasher;
        // 0 is the question of commands nothing waits on.
        ctx.shared
            .branch_salt
            .hash_one((kind, branch, status, to_tag))
            .max(1)
    }
}
