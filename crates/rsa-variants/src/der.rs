//! DER for the one key OpenSSL will not encode: a *standard* RSA key
//! (n, e, d and no factors).
//!
//! PKCS#1 (RFC 8017 A.1.2) has no optional fields for the factors, so a
//! standard key is written as a version-0 `RSAPrivateKey` whose prime1,
//! prime2, exponent1, exponent2 and coefficient are the integer 0. OpenSSL
//! parses such a file (and `openssl pkey -text` prints it); this crate
//! reads the zeros back as "no factors".

use openssl::bn::BigNumRef;

/// rsaEncryption, 1.2.840.113549.1.1.1, with NULL parameters.
const RSA_ALGORITHM: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];

fn push_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
        return;
    }
    let bytes = len.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    out.push(0x80 | (bytes.len() - skip) as u8);
    out.extend_from_slice(&bytes[skip..]);
}

fn push_tlv(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    push_len(out, body.len());
    out.extend_from_slice(body);
}

/// A non-negative INTEGER: big-endian, minimal, with a leading zero byte
/// when the top bit is set.
fn push_uint(out: &mut Vec<u8>, magnitude: &[u8]) {
    let skip = magnitude.iter().take_while(|b| **b == 0).count();
    let digits = &magnitude[skip..];
    let mut body = Vec::with_capacity(digits.len() + 1);
    if digits.first().is_none_or(|b| b & 0x80 != 0) {
        body.push(0);
    }
    body.extend_from_slice(digits);
    push_tlv(out, 0x02, &body);
}

/// PKCS#1 `RSAPrivateKey` for n, e, d with zero factors.
pub(crate) fn standard_pkcs1(n: &BigNumRef, e: &BigNumRef, d: &BigNumRef) -> Vec<u8> {
    let mut body = Vec::with_capacity(3 * n.num_bytes() as usize + 32);
    push_uint(&mut body, &[0]); // version two-prime
    for v in [n, e, d] {
        push_uint(&mut body, &v.to_vec());
    }
    for _ in 0..5 {
        push_uint(&mut body, &[0]);
    }
    let mut out = Vec::with_capacity(body.len() + 4);
    push_tlv(&mut out, 0x30, &body);
    out
}

/// PKCS#8 `PrivateKeyInfo` (RFC 5208) around a PKCS#1 key.
pub(crate) fn pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(pkcs1.len() + 32);
    push_uint(&mut body, &[0]);
    body.extend_from_slice(RSA_ALGORITHM);
    push_tlv(&mut body, 0x04, pkcs1);
    let mut out = Vec::with_capacity(body.len() + 4);
    push_tlv(&mut out, 0x30, &body);
    out
}

/// PEM armour (RFC 7468) with 64-column base64.
pub(crate) fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = Vec::with_capacity(der.len().div_ceil(3) * 4);
    for chunk in der.chunks(3) {
        let v = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(ALPHABET[(v >> (18 - 6 * i) & 63) as usize]);
            } else {
                b64.push(b'=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n").into_bytes();
    for line in b64.chunks(64) {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(format!("-----END {label}-----\n").as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_minimal_and_positive() {
        let mut out = Vec::new();
        push_uint(&mut out, &[0, 0, 0x7f]);
        push_uint(&mut out, &[0x80]);
        push_uint(&mut out, &[]);
        assert_eq!(out, [2, 1, 0x7f, 2, 2, 0, 0x80, 2, 1, 0]);
    }

    #[test]
    fn long_lengths() {
        let mut out = Vec::new();
        push_len(&mut out, 0x7f);
        push_len(&mut out, 0x80);
        push_len(&mut out, 0x1234);
        assert_eq!(out, [0x7f, 0x81, 0x80, 0x82, 0x12, 0x34]);
    }

    #[test]
    fn pem_matches_rfc4648_padding() {
        let p = String::from_utf8(pem("X", b"foob")).unwrap();
        assert_eq!(p, "-----BEGIN X-----\nZm9vYg==\n-----END X-----\n");
    }
}
