//! SDES (RFC 4568): the SDP `a=crypto` attribute that carries SRTP master
//! keys inside the session description, and its offer/answer.
//!
//! The keys travel in the SDP in the clear, so SDES is only as safe as
//! the signalling: use it over TLS (sips:) or say explicitly that you
//! accept the risk. This module parses and formats; the decision belongs
//! to the user agent.
//!
//! ```text
//! a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4 KDR=1
//! ```

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// Reads keys with or without base64 padding: RFC 4568 writes it, but
/// rtpengine and other SDES implementations leave it out.
const PADDING_OPTIONAL: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

use crate::{Context, Error, MasterKey, Options, Profile};

/// Why an `a=crypto` attribute could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdesError {
    /// Not of the form `tag suite key-params [session-params]`.
    #[error("malformed a=crypto: {0}")]
    Malformed(String),
    /// A suite this implementation does not know (offers skip it).
    #[error("unsupported crypto suite {0}")]
    UnknownSuite(String),
    /// The key material has the wrong length for the suite.
    #[error("{suite} needs {want} bytes of key and salt, the inline key has {got}")]
    KeyLength {
        /// The suite.
        suite: Profile,
        /// Key plus salt length it needs.
        want: usize,
        /// What the attribute carried.
        got: usize,
    },
}

/// One `inline:` key (RFC 4568 §6.1).
#[derive(Clone, PartialEq, Eq)]
pub struct InlineKey {
    /// Master key followed by master salt.
    pub key_salt: Vec<u8>,
    /// Packets the key may protect (`|2^20` or `|1048576`).
    pub lifetime: Option<u64>,
    /// MKI value and its length in bytes (`|1:4`).
    pub mki: Option<(u64, u8)>,
}

impl std::fmt::Debug for InlineKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints the key.
        f.debug_struct("InlineKey")
            .field("key_salt", &format_args!("<{} bytes>", self.key_salt.len()))
            .field("lifetime", &self.lifetime)
            .field("mki", &self.mki)
            .finish()
    }
}

impl InlineKey {
    /// The MKI as the bytes each packet carries (big-endian, its length).
    pub fn mki_bytes(&self) -> Vec<u8> {
        match self.mki {
            Some((value, len)) => {
                let len = usize::from(len);
                let be = value.to_be_bytes();
                let mut out = vec![0u8; len];
                let n = len.min(8);
                out[len - n..].copy_from_slice(&be[8 - n..]);
                out
            }
            None => Vec::new(),
        }
    }
}

/// A parsed `a=crypto` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crypto {
    /// The tag that pairs an answer with its offer.
    pub tag: u32,
    /// The suite.
    pub suite: Profile,
    /// The suite's name as written (RFC 6188's two spellings differ);
    /// answers echo it.
    pub suite_name: String,
    /// One key or several told apart by MKI.
    pub keys: Vec<InlineKey>,
    /// KDR=n: the key derivation rate is 2^n.
    pub kdr: Option<u8>,
    /// WSH=n: the replay window the sender asks for.
    pub window: Option<usize>,
    /// UNENCRYPTED_SRTP, UNENCRYPTED_SRTCP and UNAUTHENTICATED_SRTP as
    /// given (RFC 4568 §6.3.2): we refuse such offers, and write them back.
    pub weakened: Vec<String>,
    /// Session parameters we do not interpret (FEC_ORDER, FEC_KEY, …).
    pub other: Vec<String>,
}

impl Crypto {
    /// A fresh attribute for `suite` with `key_salt` (master key then
    /// salt), no lifetime, no MKI.
    pub fn new(tag: u32, suite: Profile, key_salt: Vec<u8>) -> Result<Self, SdesError> {
        check_len(suite, &key_salt)?;
        Ok(Self {
            tag,
            suite,
            suite_name: suite.name().to_string(),
            keys: vec![InlineKey {
                key_salt,
                lifetime: None,
                mki: None,
            }],
            kdr: None,
            window: None,
            weakened: Vec::new(),
            other: Vec::new(),
        })
    }

    /// Parses the attribute's value (what follows `a=crypto:`).
    pub fn parse(value: &str) -> Result<Self, SdesError> {
        let bad = |why: &str| SdesError::Malformed(why.to_string());
        let mut fields = value.split_ascii_whitespace();
        let tag = fields
            .next()
            .ok_or_else(|| bad("empty"))?
            .parse::<u32>()
            .ok()
            .filter(|t| *t < 1_000_000_000)
            .ok_or_else(|| bad("the tag is not a number of 1 to 9 digits"))?;
        let suite_name = fields.next().ok_or_else(|| bad("no crypto suite"))?;
        let suite =
            Profile::parse(suite_name).ok_or_else(|| SdesError::UnknownSuite(suite_name.into()))?;
        let key_params = fields.next().ok_or_else(|| bad("no key parameters"))?;
        let mut keys = Vec::new();
        for param in key_params.split(';') {
            let info = param
                .strip_prefix("inline:")
                .ok_or_else(|| bad("only the inline key method is defined"))?;
            keys.push(parse_inline(suite, info)?);
        }
        if keys.len() > 1 && keys.iter().any(|k| k.mki.is_none()) {
            return Err(bad("several keys need an MKI each"));
        }
        let mut c = Self {
            tag,
            suite,
            suite_name: suite_name.to_string(),
            keys,
            kdr: None,
            window: None,
            weakened: Vec::new(),
            other: Vec::new(),
        };
        for param in fields {
            if let Some(n) = param.strip_prefix("KDR=") {
                c.kdr = Some(
                    n.parse::<u8>()
                        .ok()
                        .filter(|n| *n <= 24)
                        .ok_or_else(|| bad("KDR is 0 to 24"))?,
                );
            } else if let Some(n) = param.strip_prefix("WSH=") {
                c.window = Some(
                    n.parse::<usize>()
                        .ok()
                        .filter(|n| (64..=32_768).contains(n))
                        .ok_or_else(|| bad("WSH is 64 to 32768"))?,
                );
            } else if matches!(
                param,
                "UNENCRYPTED_SRTP" | "UNENCRYPTED_SRTCP" | "UNAUTHENTICATED_SRTP"
            ) {
                c.weakened.push(param.to_string());
            } else {
                c.other.push(param.to_string());
            }
        }
        Ok(c)
    }

    /// The SRTP context these keys describe: send side when we wrote the
    /// attribute, receive side when the peer did.
    pub fn context(&self, mut options: Options) -> Result<Context, Error> {
        let (key_len, salt_len) = (self.suite.key_len(), self.suite.salt_len());
        let mkis: Vec<Vec<u8>> = self.keys.iter().map(InlineKey::mki_bytes).collect();
        let keys: Vec<MasterKey<'_>> = self
            .keys
            .iter()
            .zip(&mkis)
            .map(|(k, mki)| MasterKey {
                key: &k.key_salt[..key_len],
                salt: &k.key_salt[key_len..key_len + salt_len],
                mki,
            })
            .collect();
        if let Some(n) = self.kdr {
            options.kdr = 1 << n;
        }
        if let Some(w) = self.window {
            options.window = options.window.max(w);
        }
        Context::with_keys(self.suite, &keys, options)
    }

    /// The answer to this offer (RFC 4568 §7.1.2): same tag and suite
    /// (in the offer's spelling), our own key.
    pub fn answer(&self, key_salt: Vec<u8>) -> Result<Self, SdesError> {
        let mut a = Crypto::new(self.tag, self.suite, key_salt)?;
        a.suite_name = self.suite_name.clone();
        a.kdr = self.kdr;
        Ok(a)
    }
}

impl std::fmt::Display for Crypto {
    /// The attribute's value, without `a=crypto:`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ", self.tag, self.suite_name)?;
        for (i, k) in self.keys.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "inline:{}", STANDARD.encode(&k.key_salt))?;
            if let Some(l) = k.lifetime {
                if l.is_power_of_two() {
                    write!(f, "|2^{}", l.trailing_zeros())?;
                } else {
                    write!(f, "|{l}")?;
                }
            }
            if let Some((v, len)) = k.mki {
                write!(f, "|{v}:{len}")?;
            }
        }
        if let Some(n) = self.kdr {
            write!(f, " KDR={n}")?;
        }
        if let Some(w) = self.window {
            write!(f, " WSH={w}")?;
        }
        for p in self.weakened.iter().chain(&self.other) {
            write!(f, " {p}")?;
        }
        Ok(())
    }
}

fn check_len(suite: Profile, key_salt: &[u8]) -> Result<(), SdesError> {
    let want = suite.key_len() + suite.salt_len();
    if key_salt.len() != want {
        return Err(SdesError::KeyLength {
            suite,
            want,
            got: key_salt.len(),
        });
    }
    Ok(())
}

fn parse_inline(suite: Profile, info: &str) -> Result<InlineKey, SdesError> {
    let bad = |why: &str| SdesError::Malformed(why.to_string());
    let mut parts = info.split('|');
    let key = parts.next().unwrap_or_default();
    let key_salt = PADDING_OPTIONAL
        .decode(key)
        .map_err(|_| bad("the inline key is not base64"))?;
    check_len(suite, &key_salt)?;
    let mut k = InlineKey {
        key_salt,
        lifetime: None,
        mki: None,
    };
    for part in parts {
        if let Some((value, len)) = part.split_once(':') {
            if k.mki.is_some() {
                return Err(bad("two MKIs for one key"));
            }
            let len: u8 = len
                .parse()
                .ok()
                .filter(|l| (1..=128).contains(l))
                .ok_or_else(|| bad("the MKI length is 1 to 128"))?;
            let value: u64 = value
                .parse()
                .map_err(|_| bad("the MKI value is a number"))?;
            if len < 8 && value >> (8 * u32::from(len)) != 0 {
                return Err(bad("the MKI value does not fit its length"));
            }
            k.mki = Some((value, len));
        } else {
            if k.lifetime.is_some() || k.mki.is_some() {
                return Err(bad("the lifetime comes once, before the MKI"));
            }
            let lifetime = match part.strip_prefix("2^") {
                Some(e) => e
                    .parse::<u32>()
                    .ok()
                    .filter(|e| *e <= 48)
                    .map(|e| 1u64 << e),
                None => part.parse::<u64>().ok(),
            };
            k.lifetime = Some(lifetime.ok_or_else(|| bad("the lifetime is 2^n or a number"))?);
        }
    }
    Ok(k)
}

/// Picks the first offered attribute (the offerer's preference) with a
/// suite in `supported` and no weakening parameters.
pub fn choose<'a>(offers: &'a [Crypto], supported: &[Profile]) -> Option<&'a Crypto> {
    offers
        .iter()
        .find(|c| c.weakened.is_empty() && supported.contains(&c.suite))
}

/// Parses every `a=crypto:` line of a media section, skipping (not
/// failing on) suites we do not know; other errors are returned.
pub fn parse_all<'a>(
    attributes: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Crypto>, SdesError> {
    let mut out = Vec::new();
    for value in attributes {
        match Crypto::parse(value) {
            Ok(c) => out.push(c),
            Err(SdesError::UnknownSuite(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_parameters_are_written_back_as_given() {
        let k30 = STANDARD.encode([7u8; 30]);
        let a = format!(
            "5 AES_CM_128_HMAC_SHA1_80 inline:{k30}|2^20 KDR=3 UNENCRYPTED_SRTCP FEC_ORDER=SRTP_FEC"
        );
        let c = Crypto::parse(&a).unwrap();
        assert_eq!(c.weakened, ["UNENCRYPTED_SRTCP"]);
        assert_eq!(c.to_string(), a);
        assert_eq!(Crypto::parse(&c.to_string()).unwrap(), c);
    }

    #[test]
    fn a_key_without_base64_padding_as_rtpengine_writes_it_is_read() {
        // AEAD_AES_256_GCM: 44 bytes of key and salt, 59 characters unpadded.
        let a =
            "1 AEAD_AES_256_GCM inline:B1oW55gRtNcR0CP6mgtNVh0o7NBmSV8B3P9cj6bmgzPQVL/uQybuG8lhByk";
        let c = Crypto::parse(a).unwrap();
        assert_eq!(c.keys[0].key_salt.len(), 44);
        let padded = format!("{a}=");
        assert_eq!(Crypto::parse(&padded).unwrap().keys, c.keys);
    }

    #[test]
    fn rfc4568_example_parses_and_formats_back() {
        // RFC 4568 §8.1's offer.
        let a =
            "1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4";
        let c = Crypto::parse(a).unwrap();
        assert_eq!(c.tag, 1);
        assert_eq!(c.suite, Profile::Aes128CmSha1_80);
        assert_eq!(c.keys[0].key_salt.len(), 30);
        assert_eq!(c.keys[0].lifetime, Some(1 << 20));
        assert_eq!(c.keys[0].mki, Some((1, 4)));
        assert_eq!(c.keys[0].mki_bytes(), vec![0, 0, 0, 1]);
        assert_eq!(c.to_string(), a);
        let ctx = c.context(Options::default()).unwrap();
        assert_eq!(ctx.rtp_overhead(), 14, "tag and 4-byte MKI");
    }

    #[test]
    fn both_rfc6188_spellings_and_gcm_and_session_params() {
        let key24 = STANDARD.encode([7u8; 38]);
        for spelling in ["AES_192_CM_HMAC_SHA1_80", "AES_CM_192_HMAC_SHA1_80"] {
            let c = Crypto::parse(&format!(
                "3 {spelling} inline:{key24} KDR=4 WSH=128 FEC_ORDER=FEC_SRTP"
            ))
            .unwrap();
            assert_eq!(c.suite, Profile::Aes192CmSha1_80);
            assert_eq!(c.kdr, Some(4));
            assert_eq!(c.window, Some(128));
            assert_eq!(c.other, vec!["FEC_ORDER=FEC_SRTP".to_string()]);
            let answer = c.answer(vec![1; 38]).unwrap();
            assert!(
                answer
                    .to_string()
                    .starts_with(&format!("3 {spelling} inline:")),
                "answers echo the spelling"
            );
        }
        let gcm = STANDARD.encode([1u8; 28]);
        let c = Crypto::parse(&format!("9 AEAD_AES_128_GCM inline:{gcm}")).unwrap();
        assert_eq!(c.suite, Profile::AeadAes128Gcm);
        c.context(Options::default()).unwrap();
    }

    #[test]
    fn negotiation_takes_the_first_usable_offer() {
        let k30 = STANDARD.encode([1u8; 30]);
        let k46 = STANDARD.encode([1u8; 46]);
        let lines = [
            format!("1 F8_128_HMAC_SHA1_80 inline:{k30}"),
            format!("2 AES_256_CM_HMAC_SHA1_80 inline:{k46} UNENCRYPTED_SRTP"),
            format!("3 AES_256_CM_HMAC_SHA1_32 inline:{k46}"),
            format!("4 AES_CM_128_HMAC_SHA1_80 inline:{k30}"),
        ];
        let offers = parse_all(lines.iter().map(String::as_str)).unwrap();
        assert_eq!(offers.len(), 3, "the unknown suite is skipped");
        let pick = choose(&offers, &Profile::ALL).unwrap();
        assert_eq!(pick.tag, 3, "weakened offers are refused");
        let only128 = choose(&offers, &[Profile::Aes128CmSha1_80]).unwrap();
        assert_eq!(only128.tag, 4);
        assert!(
            choose(&offers, &[Profile::AeadAes256Gcm]).is_none(),
            "nothing in common: 488"
        );
    }

    #[test]
    fn bad_attributes_get_precise_errors() {
        let k30 = STANDARD.encode([1u8; 30]);
        for (value, why) in [
            ("", "empty"),
            ("x AES_CM_128_HMAC_SHA1_80 inline:AAAA", "tag"),
            ("1", "no crypto suite"),
            ("1 AES_CM_128_HMAC_SHA1_80", "no key parameters"),
            ("1 AES_CM_128_HMAC_SHA1_80 uri:x", "inline"),
            ("1 AES_CM_128_HMAC_SHA1_80 inline:@@@", "base64"),
            (
                &format!("1 AES_CM_128_HMAC_SHA1_80 inline:{k30}|2^99"),
                "lifetime",
            ),
            (
                &format!("1 AES_CM_128_HMAC_SHA1_80 inline:{k30}|1:0"),
                "MKI length",
            ),
            (
                &format!("1 AES_CM_128_HMAC_SHA1_80 inline:{k30}|300:1"),
                "fit",
            ),
            (
                &format!("1 AES_CM_128_HMAC_SHA1_80 inline:{k30};inline:{k30}"),
                "MKI each",
            ),
            (
                &format!("1 AES_CM_128_HMAC_SHA1_80 inline:{k30} KDR=30"),
                "KDR",
            ),
            (
                &format!("1 AES_CM_128_HMAC_SHA1_80 inline:{k30} WSH=10"),
                "WSH",
            ),
        ] {
            let e = Crypto::parse(value).unwrap_err().to_string();
            assert!(e.contains(why), "{value}: {e}");
        }
        let short = STANDARD.encode([1u8; 20]);
        assert!(matches!(
            Crypto::parse(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{short}")),
            Err(SdesError::KeyLength {
                want: 30,
                got: 20,
                ..
            })
        ));
        assert!(matches!(
            Crypto::parse("1 NULL_HMAC_SHA1_80 inline:AAAA"),
            Err(SdesError::UnknownSuite(_))
        ));
    }

    #[test]
    fn offer_and_answer_keys_make_working_contexts() {
        let offer = Crypto::new(1, Profile::Aes256CmSha1_32, vec![3; 46]).unwrap();
        let parsed = Crypto::parse(&offer.to_string()).unwrap();
        let mut tx = offer.context(Options::default()).unwrap();
        let mut rx = parsed.context(Options::default()).unwrap();
        let plain = vec![0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 1, 2, 3];
        let mut p = plain.clone();
        tx.protect(&mut p).unwrap();
        rx.unprotect(&mut p).unwrap();
        assert_eq!(p, plain);
    }
}
