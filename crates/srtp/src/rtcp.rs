//! SRTCP (RFC 3711 §3.4, RFC 7714 §9): protecting and unprotecting RTCP
//! packets.

use subtle::ConstantTimeEq;

use crate::cipher::{cm_iv, gcm_iv, Transform, GCM_TAG_LEN};
use crate::context::{be32, grow_in_place, hmac_tag, Context, RtcpStream};
use crate::error::Error;
use crate::hook::{Hook, Step};
use crate::replay::ReplayWindow;
use crate::MAX_RTCP_PACKETS;

/// The fixed RTCP header: at least 8 bytes, version 2 (RFC 3550 §6.4).
pub(crate) fn check_rtcp(packet: &[u8]) -> Result<(), Error> {
    if packet.len() < 8 {
        return Err(Error::Malformed("shorter than the 8-byte RTCP header"));
    }
    if packet[0] >> 6 != 2 {
        return Err(Error::Malformed("RTCP version is not 2"));
    }
    Ok(())
}

impl<H: Hook> Context<H> {
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
