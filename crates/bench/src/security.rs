//! `sipsec bench security`: what each security layer costs, in one run.
//!
//! Each row is one operation with one more layer than the row it builds
//! on (plain REGISTER → digest MD5 → digest SHA-256 → over TCP → over
//! TLS; a full TLS handshake with each server key and key exchange; a
//! resumed one; SRTP per packet; PrivaSIP per call; STIR/SHAKEN per
//! INVITE). The figures come from the experiments that measure each
//! layer on its own (`bench compare`, `bench connections`, `bench srtp`,
//! `bench privacy-route`, `bench stir`), run here one after the other on
//! the same machine with the same rounds; this module only renders them.

use std::fmt::Write as _;

use serde::Serialize;

use crate::plot;

/// One operation with one more layer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// The group of layers: signalling, TLS handshake, media, privacy,
    /// caller identity.
    pub section: String,
    /// What was measured, with its layers (e.g. "REGISTER, UDP, digest MD5").
    pub layer: String,
    /// The unit of `sipsec` and `peer`: "µs CPU" (the server's, per
    /// operation), "ns" (per packet, in process).
    pub unit: String,
    /// sipsec's figure in each round.
    pub sipsec: Vec<f64>,
    /// The peer measured beside it (Kamailio, libsrtp), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_name: Option<String>,
    /// The peer's figure in each round.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peer: Vec<f64>,
    /// Bytes on the wire per operation with sipsec (both directions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<f64>,
    /// The same with the peer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_bytes: Option<f64>,
    /// Median and 99th-percentile latency with sipsec, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<(f64, f64)>,
    /// The layer this row adds to (a `layer` of an earlier row): the
    /// table shows sipsec's cost above it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over: Option<String>,
}

/// The median (NaN for none).
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

impl Row {
    /// sipsec's median.
    pub fn value(&self) -> f64 {
        median(&self.sipsec)
    }

    /// The peer's median.
    pub fn peer_value(&self) -> f64 {
        median(&self.peer)
    }

    /// sipsec over the peer: the median of the rounds' own ratios (each
    /// round ran both back to back).
    pub fn ratio(&self) -> f64 {
        let ratios: Vec<f64> = self
            .sipsec
            .iter()
            .zip(&self.peer)
            .map(|(a, b)| a / b)
            .collect();
        median(&ratios)
    }

    /// sipsec's cost above the row it builds on.
    pub fn added(&self, rows: &[Row]) -> Option<f64> {
        let base = self.over.as_ref()?;
        let b = rows.iter().find(|r| &r.layer == base)?;
        Some(self.value() - b.value())
    }
}

fn figure(v: &[f64]) -> String {
    let m = median(v);
    if !m.is_finite() {
        return "–".into();
    }
    let places = if m.abs() >= 100.0 { 0 } else { 1 };
    if v.len() > 1 {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{m:.places$} [{lo:.places$}–{hi:.places$}]")
    } else {
        format!("{m:.places$}")
    }
}

fn opt(v: Option<f64>, places: usize) -> String {
    v.filter(|x| x.is_finite())
        .map_or("–".into(), |x| format!("{x:.places$}"))
}

/// The cells of one row, as the markdown table and the page show them.
fn cells(r: &Row, rows: &[Row]) -> Vec<String> {
    let ratio = r.ratio();
    vec![
        r.section.clone(),
        r.layer.clone(),
        r.unit.clone(),
        figure(&r.sipsec),
        opt(r.added(rows), 1),
        r.peer_name.clone().unwrap_or_else(|| "–".into()),
        figure(&r.peer),
        if ratio.is_finite() {
            format!("{ratio:.2}")
        } else {
            "–".into()
        },
        opt(r.bytes, 0),
        opt(r.peer_bytes, 0),
        r.latency_ms
            .map_or("–".into(), |(a, b)| format!("{a:.2} / {b:.2}")),
    ]
}

const HEAD: [&str; 11] = [
    "section",
    "operation and layers",
    "unit",
    "sipsec",
    "sipsec added",
    "peer",
    "peer's",
    "sipsec/peer",
    "bytes sipsec",
    "bytes peer",
    "sipsec p50 / p99 ms",
];

/// The markdown table; figures of several rounds show their median and
/// range.
pub fn table(rows: &[Row]) -> String {
    let mut s = format!("| {} |\n", HEAD.join(" | "));
    s.push_str(&"|---".repeat(HEAD.len()));
    s.push_str("|\n");
    for r in rows {
        let _ = writeln!(s, "| {} |", cells(r, rows).join(" | "));
    }
    s
}

/// The HTML page: the table, then per section sipsec beside its peer.
pub fn html(rows: &[Row]) -> String {
    let body: Vec<Vec<String>> = rows.iter().map(|r| cells(r, rows)).collect();
    let mut sections = vec![("Every layer, one run".to_owned(), plot::table(&HEAD, &body))];
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.section.as_str()) {
            names.push(&r.section);
        }
    }
    for name in names {
        let of: Vec<&Row> = rows.iter().filter(|r| r.section == name).collect();
        let labels: Vec<String> = of.iter().map(|r| r.layer.clone()).collect();
        let mut series = vec![("sipsec", of.iter().map(|r| r.value()).collect())];
        if let Some(peer) = of.iter().find_map(|r| r.peer_name.as_deref()) {
            series.push((peer, of.iter().map(|r| r.peer_value()).collect()));
        }
        let unit = &of[0].unit;
        let title = format!("{name}: {unit} per operation");
        let chart = plot::bars_log(&title, "", unit, &labels, &series);
        sections.push((title, chart));
    }
    plot::page("sipsec bench security", &sections)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(layer: &str, sipsec: &[f64], peer: &[f64], over: Option<&str>) -> Row {
        Row {
            section: "signalling".into(),
            layer: layer.into(),
            unit: "µs CPU".into(),
            sipsec: sipsec.to_vec(),
            peer_name: (!peer.is_empty()).then(|| "kamailio".into()),
            peer: peer.to_vec(),
            over: over.map(str::to_owned),
            ..Row::default()
        }
    }

    #[test]
    fn a_layer_shows_its_cost_over_the_one_below_and_its_ratio_per_round() {
        let rows = vec![
            row(
                "REGISTER, UDP",
                &[10.0, 12.0, 11.0],
                &[30.0, 30.0, 33.0],
                None,
            ),
            row(
                "REGISTER, UDP, digest MD5",
                &[15.0, 14.0, 16.0],
                &[40.0, 35.0, 48.0],
                Some("REGISTER, UDP"),
            ),
        ];
        assert_eq!(rows[1].added(&rows), Some(4.0));
        // Ratios 0.375, 0.4, 0.333…: the median of the rounds' ratios.
        assert!((rows[1].ratio() - 0.375).abs() < 1e-9);
        let t = table(&rows);
        assert!(t.contains("| 15.0 [14.0–16.0] | 4.0 | kamailio |"), "{t}");
        assert!(t.lines().count() == 4, "{t}");
        let page = html(&rows);
        assert!(page.contains("<svg") && page.contains("digest MD5"));
    }

    #[test]
    fn a_row_without_a_peer_or_figures_renders_dashes() {
        let rows = vec![row("SRTP", &[], &[], Some("missing"))];
        let t = table(&rows);
        assert!(t.contains("| – | – | – | – | – |"), "{t}");
    }
}
