//! Secrets from files and the OS random generator, handed to the core:
//! the digest nonce key and the PrivaSIP private keys.

use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::config::PrivacySettings;
use crate::proto::auth::NonceKey;
use crate::proto::privacy::{Privacy, PrivacyError};
use crate::proto::users::Users;

fn random_secret() -> io::Result<[u8; 32]> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(secret)
}

fn parse_secret(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A nonce key from the OS random generator; nonces live `ttl` seconds.
pub fn random_nonce_key(ttl: u64) -> io::Result<NonceKey> {
    with_epoch(NonceKey::from_secret(random_secret()?, ttl))
}

/// The key with this run's random epoch: nonces issued before this start
/// are answered `stale=true` (the replay tracker did not survive it).
fn with_epoch(key: NonceKey) -> io::Result<NonceKey> {
    let mut epoch = [0u8; 4];
    getrandom::fill(&mut epoch).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(key.with_epoch(u32::from_le_bytes(epoch)))
}

/// The nonce key kept in `path` (hex, mode 0600), created from the OS
/// random generator the first time, with this run's epoch. Rotate it by deleting the file and
/// restarting: nonces under the old secret are then answered
/// `stale=true`, so phones re-authenticate without a failure.
pub fn nonce_key(path: &Path, ttl: u64) -> io::Result<NonceKey> {
    with_epoch(NonceKey::from_secret(kept_secret(path)?, ttl))
}

/// The proxy's route key (`Shared::route_key`) kept in `path` as the
/// nonce key is: the proofs in its Record-Routes then hold across a
/// restart, so calls under way can still be ended through it. Deleting
/// the file makes a new one at the next start, and the requests of the
/// dialogs recorded before are refused.
pub fn route_key(path: &Path) -> io::Result<[u8; 32]> {
    kept_secret(path)
}

/// 256 bits kept in `path` (hex, mode 0600; refused when others may read
/// it), created from the OS random generator the first time.
fn kept_secret(path: &Path) -> io::Result<[u8; 32]> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mode = std::fs::metadata(path).map_err(named)?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(named(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("readable by others (mode {:o}): chmod 600 it", mode & 0o777),
                )));
            }
            parse_secret(text.trim()).ok_or_else(|| {
                named(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "not 64 hex digits: delete it to make a new secret",
                ))
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let secret = random_secret()?;
            write_secret(path, &format!("{}\n", hex(&secret)))?;
            Ok(secret)
        }
        Err(e) => Err(named(e)),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes `text` to `path` (mode 0600) through a synced temporary file
/// renamed into place.
fn write_secret(path: &Path, text: &str) -> io::Result<()> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(named)?;
    f.write_all(text.as_bytes()).map_err(named)?;
    f.sync_all().map_err(named)?;
    std::fs::rename(&tmp, path).map_err(named)
}

/// How long a PrivaSIP-3 ticket key is current before a start rotates it
/// (the one before still opens the tickets handed out under it).
pub const TICKET_KEY_ROTATION: std::time::Duration = std::time::Duration::from_secs(86_400);

/// The PrivaSIP-3 ticket keys kept in `path` (mode 0600: `EPOCH HEX`
/// lines, the current key first, then the one before), so tickets
/// survive a restart; created the first time; rotated at start when the
/// file is older than [`TICKET_KEY_ROTATION`]. `None`: a key for this
/// run only (`serve --check`).
pub fn ticket_keys(path: Option<&Path>) -> io::Result<privacy::tickets::TicketKeys> {
    let bad = |e: privacy::Error| io::Error::other(e.to_string());
    let Some(path) = path else {
        return privacy::tickets::TicketKeys::generate(1)
            .map(|k| k.0)
            .map_err(bad);
    };
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let (current, old_age) = match std::fs::read_to_string(path) {
        Ok(text) => {
            let meta = std::fs::metadata(path).map_err(named)?;
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(named(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "readable by others: chmod 600 it",
                )));
            }
            let first = text.lines().next().and_then(|l| {
                let (e, k) = l.split_once(' ')?;
                Some((e.parse::<u8>().ok()?, parse_secret(k.trim())?))
            });
            let Some(first) = first else {
                return Err(named(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "not `EPOCH HEX` lines: delete it to make a new key (tickets handed out stop opening)",
                )));
            };
            let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
            (Some((first, text)), age)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => (None, None),
        Err(e) => return Err(named(e)),
    };
    match current {
        Some(((epoch, key), text)) if old_age.is_some_and(|a| a < TICKET_KEY_ROTATION) => {
            let previous = text.lines().nth(1).and_then(|l| {
                let (e, k) = l.split_once(' ')?;
                Some((e.parse::<u8>().ok()?, parse_secret(k.trim())?))
            });
            privacy::tickets::TicketKeys::new(
                (epoch, &key),
                previous.as_ref().map(|(e, k)| (*e, k)),
            )
            .map_err(bad)
        }
        Some(((epoch, key), _)) => {
            // Rotated: a new current key, this one kept as the previous.
            let next = random_secret()?;
            let e = epoch.wrapping_add(1);
            write_secret(
                path,
                &format!("{e} {}\n{epoch} {}\n", hex(&next), hex(&key)),
            )?;
            privacy::tickets::TicketKeys::new((e, &next), Some((epoch, &key))).map_err(bad)
        }
        None => {
            let key = random_secret()?;
            write_secret(path, &format!("1 {}\n", hex(&key)))?;
            privacy::tickets::TicketKeys::new((1, &key), None).map_err(bad)
        }
    }
}

/// Loads `[stir]`: the signing key (EC P-256), the trust anchors and
/// revocation lists, each error naming its file.
pub fn stir(
    s: &crate::config_stir::StirSettings,
    proxy: bool,
) -> Result<Option<crate::proto::stir::Stir>, crate::io::start_error::StartError> {
    use crate::io::start_error::StartError;
    use crate::proto::stir::{CertTable, Signing, Stir, StirCounts, Verifying};
    if !s.on() {
        return Ok(None);
    }
    if !proxy {
        return Err(StartError::Stir(
            "[stir] signs and verifies calls a proxy forwards: set mode = \"proxy\"".into(),
        ));
    }
    let read =
        |p: &Path| std::fs::read(p).map_err(|e| StartError::Stir(format!("{}: {e}", p.display())));
    let sign = match &s.sign {
        Some(c) => Some(Signing {
            key: stir::SigningKey::from_pem(&read(&c.key)?)
                .map_err(|e| StartError::Stir(format!("{}: {e}", c.key.display())))?,
            settings: c.clone(),
        }),
        None => None,
    };
    let verify = match &s.verify {
        Some(c) => {
            let crls = c
                .crls
                .iter()
                .map(|p| read(p))
                .collect::<Result<Vec<_>, _>>()?;
            let trust = stir::Trust::from_pem(&read(&c.trust_anchors)?, &crls)
                .map_err(|e| StartError::Stir(format!("{}: {e}", c.trust_anchors.display())))?;
            crate::io::fetch::Client::new(&c.fetch)
                .map_err(|e| StartError::Stir(format!("certificate fetcher: {e}")))?;
            Some(Verifying {
                trust,
                settings: c.clone(),
                certs: CertTable::new(c.fetch.fetchers),
            })
        }
        None => None,
    };
    Ok(Some(Stir {
        sign,
        verify,
        counts: StirCounts::default(),
    }))
}

/// Reads the PrivaSIP private keys named in `s` and sets up pseudonym
/// decryption (AES needs the users: their SHA-256 HA1 in `realm`);
/// PrivaSIP-3's ticket keys live in `ticket_file` (see [`ticket_keys`]).
pub fn privacy(
    s: &PrivacySettings,
    users: Option<&Users>,
    realm: &str,
    ticket_file: Option<&Path>,
) -> Result<Privacy, PrivacyError> {
    let mut pems = Vec::with_capacity(s.keys.len());
    for (id, path) in &s.keys {
        let pem = std::fs::read(path).map_err(|e| PrivacyError::Key {
            name: path.display().to_string(),
            reason: e.to_string(),
        })?;
        pems.push((*id, path.display().to_string(), pem));
    }
    let tickets = if s.tickets > 0 {
        Some(ticket_keys(ticket_file).map_err(|e| PrivacyError::Key {
            name: "PrivaSIP-3 ticket key".into(),
            reason: e.to_string(),
        })?)
    } else {
        None
    };
    let privacy = Privacy::new(s, &pems, users, realm, tickets)?;
    match &s.pq_key {
        Some(path) => {
            let named = |reason: String| PrivacyError::Key {
                name: path.display().to_string(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| named(e.to_string()))?;
            let key = privacy::pq::PqKey::from_pem(&pem).map_err(|e| named(e.to_string()))?;
            Ok(privacy.with_pq(key))
        }
        None => Ok(privacy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::auth::NonceState;

    #[test]
    fn the_secret_is_kept_private_and_a_restart_makes_earlier_nonces_stale() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sipsec-nonce-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("nonce.key");
        let a = nonce_key(&path, 300).expect("created");
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let n = a.issue(1000, "r");
        assert_eq!(a.check(n.as_str(), "r", 1000), NonceState::Fresh);
        let b = nonce_key(&path, 300).expect("loaded");
        assert_eq!(b.check(n.as_str(), "r", 1000), NonceState::Stale);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = nonce_key(&path, 300).expect_err("world-readable");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::write(&path, "nothex").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let e = nonce_key(&path, 300).expect_err("garbage");
        assert!(e.to_string().contains("64 hex"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
