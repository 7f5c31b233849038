//! Which URIs, hosts and Vias name this server: its advertised address
//! and ports (UDP/TCP, TLS, WebSocket) and its domains; and which names
//! a dialog's requests will name as the next hop after it.

use std::net::{IpAddr, SocketAddr};

use sip_core::uri::Host;
use sip_core::via::Via;
use sip_core::{Message, Uri};

use crate::proto::ctx::Ctx;
use crate::proto::tokens;
use sip_core::Transport;

impl Ctx {
    /// Whether `host:port` names this server. `tls`: reached over TLS,
    /// where the TLS port (default 5061) counts too; elsewhere only the
    /// UDP/TCP port does, so a peer whose own port happens to equal our
    /// TLS port is not mistaken for us.
    #[inline]
    fn is_local_host(&self, host: Host<'_>, port: Option<u16>, tls: bool) -> bool {
        let adv = self.shared.config.advertise;
        let tls_port = self
            .shared
            .config
            .tls
            .as_ref()
            .map(|t| t.addr.port())
            .filter(|_| tls);
        let ws = &self.shared.config.websocket;
        // A TCP listener on a port of its own (`--tcp ADDR`) is ours too.
        let tcp_port = self.shared.config.tcp.map(|a| a.port()).filter(|p| *p != 0);
        let port_ok = port.unwrap_or(5060) == adv.port()
            || tcp_port.is_some_and(|t| port.unwrap_or(5060) == t)
            || tls_port.is_some_and(|t| port.unwrap_or(5061) == t)
            || [ws.ws, ws.wss]
                .iter()
                .flatten()
                .any(|a| port == Some(a.port()));
        let host_ok = match host {
            Host::V4(a) => IpAddr::V4(a) == adv.ip(),
            Host::V6(a) => IpAddr::V6(a) == adv.ip(),
            Host::Name(n) => self
                .shared
                .config
                .domains
                .iter()
                .any(|d| d.eq_ignore_ascii_case(n)),
        };
        host_ok && (port_ok || matches!(host, Host::Name(_)) && port.is_none())
    }

    /// A URI naming this server: its TLS port counts for `sips:`,
    /// `transport=tls`, and requests that arrived over TLS.
    #[inline]
    pub(super) fn is_local_uri(&self, uri: &Uri<'_>) -> bool {
        // Only a server with TLS has a TLS port to match (and only then is
        // the URI's transport worth looking up, on this per-message path).
        let tls = self.shared.config.tls.is_some()
            && (self.transport == Transport::Tls || Transport::of_uri(uri) == Transport::Tls);
        uri.is_sip()
            && uri
                .host()
                .is_some_and(|h| self.is_local_host(h, uri.port(), tls))
    }

    /// The address this server listens on for `transport`, as it names
    /// itself in Via and Record-Route.
    pub(super) fn listen_addr(&self, transport: Transport) -> SocketAddr {
        let c = &self.shared.config;
        let port = match transport {
            Transport::Tls => c.tls.as_ref().map(|t| t.addr.port()),
            Transport::Tcp => c.tcp.map(|a| a.port()).filter(|p| *p != 0),
            Transport::Ws => c.websocket.ws.map(|a| a.port()),
            Transport::Wss => c.websocket.wss.map(|a| a.port()),
            _ => None,
        };
        SocketAddr::new(c.advertise.ip(), port.unwrap_or(c.advertise.port()))
    }

    #[inline]
    pub(super) fn is_our_via(&self, via: &Via<'_>) -> bool {
        let tls = via.transport() == sip_core::via::Transport::Tls;
        self.is_local_host(via.host(), via.port(), tls)
    }
}

/// The domain name `uri` names as its host, if it names one.
fn host_name<'a>(uri: &Uri<'a>) -> Option<&'a str> {
    match uri.host()? {
        Host::Name(n) => Some(n),
        Host::V4(_) | Host::V6(_) => None,
    }
}

/// The domain name a dialog's callee will name as the next hop after this
/// proxy, from the initial request as it arrived: the host of the
/// Record-Route of the proxy before this one, else of the caller's
/// Contact (`None` when that is an address).
pub(super) fn upstream_name<'a>(msg: &Message<'a>) -> Option<&'a str> {
    match msg.record_routes().next() {
        Some(r) => host_name(r.uri()),
        None => msg.contacts().next().and_then(|c| host_name(c.addr.uri())),
    }
}

/// The domain name a dialog's caller will name as the next hop after this
/// proxy, from a response that creates the dialog: the host of the
/// Record-Route of the proxy after this one (the entry above this
/// proxy's first), else of the callee's Contact (`None` when that is an
/// address, or when no entry is this proxy's).
pub(super) fn downstream_name<'a>(ctx: &Ctx, msg: &Message<'a>) -> Option<&'a str> {
    let mut above = None;
    for r in msg.record_routes() {
        let ours = ctx.is_local_uri(r.uri()) && r.uri().param(tokens::HOPS_PARAM).is_some();
        if ours {
            return match above {
                Some(name) => name,
                None => msg.contacts().next().and_then(|c| host_name(c.addr.uri())),
            };
        }
        above = Some(host_name(r.uri()));
    }
    None
}
