//! One direction of an SRTP session: its keys, options, per-SSRC state
//! and the helpers the RTP and RTCP transforms share.

use std::collections::HashMap;

use hmac::Mac;

use crate::cipher::Aes;
use crate::error::Error;
use crate::hook::{Hook, NoHook};
use crate::kdf;
use crate::keys::{KeySet, SessionKeys};
use crate::profile::Profile;
use crate::replay::ReplayWindow;
use crate::{MAX_MKI_LEN, SALT_LEN};

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

/// Receive and send state of one SSRC's RTP.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    pub(crate) roc: u32,
    pub(crate) last_seq: u16,
    pub(crate) replay: ReplayWindow,
}

/// Receive and send state of one SSRC's RTCP.
#[derive(Debug, Clone)]
pub(crate) struct RtcpStream {
    /// The next SRTCP index to send.
    pub(crate) next: u32,
    pub(crate) replay: ReplayWindow,
}

/// One direction of an SRTP session — protect (sender) or unprotect
/// (receiver) — for any number of SSRCs, RTP and RTCP. `H` receives
/// per-step timings.
#[derive(Clone)]
pub struct Context<H: Hook = NoHook> {
    pub(crate) profile: Profile,
    pub(crate) options: Options,
    pub(crate) keys: Vec<KeySet>,
    /// The key used to send.
    pub(crate) send: usize,
    pub(crate) mki_len: usize,
    pub(crate) streams: HashMap<u32, Stream>,
    pub(crate) rtcp_streams: HashMap<u32, RtcpStream>,
    pub(crate) hook: H,
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

    pub(crate) fn key_by_mki(&self, mki: &[u8]) -> Result<usize, Error> {
        if self.mki_len == 0 {
            return Ok(0);
        }
        self.keys
            .iter()
            .position(|k| k.mki == mki)
            .ok_or(Error::UnknownMki)
    }
}

pub(crate) fn hmac_tag(mac: &hmac::Hmac<sha1::Sha1>, parts: &[&[u8]]) -> [u8; 20] {
    let mut mac = mac.clone();
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Runs an in-place protect on `packet` grown by `overhead` bytes; a
/// refused packet is left as it was.
pub(crate) fn grow_in_place(
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
