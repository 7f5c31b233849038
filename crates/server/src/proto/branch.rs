//! The branches this proxy writes in its Via (RFC 3261 §16.6 step 8):
//! which transaction, fork and try a message belongs to, read back from
//! responses, ACKs, CANCELs and ICMP errors that quote them.

use sip_core::{Message, Method};

/// Prefix of the To tags on responses this server generates; an ACK
/// carrying one acknowledges such a response and ends here.
pub const LOCAL_TAG_PREFIX: &str = "sipsec-";
/// Prefix of the branch this proxy writes in its Via.
pub const BRANCH_PREFIX: &str = "z9hG4bKsps";
/// The bits of a branch that identify its transaction; the top four
/// number the tries of other addresses (RFC 3263 §4.3: each a new
/// branch, so a late answer from an address given up is told apart).
pub const BRANCH_MASK: u64 = u64::MAX >> 4;
/// Where the fork index sits in a branch (the four bits below the try
/// number): each target of a forked request gets its own branch
/// (RFC 3261 §16.6 step 8).
pub const FORK_SHIFT: u32 = 56;
/// The bits of a branch that name the request, without try and fork.
pub const ID_MASK: u64 = u64::MAX >> 8;
/// Addresses tried for one request, the first included.
pub(super) const MAX_TRIES: u8 = 8;

/// Which try of its transaction a message belongs to: the top four bits
/// of this proxy's branch in its top Via.
pub(super) fn try_of(msg: &Message<'_>) -> u8 {
    msg.top_via()
        .branch()
        .and_then(parse_branch)
        .map_or(0, |b| (b.0 >> 60) as u8)
}

/// Reads a branch this proxy wrote: `z9hG4bKsps` then 16 hex digits (the
/// transaction, its try in the top four bits) and, on what it forwards,
/// 16 more: the tag that binds the transaction to the address its
/// responses go back to (see `Core::branch_tag`). `None` for any other
/// branch.
pub fn parse_branch(branch: &str) -> Option<(u64, Option<u64>)> {
    let hex = branch.strip_prefix(BRANCH_PREFIX)?;
    if !matches!(hex.len(), 16 | 32) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let id = u64::from_str_radix(&hex[..16], 16).ok()?;
    let tag = match hex.get(16..) {
        Some(t) if !t.is_empty() => Some(u64::from_str_radix(t, 16).ok()?),
        _ => None,
    };
    Some((id, tag))
}

/// The delta-seconds a 503's Retry-After starts with (RFC 3261 §20.33),
/// if any.
pub(super) fn retry_after(msg: &Message<'_>) -> Option<u32> {
    let v = msg.header(sip_core::HeaderName::RetryAfter)?;
    let digits = v.trim_start().split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

/// Rewrites the try number in the branch of `request`'s top Via (this
/// proxy's); `false` when it has none.
pub(super) fn renumber(request: &mut [u8], number: u8) -> bool {
    let Ok(msg) = Message::parse(request) else {
        return false;
    };
    let Some(hex) = msg
        .top_via()
        .branch()
        .filter(|b| parse_branch(b).is_some())
        .and_then(|b| b.strip_prefix(BRANCH_PREFIX))
    else {
        return false;
    };
    let at = hex.as_ptr() as usize - request.as_ptr() as usize;
    request[at] = b"0123456789abcdef"[usize::from(number & 0xf)];
    true
}

/// Identifies an entry: this proxy's branch, and whether it is the CANCEL
/// sharing that branch with an INVITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The branch value after [`BRANCH_PREFIX`].
    pub branch: u64,
    /// The CANCEL's own transaction.
    pub cancel: bool,
}

impl Key {
    /// The entry a message belongs to, from its top Via and CSeq: a
    /// response coming back, or a request this proxy sent.
    pub fn of_message(msg: &Message<'_>) -> Option<Self> {
        let branch = parse_branch(msg.top_via().branch()?)?.0 & BRANCH_MASK;
        Some(Self {
            branch,
            cancel: msg.cseq().method == Method::Cancel,
        })
    }

    /// [`of_message`](Self::of_message) and which try of the transaction
    /// `msg` belongs to.
    pub fn with_try(msg: &Message<'_>) -> Option<(Self, u8)> {
        Some((Self::of_message(msg)?, try_of(msg)))
    }

    /// The transaction and try of a request this proxy sent, from the
    /// start of it that an ICMP error quotes (Linux quotes up to 576
    /// bytes in all): the request line, then the Via this proxy puts
    /// first, whose branch ends the line. `None` for a response, an ACK
    /// (no transaction of its own), or too little quoted.
    pub fn of_quoted(bytes: &[u8]) -> Option<(Self, u8)> {
        if bytes.starts_with(b"SIP/2.0 ") || bytes.starts_with(b"ACK ") {
            return None;
        }
        let line = bytes.iter().position(|&b| b == b'\n')?;
        let rest = &bytes[line + 1..];
        let via = &rest[..rest.iter().position(|&b| b == b'\n')?];
        let via = std::str::from_utf8(via).ok()?.trim_end_matches('\r');
        let params = via.strip_prefix("Via: SIP/2.0/")?;
        let (branch, _) = parse_branch(params.rsplit_once(";branch=")?.1)?;
        let key = Self {
            branch: branch & BRANCH_MASK,
            cancel: bytes.starts_with(b"CANCEL "),
        };
        Some((key, (branch >> 60) as u8))
    }
}

/// The entry a response or error names, and which of its branches:
/// CANCELs have entries of their own, under their branch's key.
pub(super) fn split(key: Key) -> (Key, usize) {
    if key.cancel {
        return (key, 0);
    }
    let fork = (key.branch >> FORK_SHIFT) & 0xf;
    let entry = Key {
        branch: key.branch & ID_MASK,
        cancel: false,
    };
    (entry, fork as usize)
}
