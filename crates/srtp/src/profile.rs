//! The crypto suites: names, key, salt and tag sizes.

/// An SRTP crypto suite (RFC 4568 §6.2, RFC 6188 §2, RFC 7714 §14.1).
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
    /// AEAD_AES_128_GCM (RFC 7714): 16-byte tag, 96-bit salt.
    AeadAes128Gcm,
    /// AEAD_AES_256_GCM (RFC 7714).
    AeadAes256Gcm,
}

impl Profile {
    /// Every profile.
    pub const ALL: [Profile; 8] = [
        Profile::Aes128CmSha1_80,
        Profile::Aes128CmSha1_32,
        Profile::Aes192CmSha1_80,
        Profile::Aes192CmSha1_32,
        Profile::Aes256CmSha1_80,
        Profile::Aes256CmSha1_32,
        Profile::AeadAes128Gcm,
        Profile::AeadAes256Gcm,
    ];

    /// AES key length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Profile::Aes128CmSha1_80 | Profile::Aes128CmSha1_32 | Profile::AeadAes128Gcm => 16,
            Profile::Aes192CmSha1_80 | Profile::Aes192CmSha1_32 => 24,
            Profile::Aes256CmSha1_80 | Profile::Aes256CmSha1_32 | Profile::AeadAes256Gcm => 32,
        }
    }

    /// Master (and session) salt length in bytes: 14 for AES-CM, 12 for
    /// AES-GCM.
    pub fn salt_len(self) -> usize {
        if self.is_aead() {
            12
        } else {
            14
        }
    }

    /// Authentication tag length in bytes, for SRTP and SRTCP alike
    /// (RFC 3711 §5.2: the _32 suites keep an 80-bit tag on SRTCP).
    pub fn tag_len(self) -> usize {
        match self {
            Profile::Aes128CmSha1_32 | Profile::Aes192CmSha1_32 | Profile::Aes256CmSha1_32 => 4,
            Profile::AeadAes128Gcm | Profile::AeadAes256Gcm => 16,
            _ => 10,
        }
    }

    /// The SRTCP tag length: 10 bytes for every AES-CM suite.
    pub fn rtcp_tag_len(self) -> usize {
        if self.is_aead() {
            16
        } else {
            10
        }
    }

    /// AES-GCM: encryption and authentication in one pass.
    pub fn is_aead(self) -> bool {
        matches!(self, Profile::AeadAes128Gcm | Profile::AeadAes256Gcm)
    }

    /// The SDES name (RFC 4568, RFC 6188, RFC 7714).
    pub fn name(self) -> &'static str {
        match self {
            Profile::Aes128CmSha1_80 => "AES_CM_128_HMAC_SHA1_80",
            Profile::Aes128CmSha1_32 => "AES_CM_128_HMAC_SHA1_32",
            Profile::Aes192CmSha1_80 => "AES_192_CM_HMAC_SHA1_80",
            Profile::Aes192CmSha1_32 => "AES_192_CM_HMAC_SHA1_32",
            Profile::Aes256CmSha1_80 => "AES_256_CM_HMAC_SHA1_80",
            Profile::Aes256CmSha1_32 => "AES_256_CM_HMAC_SHA1_32",
            Profile::AeadAes128Gcm => "AEAD_AES_128_GCM",
            Profile::AeadAes256Gcm => "AEAD_AES_256_GCM",
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

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
