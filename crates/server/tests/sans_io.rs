//! The server's shape, checked on its source:
//!
//! - `src/proto/` is sans-IO: outside its tests it reads no clock, opens
//!   no file or socket, draws no randomness and does not reach into
//!   `crate::io`. Time comes in as `core::Now`, the nonce secret as bytes,
//!   hash keys as `RandomState`s the driver makes, stage timings through
//!   the clock the driver lends (`stage_clock`). It names no lock: the
//!   tables several workers share are sharded in `crate::shards`, and a
//!   decision holds one shard for its span.
//! - `config.rs` sits below both layers and imports neither driver.
//! - No source file of the workspace is over 1,000 lines, nor any function
//!   over 150 (outside tests and generated tables).
//! - No module imports another that (directly or not) imports it back,
//!   and code imports from the module that defines a name, not from the
//!   `lib.rs`/`mod.rs` facades (which would hide a circle).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const FORBIDDEN: [&str; 18] = [
    "Instant::now",
    "SystemTime",
    "std::fs",
    "File::",
    "UdpSocket",
    "TcpStream",
    "TcpListener",
    "getrandom",
    "RandomState::new",
    "rand::",
    "std::thread",
    "std::env",
    "eprintln!",
    "println!",
    "crate::io",
    "Mutex",
    "RwLock",
    "OnceLock",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as (module path, code outside tests).
fn modules(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("src readable")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_stem().and_then(|s| s.to_str()).expect("utf-8 name");
        if p.is_dir() {
            modules(&p, &format!("{prefix}{name}::"), out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p).expect("readable");
            if text.contains("#![cfg(test)]") {
                continue; // a test module in a file of its own
            }
            let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
            let code: String = code
                .lines()
                .map(|l| l.split("//").next().unwrap_or(l))
                .collect::<Vec<_>>()
                .join("\n");
            let module = match name {
                "lib" => "crate".to_owned(),
                "mod" => format!("crate::{}", prefix.trim_end_matches("::")),
                _ => format!("crate::{prefix}{name}"),
            };
            out.insert(module, code);
        }
    }
}

/// The `crate::…` paths a file names.
fn references(code: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        refs.push(tail[..end].trim_end_matches(':').to_owned());
        rest = &tail[end..];
    }
    refs
}

/// The module a path lands in: its longest prefix that is a module.
fn resolve<'a>(path: &str, mods: &'a BTreeMap<String, String>) -> Option<&'a str> {
    let mut p = path;
    loop {
        if let Some((k, _)) = mods.get_key_value(p) {
            return Some(k);
        }
        p = &p[..p.rfind("::")?];
    }
}

fn is_facade(module: &str, mods: &BTreeMap<String, String>) -> bool {
    module == "crate" || mods.keys().any(|k| k.starts_with(&format!("{module}::")))
}

#[test]
fn the_protocol_core_reads_no_clock_and_touches_no_file_or_socket() {
    let mut mods = BTreeMap::new();
    modules(&src(), "", &mut mods);
    let proto: Vec<_> = mods
        .iter()
        .filter(|(m, _)| m.starts_with("crate::proto::"))
        .collect();
    assert!(proto.len() >= 8, "proto modules found: {}", proto.len());
    for (module, code) in proto {
        for (n, line) in code.lines().enumerate() {
            for f in FORBIDDEN {
                assert!(
                    !line.contains(f),
                    "{module}:{}: `{f}` in the sans-IO core: pass it in from a driver\n{line}",
                    n + 1
                );
            }
        }
    }
    let config = &mods["crate::config"];
    assert!(
        !config.contains("crate::io") && !config.contains("crate::proto::core"),
        "config.rs sits below the core and the drivers"
    );
}

#[test]
fn modules_import_from_their_definitions_in_no_circle() {
    let mut mods = BTreeMap::new();
    modules(&src(), "", &mut mods);
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (module, code) in &mods {
        let facade = is_facade(module, &mods);
        for r in references(code) {
            let Some(target) = resolve(&r, &mods) else {
                continue;
            };
            if target == module.as_str() || facade {
                continue;
            }
            assert!(
                !is_facade(target, &mods),
                "{module} names `{r}` through the facade {target}: import it from its module"
            );
            edges.entry(module).or_default().insert(target);
        }
    }
    // Depth-first search for a back edge.
    fn visit<'a>(
        m: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        done: &mut BTreeSet<&'a str>,
        stack: &mut Vec<&'a str>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(i) = stack.iter().position(|s| *s == m) {
            panic!("import circle: {} -> {m}", stack[i..].join(" -> "));
        }
        stack.push(m);
        for next in edges.get(m).into_iter().flatten() {
            visit(next, edges, done, stack);
        }
        stack.pop();
        done.insert(m);
    }
    let mut done = BTreeSet::new();
    for m in mods.keys() {
        visit(m, &edges, &mut done, &mut Vec::new());
    }
    // The layers: nothing in proto or config depends on io.
    for (from, tos) in &edges {
        if from.starts_with("crate::proto") || *from == "crate::config" {
            for to in tos {
                assert!(
                    !to.starts_with("crate::io"),
                    "{from} depends on the driver {to}"
                );
            }
        }
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("readable dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Files and functions stay small enough to hold in one's head: outside
/// tests, no source file of the workspace over 1,000 lines and no function
/// over 150 (tables marked as generated excepted).
#[test]
fn no_source_file_or_function_is_too_big_to_read() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for c in std::fs::read_dir(&crates).expect("crates/") {
        let src = c.expect("entry").path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "source files found: {}", files.len());
    let mut too_big = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        if text.contains("#![cfg(test)]") {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        let code = lines
            .iter()
            .position(|l| l.starts_with("#[cfg(test)]"))
            .unwrap_or(lines.len());
        if code > 1000 {
            too_big.push(format!("{}: {code} lines", f.display()));
        }
        for (i, line) in lines[..code].iter().enumerate() {
            let body = line.trim_start();
            let indent = &line[..line.len() - body.len()];
            let is_fn = ["fn ", "pub fn ", "pub(crate) fn ", "pub(super) fn "]
                .iter()
                .any(|p| body.starts_with(p));
            let generated = i > 1
                && lines[..i]
                    .iter()
                    .rev()
                    .take(3)
                    .any(|l| l.contains("Generated"));
            if !is_fn || generated || body.ends_with(';') {
                continue;
            }
            let close = format!("{indent}}}");
            let len = lines[i..code]
                .iter()
                .position(|l| *l == close)
                .map(|n| n + 1);
            if let Some(n) = len.filter(|n| *n > 150) {
                too_big.push(format!(
                    "{}:{}: a function of {n} lines",
                    f.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(too_big.is_empty(), "split these:\n{}", too_big.join("\n"));
}
