//! An HTTP hop that answers 500 or 503 on command: toxiproxy acts on TCP
//! (latency, resets, partitions) and cannot answer as a store under load
//! does. Between iar and the S3 server; while a failure lasts, every new
//! request gets the status (an S3 error document, `Connection: close`)
//! and the connections open when it began are closed, so no client keeps
//! talking to the store through it.

use crate::hop::Hop;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Shared {
    /// The status answered until the instant, while it lasts.
    failing: Mutex<Option<(u16, Instant)>>,
    /// Bumped when a failure begins: piped connections of an older
    /// generation close.
    generation: AtomicU64,
}

impl Shared {
    fn failing_now(&self) -> Option<u16> {
        let failing = self.failing.lock().unwrap();
        failing
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(s, _)| s)
    }
}

/// The hop; it stops accepting when dropped.
pub struct HttpFaults {
    hop: Hop,
    shared: Arc<Shared>,
}

impl HttpFaults {
    /// A hop on a free loopback port to `upstream`.
    pub fn start(upstream: SocketAddr) -> HttpFaults {
        let shared = Arc::new(Shared::default());
        let serving = shared.clone();
        let hop = Hop::start(move |client| {
            let shared = serving.clone();
            std::thread::spawn(move || serve(client, upstream, &shared));
        });
        HttpFaults { hop, shared }
    }

    pub fn addr(&self) -> SocketAddr {
        self.hop.addr()
    }

    /// Answers `status` (500 or 503) to every request for `lasting`.
    pub fn fail_for(&self, status: u16, lasting: Duration) {
        *self.shared.failing.lock().unwrap() = Some((status, Instant::now() + lasting));
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }
}

fn serve(mut client: TcpStream, upstream: SocketAddr, shared: &Arc<Shared>) {
    if let Some(status) = shared.failing_now() {
        answer(&mut client, status);
        return;
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let generation = shared.generation.load(Ordering::SeqCst);
    let pipe = |from: TcpStream, to: TcpStream, shared: Arc<Shared>| {
        std::thread::spawn(move || copy_until(from, to, &shared, generation))
    };
    let up = pipe(
        client.try_clone().unwrap(),
        server.try_clone().unwrap(),
        shared.clone(),
    );
    let down = pipe(server, client, shared.clone());
    let _ = up.join();
    let _ = down.join();
}

/// Copies `from` to `to` until either end closes or a failure begins.
fn copy_until(mut from: TcpStream, mut to: TcpStream, shared: &Shared, generation: u64) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = [0u8; 64 << 10];
    loop {
        if shared.generation.load(Ordering::SeqCst) != generation {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Reads the request's head and answers `status` with an S3 error
/// document, closing the connection.
fn answer(client: &mut TcpStream, status: u16) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 << 10 {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let (reason, code) = match status {
        503 => ("Service Unavailable", "SlowDown"),
        _ => ("Internal Server Error", "InternalError"),
    };
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by the fault campaign</Message></Error>"
    );
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes());
    let _ = client.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    /// A request through the hop reaches the upstream; while a failure
    /// lasts it gets the status instead.
    #[test]
    fn requests_pass_until_a_failure_answers_them() {
        let upstream = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let up = upstream.local_addr().unwrap();
        std::thread::spawn(move || {
            for c in upstream.incoming() {
                let mut c = c.unwrap();
                let mut buf = [0u8; 1024];
                let _ = c.read(&mut buf);
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            }
        });
        let hop = HttpFaults::start(up);
        let get = || {
            let mut c = TcpStream::connect(hop.addr()).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            let _ = c.read_to_string(&mut out);
            out
        };
        assert!(get().starts_with("HTTP/1.1 200"));
        hop.fail_for(503, Duration::from_secs(60));
        let failed = get();
        assert!(failed.starts_with("HTTP/1.1 503"), "{failed}");
        assert!(failed.contains("<Code>SlowDown</Code>"));
        hop.fail_for(500, Duration::ZERO);
        assert!(get().starts_with("HTTP/1.1 200"));
    }
}
