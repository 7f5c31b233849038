//! Request methods (RFC 3261 §7.1, §27.4).

use std::fmt;

/// A SIP method. Methods are case-sensitive (RFC 3261 §7.1); unknown
/// extension methods keep their spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method<'a> {
    /// INVITE
    Invite,
    /// ACK
    Ack,
    /// BYE
    Bye,
    /// CANCEL
    Cancel,
    /// REGISTER
    Register,
    /// OPTIONS
    Options,
    /// PRACK (RFC 3262)
    Prack,
    /// SUBSCRIBE (RFC 6665)
    Subscribe,
    /// NOTIFY (RFC 6665)
    Notify,
    /// PUBLISH (RFC 3903)
    Publish,
    /// INFO (RFC 6086)
    Info,
    /// REFER (RFC 3515)
    Refer,
    /// MESSAGE (RFC 3428)
    Message,
    /// UPDATE (RFC 3311)
    Update,
    /// Any other token.
    Extension(&'a str),
}

impl<'a> Method<'a> {
    /// Classifies a method token (the caller has checked it is a token).
    pub fn from_token(s: &'a str) -> Self {
        match s {
            "INVITE" => Self::Invite,
            "ACK" => Self::Ack,
            "BYE" => Self::Bye,
            "CANCEL" => Self::Cancel,
            "REGISTER" => Self::Register,
            "OPTIONS" => Self::Options,
            "PRACK" => Self::Prack,
            "SUBSCRIBE" => Self::Subscribe,
            "NOTIFY" => Self::Notify,
            "PUBLISH" => Self::Publish,
            "INFO" => Self::Info,
            "REFER" => Self::Refer,
            "MESSAGE" => Self::Message,
            "UPDATE" => Self::Update,
            other => Self::Extension(other),
        }
    }

    /// The method's spelling.
    pub fn as_str(&self) -> &'a str {
        match self {
            Self::Invite => "INVITE",
            Self::Ack => "ACK",
            Self::Bye => "BYE",
            Self::Cancel => "CANCEL",
            Self::Register => "REGISTER",
            Self::Options => "OPTIONS",
            Self::Prack => "PRACK",
            Self::Subscribe => "SUBSCRIBE",
            Self::Notify => "NOTIFY",
            Self::Publish => "PUBLISH",
            Self::Info => "INFO",
            Self::Refer => "REFER",
            Self::Message => "MESSAGE",
            Self::Update => "UPDATE",
            Self::Extension(s) => s,
        }
    }
}

impl fmt::Display for Method<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
