//! SRTP (RFC 3711) with the AES counter-mode profiles of RFC 3711 and
//! RFC 6188: AES_CM_128, AES_192_CM and AES_256_CM with HMAC-SHA1 tags of
//! 80 or 32 bits. Sans-IO: packets are protected and unprotected in the
//! caller's buffer; no sockets, threads or clocks.
//!
//! - [`kdf`]: the AES-CM key derivation (RFC 3711 §4.3), key derivation
//!   rate included;
//! - [`Context`]: one direction of one SRTP session — per-SSRC rollover
//!   counter and sequence estimation (§3.3.1), replay window (§3.3.2,
//!   64 packets by default), key lifetime (2^48 packets, §9.2).
//!
//! Not yet: SRTCP, AEAD_AES_GCM (RFC 7714), MKI, the per-step timing hook.

pub mod fuzzing;
pub mod kdf;
mod replay;

use aes::cipher::{BlockEncrypt, KeyInit};
use hmac::{Hmac, Mac};
use sha1::Sha1;
use subtle::ConstantTimeEq;

pub use replay::ReplayWindow;

/// An SRTP crypto suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// AES_CM_128_HMAC_SHA1_80 (RFC 4568 §6.2.1).
    Aes128CmSha1_80,
    /// AES_CM_128_HMAC_SHA1_32.
    Aes128CmSha1_32,
    /// AES_192_CM_HMAC_SHA1_80 (RFC 6188).
    Aes192CmSha1_80,
    /// AES_192_CM_HMAC_SHA1_32.
    Aes192CmSha1_32,
    /// AES_256_CM_HMAC_SHA1_80 (RFC 6188).
    Aes256CmSha1_80,
    /// AES_256_CM_HMAC_SHA1_32.
    Aes256CmSha1_32,
}

/// Master salt length of every AES-CM profile (112 bits).
pub const SALT_LEN: usize = 14;
/// HMAC-SHA1 session authentication key length (160 bits).
pub const AUTH_KEY_LEN: usize = 20;
/// Packets one master key may protect (RFC 3711 §9.2).
pub const MAX_PACKETS: u64 = 1 << 48;

impl Profile {
    /// Every profile.
    pub const ALL: [Profile; 6] = [
        Profile::Aes128CmSha1_80,
        Profile::Aes128CmSha1_32,
        Profile::Aes192CmSha1_80,
        Profile::Aes192CmSha1_32,
        Profile::Aes256CmSha1_80,
        Profile::Aes256CmSha1_32,
    ];

    /// AES key length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Profile::Aes128CmSha1_80 | Profile::Aes128CmSha1_32 => 16,
            Profile::Aes192CmSha1_80 | Profile::Aes192CmSha1_32 => 24,
            Profile::Aes256CmSha1_80 | Profile::Aes256CmSha1_32 => 32,
        }
    }

    /// Authentication tag length in bytes.
    pub fn tag_len(self) -> usize {
        match self {
            Profile::Aes128CmSha1_80 | Profile::Aes192CmSha1_80 | Profile::Aes256CmSha1_80 => 10,
            _ => 4,
        }
    }

    /// The SDES name (RFC 4568, RFC 6188).
    pub fn name(self) -> &'static str {
        match self {
            Profile::Aes128CmSha1_80 => "AES_CM_128_HMAC_SHA1_80",
            Profile::Aes128CmSha1_32 => "AES_CM_128_HMAC_SHA1_32",
            Profile::Aes192CmSha1_80 => "AES_192_CM_HMAC_SHA1_80",
            Profile::Aes192CmSha1_32 => "AES_192_CM_HMAC_SHA1_32",
            Profile::Aes256CmSha1_80 => "AES_256_CM_HMAC_SHA1_80",
            Profile::Aes256CmSha1_32 => "AES_256_CM_HMAC_SHA1_32",
        }
    }

    /// Parses an SDES name, accepting both RFC 6188 spellings seen in the
    /// field (`AES_192_CM_…` and `AES_CM_192_…`).
    pub fn parse(name: &str) -> Option<Self> {
        let canonical = name
            .replace("AES_CM_192_", "AES_192_CM_")
            .replace("AES_CM_256_", "AES_256_CM_");
        Profile::ALL.into_iter().find(|p| p.name() == canonical)
    }
}

/// Why a packet was refused. Deliberately coarse for authentication: a
/// forged packet learns nothing beyond "rejected".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not an RTP packet this context can handle.
    #[error("malformed RTP packet: {0}")]
    Malformed(&'static str),
    /// The authentication tag did not verify.
    #[error("authentication failed")]
    AuthFailed,
    /// A packet already received (or too old for the replay window).
    #[error("replayed or too old packet (index {0})")]
    Replay(u64),
    /// The master key protected 2^48 packets; rekey.
    #[error("master key lifetime exhausted: rekey")]
    KeyExhausted,
    /// A key or salt of the wrong length.
    #[error("{0}")]
    BadKey(String),
}

/// AES with the key length the profile asks for.
#[derive(Clone)]
pub(crate) enum Aes {
    A128(Box<aes::Aes128>),
    A192(Box<aes::Aes192>),
    A256(Box<aes::Aes256>),
}

impl Aes {
    pub(crate) fn new(key: &[u8]) -> Result<Self, Error> {
        let bad = || Error::BadKey(format!("AES key of {} bytes", key.len()));
        Ok(match key.len() {
            16 => Aes::A128(Box::new(
                aes::Aes128::new_from_slice(key).map_err(|_| bad())?,
            )),
            24 => Aes::A192(Box::new(
                aes::Aes192::new_from_slice(key).map_err(|_| bad())?,
            )),
            32 => Aes::A256(Box::new(
                aes::Aes256::new_from_slice(key).map_err(|_| bad())?,
            )),
            _ => return Err(bad()),
        })
    }

    fn encrypt_blocks(&self, blocks: &mut [aes::Block]) {
        match self {
            Aes::A128(c) => c.encrypt_blocks(blocks),
            Aes::A192(c) => c.encrypt_blocks(blocks),
            Aes::A256(c) => c.encrypt_blocks(blocks),
        }
    }

    /// XORs `data` with the AES-CM keystream starting at counter block
    /// `iv` (RFC 3711 §4.1.1: block j is E(k, IV + j); the low 16 bits of
    /// IV are zero, so the counter fits there).
    pub(crate) fn apply_keystream(&self, iv: &[u8; 16], data: &mut [u8]) {
        const BATCH: usize = 8;
        let mut blocks = [aes::Block::default(); BATCH];
        let mut counter: u16 = 0;
        for chunk in data.chunks_mut(16 * BATCH) {
            let n = chunk.len().div_ceil(16);
            for b in blocks.iter_mut().take(n) {
                b.copy_from_slice(iv);
                let low = u16::from_be_bytes([iv[14], iv[15]]).wrapping_add(counter);
                b[14..].copy_from_slice(&low.to_be_bytes());
                counter = counter.wrapping_add(1);
            }
            self.encrypt_blocks(&mut blocks[..n]);
            for (d, k) in chunk.chunks_mut(16).zip(blocks.iter()) {
                for (x, y) in d.iter_mut().zip(k.iter()) {
                    *x ^= y;
                }
            }
        }
    }
}

/// Length of the RTP header (fixed part, CSRCs, extension), checked
/// against the packet (RFC 3550 §5.1, §5.3.1).
pub fn rtp_header_len(packet: &[u8]) -> Result<usize, Error> {
    if packet.len() < 12 {
        return Err(Error::Malformed("shorter than the 12-byte RTP header"));
    }
    if packet[0] >> 6 != 2 {
        return Err(Error::Malformed("RTP version is not 2"));
    }
    let mut len = 12 + 4 * usize::from(packet[0] & 0x0f);
    if packet[0] & 0x10 != 0 {
        let ext = packet
            .get(len + 2..len + 4)
            .ok_or(Error::Malformed("header extension cut short"))?;
        len += 4 + 4 * usize::from(u16::from_be_bytes([ext[0], ext[1]]));
    }
    if len > packet.len() {
        return Err(Error::Malformed("header longer than the packet"));
    }
    Ok(len)
}

/// Session keys derived from the master key for one key-derivation epoch.
#[derive(Clone)]
struct SessionKeys {
    cipher: Aes,
    salt: [u8; SALT_LEN],
    mac: Hmac<Sha1>,
    /// index DIV kdr these keys were derived for.
    epoch: u64,
}

/// Receive state of one SSRC.
#[derive(Debug, Clone)]
struct Stream {
    roc: u32,
    last_seq: u16,
    replay: ReplayWindow,
}

/// RFC 3711 §3.3.1: the index a sequence number most likely has, given
/// the highest sequence number `s_l` and rollover counter `roc` so far.
pub fn estimate_index(roc: u32, s_l: u16, seq: u16) -> u64 {
    let v = if s_l < 32_768 {
        if seq.wrapping_sub(s_l) > 32_768 && seq > s_l {
            roc.wrapping_sub(1)
        } else {
            roc
        }
    } else if s_l - 32_768 > seq {
        roc.wrapping_add(1)
    } else {
        roc
    };
    (u64::from(v) << 16) | u64::from(seq)
}

/// One direction of an SRTP session: protect (sender) or unprotect
/// (receiver), for any number of SSRCs.
#[derive(Clone)]
pub struct Context {
    profile: Profile,
    master_key: Vec<u8>,
    master_salt: [u8; SALT_LEN],
    /// Key derivation rate (0: derive once).
    kdr: u64,
    keys: SessionKeys,
    streams: std::collections::HashMap<u32, Stream>,
    window: usize,
    packets: u64,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints keys.
        f.debug_struct("Context")
            .field("profile", &self.profile)
            .field("streams", &self.streams.len())
            .field("packets", &self.packets)
            .finish()
    }
}

impl Context {
    /// A context for `profile` with a master key and 14-byte master salt.
    pub fn new(profile: Profile, master_key: &[u8], master_salt: &[u8]) -> Result<Self, Error> {
        Self::with_options(profile, master_key, master_salt, 0, ReplayWindow::DEFAULT)
    }

    /// Like [`Context::new`] with a key derivation rate (0 or a power of
    /// two up to 2^24, RFC 3711 §4.3.1) and a replay window size.
    pub fn with_options(
        profile: Profile,
        master_key: &[u8],
        master_salt: &[u8],
        kdr: u64,
        window: usize,
    ) -> Result<Self, Error> {
        if master_key.len() != profile.key_len() {
            return Err(Error::BadKey(format!(
                "{} needs a {}-byte master key, not {}",
                profile.name(),
                profile.key_len(),
                master_key.len()
            )));
        }
        let salt: [u8; SALT_LEN] = master_salt.try_into().map_err(|_| {
            Error::BadKey(format!(
                "the master salt is {SALT_LEN} bytes, not {}",
                master_salt.len()
            ))
        })?;
        if kdr != 0 && (!kdr.is_power_of_two() || kdr > 1 << 24) {
            return Err(Error::BadKey(format!(
                "key derivation rate {kdr}: 0 or a power of two up to 2^24"
            )));
        }
        if window < 64 {
            return Err(Error::BadKey(format!(
                "replay window {window}: at least 64 (RFC 3711 §3.3.2)"
            )));
        }
        let keys = derive(profile, master_key, &salt, 0)?;
        Ok(Self {
            profile,
            master_key: master_key.to_vec(),
            master_salt: salt,
            kdr,
            keys,
            streams: std::collections::HashMap::new(),
            window,
            packets: 0,
        })
    }

    /// The profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    fn keys_for(&mut self, index: u64) -> Result<(), Error> {
        let epoch = index.checked_div(self.kdr).unwrap_or(0);
        if epoch != self.keys.epoch {
            self.keys = derive(self.profile, &self.master_key, &self.master_salt, epoch)?;
        }
        Ok(())
    }

    fn iv(&self, ssrc: u32, index: u64) -> [u8; 16] {
        // IV = (k_s * 2^16) XOR (SSRC * 2^64) XOR (i * 2^16).
        let mut iv = [0u8; 16];
        iv[..SALT_LEN].copy_from_slice(&self.keys.salt);
        for (d, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
            *d ^= s;
        }
        for (d, s) in iv[8..14].iter_mut().zip(&index.to_be_bytes()[2..]) {
            *d ^= s;
        }
        iv
    }

    fn tag(&self, authenticated: &[u8], roc: u32) -> [u8; 20] {
        let mut mac = self.keys.mac.clone();
        mac.update(authenticated);
        mac.update(&roc.to_be_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Protects the RTP packet in `packet` in place: encrypts the payload
    /// and appends the authentication tag.
    pub fn protect(&mut self, packet: &mut Vec<u8>) -> Result<(), Error> {
        let header = rtp_header_len(packet)?;
        if self.packets >= MAX_PACKETS {
            return Err(Error::KeyExhausted);
        }
        let seq = u16::from_be_bytes([packet[2], packet[3]]);
        let ssrc = u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]);
        let window = self.window;
        let stream = self.streams.entry(ssrc).or_insert_with(|| Stream {
            roc: 0,
            last_seq: seq,
            replay: ReplayWindow::new(window),
        });
        // The sender's rollover counter grows when the sequence wraps.
        let index = estimate_index(stream.roc, stream.last_seq, seq);
        let roc = (index >> 16) as u32;
        if roc > stream.roc || (roc == stream.roc && seq > stream.last_seq) {
            stream.roc = roc;
            stream.last_seq = seq;
        }
        self.keys_for(index)?;
        let iv = self.iv(ssrc, index);
        self.keys.cipher.apply_keystream(&iv, &mut packet[header..]);
        let tag = self.tag(packet, roc);
        packet.extend_from_slice(&tag[..self.profile.tag_len()]);
        self.packets += 1;
        Ok(())
    }

    /// Verifies and decrypts the SRTP packet in `packet` in place,
    /// removing the tag. A packet that fails leaves the state unchanged.
    pub fn unprotect(&mut self, packet: &mut Vec<u8>) -> Result<(), Error> {
        let tag_len = self.profile.tag_len();
        if packet.len() < 12 + tag_len {
            return Err(Error::Malformed("shorter than a header and a tag"));
        }
        let body = packet.len() - tag_len;
        let header = rtp_header_len(&packet[..body])?;
        let seq = u16::from_be_bytes([packet[2], packet[3]]);
        let ssrc = u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]);
        let (index, fresh) = match self.streams.get(&ssrc) {
            Some(s) => {
                let index = estimate_index(s.roc, s.last_seq, seq);
                if !s.replay.check(index) {
                    return Err(Error::Replay(index));
                }
                (index, false)
            }
            None => (u64::from(seq), true),
        };
        let roc = (index >> 16) as u32;
        self.keys_for(index)?;
        let expected = self.tag(&packet[..body], roc);
        if !bool::from(expected[..tag_len].ct_eq(&packet[body..])) {
            return Err(Error::AuthFailed);
        }
        let iv = self.iv(ssrc, index);
        self.keys
            .cipher
            .apply_keystream(&iv, &mut packet[header..body]);
        packet.truncate(body);
        let window = self.window;
        let stream = self.streams.entry(ssrc).or_insert_with(|| Stream {
            roc: 0,
            last_seq: seq,
            replay: ReplayWindow::new(window),
        });
        let highest = (u64::from(stream.roc) << 16) | u64::from(stream.last_seq);
        if fresh || index > highest {
            stream.roc = roc;
            stream.last_seq = seq;
        }
        stream.replay.accept(index);
        Ok(())
    }
}

/// Session keys for `epoch` (= index DIV kdr).
fn derive(
    profile: Profile,
    master_key: &[u8],
    master_salt: &[u8; SALT_LEN],
    epoch: u64,
) -> Result<SessionKeys, Error> {
    let prf = Aes::new(master_key)?;
    let mut key = vec![0u8; profile.key_len()];
    let mut salt = [0u8; SALT_LEN];
    let mut auth = [0u8; AUTH_KEY_LEN];
    kdf::derive_with(
        &prf,
        master_salt,
        kdf::Label::RtpEncryption,
        epoch,
        &mut key,
    );
    kdf::derive_with(&prf, master_salt, kdf::Label::RtpSalt, epoch, &mut salt);
    kdf::derive_with(
        &prf,
        master_salt,
        kdf::Label::RtpAuthentication,
        epoch,
        &mut auth,
    );
    let mac =
        <Hmac<Sha1> as Mac>::new_from_slice(&auth).map_err(|_| Error::BadKey("HMAC key".into()))?;
    Ok(SessionKeys {
        cipher: Aes::new(&key)?,
        salt,
        mac,
        epoch,
    })
}
