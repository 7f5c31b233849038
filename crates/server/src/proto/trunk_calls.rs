//! The proxy's side of trunks: a request for a number no local user has
//! (by prefix, or the default trunk) or for a trunk's domain goes to the
//! trunk's gateway the algorithm picks, its transaction failing over to
//! the others (see [`crate::proto::trunks`]).

use std::net::SocketAddr;

use sip_core::{Message, Method, StatusCode};

use crate::proto::core::{Core, Next, Reply};
use crate::proto::proxy::Selected;

impl Core {
    /// Where `msg` goes through trunk `i`: its first gateway, failing over
    /// along the trunk's route. Only this domain's (authenticated) users
    /// reach a trunk when authentication is on: a trunk is not a relay
    /// for peers or strangers (toll fraud). No gateway up: 503.
    pub(super) fn trunk_target(
        &mut self,
        i: usize,
        msg: &Message<'_>,
        src: SocketAddr,
        authenticated: bool,
        out: &mut Vec<u8>,
    ) -> Result<Selected, Reply> {
        if !matches!(
            msg.method(),
            Method::Invite | Method::Message | Method::Options
        ) || (self.shared.auth.is_some() && !authenticated)
        {
            return Err(self.respond(
                msg,
                StatusCode::FORBIDDEN,
                &[(
                    "Warning",
                    "399 sipsec \"trunks carry this domain's users' calls\"",
                )],
                src,
                out,
            ));
        }
        let shared = self.shared.clone();
        let sticky = shared.transactions.is_none();
        let Some((gateway, route)) =
            shared
                .trunks
                .pick(i, msg, &shared.names, self.now.mono, sticky)
        else {
            let warning = format!(
                "399 sipsec \"no gateway of trunk {} is up\"",
                shared.trunks.name(i)
            );
            return Err(self.respond(
                msg,
                StatusCode::SERVICE_UNAVAILABLE,
                &[("Retry-After", "5"), ("Warning", &warning)],
                src,
                out,
            ));
        };
        let transport = route.transport;
        Ok(Selected {
            authenticated,
            to_peer: true,
            ..Selected::at(Next::Named(gateway, route), transport)
        })
    }
}
