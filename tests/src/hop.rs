//! What the tests' TCP hops ([`super::http_faults`], [`super::blackhole`])
//! share: a loopback listener whose accepting thread hands each client to
//! the hop, and stops when the hop is dropped.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A listener on a free loopback port; it stops accepting when dropped.
pub(crate) struct Hop {
    addr: SocketAddr,
    stopped: Arc<AtomicBool>,
}

impl Drop for Hop {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Wakes the accept loop.
        let _ = TcpStream::connect(self.addr);
    }
}

impl Hop {
    /// Accepts on its own thread, each client given to `client`.
    pub(crate) fn start(client: impl Fn(TcpStream) + Send + 'static) -> Hop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding the hop");
        let addr = listener.local_addr().unwrap();
        let stopped = Arc::new(AtomicBool::new(false));
        let accepting = stopped.clone();
        std::thread::spawn(move || {
            for accepted in listener.incoming() {
                if accepting.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(accepted) = accepted {
                    client(accepted);
                }
            }
        });
        Hop { addr, stopped }
    }

    /// Where clients connect.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}
