//! SRTP and SRTCP (RFC 3711) with the AES counter-mode suites of RFC 3711
//! and RFC 6188 (AES-128/192/256 with HMAC-SHA1 tags of 80 or 32 bits) and
//! the AES-GCM suites of RFC 7714. Sans-IO: packets are protected and
//! unprotected in the caller's buffer; no sockets, threads or clocks.
//!
//! - [`kdf`]: the AES-CM key derivation (RFC 3711 §4.3), key derivation
//!   rate included;
//! - [`Context`]: one direction of one SRTP session — per-SSRC rollover
//!   counter and sequence estimation (§3.3.1), replay windows for SRTP
//!   and SRTCP (§3.3.2, 64 packets by default, configurable), optional
//!   MKI with several master keys (§3.1), key lifetimes (2^48 SRTP and
//!   2^31 SRTCP packets per master key, §9.2);
//! - [`Hook`]: per-step timings ([`StepTimes`]) that cost nothing when
//!   off ([`NoHook`]).
//!
//! Packet layouts, as libsrtp writes them:
//! - SRTP, AES-CM: header | encrypted payload | MKI | tag;
//! - SRTP, AES-GCM: header | encrypted payload | tag | MKI;
//! - SRTCP, AES-CM: header | encrypted rest | E+index | MKI | tag;
//! - SRTCP, AES-GCM: header | encrypted rest | tag | E+index | MKI.

mod cipher;
pub mod fuzzing;
mod hook;
pub mod kdf;
mod profile;
mod replay;
pub mod sdes;

use std::collections::HashMap;

use hmac::Mac;
use subtle::ConstantTimeEq;

pub use cipher::AUTH_KEY_LEN;
use cipher::{Aes, SessionKeys, Transform, GCM_TAG_LEN};
pub use hook::{Hook, NoHook, Step, StepTimes};
pub use profile::Profile;
pub use replay::ReplayWindow;

/// Longest master salt (AES-CM, 112 bits); AES-GCM uses 12 bytes.
pub const SALT_LEN: usize = 14;
/// SRTP packets one master key may protect (RFC 3711 §9.2).
pub const MAX_PACKETS: u64 = 1 << 48;
/// SRTCP packets one master key may protect (RFC 3711 §9.2).
pub const MAX_RTCP_PACKETS: u64 = 1 << 31;
/// Longest MKI accepted (libsrtp's limit).
pub const MAX_MKI_LEN: usize = 128;

/// Why a packet was refused. Deliberately coarse for authentication: a
/// forged packet learns nothing beyond "rejected".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not an RTP/RTCP packet this context can handle.
    #[error("malformed packet: {0}")]
    Malformed(&'static str),
    /// The authentication tag did not verify.
    #[error("authentication failed")]
    AuthFailed,
    /// A packet already received (or too old for the replay window).
    #[error("replayed or too old packet (index {0})")]
    Replay(u64),
    /// The master key protected its lifetime's worth of packets; rekey.
    #[error("master key lifetime exhausted: rekey")]
    KeyExhausted,
    /// The packet names a master key this context does not have.
    #[error("unknown MKI")]
    UnknownMki,
    /// The caller's buffer has no room for the tag and trailer.
    #[error("buffer too small: {0} bytes needed")]
    BufferTooSmall(usize),
    /// A key, salt, MKI or option that cannot be used.
    #[error("{0}")]
    BadKey(String),
}

/// Session options beyond the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Key derivation rate: 0 (derive once) or a power of two up to 2^24
    /// (RFC 3711 §4.3.1).
    pub kdr: u64,
    /// Replay window in packets, at least 64 (RFC 3711 §3.3.2).
    pub window: usize,
    /// For the AES-192 suites only: derive session keys the way libsrtp
    /// up to 2.7 does (its issue #763: an AES-256 PRF over the master key
    /// followed by 8 bytes of the salt) instead of per RFC 6188 §7.4, to
    /// talk to peers built on it. Off by default.
    pub libsrtp_aes192_kdf: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            kdr: 0,
            window: ReplayWindow::DEFAULT,
            libsrtp_aes192_kdf: false,
        }
    }
}

/// A master key with its salt and, when MKIs are in use, its identifier.
#[derive(Debug, Clone, Copy)]
pub struct MasterKey<'a> {
    /// The master key (`profile.key_len()` bytes).
    pub key: &'a [u8],
    /// The master salt (`profile.salt_len()` bytes).
    pub salt: &'a [u8],
    /// The MKI carried in each packet; empty for none.
    pub mki: &'a [u8],
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

/// One master key and the session keys derived from it.
#[derive(Clone)]
struct KeySet {
    mki: Vec<u8>,
    /// The master key as an AES PRF; `None` for keys given directly.
    prf: Option<Aes>,
    master_salt: [u8; SALT_LEN],
    rtp: Option<SessionKeys>,
    rtcp: Option<SessionKeys>,
    rtp_packets: u64,
    rtcp_packets: u64,
}

impl KeySet {
    /// The SRTP or SRTCP session keys for `index`, derived when the
    /// epoch changed (or at first use).
    fn session(
        &mut self,
        profile: Profile,
        kdr: u64,
        rtcp: bool,
        index: u64,
    ) -> Result<(&SessionKeys, bool), Error> {
        let epoch = index.checked_div(kdr).unwrap_or(0);
        let slot = if rtcp { &mut self.rtcp } else { &mut self.rtp };
        let stale = match (slot.as_ref(), &self.prf) {
            (Some(_), None) => false,
            (Some(k), Some(_)) => k.epoch != epoch,
            (None, _) => true,
        };
        if stale {
            let prf = self
                .prf
                .as_ref()
                .ok_or(Error::BadKey("no session keys".into()))?;
            *slot = Some(SessionKeys::derive(
                profile,
                prf,
                &self.master_salt,
                rtcp,
                epoch,
            )?);
        }
        match slot.as_ref() {
            Some(k) => Ok((k, stale)),
            None => Err(Error::BadKey("no session keys".into())),
        }
    }
}

/// Receive and send state of one SSRC's RTP.
#[derive(Debug, Clone)]
struct Stream {
    roc: u32,
    last_seq: u16,
    replay: ReplayWindow,
}

/// Receive and send state of one SSRC's RTCP.
#[derive(Debug, Clone)]
struct RtcpStream {
    /// The next SRTCP index to send.
    next: u32,
    replay: ReplayWindow,
}

/// AES-CM IV (RFC 3711 §4.1.1): (k_s * 2^16) XOR (SSRC * 2^64) XOR
/// (i * 2^16).
fn cm_iv(salt: &[u8; SALT_LEN], ssrc: u32, index: u64) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv[..SALT_LEN].copy_from_slice(salt);
    for (d, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
        *d ^= s;
    }
    for (d, s) in iv[8..14].iter_mut().zip(&index.to_be_bytes()[2..]) {
        *d ^= s;
    }
    iv
}

/// AES-GCM IV (RFC 7714 §8.1, §9.1): 00 00 | SSRC | `tail` XOR salt,
/// where the tail is ROC | SEQ for SRTP and 00 00 | index for SRTCP.
fn gcm_iv(salt: &[u8; SALT_LEN], ssrc: u32, tail: [u8; 6]) -> [u8; 12] {
    let mut iv = [0u8; 12];
    iv[2..6].copy_from_slice(&ssrc.to_be_bytes());
    iv[6..].copy_from_slice(&tail);
    for (d, s) in iv.iter_mut().zip(salt) {
        *d ^= s;
    }
    iv
}

fn hmac_tag(mac: &hmac::Hmac<sha1::Sha1>, parts: &[&[u8]]) -> [u8; 20] {
    let mut mac = mac.clone();
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// One direction of an SRTP session — protect (sender) or unprotect
/// (receiver) — for any number of SSRCs, RTP and RTCP. `H` receives
/// per-step timings.
#[derive(Clone)]
pub struct Context<H: Hook = NoHook> {
    profile: Profile,
    options: Options,
    keys: Vec<KeySet>,
    /// The key used to send.
    send: usize,
    mki_len: usize,
    streams: HashMap<u32, Stream>,
    rtcp_streams: HashMap<u32, RtcpStream>,
    hook: H,
}

impl<H: Hook> std::fmt::Debug for Context<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints keys.
        f.debug_struct("Context")
            .field("profile", &self.profile)
            .field("keys", &self.keys.len())
            .field("streams", &self.streams.len())
            .field("rtcp_streams", &self.rtcp_streams.len())
            .finish()
    }
}

impl Context {
    /// A context for `profile` with one master key and salt, no MKI.
    pub fn new(profile: Profile, master_key: &[u8], master_salt: &[u8]) -> Result<Self, Error> {
        Self::with_options(profile, master_key, master_salt, Options::default())
    }

    /// Like [`Context::new`] with a key derivation rate and replay window.
    pub fn with_options(
        profile: Profile,
        master_key: &[u8],
        master_salt: &[u8],
        options: Options,
    ) -> Result<Self, Error> {
        let key = MasterKey {
            key: master_key,
            salt: master_salt,
            mki: &[],
        };
        Self::with_keys(profile, &[key], options)
    }

    /// A context with several master keys told apart by their MKIs (all
    /// of one length). The first key sends until [`Context::send_with`]
    /// picks another; received packets choose theirs by MKI.
    pub fn with_keys(
        profile: Profile,
        keys: &[MasterKey<'_>],
        options: Options,
    ) -> Result<Self, Error> {
        check_options(options)?;
        let first = keys
            .first()
            .ok_or(Error::BadKey("no master key given".into()))?;
        let mki_len = first.mki.len();
        if mki_len > MAX_MKI_LEN {
            return Err(Error::BadKey(format!(
                "MKI of {mki_len} bytes: at most {MAX_MKI_LEN}"
            )));
        }
        if keys.len() > 1 && mki_len == 0 {
            return Err(Error::BadKey(
                "several master keys need MKIs to tell them apart".into(),
            ));
        }
        let mut sets: Vec<KeySet> = Vec::with_capacity(keys.len());
        for k in keys {
            if k.key.len() != profile.key_len() {
                return Err(Error::BadKey(format!(
                    "{profile} needs a {}-byte master key, not {}",
                    profile.key_len(),
                    k.key.len()
                )));
            }
            if k.salt.len() != profile.salt_len() {
                return Err(Error::BadKey(format!(
                    "{profile} needs a {}-byte master salt, not {}",
                    profile.salt_len(),
                    k.salt.len()
                )));
            }
            if k.mki.len() != mki_len {
                return Err(Error::BadKey("every MKI must have the same length".into()));
            }
            if sets.iter().any(|s| s.mki == k.mki) {
                return Err(Error::BadKey("two master keys share an MKI".into()));
            }
            let aes192 = matches!(profile, Profile::Aes192CmSha1_80 | Profile::Aes192CmSha1_32);
            let (prf, master_salt) = if aes192 && options.libsrtp_aes192_kdf {
                // libsrtp's buffer: key | salt | 8 zero bytes, read as an
                // AES-256 key and a 14-byte salt.
                let mut buf = [0u8; 46];
                buf[..24].copy_from_slice(k.key);
                buf[24..38].copy_from_slice(k.salt);
                let mut salt = [0u8; SALT_LEN];
                salt.copy_from_slice(&buf[32..]);
                (Aes::new(&buf[..32])?, salt)
            } else {
                (Aes::new(k.key)?, kdf::padded_salt(k.salt)?)
            };
            sets.push(KeySet {
                mki: k.mki.to_vec(),
                prf: Some(prf),
                master_salt,
                rtp: None,
                rtcp: None,
                rtp_packets: 0,
                rtcp_packets: 0,
            });
        }
        Ok(Self::from_sets(profile, options, sets, mki_len))
    }

    /// A context over session keys given directly, skipping the key
    /// derivation: how RFC 7714's known-answer vectors are stated, and
    /// how keys negotiated elsewhere arrive. `auth_key` is the 20-byte
    /// HMAC key (empty for AES-GCM). The same keys serve SRTP and SRTCP.
    pub fn with_session_keys(
        profile: Profile,
        key: &[u8],
        salt: &[u8],
        auth_key: &[u8],
    ) -> Result<Self, Error> {
        let keys = SessionKeys::given(profile, key, salt, auth_key)?;
        let set = KeySet {
            mki: Vec::new(),
            prf: None,
            master_salt: [0; SALT_LEN],
            rtp: Some(keys.clone()),
            rtcp: Some(keys),
            rtp_packets: 0,
            rtcp_packets: 0,
        };
        Ok(Self::from_sets(profile, Options::default(), vec![set], 0))
    }

    fn from_sets(profile: Profile, options: Options, keys: Vec<KeySet>, mki_len: usize) -> Self {
        Self {
            profile,
            options,
            keys,
            send: 0,
            mki_len,
            streams: HashMap::new(),
            rtcp_streams: HashMap::new(),
            hook: NoHook,
        }
    }
}

fn check_options(o: Options) -> Result<(), Error> {
    if o.kdr != 0 && (!o.kdr.is_power_of_two() || o.kdr > 1 << 24) {
        return Err(Error::BadKey(format!(
            "key derivation rate {}: 0 or a power of two up to 2^24",
            o.kdr
        )));
    }
    if o.window < 64 {
        return Err(Error::BadKey(format!(
            "replay window {}: at least 64 (RFC 3711 §3.3.2)",
            o.window
        )));
    }
    Ok(())
}

impl<H: Hook> Context<H> {
    /// The same context reporting step timings to `hook`.
    pub fn with_hook<G: Hook>(self, hook: G) -> Context<G> {
        Context {
            profile: self.profile,
            options: self.options,
            keys: self.keys,
            send: self.send,
            mki_len: self.mki_len,
            streams: self.streams,
            rtcp_streams: self.rtcp_streams,
            hook,
        }
    }

    /// The timing hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The timing hook, to read or reset it.
    pub fn hook_mut(&mut self) -> &mut H {
        &mut self.hook
    }

    /// The profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// Bytes protect adds to an RTP packet (tag and MKI).
    pub fn rtp_overhead(&self) -> usize {
        self.profile.tag_len() + self.mki_len
    }

    /// Bytes protect adds to an RTCP packet (E+index, tag and MKI).
    pub fn rtcp_overhead(&self) -> usize {
        4 + self.profile.rtcp_tag_len() + self.mki_len
    }

    /// Sends with the master key whose MKI is `mki` from now on.
    pub fn send_with(&mut self, mki: &[u8]) -> Result<(), Error> {
        self.send = self
            .keys
            .iter()
            .position(|k| k.mki == mki)
            .ok_or(Error::UnknownMki)?;
        Ok(())
    }

    fn key_by_mki(&self, mki: &[u8]) -> Result<usize, Error> {
        if self.mki_len == 0 {
            return Ok(0);
        }
        self.keys
            .iter()
            .position(|k| k.mki == mki)
            .ok_or(Error::UnknownMki)
    }

    /// Protects the RTP packet in `packet` in place: encrypts the payload
    /// and appends the tag (and MKI).
    pub fn protect(&mut self, packet: &mut Vec<u8>) -> Result<(), Error> {
        let overhead = self.rtp_overhead();
        grow_in_place(packet, overhead, |buf, len| self.protect_in_place(buf, len))
    }

    /// Protects the `len`-byte RTP packet at the start of `buf`, which
    /// must have [`Context::rtp_overhead`] spare bytes after it; returns
    /// the SRTP packet's length.
    pub fn protect_in_place(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let mark = self.hook.start();
        let packet = buf
            .get(..len)
            .ok_or(Error::Malformed("length beyond the buffer"))?;
        let header = rtp_header_len(packet)?;
        let total = len + self.rtp_overhead();
        if buf.len() < total {
            return Err(Error::BufferTooSmall(total));
        }
        let seq = u16::from_be_bytes([buf[2], buf[3]]);
        let ssrc = be32(&buf[8..12]);
        let key = &mut self.keys[self.send];
        if key.rtp_packets >= MAX_PACKETS {
            return Err(Error::KeyExhausted);
        }
        let window = self.options.window;
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
        self.hook.stop(Step::Header, mark);

        let mki_len = self.mki_len;
        let mki_at = len
            + if self.profile.is_aead() {
                GCM_TAG_LEN
            } else {
                0
            };
        buf[mki_at..mki_at + mki_len].copy_from_slice(&key.mki);

        let mark = self.hook.start();
        let (keys, derived) = key.session(self.profile, self.options.kdr, false, index)?;
        if derived {
            self.hook.stop(Step::KeyDerivation, mark);
        }
        match &keys.transform {
            Transform::Cm { cipher, mac } => {
                let mark = self.hook.start();
                cipher.apply_keystream(&cm_iv(&keys.salt, ssrc, index), &mut buf[header..len]);
                self.hook.stop(Step::Encryption, mark);
                let mark = self.hook.start();
                let tag = hmac_tag(mac, &[&buf[..len], &roc.to_be_bytes()]);
                let tag_len = self.profile.tag_len();
                buf[len + mki_len..total].copy_from_slice(&tag[..tag_len]);
                self.hook.stop(Step::Authentication, mark);
            }
            Transform::Gcm(gcm) => {
                let mark = self.hook.start();
                let mut tail = [0u8; 6];
                tail[..4].copy_from_slice(&roc.to_be_bytes());
                tail[4..].copy_from_slice(&seq.to_be_bytes());
                let iv = gcm_iv(&keys.salt, ssrc, tail);
                let (head, body) = buf.split_at_mut(header);
                let tag = gcm.seal(&iv, head, &mut body[..len - header]);
                buf[len..len + GCM_TAG_LEN].copy_from_slice(&tag);
                self.hook.stop(Step::Encryption, mark);
            }
        }
        key.rtp_packets += 1;
        Ok(total)
    }

    /// Verifies and decrypts the SRTP packet in `packet` in place,
    /// removing tag and MKI. A refused packet leaves packet and state
    /// unchanged.
    pub fn unprotect(&mut self, packet: &mut Vec<u8>) -> Result<(), Error> {
        let len = self.unprotect_in_place(packet)?;
        packet.truncate(len);
        Ok(())
    }

    /// Verifies and decrypts the SRTP packet that fills `buf`; returns
    /// the RTP packet's length (at the start of `buf`).
    pub fn unprotect_in_place(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        let mark = self.hook.start();
        let (tag_len, mki_len) = (self.profile.tag_len(), self.mki_len);
        if buf.len() < 12 + tag_len + mki_len {
            return Err(Error::Malformed("shorter than a header, tag and MKI"));
        }
        let aead = self.profile.is_aead();
        let body_end = buf.len() - tag_len - mki_len;
        let (mki_at, tag_at) = if aead {
            (body_end + tag_len, body_end)
        } else {
            (body_end, body_end + mki_len)
        };
        let header = rtp_header_len(&buf[..body_end])?;
        let seq = u16::from_be_bytes([buf[2], buf[3]]);
        let ssrc = be32(&buf[8..12]);
        let k = self.key_by_mki(&buf[mki_at..mki_at + mki_len])?;
        let known = self.streams.get(&ssrc);
        let index = match known {
            Some(s) => estimate_index(s.roc, s.last_seq, seq),
            None => u64::from(seq),
        };
        self.hook.stop(Step::Header, mark);

        if let Some(s) = known {
            let mark = self.hook.start();
            let fresh = s.replay.check(index);
            self.hook.stop(Step::ReplayCheck, mark);
            if !fresh {
                return Err(Error::Replay(index));
            }
        }

        let roc = (index >> 16) as u32;
        let mark = self.hook.start();
        let key = &mut self.keys[k];
        let (keys, derived) = key.session(self.profile, self.options.kdr, false, index)?;
        if derived {
            self.hook.stop(Step::KeyDerivation, mark);
        }
        match &keys.transform {
            Transform::Cm { cipher, mac } => {
                let mark = self.hook.start();
                let expected = hmac_tag(mac, &[&buf[..body_end], &roc.to_be_bytes()]);
                let ok = bool::from(expected[..tag_len].ct_eq(&buf[tag_at..tag_at + tag_len]));
                self.hook.stop(Step::Authentication, mark);
                if !ok {
                    return Err(Error::AuthFailed);
                }
                let mark = self.hook.start();
                cipher.apply_keystream(&cm_iv(&keys.salt, ssrc, index), &mut buf[header..body_end]);
                self.hook.stop(Step::Decryption, mark);
            }
            Transform::Gcm(gcm) => {
                let mark = self.hook.start();
                let mut tag = [0u8; GCM_TAG_LEN];
                tag.copy_from_slice(&buf[tag_at..tag_at + GCM_TAG_LEN]);
                let mut tail = [0u8; 6];
                tail[..4].copy_from_slice(&roc.to_be_bytes());
                tail[4..].copy_from_slice(&seq.to_be_bytes());
                let iv = gcm_iv(&keys.salt, ssrc, tail);
                let (head, body) = buf.split_at_mut(header);
                let ok = gcm.open(&iv, head, &mut body[..body_end - header], &tag);
                self.hook.stop(Step::Decryption, mark);
                if !ok {
                    return Err(Error::AuthFailed);
                }
            }
        }
        let window = self.options.window;
        let fresh = !self.streams.contains_key(&ssrc);
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
        Ok(body_end)
    }

    /// Protects the RTCP compound packet in `packet` in place: encrypts
    /// all but the first 8 bytes, appends E+index, tag (and MKI).
    pub fn protect_rtcp(&mut self, packet: &mut Vec<u8>) -> Result<(), Error> {
        let overhead = self.rtcp_overhead();
        grow_in_place(packet, overhead, |buf, len| {
            self.protect_rtcp_in_place(buf, len)
        })
    }

    /// Protects the `len`-byte RTCP packet at the start of `buf`, which
    /// must have [`Context::rtcp_overhead`] spare bytes after it; returns
    /// the SRTCP packet's length.
    pub fn protect_rtcp_in_place(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let mark = self.hook.start();
        let packet = buf
            .get(..len)
            .ok_or(Error::Malformed("length beyond the buffer"))?;
        check_rtcp(packet)?;
        let total = len + self.rtcp_overhead();
        if buf.len() < total {
            return Err(Error::BufferTooSmall(total));
        }
        let ssrc = be32(&buf[4..8]);
        let key = &mut self.keys[self.send];
        if key.rtcp_packets >= MAX_RTCP_PACKETS {
            return Err(Error::KeyExhausted);
        }
        let window = self.options.window;
        let stream = self.rtcp_streams.entry(ssrc).or_insert_with(|| RtcpStream {
            next: 0,
            replay: ReplayWindow::new(window),
        });
        let index = stream.next;
        if index > 0x7fff_ffff {
            return Err(Error::KeyExhausted);
        }
        self.hook.stop(Step::Header, mark);

        let e_index = (0x8000_0000 | index).to_be_bytes();
        let mki_len = self.mki_len;
        let mki_at = len
            + 4
            + if self.profile.is_aead() {
                GCM_TAG_LEN
            } else {
                0
            };
        buf[mki_at..mki_at + mki_len].copy_from_slice(&key.mki);

        let mark = self.hook.start();
        let (keys, derived) = key.session(self.profile, self.options.kdr, true, index.into())?;
        if derived {
            self.hook.stop(Step::KeyDerivation, mark);
        }
        match &keys.transform {
            Transform::Cm { cipher, mac } => {
                let mark = self.hook.start();
                cipher.apply_keystream(&cm_iv(&keys.salt, ssrc, index.into()), &mut buf[8..len]);
                self.hook.stop(Step::Encryption, mark);
                let mark = self.hook.start();
                buf[len..len + 4].copy_from_slice(&e_index);
                let tag = hmac_tag(mac, &[&buf[..len + 4]]);
                let tag_len = self.profile.rtcp_tag_len();
                buf[len + 4 + mki_len..total].copy_from_slice(&tag[..tag_len]);
                self.hook.stop(Step::Authentication, mark);
            }
            Transform::Gcm(gcm) => {
                let mark = self.hook.start();
                let mut tail = [0u8; 6];
                tail[2..].copy_from_slice(&index.to_be_bytes());
                let iv = gcm_iv(&keys.salt, ssrc, tail);
                let mut aad = [0u8; 12];
                aad[..8].copy_from_slice(&buf[..8]);
                aad[8..].copy_from_slice(&e_index);
                let tag = gcm.seal(&iv, &aad, &mut buf[8..len]);
                buf[len..len + GCM_TAG_LEN].copy_from_slice(&tag);
                let at = len + GCM_TAG_LEN;
                buf[at..at + 4].copy_from_slice(&e_index);
                self.hook.stop(Step::Encryption, mark);
            }
        }
        stream.next = index + 1;
        key.rtcp_packets += 1;
        Ok(total)
    }

    /// Verifies and (when the E flag says so) decrypts the SRTCP packet
    /// in `packet` in place, removing the trailer.
    pub fn unprotect_rtcp(&mut self, packet: &mut Vec<u8>) -> Result<(), Error> {
        let len = self.unprotect_rtcp_in_place(packet)?;
        packet.truncate(len);
        Ok(())
    }

    /// Verifies and decrypts the SRTCP packet that fills `buf`; returns
    /// the RTCP packet's length (at the start of `buf`).
    pub fn unprotect_rtcp_in_place(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        let mark = self.hook.start();
        let (tag_len, mki_len) = (self.profile.rtcp_tag_len(), self.mki_len);
        if buf.len() < 8 + 4 + tag_len + mki_len {
            return Err(Error::Malformed(
                "shorter than an RTCP header and the SRTCP trailer",
            ));
        }
        let aead = self.profile.is_aead();
        let (body_end, trailer_at, tag_at) = if aead {
            let trailer_at = buf.len() - mki_len - 4;
            (trailer_at - tag_len, trailer_at, trailer_at - tag_len)
        } else {
            let trailer_at = buf.len() - tag_len - mki_len - 4;
            (trailer_at, trailer_at, trailer_at + 4 + mki_len)
        };
        let mki_at = trailer_at + 4;
        check_rtcp(&buf[..body_end])?;
        let e_word = be32(&buf[trailer_at..trailer_at + 4]);
        let encrypted = e_word >> 31 == 1;
        let index = e_word & 0x7fff_ffff;
        let ssrc = be32(&buf[4..8]);
        let k = self.key_by_mki(&buf[mki_at..mki_at + mki_len])?;
        self.hook.stop(Step::Header, mark);

        if let Some(s) = self.rtcp_streams.get(&ssrc) {
            let mark = self.hook.start();
            let fresh = s.replay.check(index.into());
            self.hook.stop(Step::ReplayCheck, mark);
            if !fresh {
                return Err(Error::Replay(index.into()));
            }
        }

        let mark = self.hook.start();
        let key = &mut self.keys[k];
        let (keys, derived) = key.session(self.profile, self.options.kdr, true, index.into())?;
        if derived {
            self.hook.stop(Step::KeyDerivation, mark);
        }
        match &keys.transform {
            Transform::Cm { cipher, mac } => {
                let mark = self.hook.start();
                let expected = hmac_tag(mac, &[&buf[..trailer_at + 4]]);
                let ok = bool::from(expected[..tag_len].ct_eq(&buf[tag_at..tag_at + tag_len]));
                self.hook.stop(Step::Authentication, mark);
                if !ok {
                    return Err(Error::AuthFailed);
                }
                if encrypted {
                    let mark = self.hook.start();
                    let iv = cm_iv(&keys.salt, ssrc, index.into());
                    cipher.apply_keystream(&iv, &mut buf[8..trailer_at]);
                    self.hook.stop(Step::Decryption, mark);
                }
            }
            Transform::Gcm(gcm) => {
                let mark = self.hook.start();
                let mut tag = [0u8; GCM_TAG_LEN];
                tag.copy_from_slice(&buf[tag_at..tag_at + GCM_TAG_LEN]);
                let mut tail = [0u8; 6];
                tail[2..].copy_from_slice(&index.to_be_bytes());
                let iv = gcm_iv(&keys.salt, ssrc, tail);
                let ok = if encrypted {
                    let mut aad = [0u8; 12];
                    aad[..8].copy_from_slice(&buf[..8]);
                    aad[8..].copy_from_slice(&e_word.to_be_bytes());
                    gcm.open(&iv, &aad, &mut buf[8..body_end], &tag)
                } else {
                    // RFC 7714 §9.2: unencrypted, the whole packet and
                    // the trailer are associated data.
                    let mut aad = buf[..body_end].to_vec();
                    aad.extend_from_slice(&e_word.to_be_bytes());
                    gcm.open(&iv, &aad, &mut [], &tag)
                };
                self.hook.stop(Step::Decryption, mark);
                if !ok {
                    return Err(Error::AuthFailed);
                }
            }
        }
        let window = self.options.window;
        self.rtcp_streams
            .entry(ssrc)
            .or_insert_with(|| RtcpStream {
                next: 0,
                replay: ReplayWindow::new(window),
            })
            .replay
            .accept(index.into());
        Ok(body_end)
    }
}

/// Runs an in-place protect on `packet` grown by `overhead` bytes; a
/// refused packet is left as it was.
fn grow_in_place(
    packet: &mut Vec<u8>,
    overhead: usize,
    protect: impl FnOnce(&mut [u8], usize) -> Result<usize, Error>,
) -> Result<(), Error> {
    let len = packet.len();
    packet.resize(len + overhead, 0);
    let r = protect(packet, len);
    packet.truncate(*r.as_ref().unwrap_or(&len));
    r.map(drop)
}

/// The fixed RTCP header: at least 8 bytes, version 2 (RFC 3550 §6.4).
fn check_rtcp(packet: &[u8]) -> Result<(), Error> {
    if packet.len() < 8 {
        return Err(Error::Malformed("shorter than the 8-byte RTCP header"));
    }
    if packet[0] >> 6 != 2 {
        return Err(Error::Malformed("RTCP version is not 2"));
    }
    Ok(())
}
