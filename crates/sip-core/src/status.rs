//! SIP status codes (RFC 3261 §21).

use std::fmt;

/// A SIP response status code, always in `100..=699`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatusCode(u16);

macro_rules! codes {
    ($($name:ident = $code:expr, $reason:expr;)*) => {
        impl StatusCode {
            $(
                #[doc = concat!("`", stringify!($code), " ", $reason, "`")]
                pub const $name: StatusCode = StatusCode($code);
            )*

            /// The RFC's reason phrase for this code, or a generic phrase for its class.
            pub fn reason(self) -> &'static str {
                match self.0 {
                    $($code => $reason,)*
                    100..=199 => "Provisional",
                    200..=299 => "OK",
                    300..=399 => "Redirected",
                    400..=499 => "Client Error",
                    500..=599 => "Server Error",
                    _ => "Global Failure",
                }
            }
        }
    };
}

codes! {
    TRYING = 100, "Trying";
    RINGING = 180, "Ringing";
    SESSION_PROGRESS = 183, "Session Progress";
    OK = 200, "OK";
    MOVED_TEMPORARILY = 302, "Moved Temporarily";
    BAD_REQUEST = 400, "Bad Request";
    UNAUTHORIZED = 401, "Unauthorized";
    FORBIDDEN = 403, "Forbidden";
    NOT_FOUND = 404, "Not Found";
    METHOD_NOT_ALLOWED = 405, "Method Not Allowed";
    PROXY_AUTHENTICATION_REQUIRED = 407, "Proxy Authentication Required";
    REQUEST_TIMEOUT = 408, "Request Timeout";
    MESSAGE_TOO_LARGE = 413, "Request Entity Too Large";
    UNSUPPORTED_MEDIA_TYPE = 415, "Unsupported Media Type";
    UNSUPPORTED_URI_SCHEME = 416, "Unsupported URI Scheme";
    BAD_EXTENSION = 420, "Bad Extension";
    INTERVAL_TOO_BRIEF = 423, "Interval Too Brief";
    USE_IDENTITY_HEADER = 428, "Use Identity Header";
    FLOW_FAILED = 430, "Flow Failed";
    BAD_IDENTITY_INFO = 436, "Bad Identity Info";
    UNSUPPORTED_CREDENTIAL = 437, "Unsupported Credential";
    INVALID_IDENTITY_HEADER = 438, "Invalid Identity Header";
    TEMPORARILY_UNAVAILABLE = 480, "Temporarily Unavailable";
    CALL_DOES_NOT_EXIST = 481, "Call/Transaction Does Not Exist";
    LOOP_DETECTED = 482, "Loop Detected";
    TOO_MANY_HOPS = 483, "Too Many Hops";
    BUSY_HERE = 486, "Busy Here";
    REQUEST_TERMINATED = 487, "Request Terminated";
    NOT_ACCEPTABLE_HERE = 488, "Not Acceptable Here";
    SERVER_INTERNAL_ERROR = 500, "Server Internal Error";
    NOT_IMPLEMENTED = 501, "Not Implemented";
    SERVICE_UNAVAILABLE = 503, "Service Unavailable";
    SERVER_TIMEOUT = 504, "Server Time-out";
    VERSION_NOT_SUPPORTED = 505, "Version Not Supported";
    MESSAGE_TOO_LARGE_5XX = 513, "Message Too Large";
    DECLINE = 603, "Decline";
}

impl StatusCode {
    /// Creates a status code; `None` outside `100..=699`.
    pub const fn new(code: u16) -> Option<Self> {
        if code >= 100 && code <= 699 {
            Some(Self(code))
        } else {
            None
        }
    }

    /// The numeric value.
    pub const fn as_u16(self) -> u16 {
        self.0
    }

    /// 1xx.
    pub const fn is_provisional(self) -> bool {
        self.0 < 200
    }

    /// 2xx.
    pub const fn is_success(self) -> bool {
        self.0 >= 200 && self.0 < 300
    }

    /// 200..=699.
    pub const fn is_final(self) -> bool {
        self.0 >= 200
    }

    /// The three ASCII digits.
    pub fn digits(self) -> [u8; 3] {
        let c = self.0;
        [
            b'0' + (c / 100) as u8,
            b'0' + (c / 10 % 10) as u8,
            b'0' + (c % 10) as u8,
        ]
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, self.reason())
    }
}
