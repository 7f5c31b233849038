//! The cross-check: every adapter decrypts and verifies what every other produced.

use super::*;
use crate::error::Error;

/// Loads each key into every adapter that computes with it, then has each
/// of those encrypt and sign and every one of them (itself included)
/// decrypt and verify; a tampered message must not verify. Returns how
/// many pairs passed.
pub fn cross_check(adapters: &mut [Adapter], keys: &[TestKey]) -> Result<usize, Error> {
    let mut pairs = 0;
    for k in keys {
        let who: Vec<usize> = (0..adapters.len())
            .filter(|&i| adapters[i].supports(k))
            .collect();
        for &i in &who {
            let v = adapters[i].call(&k.load_request())?;
            if v["bits"].as_u64() != Some(u64::from(k.bits)) {
                return Err(Error::Mismatch(format!(
                    "{}: loaded {} as {} bits",
                    adapters[i].id(),
                    k.id,
                    v["bits"]
                )));
            }
        }
        for &i in &who {
            let msg: Vec<u8> = (0..oaep_max(k.bits))
                .map(|n| (n * 7 + i * 13) as u8)
                .collect();
            let from = adapters[i].id().to_owned();
            let ct = adapters[i].hex(
                &json!({"op": "encrypt", "key": k.id, "msg": to_hex(&msg)}),
                "ct",
            )?;
            let sig = adapters[i].hex(
                &json!({"op": "sign", "key": k.id, "msg": to_hex(&msg)}),
                "sig",
            )?;
            for &j in &who {
                let b = &mut adapters[j];
                let to = b.id().to_owned();
                let at = |op: &str| {
                    format!(
                        "{to} {op} of {from}'s RSA-{} {} ({})",
                        k.bits, k.variant, k.id
                    )
                };
                let got = b
                    .hex(
                        &json!({"op": "decrypt", "key": k.id, "ct": to_hex(&ct)}),
                        "msg",
                    )
                    .map_err(|e| Error::Mismatch(format!("{}: {e}", at("decryption"))))?;
                if got != msg {
                    return Err(Error::Mismatch(format!(
                        "{}: wrong plaintext",
                        at("decryption")
                    )));
                }
                let ok = b.call(
                    &json!({"op": "verify", "key": k.id, "msg": to_hex(&msg), "sig": to_hex(&sig)}),
                )?;
                if ok["valid"] != json!(true) {
                    return Err(Error::Mismatch(format!(
                        "{}: the signature was refused",
                        at("verification")
                    )));
                }
                let mut bad = msg.clone();
                bad[0] ^= 1;
                let no = b.call(
                    &json!({"op": "verify", "key": k.id, "msg": to_hex(&bad), "sig": to_hex(&sig)}),
                )?;
                if no["valid"] != json!(false) {
                    return Err(Error::Mismatch(format!(
                        "{}: a signature over another message was accepted",
                        at("verification")
                    )));
                }
                pairs += 1;
            }
        }
    }
    Ok(pairs)
}
