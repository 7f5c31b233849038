//! Scenarios as data: a message flow of requests to send (templates with
//! variables) and responses to expect, with the legs whose latencies are
//! summed into the call's latency (the published lean-server study: REGISTER→200, or challenge
//! leg + authenticated leg; INVITE→200 plus BYE→200; INVITE→404; …).

use crate::error::Error;
use std::fmt::Write as _;

/// A value filled in when a message is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// `[call_id]`.
    CallId,
    /// `[branch]`: this transaction's Via branch.
    Branch,
    /// `[local]`: the generator socket's `ip:port`.
    Local,
    /// `[transport]`: the Via token, `UDP`, `TCP`, `TLS`, `WS` or `WSS`.
    Transport,
    /// `[contact_params]`: `;transport=ws` on a WebSocket (RFC 7118
    /// §5.2, for WS and WSS alike), else nothing (the connection is the
    /// flow).
    ContactParams,
    /// `[remote]`: the target's `ip:port`.
    Remote,
    /// `[user]`: the caller's user name.
    User,
    /// `[service]`: the callee's user name.
    Service,
    /// `[caller]`: the From user and digest username this call shows (a
    /// PrivaSIP pseudonym, or the user's name).
    Caller,
    /// `[callee]`: the callee's user part this call shows (a PrivaSIP
    /// pseudonym, or `[service]`).
    Callee,
    /// `[cseq]`: this transaction's CSeq number.
    Cseq,
    /// `[from_tag]`.
    FromTag,
    /// `[peer_tag]`: `;tag=…` of the far end's To, or nothing.
    PeerTag,
    /// `[expires]`.
    Expires,
    /// `[authorization]`: a whole `Authorization:` or
    /// `Proxy-Authorization:` line answering the last challenge, or nothing.
    Authorization,
    /// `[route]`: a `Route:` line with the dialog's route set, or nothing.
    Route,
    /// `[dialog_uri]`: the dialog's remote target (the 2xx's Contact).
    DialogUri,
}

impl Var {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "call_id" => Var::CallId,
            "branch" => Var::Branch,
            "local" => Var::Local,
            "transport" => Var::Transport,
            "contact_params" => Var::ContactParams,
            "remote" => Var::Remote,
            "user" => Var::User,
            "service" => Var::Service,
            "caller" => Var::Caller,
            "callee" => Var::Callee,
            "cseq" => Var::Cseq,
            "from_tag" => Var::FromTag,
            "peer_tag" => Var::PeerTag,
            "expires" => Var::Expires,
            "authorization" => Var::Authorization,
            "route" => Var::Route,
            "dialog_uri" => Var::DialogUri,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Lit(String),
    Var(Var),
}

/// Text with `[variable]` placeholders, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    segs: Vec<Seg>,
}

impl Template {
    /// Parses `text`; an unknown `[name]` is an error naming it.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut segs = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('[') {
            let close = rest[open..]
                .find(']')
                .map(|c| open + c)
                .ok_or_else(|| Error::UnclosedTemplate(rest.to_owned()))?;
            if open > 0 {
                segs.push(Seg::Lit(rest[..open].to_owned()));
            }
            let name = &rest[open + 1..close];
            let var =
                Var::from_name(name).ok_or_else(|| Error::UnknownVariable(name.to_owned()))?;
            segs.push(Seg::Var(var));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            segs.push(Seg::Lit(rest.to_owned()));
        }
        Ok(Self { segs })
    }

    /// Appends the text with variables from `value`.
    pub fn render(&self, out: &mut Vec<u8>, mut value: impl FnMut(Var, &mut Vec<u8>)) {
        for s in &self.segs {
            match s {
                Seg::Lit(t) => out.extend_from_slice(t.as_bytes()),
                Seg::Var(v) => value(*v, out),
            }
        }
    }
}

/// Which CSeq number a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cseq {
    /// The next number: a new transaction.
    Next,
    /// The previous request's number (ACK).
    Same,
}

/// Which branch a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// A new one.
    New,
    /// The previous request's (ACK for a non-2xx final, RFC 3261 §17.1.1.3).
    Same,
}

/// A request to send.
#[derive(Debug, Clone)]
pub struct Send {
    /// Method.
    pub method: &'static str,
    /// Request-URI.
    pub uri: Template,
    /// Header lines, each ending in CRLF, without Content-Length.
    pub headers: Template,
    /// Body (Content-Length is computed).
    pub body: String,
    /// CSeq number to use.
    pub cseq: Cseq,
    /// Branch to use.
    pub branch: Branch,
    /// Retransmit over UDP until answered (RFC 3261 §17.1).
    pub retransmit: bool,
    /// Starts a timed leg.
    pub leg_start: bool,
}

/// A response to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// Lowest acceptable status.
    pub min: u16,
    /// Highest acceptable status.
    pub max: u16,
    /// May not come (provisional responses).
    pub optional: bool,
    /// Ends a timed leg.
    pub leg_end: bool,
    /// A digest challenge to answer in the next request.
    pub challenge: bool,
}

impl Expect {
    /// Whether `status` is acceptable here.
    pub fn accepts(&self, status: u16) -> bool {
        (self.min..=self.max).contains(&status)
    }
}

/// One step of a flow.
#[derive(Debug, Clone)]
pub enum Step {
    /// Send a request.
    Send(Send),
    /// Wait for a response.
    Expect(Expect),
}

/// A call flow.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Needs a registered callee (the built-in UAS).
    pub needs_callee: bool,
    /// Value of `[service]`.
    pub service: String,
    /// Value of `[expires]`.
    pub expires: u32,
}

/// The built-in scenarios' names.
pub const BUILT_IN: [&str; 6] = [
    "register",
    "register-update",
    "register-logout",
    "invite",
    "invite-not-found",
    "redirect",
];

const COMMON: &str = "Via: SIP/2.0/[transport] [local];branch=[branch];rport\r\nMax-Forwards: 70\r\nFrom: <sip:[user]@[remote]>;tag=[from_tag]\r\n";

fn send(method: &'static str, uri: &str, headers: &str, body: &str) -> Send {
    Send {
        method,
        uri: Template::parse(uri).expect("built-in template"),
        headers: Template::parse(headers).expect("built-in template"),
        body: body.to_owned(),
        cseq: Cseq::Next,
        branch: Branch::New,
        retransmit: true,
        leg_start: true,
    }
}

fn expect(min: u16, max: u16) -> Expect {
    Expect {
        min,
        max,
        optional: false,
        leg_end: true,
        challenge: false,
    }
}

fn optional(min: u16, max: u16) -> Step {
    Step::Expect(Expect {
        optional: true,
        leg_end: false,
        ..expect(min, max)
    })
}

/// `request` (timed), then, with `auth`, its challenge `challenge_code`
/// (timed leg) and the same request with credentials (timed leg).
fn with_auth(steps: &mut Vec<Step>, request: Send, auth: bool, challenge_code: u16) {
    if auth {
        steps.push(Step::Send(request.clone()));
        steps.push(optional(100, 100));
        steps.push(Step::Expect(Expect {
            challenge: true,
            ..expect(challenge_code, challenge_code)
        }));
        if request.method == "INVITE" {
            steps.push(Step::Send(ack("[peer_tag]")));
        }
    }
    steps.push(Step::Send(request));
}

fn ack(to_tag_var: &str) -> Send {
    let headers = format!(
        "{COMMON}To: <sip:[service]@[remote]>{to_tag_var}\r\nCall-ID: [call_id]\r\nCSeq: [cseq] ACK\r\n"
    );
    Send {
        cseq: Cseq::Same,
        branch: Branch::Same,
        retransmit: false,
        leg_start: false,
        ..send("ACK", "sip:[service]@[remote]", &headers, "")
    }
}

const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";

/// A built-in scenario, with or without digest authentication.
pub fn built_in(name: &str, auth: bool) -> Result<Scenario, Error> {
    let mut steps = Vec::new();
    let register = |expires: u32| -> Scenario {
        let mut steps = Vec::new();
        let headers = format!(
            "{COMMON}To: <sip:[user]@[remote]>\r\nCall-ID: [call_id]\r\nCSeq: [cseq] REGISTER\r\nContact: <sip:[user]@[local][contact_params]>\r\nExpires: [expires]\r\n[authorization]"
        );
        with_auth(
            &mut steps,
            send("REGISTER", "sip:[remote]", &headers, ""),
            auth,
            401,
        );
        steps.push(Step::Expect(expect(200, 200)));
        Scenario {
            name: name.to_owned(),
            steps,
            needs_callee: false,
            service: String::new(),
            expires,
        }
    };
    let invite_headers = format!(
        "{COMMON}To: <sip:[service]@[remote]>\r\nCall-ID: [call_id]\r\nCSeq: [cseq] INVITE\r\nContact: <sip:[user]@[local][contact_params]>\r\nContent-Type: application/sdp\r\n[authorization]"
    );
    let invite = send("INVITE", "sip:[service]@[remote]", &invite_headers, SDP);
    let (needs_callee, service) = match name {
        "register" => return Ok(register(3600)),
        "register-update" => return Ok(register(1800)),
        "register-logout" => return Ok(register(0)),
        "invite" => {
            with_auth(&mut steps, invite, auth, 407);
            steps.push(optional(100, 199));
            steps.push(optional(100, 199));
            steps.push(Step::Expect(expect(200, 200)));
            steps.push(Step::Send(Send {
                branch: Branch::New,
                ..ack("[peer_tag]")
            }));
            let bye = format!(
                "{COMMON}To: <sip:[service]@[remote]>[peer_tag]\r\nCall-ID: [call_id]\r\nCSeq: [cseq] BYE\r\n"
            );
            steps.push(Step::Send(send("BYE", "sip:[service]@[remote]", &bye, "")));
            steps.push(Step::Expect(expect(200, 200)));
            (true, "callee")
        }
        "invite-not-found" | "redirect" => {
            let code = if name == "redirect" { 302 } else { 404 };
            with_auth(&mut steps, invite, auth, 407);
            steps.push(optional(100, 199));
            steps.push(Step::Expect(expect(code, code)));
            steps.push(Step::Send(ack("[peer_tag]")));
            (
                name == "redirect",
                if name == "redirect" {
                    "callee"
                } else {
                    "nobody"
                },
            )
        }
        other => {
            let mut known = String::new();
            for n in BUILT_IN {
                let _ = write!(known, " {n}");
            }
            return Err(Error::UnknownScenario {
                name: other.to_owned(),
                known,
            });
        }
    };
    Ok(Scenario {
        name: name.to_owned(),
        steps,
        needs_callee,
        service: service.to_owned(),
        expires: 3600,
    })
}

/// INVITE → 180 Ringing from a caller of `caller_domain` to the callee
/// of `callee_domain`, through the caller's home proxy (the target) and
/// the callee's (the PrivaSIP server response time of the PrivaSIP papers). The user
/// parts are `[caller]` and `[callee]`: pseudonyms when the run has them.
/// With `auth` the first INVITE is challenged (untimed) and the timed leg
/// is the authenticated INVITE → 180; the call then completes (200, ACK
/// and BYE along the dialog's route set) without further timed legs.
pub fn ringing(caller_domain: &str, callee_domain: &str, auth: bool) -> Result<Scenario, Error> {
    for d in [caller_domain, callee_domain] {
        if d.is_empty() || d.contains(['[', ']', '<', '>', ' ', '@']) {
            return Err(Error::BadDomain(d.to_owned()));
        }
    }
    let from = format!(
        "Via: SIP/2.0/[transport] [local];branch=[branch];rport\r\nMax-Forwards: 70\r\nFrom: <sip:[caller]@{caller_domain}>;tag=[from_tag]\r\n"
    );
    let to = format!("sip:[callee]@{callee_domain}");
    let invite = send(
        "INVITE",
        &to,
        &format!("{from}To: <{to}>\r\nCall-ID: [call_id]\r\nCSeq: [cseq] INVITE\r\nContact: <sip:[local][contact_params]>\r\nContent-Type: application/sdp\r\n[authorization]"),
        SDP,
    );
    let ack = |uri: &str, route: &str| Send {
        cseq: Cseq::Same,
        branch: Branch::Same,
        retransmit: false,
        leg_start: false,
        ..send(
            "ACK",
            uri,
            &format!(
                "{from}{route}To: <{to}>[peer_tag]\r\nCall-ID: [call_id]\r\nCSeq: [cseq] ACK\r\n"
            ),
            "",
        )
    };
    let mut steps = Vec::new();
    if auth {
        steps.push(Step::Send(invite.clone()));
        steps.push(optional(100, 100));
        steps.push(Step::Expect(Expect {
            challenge: true,
            leg_end: false,
            ..expect(407, 407)
        }));
        steps.push(Step::Send(ack(&to, "")));
    }
    steps.push(Step::Send(invite));
    steps.push(optional(100, 100));
    // The timed leg ends at the 180 (or at the 200 that overtook it).
    steps.push(Step::Expect(Expect {
        optional: true,
        ..expect(180, 180)
    }));
    steps.push(optional(100, 199));
    steps.push(Step::Expect(Expect {
        leg_end: false,
        ..expect(200, 200)
    }));
    steps.push(Step::Send(Send {
        branch: Branch::New,
        ..ack("[dialog_uri]", "[route]")
    }));
    steps.push(Step::Send(Send {
        leg_start: false,
        ..send(
            "BYE",
            "[dialog_uri]",
            &format!(
                "{from}[route]To: <{to}>[peer_tag]\r\nCall-ID: [call_id]\r\nCSeq: [cseq] BYE\r\n"
            ),
            "",
        )
    }));
    steps.push(Step::Expect(Expect {
        leg_end: false,
        ..expect(200, 200)
    }));
    Ok(Scenario {
        name: "invite-ringing".to_owned(),
        steps,
        needs_callee: true,
        service: "callee".to_owned(),
        expires: 3600,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_and_render() {
        let t = Template::parse("a [user] b [cseq]").unwrap();
        let mut out = Vec::new();
        t.render(&mut out, |v, o| match v {
            Var::User => o.extend_from_slice(b"alice"),
            Var::Cseq => o.extend_from_slice(b"7"),
            _ => {}
        });
        assert_eq!(out, b"a alice b 7");
        assert!(matches!(
            Template::parse("[nope]").unwrap_err(),
            Error::UnknownVariable(v) if v == "nope"
        ));
        assert!(matches!(
            Template::parse("x [user").unwrap_err(),
            Error::UnclosedTemplate(_)
        ));
        assert!(Template::parse("x [user")
            .unwrap_err()
            .to_string()
            .contains("unclosed"));
    }

    #[test]
    fn built_ins_have_the_published_legs() {
        let legs = |s: &Scenario| {
            s.steps
                .iter()
                .filter(|st| matches!(st, Step::Expect(e) if e.leg_end))
                .count()
        };
        for name in BUILT_IN {
            let plain = built_in(name, false).unwrap();
            let auth = built_in(name, true).unwrap();
            assert_eq!(
                legs(&auth),
                legs(&plain) + 1,
                "{name}: the challenge is a leg"
            );
        }
        assert_eq!(legs(&built_in("register", false).unwrap()), 1);
        assert_eq!(
            legs(&built_in("invite", false).unwrap()),
            2,
            "INVITE→200 + BYE→200"
        );
        assert_eq!(built_in("register-logout", false).unwrap().expires, 0);
        assert!(built_in("invite", false).unwrap().needs_callee);
        assert!(built_in("bogus", false).is_err());
    }

    #[test]
    fn ringing_times_one_leg_and_checks_its_domains() {
        for auth in [false, true] {
            let s = ringing("a.example", "b.example", auth).unwrap();
            let ends: Vec<u16> = s
                .steps
                .iter()
                .filter_map(|st| match st {
                    Step::Expect(e) if e.leg_end => Some(e.min),
                    _ => None,
                })
                .collect();
            assert_eq!(ends, [180], "only INVITE → 180 is timed (auth {auth})");
        }
        assert!(ringing("[::1]", "b.example", false).is_err());
        assert!(ringing("a.example", "", false).is_err());
    }
}
