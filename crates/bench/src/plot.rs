//! Plots as self-contained SVG (line and bar charts with axes, ticks and a
//! legend) and the HTML page that shows a run's tables and plots. Written
//! directly: no font files or rendering stack to install.
//!
//! Text is laid out from an estimate of its width ([`text_width`]: a
//! generous average advance per character), so margins grow to fit tick
//! labels and legends, and category labels that would run into each other
//! are rotated. Every series has its own colour and dash pattern, so a
//! series drawn over an identical one stays visible.

use crate::error::Error;
use std::fmt::Write as _;

/// Width of the plot area.
const PLOT_W: f64 = 640.0;
/// Height of the plot area.
const PLOT_H: f64 = 310.0;
const TOP: f64 = 40.0;
const RIGHT: f64 = 20.0;
const FONT: f64 = 12.0;
const TITLE_FONT: f64 = 15.0;
/// Height of one line of axis text.
const LINE: f64 = 16.0;
/// How far rotated category labels lean (degrees).
const SLANT: f64 = 40.0;
const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];
/// Dash patterns by series: the first solid and wide (drawn first, below),
/// the next dashed or dotted over it.
const DASHES: [&str; 4] = ["", "8 4", "2 3", "10 3 2 3"];

/// Escapes text for SVG and HTML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An upper estimate of how wide `text` is at `size` px in a sans-serif
/// font: 0.62 em per character (Latin capitals and digits average about
/// 0.6 em, lower case less).
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * 0.62 * size
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

/// `v` with at most `decimals` decimals and no trailing zeros.
fn trimmed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    if s == "-0" {
        "0".to_owned()
    } else {
        s
    }
}

/// A tick value: `1M`, `2.5M`, `25k`, `150`, `0.05`.
pub fn label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trimmed(v / 1e6, 2))
    } else if a >= 1e4 {
        format!("{}k", trimmed(v / 1e3, 1))
    } else if a >= 1.0 || a == 0.0 {
        trimmed(v, 2)
    } else {
        // Enough decimals for three significant digits.
        let d = (2.0 - a.log10().floor()).clamp(0.0, 12.0) as usize;
        trimmed(v, d)
    }
}

/// The space around the plot area, grown to fit what is drawn there.
struct Layout {
    left: f64,
    /// Below the plot area: tick or category labels, then the x title.
    bottom: f64,
    /// The legend's column, right of the plot so that it covers no data.
    legend: f64,
}

impl Layout {
    /// `below`: what the x axis labels need; `min_left`: what the first
    /// category label reaches left of the plot area.
    fn new(y_ticks: &[String], names: &[&str], below: f64, min_left: f64) -> Self {
        let widest = y_ticks
            .iter()
            .map(|t| text_width(t, FONT))
            .fold(0.0, f64::max);
        let legend = names
            .iter()
            .map(|n| text_width(n, FONT))
            .fold(0.0, f64::max);
        Self {
            left: (32.0 + widest).max(min_left),
            bottom: below + LINE + 10.0,
            legend: if names.is_empty() { 0.0 } else { 40.0 + legend },
        }
    }
    fn width(&self) -> f64 {
        self.left + PLOT_W + RIGHT + self.legend
    }
    fn height(&self) -> f64 {
        TOP + PLOT_H + self.bottom
    }
    /// The y of the x axis.
    fn base(&self) -> f64 {
        TOP + PLOT_H
    }
}

/// Maps data to pixels; with `log_x` or `log_y` the frame's bounds are
/// decades (log10) and values are mapped through log10.
struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    log_x: bool,
    log_y: bool,
    /// Every x is a whole number (a count: workers, connections): no
    /// ticks between them.
    whole_x: bool,
}

impl Frame {
    fn px(&self, l: &Layout, x: f64) -> f64 {
        let x = if self.log_x { x.log10() } else { x };
        l.left + (x - self.x0) / (self.x1 - self.x0).max(f64::MIN_POSITIVE) * PLOT_W
    }
    fn py(&self, l: &Layout, y: f64) -> f64 {
        let y = if self.log_y { y.log10() } else { y };
        l.base() - (y - self.y0) / (self.y1 - self.y0).max(f64::MIN_POSITIVE) * PLOT_H
    }
    /// Tick values on y (data units, not log).
    fn y_ticks(&self) -> Vec<f64> {
        if self.log_y {
            decades(self.y0, self.y1)
        } else {
            linear_ticks(self.y0, self.y1, 5.0, 0.0)
        }
    }
    fn x_ticks(&self) -> Vec<f64> {
        if self.log_x {
            let d = decades(self.x0, self.x1);
            if self.x1 - self.x0 <= 3.0 {
                // Few decades: 1, 2, 5 in each.
                d.iter()
                    .flat_map(|v| [*v, v * 2.0, v * 5.0])
                    .filter(|v| v.log10() <= self.x1 + 1e-9)
                    .collect()
            } else {
                d
            }
        } else {
            let least = if self.whole_x { 1.0 } else { 0.0 };
            linear_ticks(self.x0, self.x1, 8.0, least)
        }
    }
}

/// About `n` round ticks from `lo` to `hi`, at least `least` apart.
fn linear_ticks(lo: f64, hi: f64, n: f64, least: f64) -> Vec<f64> {
    let step = tick_step(hi - lo, n).max(least);
    let mut out = Vec::new();
    let mut k = (lo / step).ceil();
    while k * step <= hi + step * 1e-9 && out.len() < 50 {
        out.push(k * step);
        k += 1.0;
    }
    out
}

/// 10^d for every whole d in `lo..=hi`.
fn decades(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut d = lo.ceil();
    while d <= hi + 1e-9 && out.len() < 40 {
        out.push(10f64.powf(d));
        d += 1.0;
    }
    out
}

/// The opening tag, a `<title>` (which names the plot's file), the title
/// (smaller when long, so that it fits) and the axis titles.
fn open(s: &mut String, l: &Layout, title: &str, x_label: &str, y_label: &str) {
    let (w, h) = (l.width(), l.height());
    let room = w - 20.0;
    let size = if text_width(title, TITLE_FONT) > room {
        (room / (text_width(title, 1.0))).max(8.0)
    } else {
        TITLE_FONT
    };
    let cx = (l.left + l.left + PLOT_W) / 2.0;
    // Centred over the plot area unless that pushes it off the picture.
    let half = text_width(title, size) / 2.0;
    let tx = cx.clamp(10.0 + half, w - 10.0 - half);
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="sans-serif" font-size="{FONT}"><title>{t}</title><rect width="100%" height="100%" fill="white"/><text x="{tx:.1}" y="24" text-anchor="middle" font-size="{size:.1}">{t}</text>"#,
        t = escape(title),
    );
    if !x_label.is_empty() {
        let _ = write!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            h - 10.0,
            escape(x_label)
        );
    }
    let my = TOP + PLOT_H / 2.0;
    let _ = write!(
        s,
        r#"<text x="16" y="{my:.1}" text-anchor="middle" transform="rotate(-90 16 {my:.1})">{}</text>"#,
        escape(y_label)
    );
}

/// The x and y axis lines, and the y grid with its values.
fn y_axis(s: &mut String, l: &Layout, f: &Frame, ticks: &[(f64, String)]) {
    let (base, right) = (l.base(), l.left + PLOT_W);
    for (v, text) in ticks {
        let py = f.py(l, *v);
        let _ = write!(
            s,
            r##"<line x1="{0:.1}" y1="{py:.1}" x2="{right:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{1:.1}" y="{2:.1}" text-anchor="end">{text}</text>"##,
            l.left,
            l.left - 6.0,
            py + 4.0,
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{0:.1}" y1="{base:.1}" x2="{right:.1}" y2="{base:.1}" stroke="#333"/><line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{base:.1}" stroke="#333"/>"##,
        l.left,
    );
}

fn x_ticks(s: &mut String, l: &Layout, f: &Frame) {
    let base = l.base();
    for x in f.x_ticks() {
        let px = f.px(l, x);
        let _ = write!(
            s,
            r##"<line x1="{px:.1}" y1="{base:.1}" x2="{px:.1}" y2="{:.1}" stroke="#333"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            base + 5.0,
            base + 18.0,
            label(x)
        );
    }
}

/// The legend: a swatch (a line in the series' dash pattern, or a box)
/// and the name, one per row.
fn legend(s: &mut String, l: &Layout, names: &[&str], swatch_lines: bool) {
    let x = l.left + PLOT_W + RIGHT + 4.0;
    for (i, n) in names.iter().enumerate() {
        let y = TOP + 8.0 + LINE * i as f64;
        let color = COLORS[i % COLORS.len()];
        if swatch_lines {
            let _ = write!(
                s,
                r#"<line x1="{x:.1}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="{color}" stroke-width="{2}"{3}/>"#,
                y - 4.0,
                x + 24.0,
                if i == 0 { 3.5 } else { 2.0 },
                dash(i)
            );
        } else {
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{color}"/>"#,
                y - 10.0,
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{y:.1}">{}</text>"#,
            x + if swatch_lines { 30.0 } else { 18.0 },
            escape(n)
        );
    }
}

fn dash(i: usize) -> String {
    match DASHES[i % DASHES.len()] {
        "" => String::new(),
        d => format!(r#" stroke-dasharray="{d}""#),
    }
}

/// Lines through points, one per named series, on linear axes.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> String {
    line_chart(title, x_label, y_label, series, false)
}

/// Lines on a logarithmic x axis (decades, with 2 and 5 between them when
/// there are few), for latencies that span orders of magnitude; points at
/// x ≤ 0 are left out.
pub fn lines_log_x(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> String {
    line_chart(title, x_label, y_label, series, true)
}

fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    log_x: bool,
) -> String {
    let shown = |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite() && (!log_x || x > 0.0);
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0_f64);
    let mut whole_x = !log_x;
    for &(x, y) in series.iter().flat_map(|(_, p)| p.iter()).filter(shown) {
        whole_x &= x.fract() == 0.0;
        let x = if log_x { x.log10() } else { x };
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if log_x {
        (x0, x1) = (x0.floor(), x1.ceil());
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let f = Frame {
        x0,
        x1,
        y0: 0.0,
        y1: if y1 > 0.0 { y1 * 1.05 } else { 1.0 },
        log_x,
        log_y: false,
        whole_x,
    };
    let ticks: Vec<(f64, String)> = f.y_ticks().into_iter().map(|v| (v, label(v))).collect();
    let names: Vec<&str> = series.iter().map(|(n, _)| *n).collect();
    let texts: Vec<String> = ticks.iter().map(|(_, t)| t.clone()).collect();
    let l = Layout::new(&texts, &names, 22.0, 0.0);
    let mut s = String::new();
    open(&mut s, &l, title, x_label, y_label);
    y_axis(&mut s, &l, &f, &ticks);
    x_ticks(&mut s, &l, &f);
    for (i, (_, p)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = p
            .iter()
            .filter(shown)
            .map(|&(x, y)| (f.px(&l, x), f.py(&l, y)))
            .collect();
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="{}"{} points="{}"/>"#,
            if i == 0 { 3.5 } else { 2.0 },
            dash(i),
            path.join(" ")
        );
        if pts.len() <= 40 {
            for (x, y) in pts {
                let _ = write!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{color}"/>"#
                );
            }
        }
    }
    legend(&mut s, &l, &names, true);
    s.push_str("</svg>");
    s
}

/// Grouped bars: one group per category label, one bar per named series.
pub fn bars(
    title: &str,
    x_label: &str,
    y_label: &str,
    labels: &[String],
    series: &[(&str, Vec<f64>)],
) -> String {
    grouped(title, x_label, y_label, labels, series, false)
}

/// Grouped bars on a logarithmic axis (decades), for values that span
/// orders of magnitude; values ≤ 0 are left out.
pub fn bars_log(
    title: &str,
    x_label: &str,
    y_label: &str,
    labels: &[String],
    series: &[(&str, Vec<f64>)],
) -> String {
    grouped(title, x_label, y_label, labels, series, true)
}

/// How the category labels under bar groups are set: flat (a label's part
/// in brackets on a second line) when each fits its group, else slanted.
struct Categories<'a> {
    lines: Vec<(&'a str, &'a str)>,
    slanted: bool,
    /// Every n-th label is written (slanted labels closer than a line apart
    /// would overlap).
    every: usize,
}

impl<'a> Categories<'a> {
    fn new(labels: &'a [String], group: f64) -> Self {
        let lines: Vec<(&str, &str)> = labels
            .iter()
            .map(|l| l.split_once(" (").unwrap_or((l.as_str(), "")))
            .collect();
        let widest = lines
            .iter()
            .map(|(a, b)| text_width(a, FONT).max(text_width(b, FONT) + 6.0))
            .fold(0.0, f64::max);
        let slanted = widest > group - 8.0;
        let gap = group * SLANT.to_radians().sin();
        let every = if slanted {
            (LINE / gap).ceil().max(1.0) as usize
        } else {
            1
        };
        Self {
            lines,
            slanted,
            every,
        }
    }
    fn widest_full(&self, labels: &[String]) -> f64 {
        labels
            .iter()
            .map(|l| text_width(l, FONT))
            .fold(0.0, f64::max)
    }
    /// The height the labels take below the axis.
    fn below(&self, labels: &[String]) -> f64 {
        if self.slanted {
            let (sin, cos) = SLANT.to_radians().sin_cos();
            14.0 + self.widest_full(labels) * sin + FONT * cos + 4.0
        } else if self.lines.iter().any(|(_, b)| !b.is_empty()) {
            36.0
        } else {
            22.0
        }
    }
    /// How far slanted labels reach left of the plot area (groups `group`
    /// wide): the margin that keeps them in the picture.
    fn reach_left(&self, labels: &[String], group: f64) -> f64 {
        if !self.slanted {
            return 0.0;
        }
        labels
            .iter()
            .enumerate()
            .map(|(g, l)| text_width(l, FONT) * SLANT.to_radians().cos() - group * (g as f64 + 0.5))
            .fold(0.0, f64::max)
    }
    fn write(&self, s: &mut String, labels: &[String], g: usize, cx: f64, base: f64) {
        if !g.is_multiple_of(self.every) {
            return;
        }
        if self.slanted {
            let y = base + 14.0;
            let _ = write!(
                s,
                r#"<text x="{cx:.1}" y="{y:.1}" text-anchor="end" transform="rotate(-{SLANT} {cx:.1} {y:.1})">{}</text>"#,
                escape(&labels[g])
            );
            return;
        }
        let (first, second) = self.lines[g];
        let _ = write!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}"#,
            base + 16.0,
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
    }
}

fn grouped(
    title: &str,
    x_label: &str,
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
    let groups = labels.len().max(1) as f64;
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
            x1: groups,
            y0: lo,
            y1: hi,
            log_x: false,
            log_y: true,
            whole_x: false,
        }
    } else {
        Frame {
            x0: 0.0,
            x1: groups,
            y0: 0.0,
            y1: if top > 0.0 { top * 1.1 } else { 1.0 },
            log_x: false,
            log_y: false,
            whole_x: false,
        }
    };
    let ticks: Vec<(f64, String)> = f.y_ticks().into_iter().map(|v| (v, label(v))).collect();
    let names: Vec<&str> = series.iter().map(|(n, _)| *n).collect();
    let texts: Vec<String> = ticks.iter().map(|(_, t)| t.clone()).collect();
    let group = PLOT_W / groups;
    let cats = Categories::new(labels, group);
    let l = Layout::new(
        &texts,
        &names,
        cats.below(labels),
        cats.reach_left(labels, group) + 10.0,
    );
    let mut s = String::new();
    open(&mut s, &l, title, x_label, y_label);
    y_axis(&mut s, &l, &f, &ticks);
    let bar = group * 0.8 / series.len().max(1) as f64;
    for g in 0..labels.len() {
        let gx = l.left + group * g as f64;
        cats.write(&mut s, labels, g, gx + group / 2.0, l.base());
        for (i, (_, v)) in series.iter().enumerate() {
            let Some(&val) = v.get(g) else { continue };
            if !shown(val) {
                continue;
            }
            let y = f.py(&l, val);
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
                gx + group * 0.1 + bar * i as f64,
                bar,
                (l.base() - y).max(0.0),
                COLORS[i % COLORS.len()],
                label(val)
            );
        }
    }
    legend(&mut s, &l, &names, false);
    s.push_str("</svg>");
    s
}

/// An HTML page of titled sections (each already HTML: tables, SVG).
pub fn page(title: &str, sections: &[(String, String)]) -> String {
    let mut s = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{0}</title><style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f4f4f4}}table.about td,table.about th{{text-align:left}}svg{{max-width:100%;height:auto}}</style></head><body><h1>{0}</h1>",
        escape(title)
    );
    for (h, body) in sections {
        let _ = write!(s, "<h2>{}</h2>{body}", escape(h));
    }
    s.push_str("</body></html>\n");
    s
}

/// `page` with `html` inserted under its heading (e.g. how the run was made).
pub fn after_heading(page: &str, html: &str) -> String {
    match page.find("</h1>") {
        Some(i) => {
            let at = i + "</h1>".len();
            format!("{}{html}{}", &page[..at], &page[at..])
        }
        None => format!("{html}{page}"),
    }
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

/// A markdown table (a header row, the `|---|` row, body rows) as an
/// HTML [`table`].
pub fn markdown_table(md: &str) -> String {
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let mut lines = md.lines();
    let head = cells(lines.next().unwrap_or(""));
    let rows: Vec<Vec<String>> = lines.skip(1).map(cells).collect();
    table(&head.iter().map(String::as_str).collect::<Vec<_>>(), &rows)
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

/// A file name from a plot's title: lower-case letters and digits, words
/// joined by `-` ("Server CPU µs per call, with digest" →
/// "server-cpu-s-per-call-with-digest"), at most 60 characters.
pub fn slug(title: &str) -> String {
    let mut s = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.is_empty() && !s.ends_with('-') {
            s.push('-');
        }
    }
    let mut s: String = s.trim_end_matches('-').chars().take(60).collect();
    while s.ends_with('-') {
        s.pop();
    }
    if s.is_empty() {
        "plot".to_owned()
    } else {
        s
    }
}

/// The text of an SVG's `<title>`, unescaped enough for a file name.
fn svg_title(svg: &str) -> &str {
    svg.split_once("<title>")
        .and_then(|(_, rest)| rest.split_once("</title>"))
        .map_or("", |(t, _)| t)
}

/// `svg` with `caption` in a line of its own under the plot (the height
/// grown to hold it), so a file read alone says what made it.
pub fn with_caption(svg: &str, caption: &str) -> String {
    const LINE: f64 = 18.0;
    let head_end = svg.find('>').unwrap_or(0);
    let head = &svg[..head_end];
    let value = |key: &str| -> Option<(usize, usize)> {
        let at = head.find(key)? + key.len();
        Some((at, at + head[at..].find('"')?))
    };
    let (Some((h0, h1)), Some((v0, v1))) = (value(" height=\""), value(" viewBox=\"")) else {
        return svg.to_owned();
    };
    let Ok(h) = head[h0..h1].parse::<f64>() else {
        return svg.to_owned();
    };
    let view: Vec<&str> = head[v0..v1].split_whitespace().collect();
    let [x, y, w, vh] = view[..] else {
        return svg.to_owned();
    };
    let vh: f64 = vh.parse().unwrap_or(h);
    let mut out = String::with_capacity(svg.len() + caption.len() + 128);
    out.push_str(&head[..h0]);
    out.push_str(&format!("{:.0}", h + LINE));
    out.push_str(&head[h1..v0]);
    out.push_str(&format!("{x} {y} {w} {:.0}", vh + LINE));
    out.push_str(&svg[v1..]);
    let close = out.rfind("</svg>").unwrap_or(out.len());
    let text = format!(
        r##"<rect x="0" y="{vh:.0}" width="100%" height="{LINE:.0}" fill="white"/><text x="6" y="{:.0}" font-size="10" fill="#555">{}</text>"##,
        vh + LINE - 5.0,
        escape(caption)
    );
    out.insert_str(close, &text);
    out
}

/// Writes each plot of `html` into `dir` as `NAME-TITLE.svg` (the title
/// made a [`slug`]; a repeated one gets `-2`, `-3`), and as `.png` too
/// when `rsvg-convert` (Debian: librsvg2-bin) is there, each with
/// `caption` under it. Returns the files written.
pub fn write_files(
    html: &str,
    dir: &std::path::Path,
    name: &str,
    caption: &str,
) -> Result<Vec<std::path::PathBuf>, Error> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir).map_err(Error::io(dir.display()))?;
    let mut files = Vec::new();
    let mut used = std::collections::HashMap::<String, usize>::new();
    for svg in svgs(html) {
        let stem = format!("{name}-{}", slug(&svg_title(svg).replace("&amp;", "and")));
        let n = used.entry(stem.clone()).or_insert(0);
        *n += 1;
        let stem = if *n == 1 { stem } else { format!("{stem}-{n}") };
        let svg = with_caption(svg, caption);
        let svg = svg.as_str();
        let svg_path = dir.join(format!("{stem}.svg"));
        std::fs::write(&svg_path, svg).map_err(Error::io(svg_path.display()))?;
        files.push(svg_path);
        let png = dir.join(format!("{stem}.png"));
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
    fn counts_on_x_get_no_ticks_between_them() {
        let points = |y: f64| vec![(1.0, y), (2.0, y * 1.5)];
        let svg = lines("scale", "workers", "calls/s", &[("a", points(10.0))]);
        for tick in [">1<", ">2<"] {
            assert!(svg.contains(tick), "{tick} missing");
        }
        assert!(!svg.contains(">1.5<") && !svg.contains(">1.1<"), "{svg}");
        // Fractions on x still get ticks between whole numbers.
        let svg = lines("f", "s", "y", &[("a", vec![(0.5, 1.0), (1.5, 2.0)])]);
        assert!(svg.contains(">1<") && svg.contains(">0.6<"), "{svg}");
    }

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(tick_step(100.0, 5.0), 20.0);
        assert_eq!(tick_step(7.0, 5.0), 1.0);
        assert_eq!(tick_step(0.0, 5.0), 1.0);
        assert_eq!(label(25_000.0), "25k");
        assert_eq!(label(12_500.0), "12.5k");
        assert_eq!(label(1_000_000.0), "1M", "not 1000k");
        assert_eq!(label(2_500_000.0), "2.5M");
        assert_eq!(label(3.0), "3");
        assert_eq!(label(0.30000000000000004), "0.3");
        assert_eq!(label(0.05), "0.05");
        assert_eq!(label(0.001), "0.001");
        assert_eq!(label(0.0), "0");
    }

    #[test]
    fn a_caption_grows_the_plot_under_it() {
        let svg = lines(
            "Calls",
            "rate",
            "calls/s",
            &[("a", vec![(1.0, 2.0), (2.0, 3.0)])],
        );
        let height = |s: &str| -> f64 {
            let at = s.find(" height=\"").expect("height") + 9;
            s[at..at + s[at..].find('"').expect("quote")]
                .parse()
                .expect("number")
        };
        let c = with_caption(&svg, "register · 2026-11-26 by sipsec <x>");
        assert_eq!(height(&c), height(&svg) + 18.0);
        assert!(
            c.contains("register · 2026-11-26 by sipsec &lt;x&gt;</text></svg>"),
            "{c}"
        );
        assert!(c.starts_with("<svg") && c.ends_with("</svg>"));
    }

    #[test]
    fn slugs_name_files() {
        assert_eq!(
            slug("Server CPU µs per call, with digest"),
            "server-cpu-s-per-call-with-digest"
        );
        assert_eq!(slug("p99 latency"), "p99-latency");
        assert_eq!(slug("→"), "plot");
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
            "scenario",
            "µs",
            &["register".into(), "invite".into()],
            &[("a", vec![1.0, f64::NAN]), ("b", vec![2.0, 3.0])],
        );
        assert_eq!(
            b.matches("<rect x").count(),
            3 + 2,
            "3 bars + 2 legend boxes"
        );
        assert!(b.contains(">scenario</text>"), "the x axis has a title");
        let edge = 32.0 + PLOT_W + RIGHT;
        let legend_x: Vec<f64> = b
            .match_indices(r#"<rect x=""#)
            .map(|(i, m)| {
                let rest = &b[i + m.len()..];
                rest[..rest.find('"').unwrap()].parse().unwrap()
            })
            .filter(|x| *x >= edge)
            .collect();
        assert_eq!(legend_x.len(), 2, "the legend is right of the plot: {b}");
        let two = bars_log(
            "decrypt",
            "size",
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
        let stamped = after_heading(&p, "<p>made</p>");
        assert!(stamped.contains("<h1>run</h1><p>made</p><h2>"));
    }

    #[test]
    fn long_category_labels_are_slanted_and_series_are_told_apart() {
        let labels: Vec<String> = (0..6)
            .map(|i| format!("AEAD_AES_256_GCM_HMAC_PROFILE_{i}"))
            .collect();
        let b = bars("srtp", "profile", "ns", &labels, &[("a", vec![1.0; 6])]);
        assert_eq!(b.matches("transform=\"rotate(-40").count(), 6, "{b}");
        let flat = bars(
            "srtp",
            "profile",
            "ns",
            &["a".into(), "b".into()],
            &[("a", vec![1.0; 2])],
        );
        assert!(!flat.contains("rotate(-40"));
        let l = lines(
            "load",
            "s",
            "calls/s",
            &[
                ("offered", vec![(0.0, 5.0), (1.0, 5.0)]),
                ("achieved", vec![(0.0, 5.0), (1.0, 5.0)]),
            ],
        );
        assert!(
            l.contains(r#"stroke-width="3.5" points"#) && l.contains(r#"stroke-dasharray="8 4""#),
            "the second line is dashed over a wider first one: {l}"
        );
        let cdf = lines_log_x(
            "cdf",
            "ms",
            "share",
            &[("l", vec![(0.05, 0.1), (14.8, 1.0)])],
        );
        for tick in [">0.01<", ">0.1<", ">1<", ">10<", ">100<"] {
            assert!(cdf.contains(tick), "decade tick {tick}: {cdf}");
        }
    }
}
