//! One adapter process and the line protocol spoken with it.

use super::*;
use crate::error::Error;

/// What an adapter says of itself (`hello`).
#[derive(Debug, Clone, Serialize)]
pub struct Info {
    /// The runner's id for it.
    pub id: String,
    /// Library and backend versions.
    pub version: String,
    /// Its language.
    pub language: String,
    /// Its benchmark framework; empty when none fits (C).
    pub framework: String,
    /// Key variants it computes with.
    pub variants: Vec<String>,
    /// Smallest modulus it accepts.
    pub min_bits: u32,
}

/// How much of an adapter's stderr is kept to explain its failure.
pub(super) const STDERR_KEPT: usize = 4096;

/// A running adapter.
pub struct Adapter {
    /// What it said of itself.
    pub info: Info,
    child: Child,
    input: BufWriter<ChildStdin>,
    /// Reply lines, read by a thread so that a call can time out.
    replies: Receiver<std::io::Result<String>>,
    /// The end of its stderr, drained by a thread so that a chatty
    /// adapter never blocks on a full pipe.
    stderr: Arc<Mutex<String>>,
    timeout: Duration,
}

impl Adapter {
    /// Starts `spec` and asks who it is. A call without an answer within
    /// `timeout` stops the adapter and fails.
    pub fn start(spec: &Spec, timeout: Duration) -> Result<Self, Error> {
        let mut child = Command::new(&spec.argv[0])
            .args(&spec.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::io(format!(
                "{}: cannot start {}",
                spec.id, spec.argv[0]
            )))?;
        let (Some(i), Some(o), Some(e)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Error::peer(&spec.id, "no pipes"));
        };
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(o).lines() {
                let failed = line.is_err();
                if tx.send(line).is_err() || failed {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let tail = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(e).lines() {
                let Ok(line) = line else { return };
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                t.push_str(&line);
                t.push('\n');
                if t.len() > 2 * STDERR_KEPT {
                    let mut cut = t.len() - STDERR_KEPT;
                    while !t.is_char_boundary(cut) {
                        cut += 1;
                    }
                    t.drain(..cut);
                }
            }
        });
        let mut a = Self {
            info: Info {
                id: spec.id.clone(),
                version: String::new(),
                language: String::new(),
                framework: String::new(),
                variants: Vec::new(),
                min_bits: 0,
            },
            child,
            input: BufWriter::new(i),
            replies,
            stderr,
            timeout,
        };
        let hello = a.call(&json!({"op": "hello"}))?;
        let text = |f: &str| hello[f].as_str().unwrap_or("").to_owned();
        a.info.version = text("version");
        a.info.language = text("language");
        a.info.framework = text("framework");
        a.info.variants = hello["variants"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_else(|| vec!["crt".into()]);
        a.info.min_bits = hello["min_bits"].as_u64().unwrap_or(0) as u32;
        Ok(a)
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// Whether it computes with `key`.
    pub fn supports(&self, key: &TestKey) -> bool {
        key.bits >= self.info.min_bits && self.info.variants.iter().any(|v| v == key.variant)
    }

    /// Sends one request and returns the reply, or the adapter's error.
    pub fn call(&mut self, req: &Value) -> Result<Value, Error> {
        let op = req["op"].as_str().unwrap_or("?");
        let mut line = serde_json::to_string(req).map_err(|e| Error::Input(e.to_string()))?;
        line.push('\n');
        let sent = self
            .input
            .write_all(line.as_bytes())
            .and_then(|()| self.input.flush());
        let reply = match sent {
            Ok(()) => self.replies.recv_timeout(self.timeout),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        let reply = match reply {
            Ok(Ok(r)) => r,
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                return Err(Error::Timeout(format!(
                    "{}: no answer to {op} within {} s; the adapter was stopped",
                    self.info.id,
                    self.timeout.as_secs_f64()
                )));
            }
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => {
                // Give the stderr thread a moment to read the last words.
                std::thread::sleep(Duration::from_millis(100));
                if self.child.try_wait().ok().flatten().is_none() {
                    let _ = self.child.kill();
                }
                let _ = self.child.wait();
                let err = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
                return Err(Error::peer(
                    &self.info.id,
                    format!(
                        "the adapter stopped answering ({op}){}{}",
                        if err.is_empty() { "" } else { ": " },
                        err.trim_end()
                    ),
                ));
            }
        };
        let v: Value = serde_json::from_str(&reply).map_err(|e| {
            Error::peer(
                &self.info.id,
                format!("not a JSON reply ({e}): {}", reply.trim_end()),
            )
        })?;
        if v["ok"] != json!(true) {
            return Err(Error::peer(
                &self.info.id,
                format!(
                    "{op} failed: {}",
                    v["error"].as_str().unwrap_or("no reason given")
                ),
            ));
        }
        Ok(v)
    }

    pub(super) fn hex(&mut self, req: &Value, field: &str) -> Result<Vec<u8>, Error> {
        let v = self.call(req)?;
        let h = v[field].as_str().unwrap_or("");
        from_hex(h).ok_or_else(|| Error::peer(&self.info.id, format!("{field} is not hex")))
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        let _ = self.input.write_all(b"{\"op\":\"quit\"}\n");
        let _ = self.input.flush();
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

pub(super) fn to_hex(b: &[u8]) -> String {
    privacy::Encoding::Hex.encode(b)
}

pub(super) fn from_hex(s: &str) -> Option<Vec<u8>> {
    privacy::Encoding::Hex.decode(s)
}
