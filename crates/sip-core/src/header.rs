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

        /// Every spelling the stack recognises, for checking `from_name`.
        #[cfg(test)]
        const ALIASES: &[(&str, HeaderName)] = &[$($(($alias, HeaderName::$variant),)*)*];

        impl HeaderName {
            /// The canonical (long) spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $canonical,)*
                    Self::Other => "extension-header",
                }
            }

            /// Classifies a header name, case-insensitively, accepting compact forms.
            // Generated arms stay uniform even where one `if` could merge into the match.
            #[allow(clippy::collapsible_match)]
            pub fn from_name(name: &str) -> Self {
                let b = name.as_bytes();
                let eq = |alias: &[u8]| alias.len() == b.len() && folded_eq(alias, b);
                // Dispatch on the first letter: at most a handful of comparisons.
                match b.first().map(u8::to_ascii_lowercase) {
                Some(b'a') => {
                    if eq(b"allow") {
                        return Self::Allow;
                    }
                    if eq(b"accept") {
                        return Self::Accept;
                    }
                    if eq(b"allow-events") {
                        return Self::AllowEvents;
                    }
                    if eq(b"authorization") {
                        return Self::Authorization;
                    }
                    if eq(b"authentication-info") {
                        return Self::AuthenticationInfo;
                    }
                }
                Some(b'b') => {
                    if eq(b"b") {
                        return Self::ReferredBy;
                    }
                }
                Some(b'c') => {
                    if eq(b"c") {
                        return Self::ContentType;
                    }
                    if eq(b"cseq") {
                        return Self::CSeq;
                    }
                    if eq(b"call-id") {
                        return Self::CallId;
                    }
                    if eq(b"contact") {
                        return Self::Contact;
                    }
                    if eq(b"content-type") {
                        return Self::ContentType;
                    }
                    if eq(b"content-length") {
                        return Self::ContentLength;
                    }
                    if eq(b"content-encoding") {
                        return Self::ContentEncoding;
                    }
                }
                Some(b'd') => {
                    if eq(b"date") {
                        return Self::Date;
                    }
                }
                Some(b'e') => {
                    if eq(b"e") {
                        return Self::ContentEncoding;
                    }
                    if eq(b"event") {
                        return Self::Event;
                    }
                    if eq(b"expires") {
                        return Self::Expires;
                    }
                }
                Some(b'f') => {
                    if eq(b"f") {
                        return Self::From;
                    }
                    if eq(b"from") {
                        return Self::From;
                    }
                }
                Some(b'i') => {
                    if eq(b"i") {
                        return Self::CallId;
                    }
                    if eq(b"identity") {
                        return Self::Identity;
                    }
                }
                Some(b'k') => {
                    if eq(b"k") {
                        return Self::Supported;
                    }
                }
                Some(b'l') => {
                    if eq(b"l") {
                        return Self::ContentLength;
                    }
                }
                Some(b'm') => {
                    if eq(b"m") {
                        return Self::Contact;
                    }
                    if eq(b"min-expires") {
                        return Self::MinExpires;
                    }
                    if eq(b"max-forwards") {
                        return Self::MaxForwards;
                    }
                }
                Some(b'o') => {
                    if eq(b"o") {
                        return Self::Event;
                    }
                }
                Some(b'p') => {
                    if eq(b"path") {
                        return Self::Path;
                    }
                    if eq(b"proxy-require") {
                        return Self::ProxyRequire;
                    }
                    if eq(b"proxy-authenticate") {
                        return Self::ProxyAuthenticate;
                    }
                    if eq(b"proxy-authorization") {
                        return Self::ProxyAuthorization;
                    }
                    if eq(b"p-asserted-identity") {
                        return Self::PAssertedIdentity;
                    }
                }
                Some(b'r') => {
                    if eq(b"r") {
                        return Self::ReferTo;
                    }
                    if eq(b"route") {
                        return Self::Route;
                    }
                    if eq(b"require") {
                        return Self::Require;
                    }
                    if eq(b"refer-to") {
                        return Self::ReferTo;
                    }
                    if eq(b"referred-by") {
                        return Self::ReferredBy;
                    }
                    if eq(b"retry-after") {
                        return Self::RetryAfter;
                    }
                    if eq(b"record-route") {
                        return Self::RecordRoute;
                    }
                }
                Some(b's') => {
                    if eq(b"s") {
                        return Self::Subject;
                    }
                    if eq(b"server") {
                        return Self::Server;
                    }
                    if eq(b"subject") {
                        return Self::Subject;
                    }
                    if eq(b"supported") {
                        return Self::Supported;
                    }
                    if eq(b"session-expires") {
                        return Self::SessionExpires;
                    }
                }
                Some(b't') => {
                    if eq(b"t") {
                        return Self::To;
                    }
                    if eq(b"to") {
                        return Self::To;
                    }
                    if eq(b"timestamp") {
                        return Self::Timestamp;
                    }
                }
                Some(b'u') => {
                    if eq(b"u") {
                        return Self::AllowEvents;
                    }
                    if eq(b"user-agent") {
                        return Self::UserAgent;
                    }
                    if eq(b"unsupported") {
                        return Self::Unsupported;
                    }
                }
                Some(b'v') => {
                    if eq(b"v") {
                        return Self::Via;
                    }
                    if eq(b"via") {
                        return Self::Via;
                    }
                }
                Some(b'w') => {
                    if eq(b"warning") {
                        return Self::Warning;
                    }
                    if eq(b"www-authenticate") {
                        return Self::WwwAuthenticate;
                    }
                }
                Some(b'x') => {
                    if eq(b"x") {
                        return Self::SessionExpires;
                    }
                }
                Some(b'y') => {
                    if eq(b"y") {
                        return Self::Identity;
                    }
                }
                    _ => {}
                }
                Self::Other
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
    Identity => "Identity", ["identity", "y"];
    PAssertedIdentity => "P-Asserted-Identity", ["p-asserted-identity"];
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

/// Whether `b` spells `alias` (lower case) in any case: each letter of
/// `alias` matches itself or its capital, every other byte only itself.
/// Branch-free over the bytes, so the compiler can vectorise it; every
/// header field is named through it.
#[inline]
fn folded_eq(alias: &[u8], b: &[u8]) -> bool {
    alias.iter().zip(b).fold(0u8, |diff, (&a, &c)| {
        let case = u8::from(a.is_ascii_lowercase()) << 5;
        diff | (a ^ (c | case))
    }) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_matches_letters_in_either_case_and_nothing_else() {
        assert!(folded_eq(b"call-id", b"Call-ID"));
        assert!(folded_eq(b"call-id", b"CALL-ID"));
        // The bytes a case bit would turn into '-', '.' or a letter.
        assert!(!folded_eq(b"call-id", b"call\rid"));
        assert!(!folded_eq(b"a.b", b"a\x0eb"));
        for c in 0..=255u8 {
            let same = c == b'q' || c == b'Q';
            assert_eq!(folded_eq(b"q", &[c]), same, "{c:#x}");
            assert_eq!(folded_eq(b"-", &[c]), c == b'-', "{c:#x}");
        }
    }

    #[test]
    fn every_alias_in_any_case() {
        for (alias, name) in ALIASES {
            assert_eq!(HeaderName::from_name(alias), *name, "{alias}");
            assert_eq!(
                HeaderName::from_name(&alias.to_ascii_uppercase()),
                *name,
                "{alias}"
            );
            assert_eq!(
                HeaderName::from_name(&format!("{alias}x")),
                HeaderName::Other
            );
        }
        assert_eq!(HeaderName::from_name(""), HeaderName::Other);
    }

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
