//! A TCP hop that can turn every connection open through it into a black
//! hole: what either side sends from then on is read and dropped, and the
//! connection is never closed, as when a NAT or conntrack entry is lost or
//! a middlebox fails over. Connections opened afterwards pass. Toxiproxy
//! cannot do this: its partition closes the connections when it ends, so a
//! client finds out at once. It can also refuse every connection (each
//! closed as soon as it is accepted, as a server that is down behind a
//! load balancer) until told to pass them.

use crate::hop::Hop;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Shared {
    /// One flag per connection accepted: set, its bytes are dropped.
    connections: Mutex<Vec<Arc<AtomicBool>>>,
    /// Set: each new connection is closed at once.
    refusing: AtomicBool,
}

/// The hop; it stops accepting when dropped (the black holes stay).
pub struct Blackhole {
    hop: Hop,
    shared: Arc<Shared>,
}

impl Blackhole {
    /// A hop on a free loopback port to `upstream`, refusing every
    /// connection until [`Blackhole::pass`].
    pub fn start_refusing(upstream: SocketAddr) -> Blackhole {
        let hole = Blackhole::start(upstream);
        hole.shared.refusing.store(true, Ordering::SeqCst);
        hole
    }

    /// New connections pass from now on.
    pub fn pass(&self) {
        self.shared.refusing.store(false, Ordering::SeqCst);
    }

    /// A hop on a free loopback port to `upstream`.
    pub fn start(upstream: SocketAddr) -> Blackhole {
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        let hop = Hop::start(move |client| {
            if accepting.refusing.load(Ordering::SeqCst) {
                drop(client);
                return;
            }
            let Ok(server) = TcpStream::connect(upstream) else {
                return;
            };
            let dead = Arc::new(AtomicBool::new(false));
            accepting.connections.lock().unwrap().push(dead.clone());
            let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let d = dead.clone();
            std::thread::spawn(move || pump(client, server, &d));
            std::thread::spawn(move || pump(s, c, &dead));
        });
        Blackhole { hop, shared }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.hop.addr()
    }

    /// Every connection open now drops all it carries from here on, and
    /// stays open; new ones pass.
    pub fn swallow_open_connections(&self) {
        for dead in self.shared.connections.lock().unwrap().iter() {
            dead.store(true, Ordering::SeqCst);
        }
    }
}

/// Copies `from` to `to` until either ends, dropping the bytes once `dead`
/// is set (and then never closing `to`: the other side must not learn).
fn pump(mut from: TcpStream, mut to: TcpStream, dead: &AtomicBool) {
    let mut buffer = [0u8; 16 << 10];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if dead.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    if !dead.load(Ordering::SeqCst) {
        let _ = to.shutdown(std::net::Shutdown::Write);
    }
}
