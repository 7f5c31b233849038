//! The registrar (RFC 3261 §10.3, Path from RFC 3327): a REGISTER
//! becomes a prepared location change whose 200 waits for the driver to
//! store it ([`Reply::Persist`]).

use std::fmt::Write as _;
use std::net::SocketAddr;

use sip_core::contact::Contact;
use sip_core::{HeaderName, Message, StatusCode};

use crate::config::PathMode;
use crate::proto::ctx::Ctx;
use crate::proto::location::{ContactChange, Prepared, Registration, UpdateError, UpdatePolicy};
use crate::proto::metrics::Stage;
use crate::proto::reply::{bump, unverified_budget, Reply, MAX_DATAGRAM};
use crate::proto::uris::{first_path_uri, has_option_tag, push_aor, reveal};

/// What a REGISTER asks of its contacts: the usual one without an
/// allocation.
type Changes<'m> = smallvec::SmallVec<[ContactChange<'m>; 1]>;
use sip_core::Transport;

/// Longest Call-ID a binding stores.
pub const MAX_CALL_ID_LEN: usize = 256;
/// Longest Path a binding stores.
pub const MAX_PATH_LEN: usize = 1024;

/// The registrar's own state: scratch for the REGISTER being handled
/// and the change it prepared.
#[derive(Debug, Default)]
pub(super) struct Registrar {
    /// The REGISTER's Path values, gathered (RFC 3327).
    path: String,
    /// The route to this node's end of a REGISTER's flow (shared
    /// location only).
    node_route: String,
    /// Addresses-of-record registered over a WebSocket by the messages
    /// handled since the driver last asked.
    pub(super) websocket_aors: Vec<String>,
    /// A binding change waiting for `Core::persisted`, and where its
    /// answer goes.
    pub(super) pending: Option<(Prepared, SocketAddr, Transport)>,
    /// The REGISTER's AoR is written here, kept from one to the next.
    aor: String,
}

/// What the 200 to a REGISTER says besides the bindings.
struct Answer<'a> {
    /// The contacts the request named (listed first).
    changes: &'a [ContactChange<'a>],
    /// The request carried valid credentials (its source is proven).
    credentials: bool,
    /// The ID registering (revealed from a pseudonym).
    id: &'a str,
    supports_path: bool,
    wants_outbound: bool,
}

/// The header a phone enrolls for PrivaSIP-3 tickets with.
pub const ENROLL: &str = "Privasip-Enroll";
/// The header the tickets come back in.
pub const TICKETS: &str = "Privasip-Tickets";

/// Each contact's RFC 5626 instance and flow (`+sip.instance` with
/// `reg-id`, kept as INSTANCE#REG-ID so its next registration on another
/// flow replaces this one); empty where none, or where the values are
/// longer than a binding keeps or hold what a journal line cannot. The
/// list stops at the last contact that has one (no allocation for the
/// usual REGISTER, which names none).
fn instances(contacts: &[Contact<'_>]) -> Vec<String> {
    let mut found = Vec::new();
    for (k, c) in contacts.iter().enumerate() {
        let p = c.addr.params();
        if let (Some(i), Some(r)) = (p.get("+sip.instance").flatten(), p.get("reg-id").flatten()) {
            if i.len() + r.len() < MAX_CALL_ID_LEN
                && !i.chars().chain(r.chars()).any(char::is_control)
            {
                found.resize(k, String::new());
                found.push(format!("{i}#{r}"));
            }
        }
    }
    found
}

impl Registrar {
    pub(super) fn register(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Reply {
        let user = match ctx.authenticate(msg, false, now, src, out) {
            Ok(u) => u,
            Err(reply) => return reply,
        };
        let to = msg.to().uri();
        let (Some(to_user), Some(to_host)) = (to.user(), to.host()) else {
            return ctx.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[(
                    "Warning",
                    "399 sipsec \"To must be a SIP URI with a user part\"",
                )],
                src,
                out,
            );
        };
        let Some(to_user) = reveal(ctx.shared.privacy.as_ref(), to_user, now, || {
            ctx.may_decrypt(src)
        }) else {
            return ctx.refuse(msg, src, out);
        };
        if let Some(user) = &user {
            if *to_user != **user {
                return ctx.respond(msg, StatusCode::FORBIDDEN, &[], src, out);
            }
        }
        // The buffer is taken (a REGISTER refused before it is prepared
        // leaves the next one to allocate it again).
        let mut aor = std::mem::take(&mut self.aor);
        push_aor(&mut aor, &to_user, to_host);
        let star = msg.is_contact_star();
        if star && (msg.expires() != Some(0) || msg.contact_count() > 0) {
            return ctx.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[(
                    "Warning",
                    "399 sipsec \"Contact: * needs Expires: 0 and no other contact\"",
                )],
                src,
                out,
            );
        }
        // Parsed once here, then read by every check below; the usual
        // single contact without a list to hold it.
        let (one, many): (Option<Contact<'_>>, Vec<Contact<'_>>) = if msg.contact_count() == 1 {
            (msg.contacts().next(), Vec::new())
        } else {
            (None, msg.contacts().collect())
        };
        let contacts = one.as_ref().map_or(&many[..], std::slice::from_ref);
        if let Some(reply) = Self::refuse_oversize(ctx, msg, contacts, src, out) {
            return reply;
        }
        let instances = instances(contacts);
        let (changes, wants_outbound) =
            match Self::contact_changes(ctx, msg, contacts, src, &instances, out) {
                Ok(c) => c,
                Err(reply) => return reply,
            };
        let t0 = ctx.clock();
        let supports_path = match self.registration_route(ctx, msg, src, out) {
            Ok(supported) => supported,
            Err(reply) => return reply,
        };
        if matches!(ctx.transport, Transport::Ws | Transport::Wss) && self.websocket_aors.len() < 8
        {
            self.websocket_aors.push(aor.clone());
        }
        let prepared = self.prepare_change(ctx, msg, src, &aor, &changes, star, now, out);
        self.aor = aor;
        let prepared = match prepared {
            Ok(p) => p,
            Err(reply) => return reply,
        };
        ctx.stage(Stage::AddUser, t0);
        let answer = Answer {
            changes: &changes,
            credentials: user.is_some(),
            id: &to_user,
            supports_path,
            wants_outbound,
        };
        self.answer_registration(ctx, msg, src, prepared, &answer, out)
    }

    /// PrivaSIP-3 tickets for an authenticated REGISTER that enrolls
    /// (never for one without credentials: they would name whoever asked).
    fn tickets_for(ctx: &Ctx, msg: &Message<'_>, answer: &Answer<'_>, now: u64) -> Option<String> {
        let p = ctx.shared.privacy.as_ref().filter(|p| p.issues_tickets())?;
        if !answer.credentials {
            return None;
        }
        let enroll = msg
            .headers_named(sip_core::HeaderName::Other)
            .find(|h| h.raw_name.eq_ignore_ascii_case(ENROLL))?;
        p.enroll(answer.id, enroll.value, now)
    }

    /// What the REGISTER asks of each contact (RFC 3261 §10.3 steps 6–7,
    /// RFC 5626 §4.2), and whether any asks for an outbound flow; 423
    /// for an interval below the minimum.
    fn contact_changes<'m>(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        contacts: &[Contact<'m>],
        src: SocketAddr,
        instances: &'m [String],
        out: &mut Vec<u8>,
    ) -> Result<(Changes<'m>, bool), Reply> {
        let cfg = &ctx.shared.config;
        let (min, max, default) = (cfg.min_expires, cfg.max_expires, cfg.default_expires);
        let mut changes = Changes::with_capacity(msg.contact_count());
        let mut wants_outbound = false;
        let direct_flow = ctx.transport.is_reliable() && msg.header(HeaderName::Path).is_none();
        for (k, c) in contacts.iter().enumerate() {
            let instance = instances.get(k).map_or("", String::as_str);
            let wanted = c.expires.or(msg.expires()).unwrap_or(default);
            if wanted != 0 && wanted < min {
                let min = min.to_string();
                return Err(ctx.respond(
                    msg,
                    StatusCode::INTERVAL_TOO_BRIEF,
                    &[("Min-Expires", &min)],
                    src,
                    out,
                ));
            }
            // RFC 5626 §4.2: an outbound registration names its instance
            // and flow; over a connection to this server (no Path: no edge
            // proxy between) the connection is the flow.
            let params = c.addr.params();
            let outbound = direct_flow
                && params.get("reg-id").is_some()
                && params.get("+sip.instance").is_some();
            wants_outbound |= outbound;
            changes.push(ContactChange {
                contact: c.addr.uri().as_str(),
                expires: wanted.min(max),
                q: c.q.unwrap_or(1000),
                outbound,
                instance,
            });
        }
        Ok((changes, wants_outbound))
    }

    /// The Path to store (RFC 3327) and, with a location shared by several
    /// nodes, the route to this node and the flow's token (RFC 5626 §5.2)
    /// for a phone on a connection here; whether the phone supports Path.
    fn registration_route(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<bool, Reply> {
        let supports_path = self.collect_path(ctx, msg, src, out)?;
        if self.path.len() > MAX_PATH_LEN {
            bump(&ctx.shared.metrics.contacts_refused);
            return Err(ctx.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[(
                    "Warning",
                    "399 sipsec \"Path longer than this registrar stores\"",
                )],
                src,
                out,
            ));
        }
        // With a location shared by several nodes, a phone on a connection
        // to this node is reached through this node: the binding names the
        // route here, with the flow's token (RFC 5626 §5.2).
        self.node_route.clear();
        if ctx.shared.config.redis.is_some() && ctx.transport.is_reliable() {
            let token =
                crate::proto::tokens::flow_token(&ctx.shared.flow_key.0, src, ctx.transport);
            let _ = write!(
                self.node_route,
                "<sip:{token}@{};lr>",
                ctx.shared.config.advertise
            );
        }
        Ok(supports_path)
    }

    /// The location change the REGISTER makes, prepared (not yet stored);
    /// the answer when it cannot be made.
    #[allow(clippy::too_many_arguments)]
    fn prepare_change(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        aor: &str,
        changes: &[ContactChange<'_>],
        star: bool,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Result<Prepared, Reply> {
        let reg = Registration {
            call_id: msg.call_id(),
            cseq: msg.cseq().seq,
            source: src,
            path: &self.path,
            flow: ctx.transport.is_reliable().then_some(ctx.transport),
            node: &self.node_route,
            now,
        };
        let cfg = &ctx.shared.config;
        // Over UDP the 200 must fit one datagram with the request's own
        // headers, which it echoes (RFC 3261 §18.2.2 leaves no other way
        // back for a response).
        let max_listing = if ctx.transport == Transport::Udp {
            MAX_DATAGRAM.saturating_sub(msg.len() + 256)
        } else {
            usize::MAX
        };
        let policy = UpdatePolicy {
            max_contacts: cfg.max_contacts,
            overflow: cfg.max_contacts_policy,
            max_listing,
            max_bindings: cfg.max_bindings,
        };
        let result = ctx
            .shared
            .location
            .prepare(aor, changes, star, &reg, &policy);
        let status = match result {
            Ok(p) => return Ok(p),
            Err(UpdateError::Busy(aor)) => {
                out.clear();
                ctx.busy = Some(aor);
                return Err(Reply::Retry);
            }
            Err(UpdateError::OutOfOrder { .. }) => ctx.respond(
                msg,
                StatusCode::SERVER_INTERNAL_ERROR,
                &[(
                    "Warning",
                    "399 sipsec \"CSeq below the stored one for this Call-ID\"",
                )],
                src,
                out,
            ),
            Err(UpdateError::TooManyContacts { max }) => {
                let warning = format!(
                    "399 sipsec \"too many contacts for this address-of-record (at most {max})\""
                );
                ctx.respond(
                    msg,
                    StatusCode::FORBIDDEN,
                    &[("Warning", &warning)],
                    src,
                    out,
                )
            }
            Err(UpdateError::Full { max }) => {
                bump(&ctx.shared.metrics.registrar_full);
                let warning =
                    format!("399 sipsec \"this registrar holds its most bindings ({max})\"");
                ctx.respond(
                    msg,
                    StatusCode::SERVICE_UNAVAILABLE,
                    &[("Retry-After", "60"), ("Warning", &warning)],
                    src,
                    out,
                )
            }
            Err(UpdateError::ListingTooLarge { .. }) => {
                bump(&ctx.shared.metrics.oversize);
                ctx.respond(
                    msg,
                    StatusCode::MESSAGE_TOO_LARGE_5XX,
                    &[(
                        "Warning",
                        "399 sipsec \"the contact list would not fit a UDP answer: register over TCP\"",
                    )],
                    src,
                    out,
                )
            }
        };
        Err(status)
    }

    /// The 200 for a prepared change (RFC 3261 §10.3 step 8): every
    /// binding listed, within what may be sent to an unverified UDP
    /// source; it waits for the change to be stored ([`Reply::Persist`]).
    fn answer_registration(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        prepared: Prepared,
        answer: &Answer<'_>,
        out: &mut Vec<u8>,
    ) -> Reply {
        let now = ctx.now.secs();
        if !prepared.is_empty() && !Self::journal_allows(ctx, prepared.records()) {
            ctx.commit_change(prepared, false);
            bump(&ctx.shared.metrics.journal_throttled);
            return ctx.respond(
                msg,
                StatusCode::SERVICE_UNAVAILABLE,
                &[
                    ("Retry-After", "5"),
                    (
                        "Warning",
                        "399 sipsec \"too many location changes: try later\"",
                    ),
                ],
                src,
                out,
            );
        }
        // An answer over UDP to a source nothing proves (no credentials)
        // carries at most AMPLIFICATION times the request's bytes, as a
        // QUIC server before address validation: the contacts the request
        // named first, then others while they fit.
        let budget = if ctx.transport == Transport::Udp && !answer.credentials {
            unverified_budget(msg.len())
        } else {
            usize::MAX
        };
        ctx.lines.clear();
        let named = |b: &crate::proto::location::Binding| {
            answer.changes.iter().any(|c| c.contact == b.contact())
        };
        let mut unlisted = 0;
        // The named ones in the first pass, the others in the second.
        for first in [true, false] {
            for b in prepared.bindings() {
                if named(b) != first {
                    continue;
                }
                let start = ctx.lines.len();
                ctx.lines.push_str("Contact: <");
                ctx.lines.push_str(b.contact());
                ctx.lines.push_str(">;expires=");
                sip_core::writer::push_u64(&mut ctx.lines, b.expires_at.saturating_sub(now));
                ctx.lines.push_str("\r\n");
                if ctx.lines.len() > budget {
                    ctx.lines.truncate(start);
                    unlisted += 1;
                }
            }
        }
        let cut_warning;
        // Most answers carry none of these: no allocation until one does.
        let mut extra: Vec<(&str, &str)> = Vec::new();
        if unlisted > 0 {
            bump(&ctx.shared.metrics.listings_cut);
            cut_warning = format!(
                "399 sipsec \"{unlisted} contact(s) not listed over UDP without credentials: ask over TCP\""
            );
            extra.push(("Warning", &cut_warning));
        }
        if answer.supports_path && !self.path.is_empty() {
            // RFC 3327 §5.3: the stored Path goes back to the UA.
            let _ = write!(ctx.lines, "Path: {}\r\n", self.path);
        }
        // RFC 5626 §6: a registrar that keeps the flow says so.
        if answer.wants_outbound {
            extra.push(("Require", "outbound"));
        }
        let tickets = Self::tickets_for(ctx, msg, answer, now);
        if let Some(t) = &tickets {
            extra.push((TICKETS, t));
        }
        let reply = ctx.respond(msg, StatusCode::OK, &extra, src, out);
        if prepared.is_empty() {
            // Nothing to store (a query, or removing what was not there).
            ctx.commit_change(prepared, true);
            bump(&ctx.shared.metrics.registered);
            return reply;
        }
        match reply {
            Reply::Send(dest, transport) => {
                self.pending = Some((prepared, dest, transport));
                Reply::Persist
            }
            other => {
                ctx.commit_change(prepared, false);
                other
            }
        }
    }

    /// 403 for a REGISTER whose bindings would store more than this
    /// registrar keeps per binding: a contact or To URI over
    /// `max_contact_len`, a Call-ID over [`MAX_CALL_ID_LEN`].
    fn refuse_oversize(
        ctx: &mut Ctx,
        msg: &Message<'_>,
        contacts: &[Contact<'_>],
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let max = ctx.shared.config.max_contact_len;
        let warning = if contacts.iter().any(|c| c.addr.uri().as_str().len() > max) {
            format!("399 sipsec \"contact URI longer than {max} bytes\"")
        } else if msg.to().uri().as_str().len() > max {
            format!("399 sipsec \"To URI longer than {max} bytes\"")
        } else if msg.contact_count() > 0 && msg.call_id().len() > MAX_CALL_ID_LEN {
            format!("399 sipsec \"Call-ID longer than {MAX_CALL_ID_LEN} bytes\"")
        } else {
            return None;
        };
        bump(&ctx.shared.metrics.contacts_refused);
        Some(ctx.respond(
            msg,
            StatusCode::FORBIDDEN,
            &[("Warning", &warning)],
            src,
            out,
        ))
    }

    /// Whether the journal may take `records` now: a token bucket of
    /// `journal_rate` bytes per second (`journal_burst` at once), so a
    /// flood of registrations cannot fill the disk or Redis faster.
    fn journal_allows(ctx: &mut Ctx, records: &[crate::proto::location::Record]) -> bool {
        let bytes: u64 = records.iter().map(|r| r.approximate_len() as u64).sum();
        let cfg = &ctx.shared.config;
        ctx.shared.journal_budget.take_leased(
            &mut ctx.journal_lease,
            bytes,
            (cfg.journal_rate, cfg.journal_burst),
            ctx.now.mono,
        )
    }

    /// Gathers the REGISTER's Path values into `self.path` (RFC 3327)
    /// according to the configured mode; `Ok` tells whether the UA sent
    /// `Supported: path` (only looked up when there is a Path), `Err` is
    /// the refusal to send.
    fn collect_path(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<bool, Reply> {
        self.path.clear();
        let mode = ctx.shared.config.path;
        if mode == PathMode::Off {
            return Ok(false);
        }
        for h in msg.headers_named(HeaderName::Path) {
            if !self.path.is_empty() {
                self.path.push_str(", ");
            }
            // Folded lines become spaces: the journal is one line per record.
            self.path.extend(
                h.value
                    .chars()
                    .map(|c| if c.is_ascii_whitespace() { ' ' } else { c }),
            );
        }
        if self.path.is_empty() {
            return Ok(false);
        }
        let supported = has_option_tag(msg, HeaderName::Supported, "path");
        if first_path_uri(&self.path).is_none() {
            return Err(ctx.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[("Warning", "399 sipsec \"Path must hold <sip:...> values\"")],
                src,
                out,
            ));
        }
        if mode == PathMode::Strict && !supported {
            return Err(ctx.respond(
                msg,
                StatusCode::BAD_EXTENSION,
                &[(
                    "Warning",
                    "399 sipsec \"Path needs Supported: path (RFC 3327)\"",
                )],
                src,
                out,
            ));
        }
        Ok(supported)
    }
}
