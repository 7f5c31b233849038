//! What the operator endpoint refuses before it reads a request's
//! target: requests a web page on another site made the operator's
//! browser send. Browsers send simple cross-site `POST`s without asking
//! first (a page cannot read the answer, but the action is done), and a
//! page whose name an attacker re-points at 127.0.0.1 (DNS rebinding)
//! is, to the browser, the same origin as our endpoint: it may then read
//! `/status` too. So:
//!
//! - an `Origin` header that is not this endpoint's own origin (the
//!   scheme `http` and the `Host` the request names; `null` included) is
//!   refused: browsers send `Origin` on every cross-origin request and on
//!   every `POST`, and no other client needs one;
//! - without `http_token` (the endpoint then listens on loopback only), a
//!   `Host` that is a name other than `localhost` is refused: a client on
//!   this host addresses it by IP address or as localhost, and a name
//!   that resolves here is what a rebinding page sends. With a token, the
//!   token is the check (a page cannot know it) and any name is served.

use std::net::IpAddr;

/// Why the request whose head is `head` is refused (`None`: it is not).
/// `token_set`: `http_token` is configured.
pub fn refusal(head: &str, token_set: bool) -> Option<String> {
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    let host = header("host");
    if let Some(origin) = header("origin") {
        let own = host.is_some_and(|h| {
            origin
                .strip_prefix("http://")
                .is_some_and(|o| o.eq_ignore_ascii_case(h))
        });
        if !own {
            return Some(format!(
                "a request from a page of another origin ({origin}) is refused: \
                 the operator endpoint takes none\n"
            ));
        }
    }
    match host {
        Some(h) if !token_set && !local_name(h) => Some(format!(
            "Host {h}: without http_token this endpoint answers only requests addressed \
             to an IP address or to localhost (a page on a name that resolves here may be \
             a DNS-rebinding attack); use the address, or set http_token\n"
        )),
        _ => None,
    }
}

/// An IP address or `localhost`, with or without a port.
fn local_name(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => {
            return v6
                .split(']')
                .next()
                .is_some_and(|a| a.parse::<IpAddr>().is_ok())
        }
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(lines: &[&str]) -> String {
        format!("POST /reload HTTP/1.1\r\n{}\r\n\r\n", lines.join("\r\n"))
    }

    #[test]
    fn its_own_pages_and_clients_without_a_browser_are_served() {
        for lines in [
            &["Host: 127.0.0.1:8060"][..],
            &["Host: 127.0.0.1:8060", "Origin: http://127.0.0.1:8060"],
            &["host: [::1]:8060", "origin: http://[::1]:8060"],
            &["Host: LocalHost:8060", "Origin: http://localhost:8060"],
            &["Host: localhost"],
            &[],
        ] {
            assert_eq!(refusal(&head(lines), false), None, "{lines:?}");
        }
    }

    #[test]
    fn another_sites_page_is_refused_with_or_without_a_token() {
        for (lines, says) in [
            (
                &["Host: 127.0.0.1:8060", "Origin: http://evil.example"][..],
                "(http://evil.example)",
            ),
            (&["Host: 127.0.0.1:8060", "Origin: null"], "(null)"),
            (
                &["Host: 127.0.0.1:8060", "Origin: https://127.0.0.1:8060"],
                "another origin",
            ),
            (
                &["Host: 127.0.0.1:8060", "Origin: http://127.0.0.1:9999"],
                "another origin",
            ),
            (&["Origin: http://127.0.0.1:8060"], "another origin"),
        ] {
            for token in [false, true] {
                let why = refusal(&head(lines), token).unwrap_or_default();
                assert!(why.contains(says), "{lines:?}: {why}");
            }
        }
    }

    #[test]
    fn a_name_is_served_only_with_a_token() {
        for host in ["evil.example:8060", "rebind.test", "localhost.evil.example"] {
            let h = head(&[&format!("Host: {host}")]);
            let why = refusal(&h, false).expect(host);
            assert!(why.contains("DNS-rebinding"), "{why}");
            assert_eq!(refusal(&h, true), None, "{host}");
        }
    }
}
