//! The registrar (RFC 3261 §10.3, Path from RFC 3327): a REGISTER
//! becomes a prepared location change whose 200 waits for the driver to
//! store it ([`Reply::Persist`]).

use std::fmt::Write as _;
use std::net::SocketAddr;

use sip_core::{HeaderName, Message, StatusCode};

use crate::config::PathMode;
use crate::proto::core::{
    aor_of, bump, first_path_uri, has_option_tag, reveal, Core, Reply, Transport, MAX_DATAGRAM,
};
use crate::proto::location::{ContactChange, Location, Registration, UpdateError, UpdatePolicy};
use crate::proto::metrics::Stage;

impl Core {
    pub(super) fn register(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Reply {
        let user = match self.authenticate(msg, false, now, src, out) {
            Ok(u) => u,
            Err(reply) => return reply,
        };
        let to = msg.to().uri();
        let (Some(to_user), Some(to_host)) = (to.user(), to.host()) else {
            return self.respond(
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
        let Some(to_user) = reveal(self.shared.privacy.as_ref(), to_user, now) else {
            return self.refuse(msg, src, out);
        };
        if let Some(user) = user {
            if *to_user != *user {
                return self.respond(msg, StatusCode::FORBIDDEN, &[], src, out);
            }
        }
        let aor = aor_of(&to_user, to_host);
        let cfg = &self.shared.config;
        let (min, max, default) = (cfg.min_expires, cfg.max_expires, cfg.default_expires);
        let star = msg.is_contact_star();
        if star && (msg.expires() != Some(0) || msg.contact_count() > 0) {
            return self.respond(
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
        let mut changes: Vec<ContactChange<'_>> = Vec::with_capacity(msg.contact_count());
        let mut wants_outbound = false;
        let direct_flow = self.transport.is_reliable() && msg.header(HeaderName::Path).is_none();
        for c in msg.contacts() {
            let wanted = c.expires.or(msg.expires()).unwrap_or(default);
            if wanted != 0 && wanted < min {
                let min = min.to_string();
                return self.respond(
                    msg,
                    StatusCode::INTERVAL_TOO_BRIEF,
                    &[("Min-Expires", &min)],
                    src,
                    out,
                );
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
            });
        }
        let t0 = self.clock();
        let supports_path = match self.collect_path(msg, src, out) {
            Ok(supported) => supported,
            Err(reply) => return reply,
        };
        // With a location shared by several nodes, a phone on a connection
        // to this node is reached through this node: the binding names the
        // route here, with the flow's token (RFC 5626 §5.2).
        self.node_route.clear();
        if self.shared.config.redis.is_some() && self.transport.is_reliable() {
            let token = self.flow_token(src, self.transport);
            let _ = write!(
                self.node_route,
                "<sip:{token}@{};lr>",
                self.shared.config.advertise
            );
        }
        let reg = Registration {
            call_id: msg.call_id(),
            cseq: msg.cseq().seq,
            source: src,
            path: &self.path,
            flow: self.transport.is_reliable().then_some(self.transport),
            node: &self.node_route,
            now,
        };
        let cfg = &self.shared.config;
        // Over UDP the 200 must fit one datagram with the request's own
        // headers, which it echoes (RFC 3261 §18.2.2 leaves no other way
        // back for a response).
        let max_listing = if self.transport == Transport::Udp {
            MAX_DATAGRAM.saturating_sub(msg.len() + 256)
        } else {
            usize::MAX
        };
        let policy = UpdatePolicy {
            max_contacts: cfg.max_contacts,
            overflow: cfg.max_contacts_policy,
            max_listing,
        };
        let result = self
            .shared
            .location
            .prepare(aor, &changes, star, &reg, &policy);
        let prepared = match result {
            Ok(p) => p,
            Err(UpdateError::Busy) => {
                out.clear();
                return Reply::Retry;
            }
            Err(UpdateError::OutOfOrder { .. }) => {
                return self.respond(
                    msg,
                    StatusCode::SERVER_INTERNAL_ERROR,
                    &[(
                        "Warning",
                        "399 sipsec \"CSeq below the stored one for this Call-ID\"",
                    )],
                    src,
                    out,
                );
            }
            Err(UpdateError::TooManyContacts { max }) => {
                let warning = format!(
                    "399 sipsec \"too many contacts for this address-of-record (at most {max})\""
                );
                return self.respond(
                    msg,
                    StatusCode::FORBIDDEN,
                    &[("Warning", &warning)],
                    src,
                    out,
                );
            }
            Err(UpdateError::ListingTooLarge { .. }) => {
                bump(&self.shared.metrics.oversize);
                return self.respond(
                    msg,
                    StatusCode::MESSAGE_TOO_LARGE_5XX,
                    &[(
                        "Warning",
                        "399 sipsec \"the contact list would not fit a UDP answer: register over TCP\"",
                    )],
                    src,
                    out,
                );
            }
            Err(UpdateError::Journal(e)) => {
                // Only `Location::update` persists by itself; `prepare`
                // leaves storing to the driver.
                unreachable!("prepare does not persist: {e}")
            }
        };
        self.stage(Stage::AddUser, t0);
        self.lines.clear();
        for b in prepared.bindings() {
            let _ = write!(
                self.lines,
                "Contact: <{}>;expires={}\r\n",
                b.contact,
                b.expires_at.saturating_sub(now)
            );
        }
        if supports_path && !self.path.is_empty() {
            // RFC 3327 §5.3: the stored Path goes back to the UA.
            let _ = write!(self.lines, "Path: {}\r\n", self.path);
        }
        // RFC 5626 §6: a registrar that keeps the flow says so.
        let require: &[(&str, &str)] = if wants_outbound {
            &[("Require", "outbound")]
        } else {
            &[]
        };
        let reply = self.respond(msg, StatusCode::OK, require, src, out);
        if prepared.is_empty() {
            // Nothing to store (a query, or removing what was not there).
            self.shared.location.commit(prepared, true);
            bump(&self.shared.metrics.registered);
            return reply;
        }
        match reply {
            Reply::Send(dest, transport) => {
                self.pending = Some((prepared, dest, transport));
                Reply::Persist
            }
            other => {
                self.shared.location.commit(prepared, false);
                other
            }
        }
    }

    /// Gathers the REGISTER's Path values into `self.path` (RFC 3327)
    /// according to the configured mode; `Ok` tells whether the UA sent
    /// `Supported: path` (only looked up when there is a Path), `Err` is
    /// the refusal to send.
    fn collect_path(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<bool, Reply> {
        self.path.clear();
        let mode = self.shared.config.path;
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
            return Err(self.respond(
                msg,
                StatusCode::BAD_REQUEST,
                &[("Warning", "399 sipsec \"Path must hold <sip:...> values\"")],
                src,
                out,
            ));
        }
        if mode == PathMode::Strict && !supported {
            return Err(self.respond(
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
