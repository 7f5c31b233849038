//! The proxy's side of dialogs and call records
//! ([`crate::proto::dialogs`]): a forwarded initial INVITE starts one,
//! the responses going upstream (relayed, or made by the transactions'
//! timers) confirm or end it, and the timers end those past their time.

use std::net::SocketAddr;

use sip_core::{Message, Method, StatusCode};

use crate::proto::ctx::Ctx;
use crate::proto::dialogs::{CallRecord, Caller, Follow, Legs, Start};
use crate::proto::effects::Hop;
use crate::proto::names::Route;
use crate::proto::originated::BRANCH_PREFIX;
use crate::proto::proxy::Proxy;
use crate::proto::reply::Reply;
use crate::proto::shared::Now;
use crate::proto::stir::StirEdit;

/// A BYE of the operator's.
struct Bye<'a> {
    target: &'a str,
    from: &'a str,
    to: &'a str,
    call_id: &'a str,
    cseq: u32,
}

/// How often dialogs are swept for timeouts, ms.
const SWEEP_EVERY_MS: u64 = 1000;

impl Proxy {
    /// An initial INVITE from `src` is about to be forwarded from `up` to
    /// `down` (along `route`, a trunk's when it names one): its dialog is
    /// followed from now (`Ok(true)`; `Ok(false)`: nothing new to
    /// follow), or the call is refused, answered into `out`: 503 when the
    /// table is full, 403 when its caller holds its whole share.
    pub(super) fn follow(
        &self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        (up, down): (Hop, Hop),
        route: Option<&Route>,
        out: &mut Vec<u8>,
    ) -> Result<bool, Reply> {
        let hop = down.0;
        if ctx.shared.dialogs.is_none()
            || msg.method() != Method::Invite
            || msg.to().tag().is_some()
        {
            return Ok(false);
        }
        let trunk = route
            .and_then(|r| r.name.strip_prefix("trunk."))
            .map(|t| (t.to_owned(), hop));
        let stir = self.stir_edit.as_ref().map(|e| match e {
            StirEdit::Identity(_) => "signed".to_owned(),
            StirEdit::Verstat(v) => (*v).to_owned(),
        });
        let start = Start {
            caller: msg.from().uri().user().unwrap_or("").to_owned(),
            callee: msg
                .request_uri()
                .and_then(|u| u.user())
                .unwrap_or("")
                .to_owned(),
            trunk,
            transport: ctx.transport.as_str(),
            stir,
            legs: Legs {
                from: msg.from().as_str().to_owned(),
                to: msg.to().as_str().to_owned(),
                caller_contact: msg
                    .contacts()
                    .next()
                    .map(|c| c.addr.uri().as_str().to_owned())
                    .unwrap_or_default(),
                up: Some(up),
                down: Some(down),
                cseq: msg.cseq().seq,
                callee_contact: None,
                callee_tag: None,
                hidden: self.hide_out && self.seal_call_id,
            },
        };
        let follow = match &ctx.shared.dialogs {
            Some(d) => d.begin(msg, start, self.share_of(ctx, src), ctx.now.unix_ms),
            None => return Ok(false),
        };
        match follow {
            Follow::Started => Ok(true),
            Follow::Already => Ok(false),
            Follow::Full | Follow::OverShare => Err(Self::refuse_call(ctx, msg, src, follow, out)),
        }
    }

    /// Before work is spent on an initial INVITE from `src` (its media
    /// offer, its caller's certificate): `Some` refuses it now when its
    /// dialog could not be followed ([`Proxy::follow`] decides for good).
    pub(super) fn admit(
        &self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let d = ctx.shared.dialogs.as_ref()?;
        if msg.method() != Method::Invite || msg.to().tag().is_some() {
            return None;
        }
        let follow = d.admits(msg, self.share_of(ctx, src));
        matches!(follow, Follow::Full | Follow::OverShare)
            .then(|| Self::refuse_call(ctx, msg, src, follow, out))
    }

    /// A call whose dialog cannot be followed (`Full` or `OverShare`):
    /// the request written for the callee goes nowhere, the media
    /// relay's session for it (if any) ends, and the caller is answered
    /// 503 when the table is full, 403 when it holds its whole share.
    fn refuse_call(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        follow: Follow,
        out: &mut Vec<u8>,
    ) -> Reply {
        out.clear();
        Self::abandon_media(ctx, msg);
        if follow == Follow::Full {
            return ctx.respond(
                msg,
                StatusCode::SERVICE_UNAVAILABLE,
                &[
                    ("Retry-After", "5"),
                    ("Warning", "399 sipsec \"too many calls in progress\""),
                ],
                src,
                out,
            );
        }
        ctx.respond(
            msg,
            StatusCode::FORBIDDEN,
            &[(
                "Warning",
                "399 sipsec \"too many calls in progress for this caller\"",
            )],
            src,
            out,
        )
    }

    /// A call that will not go out after all: the media relay's session
    /// its offer opened (if any, and still unanswered) ends now.
    pub(super) fn abandon_media(ctx: &mut Ctx, msg: &Message<'_>) {
        let from_tag = msg.from().tag().unwrap_or("");
        if let Some(m) = &ctx.shared.media {
            if m.abandon(msg.call_id(), from_tag) {
                ctx.sends.wake_media();
            }
        }
    }

    /// Whose share of the dialog table a call from `src` counts against:
    /// the user whose credentials were checked; else its source's.
    fn share_of<'a>(&'a self, ctx: &Ctx, src: SocketAddr) -> Option<Caller<'a>> {
        if let Some(user) = &self.caller {
            return Some(Caller::User(user));
        }
        ctx.source_share(src).map(Caller::Source)
    }

    /// A response went upstream: what it means for its dialog.
    pub(super) fn dialog_response(ctx: &mut Ctx, msg: &Message<'_>) {
        let Some(d) = ctx.shared.dialogs.as_ref() else {
            return;
        };
        if let Some(r) = d.response(msg, ctx.now.unix_ms) {
            ctx.records.push(r);
        }
    }

    /// After the transactions' timers ran: the responses they made end
    /// their dialogs (a 408 after Timer C), and once a second dialogs past
    /// their time end.
    pub(super) fn dialog_timers(&mut self, ctx: &mut Ctx, now: Now) {
        let shared = ctx.shared.clone();
        let Some(d) = shared.dialogs.as_ref() else {
            return;
        };
        for (bytes, _) in ctx.sends.iter() {
            if !bytes.starts_with(b"SIP/2.0 ") {
                continue;
            }
            if let Ok(m) = Message::parse(bytes) {
                if let Some(r) = d.response(&m, now.unix_ms) {
                    ctx.records.push(r);
                }
            }
        }
        if now.unix_ms.saturating_sub(self.swept_ms) >= SWEEP_EVERY_MS {
            self.swept_ms = now.unix_ms;
            ctx.records.extend(d.sweep(now.unix_ms));
        }
    }

    /// Ends the confirmed call `call_id` (see `Core::end_dialog`).
    pub(super) fn end_dialog(
        &mut self,
        ctx: &mut Ctx,
        call_id: &str,
        now: Now,
    ) -> Option<CallRecord> {
        ctx.sends.clear();
        ctx.now = now;
        let (legs, record) = ctx.shared.dialogs.as_ref()?.end(call_id, now.unix_ms)?;
        let callee_tag = legs.callee_tag.clone().unwrap_or_default();
        let to_callee = format!("{};tag={callee_tag}", legs.to);
        // Toward the callee: the caller's side of the dialog, a CSeq past
        // the INVITE's (and the Call-ID the callee knows: sealed toward
        // a trunk that hides the inside); toward the caller: the callee's
        // side, a CSeq of its own (the caller has seen none from the
        // callee, or few).
        if let (Some(contact), Some(down)) = (&legs.callee_contact, legs.down) {
            let hidden = legs
                .hidden
                .then(|| ctx.shared.hider.as_ref()?.hide_call_id(call_id))
                .flatten();
            let bye = Bye {
                target: contact,
                from: &legs.from,
                to: &to_callee,
                call_id: hidden.as_deref().unwrap_or(call_id),
                cseq: legs.cseq + 1,
            };
            Self::send_bye(ctx, &bye, down);
        }
        if let Some(up) = legs.up {
            let bye = Bye {
                target: &legs.caller_contact,
                from: &to_callee,
                to: &legs.from,
                call_id,
                cseq: 1_000_000,
            };
            Self::send_bye(ctx, &bye, up);
        }
        ctx.records.push(record.clone());
        Some(record)
    }

    /// Sends `bye` to `hop`, kept until answered.
    fn send_bye(ctx: &mut Ctx, bye: &Bye<'_>, hop: Hop) {
        let here = ctx.listen_addr(hop.1);
        let mut h = std::hash::BuildHasher::build_hasher(&ctx.shared.branch_salt);
        std::hash::Hasher::write(&mut h, bye.call_id.as_bytes());
        std::hash::Hasher::write(&mut h, bye.target.as_bytes());
        std::hash::Hasher::write_u64(&mut h, ctx.now.unix_ms);
        let branch = format!("{BRANCH_PREFIX}{:016x}", std::hash::Hasher::finish(&h));
        let text = format!(
            "BYE {} SIP/2.0\r\nVia: SIP/2.0/{} {here};branch={branch}\r\n\
             Max-Forwards: 70\r\nFrom: {}\r\nTo: {}\r\nCall-ID: {}\r\nCSeq: {} BYE\r\n\
             Reason: SIP;cause=200;text=\"ended by the operator\"\r\nContent-Length: 0\r\n\r\n",
            bye.target,
            hop.1.as_str(),
            bye.from,
            bye.to,
            bye.call_id,
            bye.cseq,
        );
        ctx.sends.push(text.as_bytes(), hop);
        ctx.shared
            .originated
            .start(&branch, text.as_bytes(), hop, ctx.now.mono);
        ctx.sends.wake.timers = true;
    }

    /// This proxy's own requests due again at `now` are sent again; those
    /// Timer F gives up are logged.
    pub(super) fn originated_timers(ctx: &mut Ctx, now: Now) {
        for branch in ctx.shared.originated.tick(now.mono, &mut ctx.sends) {
            ctx.events
                .push(crate::proto::reply::Event::Unanswered { branch });
        }
    }

    /// What the callee's side adds to the CSeq of the request `msg`
    /// answers or is (0: a callee's request, or no offset).
    pub(super) fn caller_offset(ctx: &Ctx, msg: &Message<'_>) -> u32 {
        ctx.shared.dialogs.as_ref().map_or(0, |d| {
            d.offset(msg.call_id(), msg.from().tag().unwrap_or(""))
        })
    }

    /// The transactions sent requests again with a trunk's credentials:
    /// their dialogs' offsets grow.
    pub(super) fn note_renumbered(ctx: &mut Ctx) {
        let Some(d) = ctx.shared.dialogs.as_ref() else {
            return;
        };
        for (call_id, from_tag) in ctx.sends.renumbered.drain(..) {
            d.renumbered(&call_id, &from_tag);
        }
    }

    /// A caller's in-dialog request `msg`, written into `out` as
    /// forwarded, gets the dialog's CSeq offset.
    pub(super) fn shift_cseq(&self, ctx: &Ctx, msg: &Message<'_>, out: &mut Vec<u8>) {
        if msg.to().tag().is_none() {
            return;
        }
        let offset = Self::caller_offset(ctx, msg);
        if offset == 0 {
            return;
        }
        let written = std::mem::take(out);
        if !crate::proto::trunk_auth::rewrite_cseq(&written, i64::from(offset), out) {
            *out = written;
        }
    }
}
