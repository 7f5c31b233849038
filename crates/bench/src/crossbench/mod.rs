//! `sipsec crypto-bench`: RSA implementations in several languages and
//! libraries, each a small adapter process (under `crossbench/`) speaking
//! one JSON object per line (`crossbench/protocol.md`). The runner makes
//! shared keys, checks that every implementation opens every other's
//! ciphertexts and accepts every other's signatures, then times each
//! operation with the study's protocol (repetitions × iterations after a
//! warm-up, plain timer) and again with each language's benchmark
//! framework, and summarises every implementation with the same code.

mod adapter;
mod build;
mod check;
mod keys;
mod measure;
mod report;

pub use adapter::*;
pub use build::*;
pub use check::*;
pub use keys::*;
pub use measure::*;
pub use report::*;

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rsa_variants::{PrivateKey, Variant};
use serde::Serialize;
use serde_json::{json, Value};

use crate::plot;
use crate::stats::MIN_TO_RANK;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_uses_students_t() {
        let (mean, sd, median, ci) = summary(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(mean, 3.0);
        assert!((sd - 2.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(median, 3.0);
        assert!((ci - 2.776 * sd / 5f64.sqrt()).abs() < 1e-12);
        assert_eq!(summary(&[2.0, 4.0]).2, 3.0);
        assert_eq!(summary(&[7.0]), (7.0, 0.0, 7.0, 0.0));
    }

    #[test]
    fn oaep_limits_and_hex() {
        assert_eq!(oaep_max(2048), 190);
        assert_eq!(oaep_max(1024), 62);
        assert_eq!(
            from_hex(&to_hex(&[0, 1, 0xfe, 0xff])),
            Some(vec![0, 1, 0xfe, 0xff])
        );
        assert_eq!(from_hex("abc"), None);
        assert_eq!(msg_lens("encrypt", 1024), [62]);
        assert_eq!(msg_lens("decrypt", 2048), [190]);
        assert_eq!(msg_lens("encrypt", 4096), [190, 446]);
        assert_eq!(msg_lens("sign", 1024), [190]);
        assert_eq!(msg_lens("keygen", 4096), [0]);
        assert_eq!(from_hex("zz"), None);
    }
}
