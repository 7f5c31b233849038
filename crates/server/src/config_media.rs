//! `[media]`: putting calls' media through rtpengine relays (their NG
//! control protocol), so that media crosses NAT, browsers reach SIP phones
//! and SRTP can be required.

use std::net::SocketAddr;
use std::time::Duration;

use crate::proto::ng::{RelayConfig, Settings};

/// Which calls the stateful proxy puts through a media relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MediaMode {
    /// None: the media goes where the SDP says.
    #[default]
    Off,
    /// Calls with a party behind NAT (its SIP or SDP address is not the
    /// one its messages come from).
    Nat,
    /// Every call with an SDP offer.
    Always,
    /// Calls between a WebSocket (browser) leg and a SIP leg only.
    WebRtc,
}

impl MediaMode {
    /// Parses `off`, `nat`, `always` or `webrtc`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(Self::Off),
            "nat" => Some(Self::Nat),
            "always" => Some(Self::Always),
            "webrtc" => Some(Self::WebRtc),
            _ => None,
        }
    }

    /// The configuration word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Nat => "nat",
            Self::Always => "always",
            Self::WebRtc => "webrtc",
        }
    }
}

/// What a call gets when no relay answers its offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RelayFailure {
    /// 503 Service Unavailable with Retry-After: the caller tries again.
    #[default]
    Refuse,
    /// Forwarded unrelayed: the media goes where the SDP says.
    Pass,
}

/// The `[media]` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaSettings {
    /// Which calls are relayed.
    pub mode: MediaMode,
    /// The relays and how they are asked (timeouts, tries, pings).
    pub relays: Settings,
    /// What a call gets when no relay answers.
    pub on_failure: RelayFailure,
    /// A call with a leg that cannot be encrypted gets 488.
    pub require_srtp: bool,
    /// Relayed calls remembered at once (to answer and delete them);
    /// past it new calls get the relay-failure treatment.
    pub max_calls: usize,
}

impl Default for MediaSettings {
    fn default() -> Self {
        Self {
            mode: MediaMode::Off,
            relays: Settings {
                relays: Vec::new(),
                timeout: Duration::from_secs(1),
                tries: 2,
                ping_every: Duration::from_secs(5),
                down_after: 2,
            },
            on_failure: RelayFailure::Refuse,
            require_srtp: false,
            max_calls: 50_000,
        }
    }
}

impl MediaSettings {
    /// Whether calls may be relayed at all.
    pub fn on(&self) -> bool {
        self.mode != MediaMode::Off
    }
}

/// A relay in `[media] relays`: `"IP:PORT"` or `{ addr, weight }`.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
pub enum RelayEntry {
    /// Weight 1.
    Addr(String),
    /// With a weight.
    Weighted {
        /// `IP:PORT` of its NG listener.
        addr: String,
        /// Share of new calls (default 1).
        weight: Option<u32>,
    },
}

/// `[media]` as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaSection {
    /// `off`, `nat`, `always` or `webrtc`.
    pub mode: Option<String>,
    /// The relays' NG addresses.
    pub relays: Option<Vec<RelayEntry>>,
    /// Seconds one try waits for the relay's answer.
    pub timeout: Option<f64>,
    /// Tries per command.
    pub tries: Option<u32>,
    /// Seconds between health pings.
    pub ping_every: Option<f64>,
    /// `refuse` (503) or `pass`.
    pub on_failure: Option<String>,
    /// 488 for a call that cannot be encrypted end to end.
    pub require_srtp: Option<bool>,
    /// Relayed calls at once.
    pub max_calls: Option<usize>,
}

/// Applies `sec` to `s`; the key and what is wrong with it on error.
pub fn media_settings(
    sec: MediaSection,
    s: &mut MediaSettings,
) -> Result<(), (&'static str, String)> {
    if let Some(m) = sec.mode {
        s.mode = MediaMode::parse(&m).ok_or_else(|| {
            (
                "media.mode",
                format!("{m:?}: use off, nat, always or webrtc"),
            )
        })?;
    }
    if let Some(list) = sec.relays {
        s.relays.relays = list
            .into_iter()
            .map(|e| {
                let (addr, weight) = match e {
                    RelayEntry::Addr(a) => (a, 1),
                    RelayEntry::Weighted { addr, weight } => (addr, weight.unwrap_or(1)),
                };
                let addr = addr.parse::<SocketAddr>().map_err(|_| {
                    (
                        "media.relays",
                        format!("{addr:?}: expected IP:PORT of rtpengine's NG listener"),
                    )
                })?;
                Ok(RelayConfig { addr, weight })
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(t) = sec.timeout {
        if !(0.05..=10.0).contains(&t) {
            return Err(("media.timeout", format!("{t}: seconds in [0.05, 10]")));
        }
        s.relays.timeout = Duration::from_secs_f64(t);
    }
    if let Some(n) = sec.tries {
        if !(1..=5).contains(&n) {
            return Err(("media.tries", format!("{n}: 1 to 5")));
        }
        s.relays.tries = n;
    }
    if let Some(t) = sec.ping_every {
        if !(0.5..=3600.0).contains(&t) {
            return Err(("media.ping_every", format!("{t}: seconds in [0.5, 3600]")));
        }
        s.relays.ping_every = Duration::from_secs_f64(t);
    }
    if let Some(f) = sec.on_failure {
        s.on_failure = match f.as_str() {
            "refuse" => RelayFailure::Refuse,
            "pass" => RelayFailure::Pass,
            _ => return Err(("media.on_failure", format!("{f:?}: use refuse or pass"))),
        };
    }
    if let Some(r) = sec.require_srtp {
        s.require_srtp = r;
    }
    if let Some(n) = sec.max_calls {
        if !(1..=1_000_000).contains(&n) {
            return Err(("media.max_calls", format!("{n}: 1 to 1000000")));
        }
        s.max_calls = n;
    }
    if s.on() && s.relays.relays.is_empty() {
        return Err((
            "media.relays",
            format!("mode {:?} needs at least one relay", s.mode.as_str()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<MediaSettings, (&'static str, String)> {
        let sec: MediaSection = toml::from_str(text).map_err(|e| ("toml", e.to_string()))?;
        let mut s = MediaSettings::default();
        media_settings(sec, &mut s).map(|()| s)
    }

    #[test]
    fn relays_with_and_without_weights() {
        let s = parse(
            "mode = \"always\"\nrelays = [\"127.0.0.1:2223\", { addr = \"10.0.0.5:2223\", weight = 3 }]\n\
             on_failure = \"pass\"\nrequire_srtp = true\ntimeout = 0.5\ntries = 3",
        )
        .unwrap();
        assert_eq!(s.mode, MediaMode::Always);
        assert_eq!(s.relays.relays.len(), 2);
        assert_eq!(s.relays.relays[1].weight, 3);
        assert_eq!(s.on_failure, RelayFailure::Pass);
        assert!(s.require_srtp);
        assert_eq!(s.relays.timeout, Duration::from_millis(500));
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(parse("mode = \"always\"").unwrap_err().0, "media.relays");
        assert_eq!(parse("mode = \"sometimes\"").unwrap_err().0, "media.mode");
        assert_eq!(
            parse("relays = [\"rtpengine\"]").unwrap_err().0,
            "media.relays"
        );
        assert_eq!(
            parse("on_failure = \"retry\"").unwrap_err().0,
            "media.on_failure"
        );
        assert_eq!(parse("tries = 9").unwrap_err().0, "media.tries");
        assert!(parse("").is_ok(), "off by default");
    }
}
