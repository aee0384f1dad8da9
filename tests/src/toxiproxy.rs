//! Shopify's toxiproxy (built by `tools/toxiproxy/build.sh`), driven
//! through its HTTP API: TCP proxies between iar and what it talks to,
//! whose toxics add latency, reset connections or hold them open with no
//! answer (a partition) while the processes on both sides keep running.

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running toxiproxy server, killed when dropped.
pub struct Toxiproxy {
    child: Child,
    api: SocketAddr,
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on the loopback (released for the caller to bind).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Which way a toxic acts: on what the client sends, or on what it gets.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    Upstream,
    Downstream,
}

impl Toxiproxy {
    /// `binary` listening for its API on a free loopback port, its random
    /// choices (a toxic's toxicity, jitter) drawn from `seed`; returns once
    /// the API answers.
    pub fn start(binary: &Path, seed: u64) -> Toxiproxy {
        let port = free_port();
        let child = Command::new(binary)
            .args(["-host", "127.0.0.1", "-port", &port.to_string()])
            .args(["-seed", &seed.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting toxiproxy-server");
        let proxy = Toxiproxy {
            child,
            api: (Ipv4Addr::LOCALHOST, port).into(),
        };
        super::blocking::wait_for("toxiproxy's API to answer", Duration::from_secs(30), || {
            proxy.request("GET", "/version", None).map(drop)
        });
        proxy
    }

    /// One API request, answered 2xx, or the status and body.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<String, String> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut conn = TcpStream::connect(self.api).map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        write!(
            conn,
            "{method} {path} HTTP/1.1\r\nHost: toxiproxy\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer)
            .map_err(|e| e.to_string())?;
        let status = answer.split(' ').nth(1).unwrap_or_default();
        if status.starts_with('2') {
            Ok(answer)
        } else {
            Err(format!("toxiproxy {method} {path}: {answer}"))
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) {
        if let Err(e) = self.request(method, path, body) {
            panic!("{e}");
        }
    }

    /// A proxy named `name` to `upstream`, listening on a free loopback
    /// port; its address.
    pub fn proxy(&self, name: &str, upstream: SocketAddr) -> SocketAddr {
        let listen: SocketAddr = (Ipv4Addr::LOCALHOST, free_port()).into();
        self.call(
            "POST",
            "/proxies",
            Some(&json!({
                "name": name,
                "listen": listen.to_string(),
                "upstream": upstream.to_string(),
                "enabled": true,
            })),
        );
        listen
    }

    /// Adds toxic `toxic` of `kind` (`latency`, `reset_peer`, `timeout`,
    /// ...) with its `attributes` to `proxy`, on every connection.
    pub fn add(&self, proxy: &str, toxic: &str, kind: &str, stream: Stream, attributes: Value) {
        let stream = match stream {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        };
        self.call(
            "POST",
            &format!("/proxies/{proxy}/toxics"),
            Some(&json!({
                "name": toxic,
                "type": kind,
                "stream": stream,
                "toxicity": 1.0,
                "attributes": attributes,
            })),
        );
    }

    /// Removes toxic `toxic` from `proxy`.
    pub fn remove(&self, proxy: &str, toxic: &str) {
        self.call("DELETE", &format!("/proxies/{proxy}/toxics/{toxic}"), None);
    }
}
