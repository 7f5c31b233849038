//! Bounds on what a decoder accepts, so hostile input cannot exhaust memory
//! or time.

/// Decoder limits. The defaults suit a public-facing server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest whole message (header section and body), in bytes.
    pub max_message_len: usize,
    /// Most header lines (after unfolding) in one message.
    pub max_headers: usize,
    /// Longest header field including continuation lines, in bytes.
    pub max_header_len: usize,
    /// Most comma-separated values, or `;` parameters, in one header field.
    pub max_values: usize,
}

impl Limits {
    /// Limits used when none are given.
    pub const DEFAULT: Limits = Limits {
        max_message_len: 65_535,
        max_headers: 128,
        max_header_len: 8_192,
        max_values: 64,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}
