//! SIP over WebSocket (RFC 7118), sans-IO: the HTTP/1.1 upgrade a
//! browser opens with (RFC 6455 §4.2, the `sip` subprotocol of RFC 7118
//! §4.1), and the frames that follow (RFC 6455 §5), one SIP message per
//! WebSocket message.
//!
//! The server's side: a reactor hands this module the bytes a connection
//! gave and sends what it returns.

pub use super::close;
use super::{opcode, parse_header, unmasked_header};

/// Longest upgrade request accepted (request line and headers).
pub const MAX_UPGRADE: usize = 8 << 10;

/// What an upgrade request came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// The request is not complete yet.
    Incomplete,
    /// Accepted: the first `used` bytes were the request; send `response`
    /// (101 Switching Protocols) and speak WebSocket from then on.
    Accept {
        /// Bytes of the request.
        used: usize,
        /// The 101 response.
        response: Vec<u8>,
    },
    /// Refused: send `response` and close.
    Refuse {
        /// The HTTP error response.
        response: Vec<u8>,
        /// Why, for the log and the tests.
        why: &'static str,
    },
}

fn refuse(status: &str, extra: &str, why: &'static str) -> Upgrade {
    let body = format!("{why}\n");
    let response = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    Upgrade::Refuse { response, why }
}

/// Whether the comma-separated `value` lists `token` (case-insensitive).
fn lists(value: &str, token: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// A `Sec-WebSocket-Key`: base64 of 16 bytes (RFC 6455 §4.1), which is
/// 22 characters of the alphabet and `==`.
fn valid_key(key: &str) -> bool {
    let b = key.as_bytes();
    b.len() == 24
        && b[22..] == *b"=="
        && b[..22]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2 step 5.4): base64 of
/// the SHA-1 of the key and the protocol's GUID.
fn accept_key(key: &str) -> String {
    use base64::Engine as _;
    use sha1::Digest as _;
    let mut h = sha1::Sha1::new();
    h.update(key.as_bytes());
    h.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// Reads an upgrade request from the start of `bytes`. `origins`, when
/// not empty, lists the `Origin`s allowed (browsers send one; a request
/// without it is refused too).
pub fn upgrade(bytes: &[u8], origins: &[String]) -> Upgrade {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if bytes.len() > MAX_UPGRADE => {
            return refuse(
                "431 Request Header Fields Too Large",
                "",
                "the upgrade request is too large",
            )
        }
        Ok(httparse::Status::Partial) => return Upgrade::Incomplete,
        Err(httparse::Error::TooManyHeaders) => {
            return refuse(
                "431 Request Header Fields Too Large",
                "",
                "the upgrade request has too many headers",
            )
        }
        Err(_) => return refuse("400 Bad Request", "", "not an HTTP request"),
    };
    if used > MAX_UPGRADE {
        return refuse(
            "431 Request Header Fields Too Large",
            "",
            "the upgrade request is too large",
        );
    }
    if req.method != Some("GET") {
        return refuse(
            "405 Method Not Allowed",
            "Allow: GET\r\n",
            "a WebSocket upgrade is a GET",
        );
    }
    if req.version != Some(1) {
        return refuse("400 Bad Request", "", "a WebSocket upgrade needs HTTP/1.1");
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .filter_map(|h| std::str::from_utf8(h.value).ok())
            .collect::<Vec<_>>()
    };
    if header("Host").len() != 1 {
        return refuse("400 Bad Request", "", "the request needs one Host");
    }
    if !header("Upgrade").iter().any(|v| lists(v, "websocket")) {
        return refuse(
            "426 Upgrade Required",
            "Upgrade: websocket\r\nConnection: Upgrade\r\n",
            "this port speaks SIP over WebSocket only",
        );
    }
    if !header("Connection").iter().any(|v| lists(v, "upgrade")) {
        return refuse("400 Bad Request", "", "Connection must list Upgrade");
    }
    if header("Sec-WebSocket-Version").as_slice() != ["13"] {
        return refuse(
            "426 Upgrade Required",
            "Sec-WebSocket-Version: 13\r\n",
            "only WebSocket version 13 is spoken",
        );
    }
    let key = header("Sec-WebSocket-Key");
    let key = match key.as_slice() {
        [k] if valid_key(k.trim()) => k.trim(),
        _ => return refuse("400 Bad Request", "", "bad Sec-WebSocket-Key"),
    };
    if !origins.is_empty() {
        let origin = header("Origin");
        let allowed = matches!(origin.as_slice(), [o] if origins.iter().any(|a| a.eq_ignore_ascii_case(o.trim())));
        if !allowed {
            return refuse("403 Forbidden", "", "this Origin is not allowed");
        }
    }
    // RFC 7118 §4.1: the client lists `sip`; the server answers with it.
    if !header("Sec-WebSocket-Protocol")
        .iter()
        .any(|v| v.split(',').any(|t| t.trim() == "sip"))
    {
        return refuse(
            "400 Bad Request",
            "",
            "the sip WebSocket subprotocol is required (RFC 7118 section 4.1)",
        );
    }
    let accept = accept_key(key);
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: sip\r\n\r\n"
    )
    .into_bytes();
    Upgrade::Accept { used, response }
}

/// What the frames of a connection carried, one at a time.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A whole WebSocket message: one SIP message.
    Message(&'a [u8]),
    /// A ping: answer with a pong carrying the same bytes.
    Ping(&'a [u8]),
    /// The peer closes (with its status code, if it gave one): answer
    /// with a close frame and end the connection.
    Close(Option<u16>),
}

/// Reassembles a connection's messages from its frames.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Fragments of a message not yet finished, and whether it is text.
    partial: Option<(Vec<u8>, bool)>,
}

/// Why a connection's frames cannot be read: close with this code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation {
    /// The close code (RFC 6455 §7.4.1).
    pub code: u16,
    /// What the peer did.
    pub why: &'static str,
}

fn violation(code: u16, why: &'static str) -> Violation {
    Violation { code, why }
}

impl Decoder {
    /// Whether a fragmented message is part-way.
    pub fn is_midway(&self) -> bool {
        self.partial.is_some()
    }

    /// Reads the complete frames at the start of `bytes` (unmasking them
    /// in place), calling `on` for each event; returns the bytes used.
    /// Stops after a close. Messages longer than `max` are refused.
    pub fn decode(
        &mut self,
        bytes: &mut [u8],
        max: usize,
        mut on: impl FnMut(Event<'_>),
    ) -> Result<usize, Violation> {
        let mut at = 0;
        while at < bytes.len() {
            let Some(header) = parse_header(&bytes[at..]) else {
                break;
            };
            let (head, len) = (header.size, header.len);
            if header.rsv != 0 {
                return Err(violation(
                    close::PROTOCOL,
                    "reserved bits set (no extension agreed)",
                ));
            }
            // RFC 6455 §5.1: a client masks every frame it sends.
            let Some(mask) = header.mask else {
                return Err(violation(close::PROTOCOL, "an unmasked client frame"));
            };
            let control = header.is_control();
            if control && (len > 125 || !header.fin) {
                return Err(violation(
                    close::PROTOCOL,
                    "a control frame fragmented or longer than 125 bytes",
                ));
            }
            // RFC 6455 §5.2: a 64-bit length has its most significant
            // bit clear.
            if len > i64::MAX as u64 {
                return Err(violation(
                    close::PROTOCOL,
                    "a frame length with its most significant bit set",
                ));
            }
            let so_far = self.partial.as_ref().map_or(0, |(p, _)| p.len() as u64);
            if !control && so_far.saturating_add(len) > max as u64 {
                return Err(violation(close::TOO_BIG, "a message larger than allowed"));
            }
            let Some(end) = usize::try_from(len)
                .ok()
                .and_then(|l| (at + head).checked_add(l))
                .filter(|e| *e <= bytes.len())
            else {
                break;
            };
            let payload = &mut bytes[at + head..end];
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i & 3];
            }
            at = end;
            let payload = &bytes[end - payload_len(len)..end];
            match header.opcode {
                opcode::PING => on(Event::Ping(payload)),
                opcode::PONG => {}
                opcode::CLOSE => {
                    let code = match payload {
                        [] => None,
                        [a, b, rest @ ..] if std::str::from_utf8(rest).is_ok() => {
                            Some(u16::from_be_bytes([*a, *b]))
                        }
                        _ => return Err(violation(close::PROTOCOL, "a malformed close frame")),
                    };
                    on(Event::Close(code));
                    return Ok(at);
                }
                opcode::CONTINUATION => {
                    let Some((buf, _)) = &mut self.partial else {
                        return Err(violation(
                            close::PROTOCOL,
                            "a continuation frame with no message begun",
                        ));
                    };
                    buf.extend_from_slice(payload);
                    if header.fin {
                        let (buf, text) = self.partial.take().unwrap_or_default();
                        check_text(&buf, text)?;
                        on(Event::Message(&buf));
                    }
                }
                d @ (opcode::TEXT | opcode::BINARY) => {
                    if self.partial.is_some() {
                        return Err(violation(
                            close::PROTOCOL,
                            "a new message before the last one finished",
                        ));
                    }
                    let text = d == opcode::TEXT;
                    if header.fin {
                        check_text(payload, text)?;
                        on(Event::Message(payload));
                    } else {
                        self.partial = Some((payload.to_vec(), text));
                    }
                }
                _ => return Err(violation(close::PROTOCOL, "reserved opcode")),
            }
        }
        Ok(at)
    }
}

fn payload_len(len: u64) -> usize {
    usize::try_from(len).unwrap_or(usize::MAX)
}

fn check_text(payload: &[u8], text: bool) -> Result<(), Violation> {
    if text && std::str::from_utf8(payload).is_err() {
        return Err(violation(
            close::INVALID_DATA,
            "a text message not in UTF-8",
        ));
    }
    Ok(())
}

/// A server frame's header (unmasked, final) for `payload`: text when
/// the payload is UTF-8, else binary (RFC 7118 §5.1). Returns the buffer
/// and how much of it is the header.
pub fn data_header(payload: &[u8]) -> ([u8; 10], usize) {
    let first = if std::str::from_utf8(payload).is_ok() {
        super::TEXT
    } else {
        super::BINARY
    };
    unmasked_header(first, payload.len())
}

/// A whole pong frame answering a ping with `payload` (≤ 125 bytes).
pub fn pong(payload: &[u8]) -> Vec<u8> {
    let (h, n) = unmasked_header(super::PONG, payload.len());
    let mut f = h[..n].to_vec();
    f.extend_from_slice(payload);
    f
}

/// A whole close frame with `code`.
pub fn close_frame(code: u16) -> Vec<u8> {
    let (h, n) = unmasked_header(super::CLOSE, 2);
    let mut f = h[..n].to_vec();
    f.extend_from_slice(&code.to_be_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    fn request(extra: &str) -> String {
        format!(
            "GET / HTTP/1.1\r\nHost: sip.example\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        )
    }

    /// A client frame: masked, with the given first byte.
    fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
        super::super::client_frame(first, payload, [1, 2, 3, 4])
    }

    fn events(d: &mut Decoder, bytes: &[u8]) -> (Result<usize, Violation>, Vec<String>) {
        let mut buf = bytes.to_vec();
        let mut seen = Vec::new();
        let r = d.decode(&mut buf, 1000, |e| {
            seen.push(match e {
                Event::Message(m) => format!("msg:{}", String::from_utf8_lossy(m)),
                Event::Ping(p) => format!("ping:{}", String::from_utf8_lossy(p)),
                Event::Close(c) => format!("close:{c:?}"),
            })
        });
        (r, seen)
    }

    #[test]
    fn the_rfc_6455_sample_key_is_accepted_with_the_sip_subprotocol() {
        let req = request("Sec-WebSocket-Protocol: chat, sip\r\n");
        let Upgrade::Accept { used, response } = upgrade(req.as_bytes(), &[]) else {
            panic!("refused");
        };
        assert_eq!(used, req.len());
        let r = String::from_utf8(response).unwrap();
        assert!(r.starts_with("HTTP/1.1 101 "), "{r}");
        // RFC 6455 §1.3's worked example.
        assert!(r.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(r.contains("Sec-WebSocket-Protocol: sip\r\n"));
        assert_eq!(upgrade(&req.as_bytes()[..40], &[]), Upgrade::Incomplete);
    }

    #[test]
    fn bad_upgrades_are_refused_with_the_status_that_says_why() {
        let cases = [
            (request(""), "400 ", "subprotocol"),
            (
                request("Sec-WebSocket-Protocol: SIP\r\n"),
                "400 ",
                "subprotocol",
            ),
            (
                request("Sec-WebSocket-Protocol: sip\r\n").replace("Version: 13", "Version: 8"),
                "426 ",
                "version 13",
            ),
            (
                request("Sec-WebSocket-Protocol: sip\r\n").replace(KEY, "short"),
                "400 ",
                "Key",
            ),
            (
                request("Sec-WebSocket-Protocol: sip\r\n").replace("Upgrade: websocket\r\n", ""),
                "426 ",
                "WebSocket only",
            ),
            (
                request("Sec-WebSocket-Protocol: sip\r\n").replace("GET", "POST"),
                "405 ",
                "GET",
            ),
            ("REGISTER sip:x SIP/2.0\r\n\r\n".into(), "400 ", "HTTP"),
            (
                format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_UPGRADE)),
                "431 ",
                "large",
            ),
        ];
        for (req, status, why) in cases {
            match upgrade(req.as_bytes(), &[]) {
                Upgrade::Refuse { response, why: w } => {
                    let r = String::from_utf8(response).unwrap();
                    assert!(r.starts_with(&format!("HTTP/1.1 {status}")), "{req:?}: {r}");
                    assert!(w.contains(why), "{req:?}: {w}");
                }
                other => panic!("{req:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_origin_list_admits_only_its_origins() {
        let allowed = vec!["https://phone.example".to_owned()];
        let good = request("Sec-WebSocket-Protocol: sip\r\nOrigin: https://phone.example\r\n");
        assert!(matches!(
            upgrade(good.as_bytes(), &allowed),
            Upgrade::Accept { .. }
        ));
        for bad in [
            request("Sec-WebSocket-Protocol: sip\r\nOrigin: https://evil.example\r\n"),
            request("Sec-WebSocket-Protocol: sip\r\n"),
        ] {
            assert!(
                matches!(upgrade(bad.as_bytes(), &allowed), Upgrade::Refuse { ref response, .. } if response.starts_with(b"HTTP/1.1 403 ")),
                "{bad}"
            );
        }
    }

    #[test]
    fn frames_give_messages_whole_fragmented_and_split_across_reads() {
        let mut d = Decoder::default();
        let mut bytes = frame(0x81, b"REGISTER one");
        bytes.extend(frame(0x01, b"INVITE "));
        bytes.extend(frame(0x89, b"p")); // a ping between fragments is allowed
        bytes.extend(frame(0x80, b"two"));
        let (r, seen) = events(&mut d, &bytes);
        assert_eq!(r, Ok(bytes.len()));
        assert_eq!(seen, ["msg:REGISTER one", "ping:p", "msg:INVITE two"]);
        // A frame cut short is left for the next read, nothing consumed.
        let whole = frame(0x82, b"binary");
        let (r, seen) = events(&mut d, &whole[..whole.len() - 1]);
        assert_eq!((r, seen.len()), (Ok(0), 0));
        let (r, seen) = events(&mut d, &whole);
        assert_eq!((r, seen), (Ok(whole.len()), vec!["msg:binary".to_owned()]));
    }

    #[test]
    fn protocol_violations_close_with_the_rfc_6455_code() {
        let unmasked = {
            let mut f = frame(0x81, b"x");
            f[1] &= 0x7f;
            f.drain(2..6);
            f
        };
        let cases: [(Vec<u8>, u16); 8] = [
            (unmasked, close::PROTOCOL),
            (frame(0xC1, b"x"), close::PROTOCOL), // RSV1 without an extension
            (frame(0x83, b"x"), close::PROTOCOL), // reserved data opcode
            (frame(0x09, b"p"), close::PROTOCOL), // fragmented ping
            (frame(0x89, &[0; 126]), close::PROTOCOL),
            (frame(0x80, b"x"), close::PROTOCOL), // continuation of nothing
            (frame(0x81, &[0xff, 0xfe]), close::INVALID_DATA),
            (frame(0x82, &[b'a'; 1001]), close::TOO_BIG),
        ];
        for (bytes, code) in cases {
            let (r, _) = events(&mut Decoder::default(), &bytes);
            assert_eq!(r.map_err(|v| v.code), Err(code), "{bytes:02x?}");
        }
        // Fragments that add up past the limit are refused before the end.
        let mut d = Decoder::default();
        let mut bytes = frame(0x01, &[b'a'; 600]);
        bytes.extend(frame(0x00, &[b'a'; 600]));
        assert_eq!(
            events(&mut d, &bytes).0.map_err(|v| v.code),
            Err(close::TOO_BIG)
        );
        // A new message while one is part-way.
        let mut d = Decoder::default();
        let mut bytes = frame(0x01, b"a");
        bytes.extend(frame(0x81, b"b"));
        assert_eq!(
            events(&mut d, &bytes).0.map_err(|v| v.code),
            Err(close::PROTOCOL)
        );
    }

    #[test]
    fn a_close_ends_decoding_and_carries_its_code() {
        let mut bytes = frame(0x88, &1001u16.to_be_bytes());
        bytes.extend(frame(0x81, b"after"));
        let (r, seen) = events(&mut Decoder::default(), &bytes);
        assert_eq!(r, Ok(8));
        assert_eq!(seen, ["close:Some(1001)"]);
        assert_eq!(
            events(&mut Decoder::default(), &frame(0x88, &[3]))
                .0
                .map_err(|v| v.code),
            Err(close::PROTOCOL)
        );
    }

    #[test]
    fn server_frames_are_unmasked_and_sized() {
        let (h, n) = data_header(b"SIP/2.0 200 OK");
        assert_eq!(&h[..n], &[0x81, 14]);
        let (h, n) = data_header(&[0xff; 300]);
        assert_eq!(&h[..n], &[0x82, 126, 1, 44]);
        assert_eq!(pong(b"p"), [0x8a, 1, b'p']);
        assert_eq!(close_frame(1000), [0x88, 2, 0x03, 0xe8]);
    }
}
