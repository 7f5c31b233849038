//! The location's records as text: one line per binding change, the form
//! the embedded journal stores and a shared location's store and change
//! feed carry. A line that does not read back is refused whole.

use std::io::Write as _;

use crate::proto::location::{Binding, Flow, Record};

/// Writes a binding of `aor` as a line of sequence `seq` (snapshots write
/// every live binding this way).
pub fn encode_bind(seq: u64, aor: &str, b: &Binding, out: &mut Vec<u8>) {
    let _ = write!(
        out,
        "{seq}\tB\t{aor}\t{}\t{}\t{}\t{}\t{}\t{}",
        b.contact, b.expires_at, b.q, b.call_id, b.cseq, b.source
    );
    // Path, the flow, its node and the phone's instance are trailing
    // fields, absent from records written before them (and when empty
    // at the end); a flow is "-" when there is none but an instance.
    let flow = b.flow.map(Flow::encode);
    let tail: [&str; 4] = [
        &b.path,
        flow.as_deref()
            .unwrap_or(if b.instance.is_empty() { "" } else { "-" }),
        &b.node,
        &b.instance,
    ];
    let used = tail
        .iter()
        .rposition(|f| !f.is_empty())
        .map_or(0, |i| i + 1);
    for f in &tail[..used] {
        let _ = write!(out, "\t{f}");
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
        } => encode_bind(*seq, aor, b, out),
        Record::Remove { seq, aor, contact } => {
            let _ = writeln!(out, "{seq}\tD\t{aor}\t{contact}");
        }
    }
}

/// Reads a line [`encode`] wrote (without its line feed).
pub fn decode(line: &str) -> Option<Record> {
    let mut f = line.split('\t');
    let seq = f.next()?.parse().ok()?;
    match f.next()? {
        "B" => {
            let aor = f.next()?.to_owned();
            let binding = Binding {
                contact: f.next()?.to_owned(),
                expires_at: f.next()?.parse().ok()?,
                q: f.next()?.parse().ok()?,
                call_id: f.next()?.to_owned(),
                cseq: f.next()?.parse().ok()?,
                source: f.next()?.parse().ok()?,
                path: f.next().unwrap_or("").to_owned(),
                flow: match f.next() {
                    None | Some("" | "-") => None,
                    Some(flow) => Some(Flow::decode(flow)?),
                },
                node: f.next().unwrap_or("").to_owned(),
                instance: f.next().unwrap_or("").to_owned(),
            };
            f.next()
                .is_none()
                .then_some(Record::Bind { seq, aor, binding })
        }
        "D" => {
            let aor = f.next()?.to_owned();
            let contact = f.next()?.to_owned();
            f.next()
                .is_none()
                .then_some(Record::Remove { seq, aor, contact })
        }
        _ => None,
    }
}
