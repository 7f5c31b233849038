//! The management side of the operator endpoint, beyond bans and
//! bindings: ending a dialog (the proxy sends BYE both ways) and draining
//! a trunk's gateway. The endpoint's token guards them (`io::http` reads
//! the requests); each is audited in the log.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::io::send::Sender;
use crate::proto::core::Core;
use crate::proto::shared::Shared;

/// An HTTP status line's code and reason, and a body.
pub type Outcome = (&'static str, String);

/// Ends the confirmed call `call_id`: a BYE to each party, its record
/// written.
pub fn end_dialog(shared: &Arc<Shared>, sender: Option<&Sender>, call_id: &str) -> Outcome {
    let Some(sender) = sender else {
        return (
            "503 Service Unavailable",
            "this server sends no requests\n".into(),
        );
    };
    let mut core = Core::new(shared.clone());
    let Some(record) = core.end_dialog(call_id, crate::io::clock::now()) else {
        return (
            "404 Not Found",
            format!("{call_id}: no confirmed call has this Call-ID\n"),
        );
    };
    crate::io::drive::account(&mut core, sender.sinks());
    sender.send_all(core.extra());
    crate::io::log::operator(&format!(
        "call {call_id} ({} to {}) ended by the operator: BYE sent to both parties",
        record.caller, record.callee
    ));
    (
        "200 OK",
        format!("{call_id} ended: BYE sent to both parties\n"),
    )
}

/// Drains gateway `gateway` of trunk `name` (or puts it back: `on` false).
pub fn drain(shared: &Shared, name: &str, gateway: SocketAddr, on: bool) -> Outcome {
    match shared.trunks.drain(name, gateway, on, &shared.names) {
        Ok(()) => {
            let what = if on { "drained" } else { "back in service" };
            crate::io::log::operator(&format!("gateway {gateway} of trunk {name} {what}"));
            (
                "200 OK",
                format!("gateway {gateway} of trunk {name} {what}\n"),
            )
        }
        Err(e) => ("404 Not Found", format!("{e}\n")),
    }
}

/// Reloads what can change while the server runs — the users file, the
/// TLS certificate and key, a proxy's trunks — as SIGHUP does; the rest
/// of the configuration takes a restart.
pub fn reload(shared: &Shared, tls: Option<&crate::io::tls::TlsContext>) -> Outcome {
    let mut done = vec![crate::io::files::reload_users(shared)];
    if let Some(ctx) = tls {
        done.push(crate::io::files::reload_certificates(ctx, shared, true));
    }
    if shared.config.mode == crate::config::Mode::Proxy {
        done.push(crate::io::trunk_files::reload(shared));
    }
    let text = done.join("; ");
    crate::io::log::operator(&format!("reload asked by the operator: {text}"));
    ("200 OK", format!("{text}\n"))
}
