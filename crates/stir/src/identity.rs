//! The SIP `Identity` header (RFC 8224 §4.1; compact form `y`):
//! `token;info=<URI>;alg=ES256;ppt=shaken`. Parsing checks the form and
//! the parameters a SHAKEN verifier needs; the token itself is read by
//! [`crate::Passport::decode`].

/// The longest header value read.
pub const MAX_VALUE: usize = crate::passport::MAX_TOKEN + 1024;

/// Why an `Identity` value cannot be used (RFC 8224 §6.2.2's 436/437/438).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Not `token;info=<uri>…`.
    #[error("Identity header malformed: {0}")]
    Malformed(&'static str),
    /// An `alg` or `ppt` other than SHAKEN's.
    #[error("Identity header not SHAKEN: {0}")]
    Unsupported(&'static str),
}

/// A parsed `Identity` value, borrowing from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentityHeader<'a> {
    /// The PASSporT (compact JWS).
    pub token: &'a str,
    /// Where the signer's certificate is (`info`).
    pub info: &'a str,
    /// `alg`, when given (ES256 when absent).
    pub alg: Option<&'a str>,
    /// `ppt`, when given.
    pub ppt: Option<&'a str>,
}

impl<'a> IdentityHeader<'a> {
    /// Parses one header value.
    pub fn parse(value: &'a str) -> Result<Self, IdentityError> {
        if value.len() > MAX_VALUE {
            return Err(IdentityError::Malformed("too long"));
        }
        let value = value.trim();
        let (token, mut rest) = value.split_once(';').unwrap_or((value, ""));
        let token = token.trim();
        if token.is_empty()
            || !token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'='))
        {
            return Err(IdentityError::Malformed("the token is not base64url"));
        }
        let mut h = Self {
            token,
            info: "",
            alg: None,
            ppt: None,
        };
        while !rest.is_empty() {
            let (name, after) = rest
                .split_once('=')
                .ok_or(IdentityError::Malformed("a parameter without a value"))?;
            let name = name.trim();
            let after = after.trim_start();
            let (val, next) = if let Some(uri) = after.strip_prefix('<') {
                // The URI may hold ';': it ends at '>'.
                let (uri, next) = uri
                    .split_once('>')
                    .ok_or(IdentityError::Malformed("info URI without '>'"))?;
                let next = next.trim_start();
                if !next.is_empty() && !next.starts_with(';') {
                    return Err(IdentityError::Malformed("text after the info URI"));
                }
                (uri, next.strip_prefix(';').unwrap_or(""))
            } else {
                let (v, next) = after.split_once(';').unwrap_or((after, ""));
                (v.trim().trim_matches('"'), next)
            };
            if name.eq_ignore_ascii_case("info") {
                h.info = val;
            } else if name.eq_ignore_ascii_case("alg") {
                h.alg = Some(val);
            } else if name.eq_ignore_ascii_case("ppt") {
                h.ppt = Some(val);
            }
            rest = next;
        }
        if h.info.is_empty() {
            return Err(IdentityError::Malformed("no info parameter"));
        }
        if h.alg.is_some_and(|a| a != "ES256") {
            return Err(IdentityError::Unsupported("alg is not ES256"));
        }
        if h.ppt.is_some_and(|p| p != "shaken") {
            return Err(IdentityError::Unsupported("ppt is not shaken"));
        }
        Ok(h)
    }

    /// The header value for a token signed for the certificate at `x5u`.
    pub fn format(token: &str, x5u: &str) -> String {
        format!("{token};info=<{x5u}>;alg=ES256;ppt=shaken")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shaken_values_parse_with_parameters_in_any_order() {
        let h =
            IdentityHeader::parse("a.b.c;info=<https://x/c.pem;v=1>;alg=ES256;ppt=shaken").unwrap();
        assert_eq!(h.token, "a.b.c");
        assert_eq!(h.info, "https://x/c.pem;v=1");
        assert_eq!((h.alg, h.ppt), (Some("ES256"), Some("shaken")));
        let h = IdentityHeader::parse(" a.b.c ; ppt=\"shaken\" ; info=<https://x/c.pem>").unwrap();
        assert_eq!(
            (h.info, h.alg, h.ppt),
            ("https://x/c.pem", None, Some("shaken"))
        );
        let v = IdentityHeader::format("t.o.k", "https://x/c.pem");
        assert_eq!(IdentityHeader::parse(&v).unwrap().info, "https://x/c.pem");
    }

    #[test]
    fn malformed_and_foreign_values_are_refused() {
        for (v, malformed) in [
            ("", true),
            ("a.b.c", true),
            ("a.b.c;info", true),
            ("a.b.c;info=<https://x", true),
            ("a.b.c;info=<https://x>junk", true),
            ("a b.c;info=<https://x>", true),
            ("a.b.c;info=<https://x>;alg=RS256", false),
            ("a.b.c;info=<https://x>;ppt=div", false),
        ] {
            let e = IdentityHeader::parse(v).unwrap_err();
            assert_eq!(
                matches!(e, IdentityError::Malformed(_)),
                malformed,
                "{v}: {e}"
            );
        }
        assert!(IdentityHeader::parse(&"a".repeat(MAX_VALUE + 1)).is_err());
    }
}
