//! The location's records as text: one line per binding change, the form
//! the embedded journal stores and a shared location's store and change
//! feed carry. A line that does not read back is refused whole.

use sip_core::writer::write_u64;

use crate::proto::aor_key::AorKey;
use crate::proto::location::{Binding, Flow, Parts, Record, Strings};

/// Writes a binding of `aor` as a line of sequence `seq` (snapshots write
/// every live binding this way). Written field by field: every REGISTER
/// that changes a binding writes one, and the formatting machinery cost
/// more than the rest of the line.
pub fn encode_bind(seq: u64, aor: &[u8], b: &Binding, out: &mut Vec<u8>) {
    write_u64(out, seq);
    out.extend_from_slice(b"\tB\t");
    for f in [aor, b.contact().as_bytes()] {
        out.extend_from_slice(f);
        out.push(b'\t');
    }
    write_u64(out, b.expires_at);
    out.push(b'\t');
    write_u64(out, u64::from(b.q));
    out.push(b'\t');
    out.extend_from_slice(b.call_id().as_bytes());
    out.push(b'\t');
    write_u64(out, u64::from(b.cseq));
    out.push(b'\t');
    sip_core::writer::push_socket_addr(out, b.source);
    // Path, the flow, its node and the phone's instance are trailing
    // fields, absent from records written before them (and when empty
    // at the end); a flow is "-" when there is none but an instance.
    let flow = match b.flow {
        Some(f) => f.parts(),
        None if b.instance().is_empty() => ["", ""],
        None => ["-", ""],
    };
    let tail: [[&str; 2]; 4] = [[b.path(), ""], flow, [b.node(), ""], [b.instance(), ""]];
    let used = tail
        .iter()
        .rposition(|f| !f[0].is_empty())
        .map_or(0, |i| i + 1);
    for f in &tail[..used] {
        out.push(b'\t');
        for piece in f {
            out.extend_from_slice(piece.as_bytes());
        }
    }
    out.push(b'\n');
}

/// Writes `r` as one journal line (also the form bindings take in a
/// shared location's store and change feed).
pub fn encode(r: &Record, out: &mut Vec<u8>) {
    match r {
        Record::Bind {
            seq,
            aor,
            binding: b,
        } => encode_bind(*seq, aor.as_bytes(), b, out),
        Record::Remove { seq, aor, contact } => {
            write_u64(out, *seq);
            out.extend_from_slice(b"\tD\t");
            out.extend_from_slice(aor.as_bytes());
            out.push(b'\t');
            out.extend_from_slice(contact.as_bytes());
            out.push(b'\n');
        }
    }
}

/// Reads a line [`encode`] wrote (without its line feed).
pub fn decode(line: &str) -> Option<Record> {
    let mut f = line.split('\t');
    let seq = f.next()?.parse().ok()?;
    match f.next()? {
        "B" => {
            let aor = AorKey::new(f.next()?);
            let contact = f.next()?;
            let expires_at = f.next()?.parse().ok()?;
            let q = f.next()?.parse().ok()?;
            let call_id = f.next()?;
            let cseq = f.next()?.parse().ok()?;
            let source = f.next()?.parse().ok()?;
            let path = f.next().unwrap_or("");
            let flow = match f.next() {
                None | Some("" | "-") => None,
                Some(flow) => Some(Flow::decode(flow)?),
            };
            let node = f.next().unwrap_or("");
            let instance = f.next().unwrap_or("");
            let binding = Binding {
                strings: Strings::new(Parts {
                    contact,
                    call_id,
                    path,
                    node,
                    instance,
                }),
                expires_at,
                q,
                cseq,
                source,
                flow,
            };
            f.next()
                .is_none()
                .then_some(Record::Bind { seq, aor, binding })
        }
        "D" => {
            let aor = AorKey::new(f.next()?);
            let contact = f.next()?.to_owned();
            f.next()
                .is_none()
                .then_some(Record::Remove { seq, aor, contact })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(source: &str) -> Binding {
        Binding {
            strings: Strings::new(Parts {
                contact: "sip:alice@192.0.2.7:5070",
                call_id: "c1@h",
                ..Parts::default()
            }),
            expires_at: 1_790_000_123,
            q: 500,
            cseq: 4_294_967_295,
            source: source.parse().expect("literal"),
            flow: None,
        }
    }

    #[test]
    fn lines_are_written_field_by_field_and_read_back() {
        let mut out = Vec::new();
        encode_bind(
            18_446_744_073_709_551_615,
            b"alice@h",
            &binding("10.0.0.255:65535"),
            &mut out,
        );
        assert_eq!(
            out,
            b"18446744073709551615\tB\talice@h\tsip:alice@192.0.2.7:5070\t1790000123\t500\tc1@h\t4294967295\t10.0.0.255:65535\n"
        );
        let mut b = binding("[2001:db8::1]:5060");
        b.strings = Strings::new(Parts {
            instance: "<urn:uuid:1>#1",
            ..b.parts()
        });
        let r = Record::Bind {
            seq: 0,
            aor: "bob@h".into(),
            binding: b,
        };
        out.clear();
        encode(&r, &mut out);
        assert!(
            out.ends_with(b"\t[2001:db8::1]:5060\t\t-\t\t<urn:uuid:1>#1\n"),
            "{out:?}"
        );
        let line = std::str::from_utf8(&out).expect("text");
        assert_eq!(decode(line.trim_end()), Some(r));
        let gone = Record::Remove {
            seq: 7,
            aor: "bob@h".into(),
            contact: "sip:bob@h".into(),
        };
        out.clear();
        encode(&gone, &mut out);
        assert_eq!(out, b"7\tD\tbob@h\tsip:bob@h\n");
        assert_eq!(decode("7\tD\tbob@h\tsip:bob@h"), Some(gone));
    }

    #[test]
    fn a_flow_is_written_as_its_transport_and_outbound_mark() {
        use crate::proto::location::Flow;
        use sip_core::Transport;
        for (flow, node, tail) in [
            (
                Flow {
                    transport: Transport::Tls,
                    outbound: true,
                },
                "",
                "\t\tTLS+ob\n",
            ),
            (
                Flow {
                    transport: Transport::Tcp,
                    outbound: false,
                },
                "<sip:t@n;lr>",
                "\t\tTCP\t<sip:t@n;lr>\n",
            ),
        ] {
            let mut b = binding("10.0.0.1:5060");
            b.flow = Some(flow);
            b.strings = Strings::new(Parts { node, ..b.parts() });
            let r = Record::Bind {
                seq: 1,
                aor: "a@h".into(),
                binding: b,
            };
            let mut out = Vec::new();
            encode(&r, &mut out);
            assert!(out.ends_with(tail.as_bytes()), "{out:?}");
            let line = std::str::from_utf8(&out).expect("text");
            assert_eq!(decode(line.trim_end()), Some(r));
        }
    }
}
