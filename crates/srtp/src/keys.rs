//! Keys: a master key and the session keys derived from it (RFC 3711
//! §4.3) for one key-derivation epoch.

use hmac::{Hmac, Mac};
use sha1::Sha1;

use crate::cipher::{bad_key, Aes, Gcm, Transform, AUTH_KEY_LEN};
use crate::error::Error;
use crate::kdf::{self, Label};
use crate::profile::Profile;
use crate::SALT_LEN;

/// Session keys derived from a master key for one key-derivation epoch,
/// for SRTP or for SRTCP.
#[derive(Clone)]
pub(crate) struct SessionKeys {
    pub(crate) transform: Transform,
    /// The session salt, `salt_len` bytes used, zero-padded.
    pub(crate) salt: [u8; SALT_LEN],
    /// index DIV kdr these keys were derived for.
    pub(crate) epoch: u64,
}

impl SessionKeys {
    /// Keys taken as given, without derivation (the RFC 7714 known-answer
    /// vectors are stated this way).
    pub(crate) fn given(
        profile: Profile,
        key: &[u8],
        salt: &[u8],
        auth_key: &[u8],
    ) -> Result<Self, Error> {
        if key.len() != profile.key_len() || salt.len() != profile.salt_len() {
            return Err(Error::BadKey(format!(
                "{profile} session keys are {} + {} bytes, not {} + {}",
                profile.key_len(),
                profile.salt_len(),
                key.len(),
                salt.len()
            )));
        }
        let mut padded = [0u8; SALT_LEN];
        padded[..salt.len()].copy_from_slice(salt);
        Ok(Self {
            transform: transform(profile, key, auth_key)?,
            salt: padded,
            epoch: 0,
        })
    }

    /// Derives the SRTP (`rtcp` false) or SRTCP keys for `epoch` from the
    /// master key's PRF and its (zero-padded) master salt.
    pub(crate) fn derive(
        profile: Profile,
        prf: &Aes,
        master_salt: &[u8; SALT_LEN],
        rtcp: bool,
        epoch: u64,
    ) -> Result<Self, Error> {
        let (enc, auth, salt_label) = if rtcp {
            (
                Label::RtcpEncryption,
                Label::RtcpAuthentication,
                Label::RtcpSalt,
            )
        } else {
            (
                Label::RtpEncryption,
                Label::RtpAuthentication,
                Label::RtpSalt,
            )
        };
        let mut key = [0u8; 32];
        let key = &mut key[..profile.key_len()];
        kdf::derive_with(prf, master_salt, enc, epoch, key);
        let mut salt = [0u8; SALT_LEN];
        kdf::derive_with(
            prf,
            master_salt,
            salt_label,
            epoch,
            &mut salt[..profile.salt_len()],
        );
        let mut auth_key = [0u8; AUTH_KEY_LEN];
        if !profile.is_aead() {
            kdf::derive_with(prf, master_salt, auth, epoch, &mut auth_key);
        }
        let keys = Self {
            transform: transform(profile, key, &auth_key)?,
            salt,
            epoch,
        };
        key.fill(0);
        auth_key.fill(0);
        Ok(keys)
    }
}

fn transform(profile: Profile, key: &[u8], auth_key: &[u8]) -> Result<Transform, Error> {
    Ok(if profile.is_aead() {
        Transform::Gcm(Gcm::new(key)?)
    } else {
        let mac = <Hmac<Sha1> as Mac>::new_from_slice(auth_key)
            .map_err(|_| bad_key("HMAC key", auth_key.len()))?;
        Transform::Cm {
            cipher: Aes::new(key)?,
            mac: Box::new(mac),
        }
    })
}

/// One master key and the session keys derived from it.
#[derive(Clone)]
pub(crate) struct KeySet {
    pub(crate) mki: Vec<u8>,
    /// The master key as an AES PRF; `None` for keys given directly.
    pub(crate) prf: Option<Aes>,
    pub(crate) master_salt: [u8; SALT_LEN],
    pub(crate) rtp: Option<SessionKeys>,
    pub(crate) rtcp: Option<SessionKeys>,
    pub(crate) rtp_packets: u64,
    pub(crate) rtcp_packets: u64,
}

impl KeySet {
    /// The SRTP or SRTCP session keys for `index`, derived when the
    /// epoch changed (or at first use).
    pub(crate) fn session(
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
