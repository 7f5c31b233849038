//! The README and the docs are true: every `sipsec` command in their shell
//! blocks names a subcommand and flags that `--help` lists (old spellings
//! are hidden aliases, so the docs must use the current ones), and the
//! README's "Your first call" runs as written: users, a server, a call in
//! plain SIP, then over TLS with SRTP.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{tempdir, Running, BIN};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The lines of the ```sh blocks of `text` (continuations joined), with
/// the heading of the section each is in.
fn shell_lines(text: &str) -> Vec<(String, String)> {
    let (mut out, mut section, mut inside, mut pending) =
        (Vec::new(), String::new(), false, String::new());
    for line in text.lines() {
        if !inside && line.starts_with("## ") {
            section = line.trim_start_matches("## ").to_owned();
        }
        if line.starts_with("```") {
            inside = !inside && line.trim() == "```sh";
            continue;
        }
        if !inside {
            continue;
        }
        let l = line.trim();
        if let Some(head) = l.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        let full = format!("{pending}{l}");
        pending.clear();
        if !full.is_empty() && !full.starts_with('#') {
            out.push((section.clone(), full));
        }
    }
    out
}

/// Splits a command line into words, honouring '…' and "…".
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote) = (Vec::new(), String::new(), None);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn help(path: &[String]) -> String {
    let out = Command::new(BIN)
        .args(path)
        .arg("--help")
        .output()
        .expect("sipsec runs");
    assert!(out.status.success(), "sipsec {} --help", path.join(" "));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The subcommands `help` lists.
fn subcommands(help: &str) -> Vec<String> {
    help.split("Commands:")
        .nth(1)
        .map(|rest| {
            rest.lines()
                .skip(1)
                .take_while(|l| l.starts_with("  "))
                .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks one `sipsec …` invocation (its words after the program name).
fn check_invocation(source: &str, words: &[String]) {
    let mut path: Vec<String> = Vec::new();
    let mut page = help(&path);
    for w in words {
        if w.starts_with('-') || !subcommands(&page).contains(w) {
            break;
        }
        path.push(w.clone());
        page = help(&path);
    }
    assert!(!path.is_empty(), "{source}: no subcommand in {words:?}");
    for w in words.iter().filter(|w| w.starts_with("--")) {
        let flag = w.split('=').next().unwrap_or(w);
        let listed = page.contains(&format!("{flag} ")) || page.contains(&format!("{flag},"));
        assert!(
            listed || page.lines().any(|l| l.trim_end().ends_with(flag)),
            "{source}: `sipsec {}` has no {flag} (see --help)",
            path.join(" ")
        );
    }
}

#[test]
fn every_documented_command_is_in_the_help() {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        for (_, line) in shell_lines(&text) {
            let w = words(&line);
            // `install -m 0755 target/release/sipsec /usr/local/bin/` copies
            // the binary: its path is a file there, not a command.
            if w.first()
                .is_some_and(|c| ["install", "cp", "strip"].contains(&c.as_str()))
            {
                continue;
            }
            for (i, word) in w.iter().enumerate() {
                let starts_command = i == 0 || ["|", "&&", ";"].contains(&w[i - 1].as_str());
                if word.ends_with("target/release/sipsec") || (word == "sipsec" && starts_command) {
                    let rest: Vec<String> = w[i + 1..]
                        .iter()
                        .take_while(|x| !["|", "&", "&&", ";", ">"].contains(&x.as_str()))
                        .cloned()
                        .collect();
                    check_invocation(&format!("{}: {line}", file.display()), &rest);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 15, "only {checked} commands found");
    // The set-up path the README offers for the server alone.
    let setup = std::fs::read_to_string(repo().join("setup.sh")).expect("setup.sh");
    assert!(setup.contains("--server-only"));
}

/// A background step: its process, and its stdout lines read so far.
fn spawn_until(cwd: &Path, line: &str, ready: &str) -> Running {
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!("exec {line} 2>&1"))
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let mut reader = BufReader::new(child.stdout.take().expect("piped"));
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        let n = reader.read_line(&mut l).expect("reads");
        assert!(n > 0, "{line}: ended before {ready:?}: {seen}");
        seen.push_str(&l);
        if l.contains(ready) {
            break;
        }
    }
    // Keep draining its output so that it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    Running {
        child,
        addr: common::banner_addr(&seen).unwrap_or(([127, 0, 0, 1], 0).into()),
        banner: seen,
    }
}

fn run(cwd: &Path, line: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(line)
        .current_dir(cwd)
        .output()
        .expect("bash runs");
    let text = common::text(&out);
    assert!(out.status.success(), "{line}: {text}");
    text
}

#[test]
fn the_first_call_runs_as_written() {
    let dir = tempdir("readme-first-call");
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    let steps: Vec<String> = shell_lines(&readme)
        .into_iter()
        .filter(|(s, _)| s == "Your first call")
        .map(|(_, l)| l.replace("target/release/sipsec", BIN))
        .collect();
    assert!(steps.len() >= 12, "{steps:?}");
    let mut server: Option<Running> = None;
    let (mut udp, mut tls, mut http) = (String::new(), String::new(), String::new());
    let mut answering: Option<Running> = None;
    let mut calls = 0;
    for step in steps {
        let step = step
            .replace("127.0.0.1:5060", &udp)
            .replace("127.0.0.1:5061", &tls);
        if step.contains(" serve ") {
            drop(server.take()); // The README restarts it.
            let tls_flags = if step.contains("--cert") {
                " --tls 127.0.0.1:0"
            } else {
                ""
            };
            let s = spawn_until(
                &dir,
                &format!("{step} --udp 127.0.0.1:0 --http 127.0.0.1:0{tls_flags}"),
                "listening on",
            );
            udp = s.addr.to_string();
            tls = common::banner_tls_addr(&s.banner)
                .map(|a| a.to_string())
                .unwrap_or_default();
            http = common::banner_http_addr(&s.banner)
                .expect("http address")
                .to_string();
            server = Some(s);
        } else if step.contains(" phone answer ") {
            answering = Some(spawn_until(&dir, &step, "waiting for a call"));
        } else if step.contains(" phone call ") {
            let out = run(&dir, &step);
            assert!(out.contains("lost 0"), "{out}");
            let mut bob = answering.take().expect("someone answers");
            assert!(bob.child.wait().expect("bob ends").success());
            calls += 1;
            if step.contains("--srtp") {
                assert!(out.contains("srtp AES_CM_128_HMAC_SHA1_80"), "{out}");
            } else {
                let status = run(&dir, &format!("{BIN} status --http {http}"));
                assert!(status.contains("mode proxy   auth on"), "{status}");
            }
        } else {
            run(&dir, &step);
        }
    }
    assert_eq!(calls, 2, "a plain call and a TLS call");
    assert!(dir.join("bob.wav").is_file(), "bob recorded the first call");
    let users = std::fs::read_to_string(dir.join("users.tsv")).expect("users.tsv");
    assert!(!users.contains("secret"), "no password on disk");
}
