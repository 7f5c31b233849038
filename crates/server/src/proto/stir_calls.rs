//! The stateful proxy's side of STIR/SHAKEN (`[stir]`): an initial INVITE
//! from an authenticated user is signed (an `Identity` header, RFC 8224
//! §4, with a SHAKEN PASSporT, RFC 8588); one from elsewhere is verified
//! (RFC 8224 §6.2) and passed on with `verstat` (3GPP TS 24.229) on its
//! P-Asserted-Identity or From, or refused under `require`.
//!
//! Verification checks what costs nothing first — the header's form, the
//! token's claims against the request, `iat` — so a stale or mismatched
//! token never makes this server fetch anything; only then is the
//! signer's certificate looked up (and fetched, the INVITE parked, when
//! it is not known yet; see [`crate::proto::stir`]).

use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;

use sip_core::{HeaderName, Message, Method};
use stir::passport::{Dest, Orig};
use stir::{Claims, IdentityHeader, Passport};

use crate::proto::ctx::Ctx;
use crate::proto::parked::Parked;
use crate::proto::proxy::Proxy;
use crate::proto::reply::{Event, Reply};
use crate::proto::stir::{Cert, FetchFailure, Lookup, StirEdit, Verifying, Why};

/// Identity headers looked at per request.
const MAX_IDENTITY: usize = 4;

/// What came of one Identity header.
enum Step {
    Passed,
    Parked,
    Failed(Why),
}

impl From<Why> for Step {
    fn from(w: Why) -> Self {
        Self::Failed(w)
    }
}

/// The user part of the URI in a From, To or P-Asserted-Identity value
/// (`"Name" <sip:+1215…@host>;tag=…`, `<tel:+1215…>`).
fn uri_user(value: &str) -> Option<&str> {
    let uri = match value.find('<') {
        Some(i) => value[i + 1..].split('>').next()?,
        None => value,
    };
    let (scheme, rest) = uri.trim().split_once(':')?;
    if scheme.eq_ignore_ascii_case("tel") {
        return Some(rest.split(';').next().unwrap_or(rest));
    }
    rest.split_once('@').map(|(user, _)| user)
}

/// The caller's number: P-Asserted-Identity's, else From's.
fn orig_tn(msg: &Message<'_>) -> Option<String> {
    let pai = msg.headers_named(HeaderName::PAssertedIdentity).next();
    let value = pai.map_or(msg.from().as_str(), |h| h.value);
    stir::tn::normalise(uri_user(value)?)
}

/// The called numbers: To's and the Request-URI's.
fn dest_tns(msg: &Message<'_>) -> [Option<String>; 2] {
    [
        uri_user(msg.to().as_str()).and_then(stir::tn::normalise),
        msg.request_uri()
            .and_then(|u| u.user())
            .and_then(stir::tn::normalise),
    ]
}

/// The callee as the PASSporT names it: its number, or under PrivaSIP its
/// pseudonymous Request-URI.
fn dest_claim(msg: &Message<'_>, shared: &crate::proto::shared::Shared) -> Option<Dest> {
    let [to, ruri] = dest_tns(msg);
    if let Some(tn) = ruri.or(to) {
        return Some(Dest::tn(tn));
    }
    let uri = msg.request_uri()?;
    (shared.privacy.is_some() && uri.user().is_some()).then(|| Dest {
        tn: Vec::new(),
        uri: vec![uri.as_str().to_owned()],
    })
}

/// Whether the PASSporT's `orig` and `dest` are this request's parties:
/// numbers against the caller's and the callee's, URIs against From's
/// and the Request-URI's or To's.
fn claims_match(c: &Claims, msg: &Message<'_>) -> bool {
    let orig = match (&c.orig.tn, &c.orig.uri) {
        (Some(tn), _) => orig_tn(msg).as_deref() == Some(tn.as_str()),
        (None, Some(uri)) => uri == msg.from().uri().as_str(),
        (None, None) => false,
    };
    let dests = dest_tns(msg);
    let ruri = msg.request_uri().map(|u| u.as_str());
    orig && (c
        .dest
        .tn
        .iter()
        .any(|d| dests.iter().flatten().any(|t| t == d))
        || c.dest
            .uri
            .iter()
            .any(|u| Some(u.as_str()) == ruri || u == msg.to().uri().as_str()))
}

/// `value` (a From or P-Asserted-Identity value) with `verstat=v` on its
/// URI's number (any `verstat` the caller put there replaced): in a SIP
/// URI's user part, on a tel URI as a parameter.
pub fn with_verstat(value: &str, v: &str) -> Option<String> {
    let (start, end) = match value.find('<') {
        Some(i) => (i + 1, i + 1 + value[i + 1..].find('>')?),
        None => (0, value.find(['>', ',']).unwrap_or(value.len())),
    };
    let uri = &value[start..end];
    let colon = uri.find(':')? + 1;
    let tel = uri[..colon].eq_ignore_ascii_case("tel:");
    let user_end = if tel {
        if start == 0 {
            // An unbracketed tel URI's parameters are the header's.
            return None;
        }
        uri.len()
    } else {
        uri.find('@')?
    };
    let user = &uri[colon..user_end];
    let mut number = String::with_capacity(user.len() + 32);
    for (i, part) in user.split(';').enumerate() {
        if i > 0 && part.to_ascii_lowercase().starts_with("verstat=") {
            continue;
        }
        if i > 0 {
            number.push(';');
        }
        number.push_str(part);
    }
    Some(format!(
        "{}{}{number};verstat={v}{}{}",
        &value[..start],
        &uri[..colon],
        &uri[user_end..],
        &value[end..]
    ))
}

/// Where `part` (a slice of `whole`) starts in it.
fn offset(whole: &[u8], part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

impl Proxy {
    /// Verifies an initial INVITE that did not come from an authenticated
    /// user: `Some(reply)` when it is refused or parked on a certificate;
    /// `None` forwards it (with its `verstat`).
    pub(super) fn stir_verify(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        authenticated: bool,
        out: &mut Vec<u8>,
    ) -> Option<Reply> {
        self.stir_edit = None;
        ctx.shared.stir.as_ref()?.verify.as_ref()?;
        let shared = ctx.shared.clone();
        let stir = shared.stir.as_ref()?;
        let v = stir.verify.as_ref()?;
        let trunk = stir
            .sign
            .as_ref()
            .is_some_and(|s| s.settings.trunks.contains(&src.ip()));
        if authenticated || trunk || msg.method() != Method::Invite || msg.to().tag().is_some() {
            return None;
        }
        let mut first = Why::NoIdentity;
        let headers = msg.headers_named(HeaderName::Identity).take(MAX_IDENTITY);
        for (i, h) in headers.enumerate() {
            match Self::check_identity(ctx, h.value, msg, src, v) {
                Step::Passed => {
                    bump_counter(&stir.counts.passed);
                    self.stir_edit = Some(StirEdit::Verstat("TN-Validation-Passed"));
                    Self::stir_event(ctx, msg, "TN-Validation-Passed".into());
                    return None;
                }
                Step::Parked => return Some(Reply::Drop),
                Step::Failed(w) if i == 0 => first = w,
                Step::Failed(_) => {}
            }
        }
        stir.counts.failed(first);
        Self::stir_event(
            ctx,
            msg,
            format!("{} ({})", first.verstat(), first.as_str()),
        );
        if !v.settings.require {
            self.stir_edit = Some(StirEdit::Verstat(first.verstat()));
            return None;
        }
        bump_counter(&stir.counts.refused);
        let warning = format!("399 sipsec \"STIR/SHAKEN: {}\"", first.as_str());
        let mut extra = vec![("Warning", warning.as_str())];
        if first == Why::Busy {
            extra.push(("Retry-After", "5"));
        }
        Some(ctx.respond(msg, first.refusal(), &extra, src, out))
    }

    fn stir_event(ctx: &mut Ctx, msg: &Message<'_>, what: String) {
        ctx.events.push(Event::Stir {
            call_id: msg.call_id().to_owned(),
            what,
        });
    }

    /// One Identity header: its form, its claims against the request,
    /// then the signer's certificate and the signature.
    fn check_identity(
        ctx: &mut Ctx,
        value: &str,
        msg: &Message<'_>,
        src: SocketAddr,
        v: &Verifying,
    ) -> Step {
        let Ok(ih) = IdentityHeader::parse(value) else {
            return Why::Malformed.into();
        };
        let Ok(p) = Passport::decode(ih.token) else {
            return Why::Malformed.into();
        };
        let age = ctx.now.secs() as i64 - p.claims.iat;
        if age.abs() > i64::from(v.settings.max_age) {
            return Why::Stale.into();
        }
        if p.header.x5u != ih.info || !claims_match(&p.claims, msg) {
            return Why::Mismatch.into();
        }
        if !ih.info.starts_with("https://") {
            return Why::Fetch(FetchFailure::NotHttps).into();
        }
        let cert = match v
            .certs
            .lookup(ih.info, ctx.now.mono, || ctx.source_share(src))
        {
            Lookup::Known(c) => c,
            Lookup::Busy => return Why::Busy.into(),
            asked @ (Lookup::Asked | Lookup::Fetching) => {
                if matches!(asked, Lookup::Asked) {
                    ctx.sends.wake_certs();
                }
                let parked = Parked {
                    message: msg.as_bytes().to_vec(),
                    src,
                    arrived: ctx.transport,
                };
                match v.certs.park(ih.info, parked, ctx.source_share(src)) {
                    Ok(()) => return Step::Parked,
                    Err(Some(c)) => c,
                    Err(None) => return Why::Busy.into(),
                }
            }
        };
        let signer = match cert {
            Cert::Valid(s) if s.not_after < ctx.now.secs() as i64 => return Why::Expired.into(),
            Cert::Valid(s) => s,
            Cert::Invalid(e) => return Why::of_cert(&e).into(),
            Cert::Failed(f) => return Why::Fetch(f).into(),
        };
        let covered = match &p.claims.orig.tn {
            Some(tn) => signer.covers(tn),
            // A pseudonymous caller is attested by its provider.
            None => signer.is_provider(),
        };
        if !covered {
            return Why::NotCovered.into();
        }
        if !p.verify(&signer.key) {
            return Why::BadSignature.into();
        }
        Step::Passed
    }

    /// Signs an initial INVITE from an authenticated user or a configured
    /// trunk (authentication service, RFC 8224 §5): the forwarded request
    /// gets an `Identity` header.
    pub(super) fn stir_sign(
        &mut self,
        ctx: &mut Ctx,
        msg: &Message<'_>,
        src: SocketAddr,
        authenticated: bool,
    ) {
        if ctx.shared.stir.as_ref().is_none_or(|s| s.sign.is_none()) {
            return;
        }
        let shared = ctx.shared.clone();
        let Some(stir) = shared.stir.as_ref() else {
            return;
        };
        let Some(s) = stir.sign.as_ref() else {
            return;
        };
        let trunk = s.settings.trunks.contains(&src.ip());
        if !(authenticated || trunk)
            || msg.method() != Method::Invite
            || msg.to().tag().is_some()
            || msg.headers_named(HeaderName::Identity).next().is_some()
        {
            return;
        }
        let pseudonymous = Self::pseudonymous_caller(ctx, msg);
        let (Some(orig), Some(dest)) = (
            Self::orig_claim(msg, pseudonymous),
            dest_claim(msg, &shared),
        ) else {
            bump_counter(&stir.counts.unsigned_not_tn);
            return;
        };
        let user = Self::authenticated_user(ctx, msg).unwrap_or_default();
        let mut attest = if trunk && !authenticated {
            s.settings.trunk_attest
        } else {
            *s.settings.users.get(&user).unwrap_or(&s.settings.attest)
        };
        let own = pseudonymous
            || stir::tn::normalise(&user).is_some_and(|u| orig.tn.as_deref() == Some(u.as_str()));
        if attest == 'A' && !own {
            // Full attestation only for the user's own number (RFC 8588
            // §4): another number the user is known to send is B. A
            // pseudonym was opened to the authenticated user already.
            attest = 'B';
        }
        // Under PrivaSIP the origination point is named per pseudonym, so
        // origid does not link a caller's calls either.
        let trunk_ip = src.ip().to_string();
        let origin = if pseudonymous {
            msg.from().uri().as_str()
        } else if trunk && !authenticated {
            trunk_ip.as_str()
        } else {
            user.as_str()
        };
        let claims = Claims {
            attest: attest.to_string(),
            dest,
            iat: ctx.now.secs() as i64,
            orig,
            origid: Self::origid(ctx, origin),
        };
        match s.key.sign(&claims, &s.settings.x5u) {
            Ok(token) => {
                bump_counter(&stir.counts.signed);
                let value = IdentityHeader::format(&token, &s.settings.x5u);
                self.stir_edit = Some(StirEdit::Identity(value));
            }
            Err(e) => Self::stir_event(ctx, msg, format!("not signed: {e}")),
        }
    }

    /// Whether the caller's From user is a PrivaSIP pseudonym that opened
    /// here (to the authenticated user, as `authorize_caller` checked).
    fn pseudonymous_caller(ctx: &Ctx, msg: &Message<'_>) -> bool {
        let privacy = ctx.shared.privacy.as_ref();
        privacy.is_some()
            && ctx.is_local_uri(msg.from().uri())
            && msg.from().uri().user().is_some_and(|u| {
                matches!(
                    // Opened (and cached) when the caller was authorized.
                    crate::proto::uris::reveal(privacy, u, ctx.now.secs(), || true),
                    Some(std::borrow::Cow::Owned(_))
                )
            })
    }

    /// The caller as the PASSporT names it: its number, or its pseudonym
    /// URI (the number stays hidden, RFC 8225 §5.2.1's `uri` form).
    fn orig_claim(msg: &Message<'_>, pseudonymous: bool) -> Option<Orig> {
        if pseudonymous {
            return Some(Orig {
                tn: None,
                uri: Some(msg.from().uri().as_str().to_owned()),
            });
        }
        orig_tn(msg).map(Orig::tn)
    }

    /// The user whose credentials for our realm the request carried.
    fn authenticated_user(ctx: &Ctx, msg: &Message<'_>) -> Option<String> {
        let realm = ctx.shared.auth.as_ref()?.realm.as_str();
        msg.headers_named(HeaderName::ProxyAuthorization)
            .filter_map(|h| sip_core::auth::Credentials::parse(h.value).ok())
            .find(|c| c.realm == Some(realm))
            .and_then(|c| c.username.map(str::to_owned))
    }

    /// A stable UUID for the user's origination point (RFC 8588 §6).
    fn origid(ctx: &Ctx, user: &str) -> String {
        let mut h = ctx.shared.branch_salt.build_hasher();
        h.write(b"origid");
        h.write(user.as_bytes());
        let a = h.finish();
        h.write_u8(1);
        let b = h.finish();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }

    /// Writes `written` (the request as forwarded) again into `out` with
    /// the Identity header or `verstat`; `false` when nothing changed.
    pub(super) fn with_stir_edit(&self, written: &[u8], out: &mut Vec<u8>) -> bool {
        let Some(edit) = &self.stir_edit else {
            return false;
        };
        let (at, end, text) = match edit {
            StirEdit::Identity(value) => {
                let Some(blank) = written.windows(4).position(|w| w == b"\r\n\r\n") else {
                    return false;
                };
                (blank + 2, blank + 2, format!("Identity: {value}\r\n"))
            }
            StirEdit::Verstat(v) => {
                let Ok(m) = Message::parse(written) else {
                    return false;
                };
                let pai = m.headers_named(HeaderName::PAssertedIdentity).next();
                let value = pai.map_or(m.from().as_str(), |h| h.value);
                let Some(new) = with_verstat(value, v) else {
                    return false;
                };
                let at = offset(written, value);
                (at, at + value.len(), new)
            }
        };
        out.clear();
        out.extend_from_slice(&written[..at]);
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(&written[end..]);
        true
    }
}

fn bump_counter(c: &std::sync::atomic::AtomicU64) {
    c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verstat_goes_on_the_number_and_replaces_the_callers() {
        let v = "TN-Validation-Passed";
        assert_eq!(
            with_verstat("\"A\" <sip:+12155551212@a.example;user=phone>;tag=1", v).unwrap(),
            "\"A\" <sip:+12155551212;verstat=TN-Validation-Passed@a.example;user=phone>;tag=1"
        );
        assert_eq!(
            with_verstat(
                "<sip:+1215;verstat=TN-Validation-Passed@a>",
                "TN-Validation-Failed"
            )
            .unwrap(),
            "<sip:+1215;verstat=TN-Validation-Failed@a>"
        );
        assert_eq!(
            with_verstat("<tel:+12155551212>", v).unwrap(),
            "<tel:+12155551212;verstat=TN-Validation-Passed>"
        );
        assert_eq!(
            with_verstat("sip:1215@a;tag=x", v).unwrap(),
            "sip:1215;verstat=TN-Validation-Passed@a;tag=x"
        );
        assert_eq!(with_verstat("tel:+1215;tag=x", v), None);
        assert_eq!(with_verstat("<sip:a.example>", v), None);
    }

    #[test]
    fn numbers_come_from_the_uri_user_part() {
        assert_eq!(uri_user("\"x\" <sip:+1215@a>;tag=1"), Some("+1215"));
        assert_eq!(uri_user("<tel:+1-215;phone-context=x>"), Some("+1-215"));
        assert_eq!(uri_user("sip:bob@b;tag=2"), Some("bob"));
        assert_eq!(uri_user("<sip:b.example>"), None);
    }
}
