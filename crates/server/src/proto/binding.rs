//! One contact bound to an address-of-record (RFC 3261 §10), its strings
//! in one allocation.
//!
//! A refresh compares the stored binding's contact and Call-ID with the
//! REGISTER's; each string on a heap block of its own was a cache line
//! of its own to fetch (and an allocation per string per refresh). The
//! five strings one after another in one block are one.

use std::fmt;
use std::net::SocketAddr;

/// One contact bound to an address-of-record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The contact URI, the Call-ID, Path, node and instance: read them
    /// through [`Binding::contact`] and the other accessors.
    pub strings: Strings,
    /// Expiry, in Unix seconds.
    pub expires_at: u64,
    /// Preference in thousandths (`q=0.5` is 500); 1000 when absent.
    pub q: u16,
    /// CSeq of the REGISTER that made the binding.
    pub cseq: u32,
    /// Where the REGISTER came from.
    pub source: SocketAddr,
    /// The connection the REGISTER came over, when it came over one:
    /// requests for this contact go back over it (RFC 3261 §18, RFC 5626).
    pub flow: Option<Flow>,
}

impl Binding {
    /// The contact URI.
    pub fn contact(&self) -> &str {
        self.strings.field(0)
    }

    /// Call-ID of the REGISTER that made the binding.
    pub fn call_id(&self) -> &str {
        self.strings.field(1)
    }

    /// The REGISTER's Path values (RFC 3327), comma-separated, first hop
    /// first; empty without Path.
    pub fn path(&self) -> &str {
        self.strings.field(2)
    }

    /// With a shared location (several nodes), the node that holds `flow`:
    /// a route URI to it (`<sip:FLOW-TOKEN@node;lr>`) that other nodes
    /// send the contact's requests through. Empty on a single node, and
    /// for contacts every node reaches directly.
    pub fn node(&self) -> &str {
        self.strings.field(3)
    }

    /// The phone's `+sip.instance` and `reg-id` (RFC 5626 §4.2), as
    /// `INSTANCE#REG-ID`, or "": a later registration of the same instance
    /// and reg-id replaces this binding, whatever its contact.
    pub fn instance(&self) -> &str {
        self.strings.field(4)
    }

    /// All five strings, borrowed (to store them again with one changed:
    /// `Strings::new(Parts { node, ..b.parts() })`).
    pub fn parts(&self) -> Parts<'_> {
        Parts {
            contact: self.contact(),
            call_id: self.call_id(),
            path: self.path(),
            node: self.node(),
            instance: self.instance(),
        }
    }
}

/// A binding's strings, borrowed: what [`Strings::new`] stores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parts<'a> {
    /// The contact URI.
    pub contact: &'a str,
    /// The REGISTER's Call-ID.
    pub call_id: &'a str,
    /// Its Path values, or "".
    pub path: &'a str,
    /// The node that holds the flow, or "".
    pub node: &'a str,
    /// `INSTANCE#REG-ID`, or "".
    pub instance: &'a str,
}

/// A binding's five strings in one heap block, one after another.
#[derive(Clone, PartialEq, Eq)]
pub struct Strings {
    text: Box<str>,
    /// Where each string but the last ends in `text`.
    ends: [usize; 4],
}

impl Strings {
    /// The strings of `p`, copied into one block.
    pub fn new(p: Parts<'_>) -> Self {
        let fields = [p.contact, p.call_id, p.path, p.node, p.instance];
        let mut text = String::with_capacity(fields.iter().map(|f| f.len()).sum());
        let mut ends = [0; 4];
        for (i, f) in fields.iter().enumerate() {
            text.push_str(f);
            if let Some(end) = ends.get_mut(i) {
                *end = text.len();
            }
        }
        Self {
            text: text.into_boxed_str(),
            ends,
        }
    }

    /// The `i`th string (0: the contact … 4: the instance).
    fn field(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        let end = self.ends.get(i).copied().unwrap_or(self.text.len());
        &self.text[start..end]
    }

    /// The bytes of all five, for sizing a record.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Whether all five are empty.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

impl fmt::Debug for Strings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries((0..5).map(|i| self.field(i)))
            .finish()
    }
}

/// A contact's flow: the connection from `Binding::source` over this
/// transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// TCP, TLS, WS or WSS.
    pub transport: sip_core::Transport,
    /// Registered with RFC 5626 outbound (`reg-id` and `+sip.instance`):
    /// when the flow is gone, requests fail with 430 instead of trying
    /// the contact's own address.
    pub outbound: bool,
}

impl Flow {
    /// As stored, in two pieces to write one after the other: `TCP` and
    /// "", or `TCP` and `+ob` for an outbound flow.
    pub fn parts(self) -> [&'static str; 2] {
        [
            self.transport.as_str(),
            if self.outbound { "+ob" } else { "" },
        ]
    }

    /// Reads what [`parts`](Self::parts) wrote.
    pub fn decode(s: &str) -> Option<Self> {
        let (t, outbound) = match s.strip_suffix("+ob") {
            Some(t) => (t, true),
            None => (s, false),
        };
        let transport = sip_core::Transport::from_token(t);
        transport.is_reliable().then_some(Flow {
            transport,
            outbound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_string_reads_back_whatever_is_empty() {
        let all = Parts {
            contact: "sip:a@1.1.1.1",
            call_id: "c1",
            path: "<sip:edge;lr>",
            node: "<sip:t@n;lr>",
            instance: "<urn:uuid:1>#1",
        };
        let cases = [
            all,
            Parts::default(),
            Parts {
                contact: "sip:a@1.1.1.1",
                instance: "<urn:uuid:1>#1",
                ..Parts::default()
            },
            Parts {
                path: "<sip:edge;lr>",
                ..Parts::default()
            },
        ];
        for p in cases {
            let s = Strings::new(p);
            let b = Binding {
                strings: s.clone(),
                expires_at: 0,
                q: 1000,
                cseq: 1,
                source: "127.0.0.1:5060".parse().expect("literal"),
                flow: None,
            };
            assert_eq!(b.parts(), p);
            let whole: usize = [p.contact, p.call_id, p.path, p.node, p.instance]
                .iter()
                .map(|f| f.len())
                .sum();
            assert_eq!(s.len(), whole);
            assert_eq!(s.is_empty(), whole == 0);
        }
    }

    #[test]
    fn strings_that_differ_only_in_where_one_ends_differ() {
        let a = Strings::new(Parts {
            contact: "sip:ab",
            call_id: "c",
            ..Parts::default()
        });
        let b = Strings::new(Parts {
            contact: "sip:a",
            call_id: "bc",
            ..Parts::default()
        });
        assert_ne!(a, b, "the same bytes split elsewhere are other strings");
        assert_eq!(format!("{a:?}"), r#"["sip:ab", "c", "", "", ""]"#);
    }
}
