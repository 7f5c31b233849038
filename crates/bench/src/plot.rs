//! Plots as self-contained SVG (line and bar charts with axes, ticks and a
//! legend) and the HTML page that shows a run's tables and plots. Written
//! directly: no font files or rendering stack to install.

use crate::error::Error;
use std::fmt::Write as _;

const W: f64 = 720.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// The legend's column, right of the plot so that it covers no data.
const LEGEND: f64 = 190.0;
const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// Escapes text for SVG and HTML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" step for about `n` ticks over `span`.
fn tick_step(span: f64, n: f64) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / n;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm < 1.5 {
        1.0
    } else if norm < 3.5 {
        2.0
    } else if norm < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn label(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        LEFT + (x - self.x0) / (self.x1 - self.x0).max(f64::MIN_POSITIVE) * (W - LEFT - RIGHT)
    }
    fn py(&self, y: f64) -> f64 {
        H - BOTTOM - (y - self.y0) / (self.y1 - self.y0).max(f64::MIN_POSITIVE) * (H - TOP - BOTTOM)
    }
}

fn open(s: &mut String, title: &str, x_label: &str, y_label: &str) {
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{H}" viewBox="0 0 {0} {H}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{1}" y="22" text-anchor="middle" font-size="15">{2}</text><text x="{1}" y="{3}" text-anchor="middle">{4}</text><text x="16" y="{5}" text-anchor="middle" transform="rotate(-90 16 {5})">{6}</text>"#,
        W + LEGEND,
        (LEFT + W - RIGHT) / 2.0,
        escape(title),
        H - 10.0,
        escape(x_label),
        (TOP + H - BOTTOM) / 2.0,
        escape(y_label)
    );
}

/// The x and y axis lines around the plot area.
fn frame_lines(s: &mut String) {
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#333"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{0}" stroke="#333"/>"##,
        H - BOTTOM,
        W - RIGHT,
    );
}

/// A horizontal grid line at `py` with its value left of the y axis.
fn gridline(s: &mut String, py: f64, text: &str) {
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{text}</text>"##,
        W - RIGHT,
        LEFT - 6.0,
        py + 4.0,
    );
}

fn axes(s: &mut String, f: &Frame, x_ticks: bool) {
    frame_lines(s);
    let step = tick_step(f.y1 - f.y0, 5.0);
    let mut y = (f.y0 / step).ceil() * step;
    while y <= f.y1 + step * 1e-9 {
        let py = f.py(y);
        gridline(s, py, &label(y));
        y += step;
    }
    if x_ticks {
        let step = tick_step(f.x1 - f.x0, 8.0);
        let mut x = (f.x0 / step).ceil() * step;
        while x <= f.x1 + step * 1e-9 {
            let px = f.px(x);
            let _ = write!(
                s,
                r##"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="#333"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
                H - BOTTOM,
                H - BOTTOM + 5.0,
                H - BOTTOM + 18.0,
                label(x)
            );
            x += step;
        }
    }
}

fn legend(s: &mut String, names: &[&str]) {
    for (i, n) in names.iter().enumerate() {
        let y = TOP + 8.0 + 16.0 * i as f64;
        let x = W + 4.0;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            y - 10.0,
            COLORS[i % COLORS.len()],
            x + 18.0,
            y,
            escape(n)
        );
    }
}

/// Lines through points, one per named series.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> String {
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0_f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let f = Frame {
        x0,
        x1,
        y0: 0.0,
        y1: if y1 > 0.0 { y1 * 1.05 } else { 1.0 },
    };
    let mut s = String::new();
    open(&mut s, title, x_label, y_label);
    axes(&mut s, &f, true);
    for (i, (_, p)) in series.iter().enumerate() {
        let path: Vec<String> = p
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", f.px(x), f.py(y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            COLORS[i % COLORS.len()],
            path.join(" ")
        );
    }
    legend(&mut s, &series.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    s.push_str("</svg>");
    s
}

/// Grouped bars: one group per label, one bar per named series.
pub fn bars(title: &str, y_label: &str, labels: &[String], series: &[(&str, Vec<f64>)]) -> String {
    grouped(title, y_label, labels, series, false)
}

/// Grouped bars on a logarithmic axis (decades), for values that span
/// orders of magnitude; values ≤ 0 are left out.
pub fn bars_log(
    title: &str,
    y_label: &str,
    labels: &[String],
    series: &[(&str, Vec<f64>)],
) -> String {
    grouped(title, y_label, labels, series, true)
}

fn grouped(
    title: &str,
    y_label: &str,
    labels: &[String],
    series: &[(&str, Vec<f64>)],
    log: bool,
) -> String {
    let shown = |v: f64| v.is_finite() && (!log || v > 0.0);
    let values = || {
        series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| shown(*v))
    };
    let top = values().fold(0.0_f64, f64::max);
    let f = if log {
        let lo = values().fold(f64::INFINITY, f64::min);
        let (lo, hi) = if lo.is_finite() {
            (
                lo.log10().floor(),
                top.log10().ceil().max(lo.log10().floor() + 1.0),
            )
        } else {
            (0.0, 1.0)
        };
        Frame {
            x0: 0.0,
            x1: labels.len().max(1) as f64,
            y0: lo,
            y1: hi,
        }
    } else {
        Frame {
            x0: 0.0,
            x1: labels.len().max(1) as f64,
            y0: 0.0,
            y1: if top > 0.0 { top * 1.1 } else { 1.0 },
        }
    };
    let mut s = String::new();
    open(&mut s, title, "", y_label);
    if log {
        log_axes(&mut s, &f);
    } else {
        axes(&mut s, &f, false);
    }
    let group = (W - LEFT - RIGHT) / labels.len().max(1) as f64;
    let bar = group * 0.8 / series.len().max(1) as f64;
    for (g, l) in labels.iter().enumerate() {
        let gx = LEFT + group * g as f64;
        // "RSA-3072 (318 B)": the part in brackets on a second line, so
        // that neighbouring groups' labels do not run into each other.
        let cx = gx + group / 2.0;
        let (first, second) = l.split_once(" (").map_or((l.as_str(), ""), |(a, b)| (a, b));
        let _ = write!(
            s,
            r#"<text x="{cx:.1}" y="{}" text-anchor="middle">{}"#,
            H - BOTTOM + 16.0,
            escape(first)
        );
        if !second.is_empty() {
            let _ = write!(
                s,
                r#"<tspan x="{cx:.1}" dy="14">({}</tspan>"#,
                escape(second)
            );
        }
        s.push_str("</text>");
        for (i, (_, v)) in series.iter().enumerate() {
            let Some(&val) = v.get(g) else { continue };
            if !shown(val) {
                continue;
            }
            let y = f.py(if log { val.log10() } else { val });
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
                gx + group * 0.1 + bar * i as f64,
                bar,
                (H - BOTTOM - y).max(0.0),
                COLORS[i % COLORS.len()],
                label(val)
            );
        }
    }
    legend(&mut s, &series.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    s.push_str("</svg>");
    s
}

/// The axes of a log chart: the frame's y runs over decades (log10).
fn log_axes(s: &mut String, f: &Frame) {
    frame_lines(s);
    let mut d = f.y0;
    while d <= f.y1 + 1e-9 {
        let py = f.py(d);
        gridline(s, py, &label(10f64.powf(d)));
        d += 1.0;
    }
}

/// An HTML page of titled sections (each already HTML: tables, SVG).
pub fn page(title: &str, sections: &[(String, String)]) -> String {
    let mut s = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{0}</title><style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f4f4f4}}</style></head><body><h1>{0}</h1>",
        escape(title)
    );
    for (h, body) in sections {
        let _ = write!(s, "<h2>{}</h2>{body}", escape(h));
    }
    s.push_str("</body></html>\n");
    s
}

/// An HTML table.
pub fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table><tr>");
    for h in head {
        let _ = write!(s, "<th>{}</th>", escape(h));
    }
    s.push_str("</tr>");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            let _ = write!(s, "<td>{}</td>", escape(c));
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

/// The SVG plots of a page made by [`page`], in order.
pub fn svgs(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<svg") {
        let Some(len) = rest[start..].find("</svg>") else {
            break;
        };
        let end = start + len + "</svg>".len();
        out.push(&rest[start..end]);
        rest = &rest[end..];
    }
    out
}

/// Writes each plot of `html` into `dir` as `NAME-K.svg`, and as
/// `NAME-K.png` too when `rsvg-convert` (Debian: librsvg2-bin) is there.
/// Returns the files written.
pub fn write_files(
    html: &str,
    dir: &std::path::Path,
    name: &str,
) -> Result<Vec<std::path::PathBuf>, Error> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
    let mut files = Vec::new();
    for (k, svg) in svgs(html).into_iter().enumerate() {
        let base = dir.join(format!("{name}-{}", k + 1));
        let svg_path = base.with_extension("svg");
        std::fs::write(&svg_path, svg).map_err(Error::io(svg_path.display()))?;
        files.push(svg_path);
        let png = base.with_extension("png");
        let child = std::process::Command::new("rsvg-convert")
            .arg("-o")
            .arg(&png)
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            continue; // No converter: SVG only.
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(svg.as_bytes());
        }
        if child.wait().is_ok_and(|s| s.success()) {
            files.push(png);
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(tick_step(100.0, 5.0), 20.0);
        assert_eq!(tick_step(7.0, 5.0), 1.0);
        assert_eq!(tick_step(0.0, 5.0), 1.0);
        assert_eq!(label(25_000.0), "25k");
        assert_eq!(label(3.0), "3");
    }

    #[test]
    fn charts_are_well_formed_svg() {
        let l = lines(
            "achieved <vs> offered",
            "offered",
            "calls/s",
            &[("sipsec", vec![(1.0, 1.0), (2.0, 2.0)]), ("empty", vec![])],
        );
        assert!(l.starts_with("<svg") && l.ends_with("</svg>"));
        assert!(l.contains("&lt;vs&gt;"), "titles are escaped");
        assert_eq!(l.matches("<polyline").count(), 2);
        let b = bars(
            "cpu",
            "µs",
            &["register".into(), "invite".into()],
            &[("a", vec![1.0, f64::NAN]), ("b", vec![2.0, 3.0])],
        );
        assert_eq!(
            b.matches("<rect x").count(),
            3 + 2,
            "3 bars + 2 legend boxes"
        );
        let legend_x: Vec<f64> = b
            .match_indices(r#"<rect x=""#)
            .map(|(i, m)| {
                let rest = &b[i + m.len()..];
                rest[..rest.find('"').unwrap()].parse().unwrap()
            })
            .filter(|x| *x >= W)
            .collect();
        assert_eq!(legend_x.len(), 2, "the legend is right of the plot: {b}");
        let two = bars_log(
            "decrypt",
            "µs",
            &["RSA-3072 (318 B)".into()],
            &[("a", vec![10.0])],
        );
        assert!(
            two.contains(r#">RSA-3072<tspan x="#) && two.contains(r#"dy="14">(318 B)</tspan>"#),
            "{two}"
        );
        let p = page(
            "run",
            &[
                ("t".into(), table(&["a"], &[vec!["<1>".into()]])),
                ("plots".into(), format!("{l}{b}")),
            ],
        );
        assert!(p.contains("<td>&lt;1&gt;</td>"));
        assert_eq!(svgs(&p), [l.as_str(), b.as_str()]);
    }
}
