//! SRTP (RFC 3711 §3.1, RFC 7714 §8): the RTP header, index estimation
//! and protecting and unprotecting RTP packets.

use subtle::ConstantTimeEq;

use crate::cipher::{cm_iv, gcm_iv, Transform, GCM_TAG_LEN};
use crate::context::{be32, grow_in_place, hmac_tag, Context, Stream};
use crate::error::Error;
use crate::hook::{Hook, Step};
use crate::replay::ReplayWindow;
use crate::MAX_PACKETS;

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

impl<H: Hook> Context<H> {
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
}
