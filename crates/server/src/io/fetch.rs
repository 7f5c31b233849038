//! Fetching a signer's certificate (`x5u`, RFC 8224 §7.2) over HTTPS, as a
//! hostile repository cannot exploit: `https://` only; the name resolved
//! here and every address checked — loopback, private, link-local and
//! other non-public addresses refused unless allowed (no request to an
//! inside address a caller names, SSRF) — and the connection made to the
//! address checked (no second resolution to rebind); one absolute
//! deadline for the whole fetch, redirects included; the body bounded;
//! redirects bounded and checked like the first URL.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use crate::config_stir::FetchSettings;
use crate::proto::stir::FetchFailure;

/// Header bytes read beyond the body's bound.
const MAX_HEAD: usize = 8 * 1024;
/// The longest a read waits before the deadline and the stop are looked at.
const SLICE: Duration = Duration::from_millis(200);

/// A certificate chain fetched, and how long it may be kept.
#[derive(Debug)]
pub struct Fetched {
    /// The body (PEM).
    pub body: Vec<u8>,
    /// From Cache-Control max-age, else the default.
    pub ttl: Duration,
}

/// The HTTPS client of the verification service.
#[derive(Debug)]
pub struct Client {
    tls: Arc<ClientConfig>,
    settings: FetchSettings,
}

/// Whether `ip` is an address on the public Internet (RFC 6890's special
/// purpose registries; an IPv6 address that carries an IPv4 one — mapped,
/// NAT64 or 6to4 — is judged by the IPv4 address it reaches).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            !(a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || a.is_documentation()
                || o[0] == 0
                // Shared address space (RFC 6598).
                || (o[0] == 100 && (64..128).contains(&o[1]))
                // IETF protocol assignments (RFC 6890).
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                // Benchmarking (RFC 2544).
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                || o[0] >= 240)
        }
        IpAddr::V6(a) => {
            if let Some(v4) = carried_v4(a) {
                return is_public(IpAddr::V4(v4));
            }
            let s = a.segments();
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                // IPv4-compatible (deprecated, RFC 4291 §2.5.5.1).
                || s[..6] == [0; 6]
                // Discard-only (RFC 6666); NAT64 for local use (RFC 8215),
                // whose embedding the network chooses.
                || s[..4] == [0x100, 0, 0, 0]
                || s[..3] == [0x64, 0xff9b, 1]
                || (s[0] & 0xfe00) == 0xfc00
                // Link-local, and site-local (deprecated, RFC 3879).
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xffc0) == 0xfec0
                // Teredo (RFC 4380) and documentation.
                || (s[0] == 0x2001 && s[1] == 0)
                || (s[0] == 0x2001 && s[1] == 0x0db8))
        }
    }
}

/// The IPv4 address an IPv6 one reaches: IPv4-mapped (RFC 4291), NAT64's
/// well-known prefix (RFC 6052's 64:ff9b::/96) and 6to4 (RFC 3056's
/// 2002::/16).
fn carried_v4(a: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    if let Some(v4) = a.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = a.segments();
    let v4 = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        std::net::Ipv4Addr::new(a, b, c, d)
    };
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(v4(s[6], s[7]));
    }
    (s[0] == 0x2002).then(|| v4(s[1], s[2]))
}

/// `https://host[:port]/path` split: host, port, path.
pub fn split_url(url: &str) -> Option<(String, u16, String)> {
    let rest = url.strip_prefix("https://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') || path.contains(['\r', '\n', ' ']) {
        return None;
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => 443,
            None => return None,
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (authority.to_string(), 443),
        }
    };
    Some((host, port, path.to_string()))
}

/// The `max-age` of a Cache-Control value; `Some(0)` for no-store or
/// no-cache.
pub fn max_age(cache_control: &str) -> Option<u64> {
    let mut age = None;
    for d in cache_control.split(',').map(str::trim) {
        let lower = d.to_ascii_lowercase();
        if lower == "no-store" || lower == "no-cache" {
            return Some(0);
        }
        if let Some(v) = lower.strip_prefix("max-age=") {
            age = v.trim_matches('"').parse().ok();
        }
    }
    age
}

/// What one HTTP exchange gave.
enum Answer {
    Body(Fetched),
    Redirect(String),
}

impl Client {
    /// A client trusting `settings.roots` (or the system's roots).
    pub fn new(settings: &FetchSettings) -> Result<Self, String> {
        let path = settings
            .roots
            .clone()
            .unwrap_or_else(|| crate::io::tls::SYSTEM_ROOTS.into());
        let roots = crate::io::tls::roots(&path).map_err(|e| e.to_string())?;
        let provider = sip_tls::default_provider();
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            tls: Arc::new(tls),
            settings: settings.clone(),
        })
    }

    /// Fetches `url`, following redirects, within the deadline.
    pub fn get(&self, url: &str, stop: &AtomicBool) -> Result<Fetched, FetchFailure> {
        let deadline = Instant::now() + self.settings.timeout;
        let mut url = url.to_string();
        for _ in 0..=self.settings.max_redirects {
            match self.exchange(&url, deadline, stop)? {
                Answer::Body(f) => return Ok(f),
                Answer::Redirect(to) => {
                    url = if to.starts_with('/') {
                        let (host, port, _) = split_url(&url).ok_or(FetchFailure::NotHttps)?;
                        format!("https://{host}:{port}{to}")
                    } else {
                        to
                    };
                }
            }
        }
        Err(FetchFailure::Redirects)
    }

    /// The checked address `host` leads to.
    fn address(&self, host: &str, port: u16) -> Result<SocketAddr, FetchFailure> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|_| FetchFailure::Unreachable)?
            .collect();
        if !self.settings.allow_private && addrs.iter().any(|a| !is_public(a.ip())) {
            return Err(FetchFailure::Private);
        }
        addrs.first().copied().ok_or(FetchFailure::Unreachable)
    }

    fn exchange(
        &self,
        url: &str,
        deadline: Instant,
        stop: &AtomicBool,
    ) -> Result<Answer, FetchFailure> {
        let (host, port, path) = split_url(url).ok_or(FetchFailure::NotHttps)?;
        let addr = self.address(&host, port)?;
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or(FetchFailure::Timeout)?;
        let sock = TcpStream::connect_timeout(&addr, left).map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                FetchFailure::Timeout
            } else {
                FetchFailure::Unreachable
            }
        })?;
        let name = ServerName::try_from(host.clone()).map_err(|_| FetchFailure::NotHttps)?;
        let conn =
            ClientConnection::new(self.tls.clone(), name).map_err(|_| FetchFailure::Unreachable)?;
        let mut tls = StreamOwned::new(conn, sock);
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/pem-certificate-chain, \
             application/x-pem-file, */*\r\nUser-Agent: sipsec\r\nConnection: close\r\n\r\n"
        );
        tls.sock
            .set_write_timeout(Some(left.min(SLICE * 10)))
            .map_err(|_| FetchFailure::Unreachable)?;
        tls.write_all(request.as_bytes())
            .map_err(|_| FetchFailure::Unreachable)?;
        let limit = self.settings.max_bytes + MAX_HEAD;
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(FetchFailure::Unreachable);
            }
            let left = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or(FetchFailure::Timeout)?;
            let _ = tls.sock.set_read_timeout(Some(left.min(SLICE)));
            match tls.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.len() > limit {
                        return Err(FetchFailure::TooLarge);
                    }
                    if complete(&buf) {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                // A peer that closes without close_notify: what came is read.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(_) => return Err(FetchFailure::Unreachable),
            }
        }
        self.answer(&buf)
    }

    /// Reads the response in `buf`.
    fn answer(&self, buf: &[u8]) -> Result<Answer, FetchFailure> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(at)) = r.parse(buf) else {
            return Err(FetchFailure::Unreachable);
        };
        let header = |name: &str| {
            r.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .and_then(|h| std::str::from_utf8(h.value).ok())
        };
        let code = r.code.unwrap_or(0);
        if (300..400).contains(&code) {
            let to = header("location").ok_or(FetchFailure::Unreachable)?;
            if !to.starts_with('/') && !to.starts_with("https://") {
                return Err(FetchFailure::NotHttps);
            }
            return Ok(Answer::Redirect(to.to_string()));
        }
        if code != 200 {
            return Err(FetchFailure::Unreachable);
        }
        let body = &buf[at..];
        let body = if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            dechunk(body).ok_or(FetchFailure::Unreachable)?
        } else {
            match header("content-length").and_then(|l| l.trim().parse::<usize>().ok()) {
                Some(n) if n > self.settings.max_bytes => return Err(FetchFailure::TooLarge),
                Some(n) if body.len() < n => return Err(FetchFailure::Unreachable),
                Some(n) => body[..n].to_vec(),
                None => body.to_vec(),
            }
        };
        if body.len() > self.settings.max_bytes {
            return Err(FetchFailure::TooLarge);
        }
        let ttl = header("cache-control")
            .and_then(max_age)
            .map_or(self.settings.default_ttl, |s| {
                Duration::from_secs(s.min(86_400))
            });
        Ok(Answer::Body(Fetched { body, ttl }))
    }
}

/// Whether `buf` holds a whole response: its head, and the body its
/// Content-Length gives (else the peer's close ends it).
fn complete(buf: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(at)) = r.parse(buf) else {
        return false;
    };
    let len = r
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let code = r.code.unwrap_or(0);
    (300..400).contains(&code) || len.is_some_and(|n| buf.len() - at >= n)
}

/// A chunked body (RFC 9112 §7.1) decoded; `None` when malformed.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&body[..line]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        body = &body[line + 2..];
        if size == 0 {
            return Some(out);
        }
        if body.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.1.1",
            "172.16.0.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
            "192.0.0.8",
            "198.18.0.1",
            "198.19.255.254",
            // An inside address reached through NAT64 or 6to4.
            "64:ff9b::10.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b:1::192.168.0.1",
            "64:ff9b:1:2::8.8.8.8",
            "2002:7f00:1::1",
            "2002:a00:1::",
            // IPv4-compatible, Teredo, discard-only, site-local.
            "::127.0.0.1",
            "::8.8.8.8",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "100::1",
            "fec0::1",
        ] {
            assert!(!is_public(a.parse().unwrap()), "{a}");
        }
        for a in [
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "198.20.0.1",
            "192.0.1.1",
        ] {
            assert!(is_public(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn urls_split_and_refuse_what_is_not_https() {
        assert_eq!(
            split_url("https://cr.example:8443/sp.pem"),
            Some(("cr.example".into(), 8443, "/sp.pem".into()))
        );
        assert_eq!(
            split_url("https://[::1]/x"),
            Some(("::1".into(), 443, "/x".into()))
        );
        assert_eq!(
            split_url("https://cr.example"),
            Some(("cr.example".into(), 443, "/".into()))
        );
        for bad in [
            "http://x/y",
            "https://",
            "https://u@x/y",
            "https://x:99999/",
            "https://x/a b",
        ] {
            assert_eq!(split_url(bad), None, "{bad}");
        }
    }

    #[test]
    fn cache_control_gives_the_age() {
        assert_eq!(max_age("public, max-age=600"), Some(600));
        assert_eq!(max_age("no-store"), Some(0));
        assert_eq!(max_age("private"), None);
    }

    #[test]
    fn chunked_bodies_decode_and_bad_ones_are_refused() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert_eq!(dechunk(b"5\r\nab"), None);
        assert_eq!(dechunk(b"zz\r\n"), None);
    }
}
