//! Header field names, including the compact forms of RFC 3261 §7.3.3 and
//! later extensions, and the raw header line type.

use std::fmt;

macro_rules! header_names {
    ($($variant:ident => $canonical:expr, [$($alias:expr),*];)*) => {
        /// A header field name the stack knows about; others are [`HeaderName::Other`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum HeaderName {
            $(
                #[doc = $canonical]
                $variant,
            )*
            /// A header the stack does not interpret.
            Other,
        }

        impl HeaderName {
            /// The canonical (long) spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $canonical,)*
                    Self::Other => "extension-header",
                }
            }

            /// Classifies a header name, case-insensitively, accepting compact forms.
            pub fn from_name(name: &str) -> Self {
                let b = name.as_bytes();
                if b.len() > 32 {
                    return Self::Other;
                }
                let mut buf = [0u8; 32];
                let lower = &mut buf[..b.len()];
                lower.copy_from_slice(b);
                lower.make_ascii_lowercase();
                match &*lower {
                    $($(x if x == $alias.as_bytes() => Self::$variant,)*)*
                    _ => Self::Other,
                }
            }
        }
    };
}

header_names! {
    Via => "Via", ["via", "v"];
    From => "From", ["from", "f"];
    To => "To", ["to", "t"];
    CallId => "Call-ID", ["call-id", "i"];
    CSeq => "CSeq", ["cseq"];
    MaxForwards => "Max-Forwards", ["max-forwards"];
    Contact => "Contact", ["contact", "m"];
    Expires => "Expires", ["expires"];
    MinExpires => "Min-Expires", ["min-expires"];
    ContentLength => "Content-Length", ["content-length", "l"];
    ContentType => "Content-Type", ["content-type", "c"];
    ContentEncoding => "Content-Encoding", ["content-encoding", "e"];
    Route => "Route", ["route"];
    RecordRoute => "Record-Route", ["record-route"];
    Path => "Path", ["path"];
    Authorization => "Authorization", ["authorization"];
    ProxyAuthorization => "Proxy-Authorization", ["proxy-authorization"];
    WwwAuthenticate => "WWW-Authenticate", ["www-authenticate"];
    ProxyAuthenticate => "Proxy-Authenticate", ["proxy-authenticate"];
    AuthenticationInfo => "Authentication-Info", ["authentication-info"];
    Require => "Require", ["require"];
    ProxyRequire => "Proxy-Require", ["proxy-require"];
    Supported => "Supported", ["supported", "k"];
    Unsupported => "Unsupported", ["unsupported"];
    Allow => "Allow", ["allow"];
    Accept => "Accept", ["accept"];
    Subject => "Subject", ["subject", "s"];
    UserAgent => "User-Agent", ["user-agent"];
    Server => "Server", ["server"];
    Date => "Date", ["date"];
    Event => "Event", ["event", "o"];
    AllowEvents => "Allow-Events", ["allow-events", "u"];
    ReferTo => "Refer-To", ["refer-to", "r"];
    ReferredBy => "Referred-By", ["referred-by", "b"];
    SessionExpires => "Session-Expires", ["session-expires", "x"];
    Timestamp => "Timestamp", ["timestamp"];
    Warning => "Warning", ["warning"];
    RetryAfter => "Retry-After", ["retry-after"];
}

impl fmt::Display for HeaderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One header line as it appears in the message, after unfolding is
/// accounted for (the value may still contain `CRLF 1*WSP` runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// The classified name.
    pub name: HeaderName,
    /// The name as written (compact or long, any case).
    pub raw_name: &'a str,
    /// The value with leading and trailing white space removed.
    pub value: &'a str,
    /// The whole line from the first byte of the name to the end of the value.
    pub line: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_and_case_insensitive() {
        assert_eq!(HeaderName::from_name("v"), HeaderName::Via);
        assert_eq!(
            HeaderName::from_name("MaX-fOrWaRdS"),
            HeaderName::MaxForwards
        );
        assert_eq!(HeaderName::from_name("I"), HeaderName::CallId);
        assert_eq!(HeaderName::from_name("l"), HeaderName::ContentLength);
        assert_eq!(HeaderName::from_name("k"), HeaderName::Supported);
        assert_eq!(HeaderName::from_name("NewFangledHeader"), HeaderName::Other);
        assert_eq!(HeaderName::from_name(&"x".repeat(100)), HeaderName::Other);
    }
}
