//! A health-check target for tests: an HTTP server on loopback that
//! answers every request with the status the test sets.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Serves on an ephemeral loopback port (returned), answering each
/// request with `status` as it is when the request arrives.
pub fn status_target(status: Arc<AtomicU16>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let head = format!(
                "HTTP/1.1 {} X\r\nContent-Length: 0\r\n\r\n",
                status.load(Ordering::Relaxed)
            );
            let _ = c.write_all(head.as_bytes());
        }
    });
    port
}
