//! WAV files: read 8 kHz PCM (16-bit), µ-law or A-law, mono or stereo
//! (mixed down); write 16-bit PCM mono.

use std::path::Path;

use crate::g711;

/// Why a WAV file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WavError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Not a WAV file we can play.
    #[error("{path}: {why}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        why: FormatError,
    },
}

/// What makes a WAV file's bytes unplayable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(String);

/// Decodes a WAV file's bytes to 16-bit mono samples at 8 kHz.
pub fn decode(bytes: &[u8]) -> Result<Vec<i16>, FormatError> {
    if bytes.len() < 12 || &bytes[..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return Err(FormatError("not a RIFF/WAVE file".into()));
    }
    let mut at = 12;
    let mut format: Option<(u16, u16, u32, u16)> = None;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let len = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]])
            as usize;
        let body = bytes
            .get(at + 8..at + 8 + len)
            .or_else(|| (id == b"data").then(|| &bytes[at + 8..]))
            .ok_or_else(|| FormatError("a chunk runs past the end of the file".into()))?;
        match id {
            b"fmt " => {
                if body.len() < 16 {
                    return Err(FormatError("fmt chunk shorter than 16 bytes".into()));
                }
                let le16 = |i: usize| u16::from_le_bytes([body[i], body[i + 1]]);
                let rate = u32::from_le_bytes([body[4], body[5], body[6], body[7]]);
                format = Some((le16(0), le16(2), rate, le16(14)));
            }
            b"data" => {
                let (tag, channels, rate, bits) = format.ok_or_else(|| {
                    FormatError("the data chunk comes before the fmt chunk".into())
                })?;
                if rate != crate::RATE {
                    return Err(FormatError(format!(
                        "{rate} Hz: only 8000 Hz is supported (resample it, e.g. sox in.wav -r 8000 out.wav)"
                    )));
                }
                if !(1..=2).contains(&channels) {
                    return Err(FormatError(format!(
                        "{channels} channels: mono or stereo only"
                    )));
                }
                let mono: Vec<i16> = match (tag, bits) {
                    (1, 16) => body
                        .chunks_exact(2)
                        .map(|c| i16::from_le_bytes([c[0], c[1]]))
                        .collect(),
                    (7, 8) => body.iter().map(|&c| g711::ulaw_decode(c)).collect(),
                    (6, 8) => body.iter().map(|&c| g711::alaw_decode(c)).collect(),
                    _ => {
                        return Err(FormatError(format!(
                            "format {tag} with {bits}-bit samples: 16-bit PCM, µ-law or A-law only"
                        )))
                    }
                };
                return Ok(if channels == 2 {
                    mono.chunks_exact(2)
                        .map(|c| ((i32::from(c[0]) + i32::from(c[1])) / 2) as i16)
                        .collect()
                } else {
                    mono
                });
            }
            _ => {}
        }
        at += 8 + len + (len & 1);
    }
    Err(FormatError("no data chunk".into()))
}

/// Encodes 16-bit mono samples at 8 kHz as a WAV file.
pub fn encode(samples: &[i16]) -> Vec<u8> {
    let data_len = (samples.len() * 2) as u32;
    let mut out = Vec::with_capacity(44 + samples.len() * 2);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // mono
    out.extend_from_slice(&crate::RATE.to_le_bytes());
    out.extend_from_slice(&(crate::RATE * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    for s in samples {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

/// Reads a WAV file (see [`decode`]).
pub fn read(path: &Path) -> Result<Vec<i16>, WavError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| WavError::Io {
        path: name.clone(),
        source,
    })?;
    decode(&bytes).map_err(|why| WavError::Format { path: name, why })
}

/// Writes a WAV file (see [`encode`]).
pub fn write(path: &Path, samples: &[i16]) -> Result<(), WavError> {
    std::fs::write(path, encode(samples)).map_err(|source| WavError::Io {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_clear_errors() {
        let samples: Vec<i16> = (0..800).map(|i| (i * 37 % 2000 - 1000) as i16).collect();
        let bytes = encode(&samples);
        assert_eq!(bytes.len(), 44 + 1600);
        assert_eq!(decode(&bytes).unwrap(), samples);
        // A data chunk cut short (a recording that was interrupted) keeps
        // what is there.
        assert_eq!(decode(&bytes[..50]).unwrap(), samples[..3]);
        assert!(decode(b"RIFF....WAVX")
            .unwrap_err()
            .to_string()
            .contains("RIFF"));
        let mut wrong_rate = bytes.clone();
        wrong_rate[24..28].copy_from_slice(&44_100u32.to_le_bytes());
        assert!(decode(&wrong_rate)
            .unwrap_err()
            .to_string()
            .contains("44100 Hz"));
        let mut eight_bit = bytes.clone();
        eight_bit[34] = 8;
        assert!(decode(&eight_bit)
            .unwrap_err()
            .to_string()
            .contains("8-bit"));
        assert!(decode(&bytes[..30])
            .unwrap_err()
            .to_string()
            .contains("past the end"));
    }

    #[test]
    fn mulaw_stereo_files_are_decoded_and_mixed_down() {
        let mut b = encode(&[0; 4]);
        b[20..22].copy_from_slice(&7u16.to_le_bytes());
        b[22..24].copy_from_slice(&2u16.to_le_bytes());
        b[34..36].copy_from_slice(&8u16.to_le_bytes());
        // data: 8 bytes = 4 stereo µ-law frames
        b[44..52].copy_from_slice(&[0x80, 0x80, 0xff, 0xff, 0x00, 0x80, 0x7f, 0xff]);
        let s = decode(&b).unwrap();
        assert_eq!(s, vec![32_124, 0, 0, 0]);
    }
}
