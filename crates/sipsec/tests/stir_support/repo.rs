//! A certificate repository for the STIR tests: an HTTPS server (OpenSSL)
//! on loopback serving the STI certificates, plus the hostile ones a
//! verifier must survive: ones that never answer (any path starting
//! `/slow`), one too large, a redirect loop. It counts the requests for each path.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};

/// The running repository.
pub struct Repo {
    pub addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Repo {
    /// Serves `files` (path → body) with the TLS key and chain in `dir`
    /// (`srv.key`, `srv.pem`).
    pub fn start(dir: &Path, files: HashMap<String, Vec<u8>>) -> Self {
        let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).expect("acceptor");
        b.set_private_key_file(dir.join("srv.key"), SslFiletype::PEM)
            .expect("key");
        b.set_certificate_chain_file(dir.join("srv.pem"))
            .expect("chain");
        let acceptor = Arc::new(b.build());
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let (h, files) = (hits.clone(), Arc::new(files));
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let (a, h, f) = (acceptor.clone(), h.clone(), files.clone());
                std::thread::spawn(move || {
                    let Ok(mut tls) = a.accept(s) else { return };
                    let mut req = Vec::new();
                    let mut b = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&b[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&req).into_owned();
                    let path = text.split(' ').nth(1).unwrap_or("/").to_string();
                    *h.lock().expect("hits").entry(path.clone()).or_default() += 1;
                    let reply: Vec<u8> = match path.as_str() {
                        p if p.starts_with("/slow") => {
                            std::thread::sleep(Duration::from_secs(20));
                            return;
                        }
                        "/huge.pem" => {
                            let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 400000\r\n\r\n".to_vec();
                            r.extend(std::iter::repeat_n(b'A', 400_000));
                            r
                        }
                        "/loop.pem" => {
                            b"HTTP/1.1 302 Found\r\nLocation: /loop.pem\r\nContent-Length: 0\r\n\r\n"
                                .to_vec()
                        }
                        p => match f.get(p) {
                            Some(body) => {
                                let mut r = format!(
                                    "HTTP/1.1 200 OK\r\nContent-Type: application/pem-certificate-chain\r\n\
                                     Cache-Control: max-age=600\r\nContent-Length: {}\r\n\r\n",
                                    body.len()
                                )
                                .into_bytes();
                                r.extend_from_slice(body);
                                r
                            }
                            None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
                        },
                    };
                    let _ = tls.write_all(&reply);
                    let _ = tls.shutdown();
                });
            }
        });
        Self { addr, hits }
    }

    /// `https://127.0.0.1:PORT/name`.
    pub fn url(&self, name: &str) -> String {
        format!("https://{}/{name}", self.addr)
    }

    /// Requests for `/name` so far.
    pub fn hits(&self, name: &str) -> usize {
        *self
            .hits
            .lock()
            .expect("hits")
            .get(&format!("/{name}"))
            .unwrap_or(&0)
    }
}
