//! The proxy (RFC 3261 §16): routing by Route, location, Path or peer
//! domain, stateless (§16.11) or through [`Transactions`], and responses
//! back along the Via.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};

use sip_core::proxy::{forward_request, forward_response, RequestEdits};
use sip_core::uri::Host;
use sip_core::{HeaderName, Limits, Message, Method, StatusCode, Uri};

use crate::config::{Mode, PathMode};
use crate::proto::core::{
    aor_of, bump, first_path_uri, resolve, reveal, Core, Event, Reply, Transport, ALLOW,
    MAX_DATAGRAM,
};
use crate::proto::location::Location;
use crate::proto::metrics::Stage;
use crate::proto::stateful::{
    Hop, Key, Seen, StartError, Upstream, BRANCH_PREFIX, LOCAL_TAG_PREFIX,
};

impl Core {
    /// Whether the phone's connection (its registered flow) is still open.
    fn flow_open(&self, peer: SocketAddr, transport: Transport) -> bool {
        self.shared
            .flows
            .get()
            .is_none_or(|f| f.open(peer, transport))
    }

    /// Whether `src` is another domain's proxy we peer with.
    fn is_peer(&self, src: SocketAddr) -> bool {
        self.shared.config.peers.iter().any(|(_, a)| *a == src)
    }

    /// The peer proxy serving the Request-URI's domain.
    fn peer_for(&self, uri: &Uri<'_>) -> Option<SocketAddr> {
        let Some(Host::Name(n)) = uri.host() else {
            return None;
        };
        self.shared
            .config
            .peers
            .iter()
            .find(|(d, _)| d.eq_ignore_ascii_case(n))
            .map(|(_, a)| *a)
    }

    /// A request that needs a local caller (INVITE, MESSAGE, SUBSCRIBE)
    /// with authentication on: digest, and under PrivaSIP the From user
    /// must open to the authenticated user. Requests from peer proxies
    /// were authenticated in their domain.
    fn authorize_caller(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool, Reply> {
        if self.shared.auth.is_none()
            || !matches!(
                msg.method(),
                Method::Invite | Method::Message | Method::Subscribe
            )
            || self.is_peer(src)
        {
            return Ok(false);
        }
        let Some(user) = self.authenticate(msg, true, now, src, out)? else {
            return Ok(false);
        };
        let from = msg.from().uri();
        let Some(from_user) = from.user() else {
            return Ok(true);
        };
        if self.shared.privacy.is_none() || !self.is_local_uri(from) {
            return Ok(true);
        }
        match reveal(self.shared.privacy.as_ref(), from_user, now) {
            None => Err(self.refuse(msg, src, out)),
            Some(Cow::Owned(id)) if id != user => Err(self.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[(
                    "Warning",
                    "399 sipsec \"From is not the authenticated user\"",
                )],
                src,
                out,
            )),
            Some(_) => Ok(true),
        }
    }

    /// The branch this proxy uses when forwarding `msg` statelessly: a
    /// function of the incoming top Via, so retransmissions, the ACK for a
    /// failure and CANCEL all get the INVITE's branch (RFC 3261 §16.11).
    fn branch(&self, msg: &Message<'_>) -> u64 {
        let v = msg.top_via();
        let mut h = self.shared.branch_salt.build_hasher();
        h.write(v.branch().unwrap_or("").as_bytes());
        h.write(v.as_str().as_bytes());
        if !v.is_rfc3261_branch() {
            // RFC 2543 peers: the transaction is identified by more fields.
            h.write(msg.call_id().as_bytes());
            h.write_u32(msg.cseq().seq);
            h.write(msg.from().tag().unwrap_or("").as_bytes());
        }
        h.finish()
    }

    /// Where responses to `msg` go (RFC 3261 §18.2.2): back on the
    /// connection for TCP; for UDP the source address, and the Via's port
    /// unless rport asked for the source port.
    fn upstream(&self, msg: &Message<'_>, src: SocketAddr) -> Hop {
        let top = msg.top_via();
        if self.transport.is_reliable() || top.rport().is_some() {
            return (src, self.transport);
        }
        (
            SocketAddr::new(src.ip(), top.port().unwrap_or(5060)),
            Transport::Udp,
        )
    }

    /// Stateful proxy: requests that belong to a transaction end here.
    fn stateful_request(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        let tx = self.shared.transactions.as_ref()?;
        let key = Key {
            branch: self.branch(msg),
            cancel: false,
        };
        let now = self.now.mono;
        let metrics = &self.shared.metrics;
        if msg.method() == Method::Cancel {
            // §16.10: answer the CANCEL here; the INVITE's 487 comes back
            // from downstream.
            let status = if tx.on_cancel(key, now, &mut self.sends, metrics) {
                StatusCode::OK
            } else {
                StatusCode::CALL_DOES_NOT_EXIST
            };
            return Some(self.respond(msg, status, &[], src, out));
        }
        match tx.on_request(key, msg.method(), now, &mut self.sends, metrics) {
            Seen::Absorbed => Some(Reply::Drop),
            Seen::New => None,
        }
    }

    pub(super) fn route(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Reply {
        let method = msg.method();
        if let Some(reply) = self.stateful_request(msg, src, out) {
            return reply;
        }
        if method == Method::Ack
            && msg
                .to()
                .tag()
                .is_some_and(|t| t.starts_with(LOCAL_TAG_PREFIX))
        {
            // Acknowledges a final response this server generated (§17.2.1).
            return Reply::Drop;
        }
        if msg.max_forwards() == Some(0) {
            return self.respond(msg, StatusCode::TOO_MANY_HOPS, &[], src, out);
        }
        if msg.vias().skip(1).any(|v| self.is_our_via(&v)) || self.is_our_via(msg.top_via()) {
            return self.respond(msg, StatusCode::LOOP_DETECTED, &[], src, out);
        }
        // Loose routing (§16.4): a first Route naming us is removed.
        let pop_route = msg
            .first_route()
            .is_some_and(|(_, r)| self.is_local_uri(r.uri()));
        let next_route = msg.routes().nth(usize::from(pop_route));
        let Some(ruri) = msg.request_uri() else {
            return Reply::Drop;
        };
        let mut new_ruri: Option<String> = None;
        let mut to_peer = false;
        let mut authenticated = false;
        let mut out_transport = Transport::Udp;
        let target = if let Some(r) = next_route {
            let u = r.uri();
            out_transport = Transport::of_uri(u);
            u.host().and_then(|h| resolve(h, u.port()))
        } else if self.is_local_uri(ruri) {
            let key = match (ruri.user(), ruri.host()) {
                (Some(u), Some(h)) => match reveal(self.shared.privacy.as_ref(), u, now) {
                    Some(u) => Some(aor_of(&u, h)),
                    None => return self.refuse(msg, src, out),
                },
                _ => None,
            };
            let Some(key) = key else {
                return match method {
                    Method::Options => self.respond(
                        msg,
                        StatusCode::OK,
                        &[("Allow", ALLOW), ("Accept", "application/sdp")],
                        src,
                        out,
                    ),
                    _ => self.respond(msg, StatusCode::NOT_FOUND, &[], src, out),
                };
            };
            let mode = self.shared.config.mode;
            if mode == Mode::Registrar {
                return self.respond(
                    msg,
                    StatusCode::METHOD_NOT_ALLOWED,
                    &[("Allow", "REGISTER, OPTIONS")],
                    src,
                    out,
                );
            }
            match self.authorize_caller(msg, src, now, out) {
                Ok(a) => authenticated = a,
                Err(reply) => return reply,
            }
            let t0 = self.clock();
            self.shared.location.lookup(&key, now, &mut self.bindings);
            self.stage(Stage::FindUser, t0);
            if self.bindings.is_empty() {
                return self.respond(msg, StatusCode::NOT_FOUND, &[], src, out);
            }
            if mode == Mode::Redirect {
                return self.redirect(msg, src, out);
            }
            let contact = self.bindings[0].contact.clone();
            // A stored Path (RFC 3327) is the route to the contact: the
            // request goes to its first hop with the Path as Route.
            self.path.clear();
            if self.shared.config.path != PathMode::Off {
                self.path.push_str(&self.bindings[0].path);
            }
            let next = match first_path_uri(&self.path) {
                Some(hop) => Some(hop),
                None => {
                    self.path.clear();
                    Uri::parse(&contact, sip_core::UriContext::Header).ok()
                }
            };
            let binding = &self.bindings[0];
            // The flow serves a contact reached over its transport (a
            // phone that registers over TCP a contact for UDP is reached
            // over UDP), and every outbound contact.
            let flow = binding.flow.filter(|f| {
                self.path.is_empty()
                    && (f.outbound || next.as_ref().map(Transport::of_uri) == Some(f.transport))
            });
            let addr = match flow {
                // The phone registered over a connection: the request goes
                // back down it (RFC 3261 §18, RFC 5626 §5.3), whatever
                // address its Contact names (often a private one).
                Some(f) if self.flow_open(binding.source, f.transport) => {
                    out_transport = f.transport;
                    Some(binding.source)
                }
                Some(f) if f.outbound => {
                    bump(&self.shared.metrics.flows_failed);
                    return self.respond(msg, StatusCode::FLOW_FAILED, &[], src, out);
                }
                // Gone without outbound: try the contact's own address.
                _ => next.and_then(|u| {
                    out_transport = Transport::of_uri(&u);
                    u.host().and_then(|h| resolve(h, u.port()))
                }),
            };
            new_ruri = Some(contact);
            addr
        } else if pop_route {
            // In-dialog request that record-routed through us (§16.12):
            // the Request-URI is the peer's contact.
            out_transport = Transport::of_uri(ruri);
            ruri.host().and_then(|h| resolve(h, ruri.port()))
        } else if let Some(peer) = self
            .peer_for(ruri)
            .filter(|_| self.shared.config.mode == Mode::Proxy)
        {
            // Another domain we peer with: our users' requests go to its
            // proxy, the Request-URI (perhaps a pseudonym for it) as is.
            match self.authorize_caller(msg, src, now, out) {
                Ok(a) => authenticated = a,
                Err(reply) => return reply,
            }
            to_peer = true;
            Some(peer)
        } else {
            // No open relay: only requests for this server's domains are proxied.
            return self.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[("Warning", "399 sipsec \"relaying denied\"")],
                src,
                out,
            );
        };
        let Some(target) = target else {
            return self.respond(
                msg,
                StatusCode::SERVICE_UNAVAILABLE,
                &[("Warning", "399 sipsec \"next hop is not an IP address\"")],
                src,
                out,
            );
        };
        let branch = self.branch(msg);
        // Over TLS this server is reached at its TLS address.
        let here = match (&self.shared.config.tls, out_transport) {
            (Some(t), Transport::Tls) => {
                SocketAddr::new(self.shared.config.advertise.ip(), t.addr.port())
            }
            _ => self.shared.config.advertise,
        };
        self.via.clear();
        let _ = write!(
            self.via,
            "SIP/2.0/{} {here};branch={BRANCH_PREFIX}{branch:016x}",
            out_transport.as_str(),
        );
        let top = msg.top_via();
        let reliable = self.transport.is_reliable();
        let annotate = reliable
            || top.rport().is_some()
            || resolve(top.host(), None).map(|a| a.ip()) != Some(src.ip());
        self.ip.clear();
        let _ = write!(self.ip, "{}", src.ip());
        // Dialog-creating requests for local users record-route when asked,
        // so the dialog's later requests come back through this proxy. A
        // phone on a TCP/TLS connection can only be reached over that
        // connection, which ends here: its dialogs always record-route
        // (as RFC 5626 §5.1 asks of an edge proxy), or the ACK and BYE
        // would be sent to a contact nobody listens on.
        let flow = self.transport.is_reliable() && self.transport == out_transport;
        self.rr.clear();
        if (self.shared.config.record_route || self.shared.transactions.is_some() || flow)
            && (new_ruri.is_some() || to_peer)
            && matches!(method, Method::Invite | Method::Subscribe | Method::Refer)
        {
            let _ = write!(self.rr, "<sip:{here};lr");
            if out_transport != Transport::Udp {
                self.rr.push_str(";transport=");
                self.rr.extend(
                    out_transport
                        .as_str()
                        .chars()
                        .map(|c| c.to_ascii_lowercase()),
                );
            }
            self.rr.push('>');
        }
        let edits = RequestEdits {
            request_uri: new_ruri.as_deref(),
            via: Some(&self.via),
            record_route: (!self.rr.is_empty()).then_some(self.rr.as_str()),
            route: (new_ruri.is_some() && !self.path.is_empty()).then_some(self.path.as_str()),
            pop_route,
            received: annotate.then_some((self.ip.as_str(), src.port())),
            max_forwards: true,
            force_rport: reliable,
            // The credentials we checked stop here (RFC 3261 §22.3).
            remove: if authenticated {
                self.shared.auth.as_ref().and_then(|a| {
                    msg.headers_named(HeaderName::ProxyAuthorization)
                        .find(|h| {
                            sip_core::auth::Credentials::parse(h.value)
                                .is_ok_and(|c| c.realm == Some(a.realm.as_str()))
                        })
                        .map(|h| (h.line, h.value))
                })
            } else {
                None
            },
        };
        let added = 1
            + usize::from(edits.record_route.is_some())
            + usize::from(edits.route.is_some())
            + usize::from(msg.max_forwards().is_none());
        let removed = usize::from(edits.pop_route && msg.route_count() == 1)
            + usize::from(edits.remove.is_some());
        match forward_request(msg, &edits, out) {
            // What we forward must itself be acceptable to the next hop:
            // our lines can push a request at the limits over them.
            Ok(())
                if out.len() > Limits::DEFAULT.max_message_len
                    || msg.header_count() + added > Limits::DEFAULT.max_headers + removed =>
            {
                out.clear();
                self.respond(
                    msg,
                    StatusCode::MESSAGE_TOO_LARGE_5XX,
                    &[(
                        "Warning",
                        "399 sipsec \"too large to forward with this proxy's headers\"",
                    )],
                    src,
                    out,
                )
            }
            Ok(()) => self.forwarded(msg, src, target, out_transport, out),
            Err(_) => {
                out.clear();
                self.respond(msg, StatusCode::TOO_MANY_HOPS, &[], src, out)
            }
        }
    }

    /// A request was written into `out` for `target`: with transactions,
    /// open one first (a response may come back before this returns).
    fn forwarded(
        &mut self,
        msg: &Message<'_>,
        src: SocketAddr,
        target: SocketAddr,
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Reply {
        if let Some(tx) = &self.shared.transactions {
            if msg.method() != Method::Ack {
                let key = Key {
                    branch: self.branch(msg),
                    cancel: false,
                };
                let up = self.upstream(msg, src);
                let started = tx.start(
                    key,
                    msg,
                    up,
                    out,
                    (target, transport),
                    self.now.mono,
                    &mut self.sends,
                    &self.shared.metrics,
                );
                match started {
                    Ok(()) => {}
                    Err(StartError::Exists) => {
                        out.clear();
                        return Reply::Drop;
                    }
                    Err(StartError::Full) => {
                        out.clear();
                        return self.respond(
                            msg,
                            StatusCode::SERVICE_UNAVAILABLE,
                            &[("Retry-After", "5")],
                            src,
                            out,
                        );
                    }
                }
            }
        }
        bump(&self.shared.metrics.forwarded);
        Reply::Send(target, transport)
    }

    pub(super) fn forward_response(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Reply {
        if !self.is_our_via(msg.top_via()) || msg.via_count() < 2 {
            bump(&self.shared.metrics.dropped);
            return Reply::Drop;
        }
        // Stateless mode skips the branch decoding altogether.
        let stateful = self
            .shared
            .transactions
            .as_ref()
            .and_then(|tx| Some((tx, Key::of_message(msg)?)));
        if let Some((tx, key)) = stateful {
            let metrics = &self.shared.metrics;
            let strip = |m: &Message<'_>, o: &mut Vec<u8>| forward_response(m, o).is_ok();
            match tx.on_response(
                key,
                msg,
                self.now.mono,
                out,
                &mut self.sends,
                metrics,
                strip,
            ) {
                Upstream::Unknown => {}
                Upstream::Absorbed => return Reply::Drop,
                Upstream::Send((dest, transport)) => return Reply::Send(dest, transport),
            }
        }
        let Some(next) = msg.vias().nth(1) else {
            return Reply::Drop;
        };
        let host = next
            .received()
            .and_then(|r| r.parse::<IpAddr>().ok())
            .map(|ip| match ip {
                IpAddr::V4(a) => Host::V4(a),
                IpAddr::V6(a) => Host::V6(a),
            })
            .unwrap_or(next.host());
        let port = match next.rport() {
            Some(Some(p)) => Some(p),
            _ => next.port(),
        };
        let Some(dest) = resolve(host, port) else {
            bump(&self.shared.metrics.dropped);
            return Reply::Drop;
        };
        let transport = match next.transport() {
            sip_core::via::Transport::Tcp => Transport::Tcp,
            sip_core::via::Transport::Tls => Transport::Tls,
            _ => Transport::Udp,
        };
        match forward_response(msg, out) {
            Ok(()) if transport == Transport::Udp && out.len() > MAX_DATAGRAM => {
                bump(&self.shared.metrics.oversize);
                bump(&self.shared.metrics.dropped);
                self.events.push(Event::Oversize {
                    what: "forwarded response",
                    dest,
                    len: out.len(),
                });
                Reply::Drop
            }
            Ok(()) => Reply::Send(dest, transport),
            Err(_) => {
                bump(&self.shared.metrics.dropped);
                Reply::Drop
            }
        }
    }
}
