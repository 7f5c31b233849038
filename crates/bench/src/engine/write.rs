//! Writing a scenario's messages: every variable of a step's template
//! filled in for one call of one user.

use sip_core::digest::{self, Qop, ResponseInput};
use sip_core::writer::write_u64;

use super::{Call, CallIds, User};
use crate::scenario::{Scenario, Var};

pub(super) struct Ctx<'a> {
    pub(super) call: &'a Call,
    pub(super) user: &'a User,
    pub(super) ids: Option<&'a CallIds>,
    pub(super) local: &'a str,
    pub(super) remote: &'a str,
    pub(super) run_id: u32,
    pub(super) worker: usize,
    pub(super) scenario: &'a Scenario,
    pub(super) method: &'a str,
    pub(super) uri: &'a str,
    pub(super) transport: &'static str,
}

/// Appends `n` in lower-case hexadecimal without leading zeros, as
/// `{n:x}` writes it.
fn hex(out: &mut Vec<u8>, n: u64) {
    sip_core::writer::push_hex(out, n, 0);
}

/// NUMBER.SLOT.WORKER.RUN[.NONCE], in hex: the response finds its call.
fn call_id(o: &mut Vec<u8>, number: u64, slot: usize, worker: usize, run: u32, nonce: Option<u32>) {
    hex(o, number);
    o.push(b'.');
    hex(o, slot as u64);
    o.push(b'.');
    hex(o, worker as u64);
    o.push(b'.');
    hex(o, u64::from(run));
    if let Some(n) = nonce {
        o.push(b'.');
        hex(o, u64::from(n));
    }
}

/// The first nonce that makes the call's Call-ID hash to `worker`'s
/// socket in a group of `sockets` steered by Call-ID (about `sockets`
/// tries).
pub(super) fn steering_nonce(
    number: u64,
    slot: usize,
    worker: usize,
    run: u32,
    sockets: u32,
) -> u32 {
    let mut id = Vec::with_capacity(48);
    call_id(&mut id, number, slot, worker, run, None);
    let stem = id.len();
    (0..)
        .find(|&n| {
            id.truncate(stem);
            id.push(b'.');
            hex(&mut id, u64::from(n));
            sip_udp::CallSteering::index_of(&id, sockets) as usize == worker
        })
        .unwrap_or(0)
}

impl Ctx<'_> {
    pub(super) fn value(&self, v: Var, o: &mut Vec<u8>) {
        let c = self.call;
        match v {
            Var::CallId => call_id(o, c.number, c.slot, self.worker, self.run_id, c.nonce),
            Var::Branch => {
                o.extend_from_slice(b"z9hG4bK-sb");
                hex(o, c.number);
                o.push(b'-');
                hex(o, u64::from(c.branch));
                o.push(b'-');
                hex(o, u64::from(self.run_id));
            }
            Var::Local => o.extend_from_slice(self.local.as_bytes()),
            Var::Transport => o.extend_from_slice(self.transport.as_bytes()),
            Var::ContactParams => {
                if self.transport.starts_with("WS") {
                    o.extend_from_slice(b";transport=ws");
                }
            }
            Var::Remote => o.extend_from_slice(self.remote.as_bytes()),
            Var::User => o.extend_from_slice(self.user.name.as_bytes()),
            Var::Service => o.extend_from_slice(self.scenario.service.as_bytes()),
            Var::Caller => {
                o.extend_from_slice(self.ids.map_or(&self.user.name, |i| &i.caller).as_bytes())
            }
            Var::Callee => o.extend_from_slice(
                self.ids
                    .map_or(&self.scenario.service, |i| &i.callee)
                    .as_bytes(),
            ),
            Var::Cseq => write_u64(o, u64::from(c.cseq)),
            Var::FromTag => {
                o.push(b'f');
                hex(o, c.number);
            }
            Var::PeerTag => o.extend_from_slice(c.peer_tag.as_bytes()),
            Var::Expires => write_u64(o, u64::from(self.scenario.expires)),
            Var::Authorization => self.authorization(o),
            Var::Route => o.extend_from_slice(c.route.as_bytes()),
            Var::DialogUri if c.target.is_empty() => {
                o.extend_from_slice(b"sip:");
                self.value(Var::Callee, o);
                o.push(b'@');
                o.extend_from_slice(self.remote.as_bytes());
            }
            Var::DialogUri => o.extend_from_slice(c.target.as_bytes()),
        }
    }

    pub(super) fn authorization(&self, o: &mut Vec<u8>) {
        let Some(ch) = &self.call.challenge else {
            return;
        };
        let ha1 = digest::ha1(
            ch.algorithm,
            &self.user.name,
            &ch.realm,
            &self.user.password,
        );
        let cnonce = format!("{:08x}", self.call.number as u32 ^ self.run_id);
        let nc = "00000001";
        let response = digest::response(&ResponseInput {
            algorithm: ch.algorithm,
            ha1: &ha1,
            nonce: &ch.nonce,
            cnonce: &cnonce,
            nc,
            qop: ch.qop.then_some(Qop::Auth),
            method: self.method,
            uri: self.uri,
            body: b"",
        });
        let header = if ch.proxy {
            "Proxy-Authorization"
        } else {
            "Authorization"
        };
        let _ = std::io::Write::write_fmt(
            o,
            format_args!(
                "{header}: Digest username=\"{}\", realm=\"{}\", nonce=\"{}\", uri=\"{}\", response=\"{}\", algorithm={}",
                // Under PrivaSIP the username shown is the caller's
                // pseudonym; the digest is over the real name.
                self.ids.map_or(&self.user.name, |i| &i.caller),
                ch.realm,
                ch.nonce,
                self.uri,
                response.as_str(),
                ch.algorithm.as_str()
            ),
        );
        if ch.qop {
            let _ = std::io::Write::write_fmt(
                o,
                format_args!(", qop=auth, nc={nc}, cnonce=\"{cnonce}\""),
            );
        }
        if let Some(op) = &ch.opaque {
            let _ = std::io::Write::write_fmt(o, format_args!(", opaque=\"{op}\""));
        }
        o.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_what_the_formatter_writes() {
        let mut cases = vec![0u64, 1, 9, 10, 15, 16, 255, 256, u64::MAX];
        cases.extend((0..64).map(|k| 1u64 << k));
        cases.extend((1..64).map(|k| (1u64 << k) - 1));
        for n in cases {
            let mut out = b"x".to_vec();
            super::hex(&mut out, n);
            assert_eq!(out, format!("x{n:x}").into_bytes());
        }
    }

    #[test]
    fn a_nonce_makes_the_call_id_hash_to_its_worker() {
        for sockets in [2u32, 3, 8] {
            for worker in 0..sockets as usize {
                for number in [0u64, 7, 123_456] {
                    let n = super::steering_nonce(number, 3, worker, 0xabcd, sockets);
                    let mut id = Vec::new();
                    super::call_id(&mut id, number, 3, worker, 0xabcd, Some(n));
                    let at = sip_udp::CallSteering::index_of(&id, sockets);
                    assert_eq!(at as usize, worker, "{}", String::from_utf8_lossy(&id));
                    assert!(id.ends_with(format!(".{n:x}").as_bytes()));
                }
            }
        }
    }
}
