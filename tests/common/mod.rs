//! The one harness every integration test uses (`mod common;` in each `tests/*.rs`).
//!
//! It owns the processes a scenario needs and cleans them up even when a test panics:
//! - [`ZooKeeper`]: a real ZooKeeper (one node or a quorum) run from Debian's jars;
//! - [`Postgres`]: a real PostgreSQL server run from Debian's packages, in a temp dir;
//! - [`Sidecar`]: a real `shardcar run` process, ready once its gRPC port accepts connections;
//! - [`TestWorker`]: a real gRPC worker that records every event it is sent;
//! - [`zk_tree`]: a dump of a namespace for assertions against ElasticJob's layout;
//! - [`proxy::Proxy`]: a TCP proxy that freezes or partitions a connection on demand.
//!
//! Every helper that waits takes a timeout and fails with a message that shows what was seen.
// Each test file compiles this module and uses only part of it.
#![allow(dead_code, unused_imports)]

pub mod ledger;
pub mod postgres;
pub mod process;
pub mod proxy;
pub mod sidecar;
pub mod tree;
pub mod worker;
pub mod zookeeper;

pub use postgres::Postgres;
pub use sidecar::{Sidecar, SidecarOptions};
pub use tree::{zk_tree, ZkTree};
pub use worker::{
    job_config, next_fake_pid, subscribe_request, StreamEnd, TestWorker, TimedEvent, WaitError,
};
pub use zookeeper::ZooKeeper;

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Ports are taken from this range: below Linux's ephemeral range (32768–60999), so an outgoing
/// connection's source port never takes a port a test is about to bind.
const PORT_RANGE: std::ops::Range<u32> = 20_000..32_000;

/// Ports already handed out by this process; a port is never handed out twice.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
static PORT_CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);

/// A TCP port on 127.0.0.1 that nothing listens on now and that this process has not handed out
/// before, so parallel tests in one binary never collide. Each process starts at a different
/// (pid- and time-derived) point of the range, which keeps concurrently running test binaries
/// apart too.
pub fn free_port() -> u16 {
    let span = PORT_RANGE.end - PORT_RANGE.start;
    // Seed the cursor once per process.
    let _ =
        PORT_CURSOR.compare_exchange(u32::MAX, seed() % span, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..span {
        let offset = PORT_CURSOR.fetch_add(1, Ordering::SeqCst) % span;
        let port = (PORT_RANGE.start + offset) as u16;
        {
            // Short critical section, no await: only marks the port as taken.
            let mut guard = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
            let taken = guard.get_or_insert_with(HashSet::new);
            if taken.contains(&port) {
                continue;
            }
            if !bindable(port) {
                continue;
            }
            taken.insert(port);
        }
        return port;
    }
    panic!("no free TCP port left in {PORT_RANGE:?} on 127.0.0.1");
}

/// Whether nothing listens on `port` on 127.0.0.1. The check binds with SO_REUSEADDR and never
/// listens: a child process that another test forks meanwhile inherits a copy of this socket
/// until it execs, and a listening copy would make the port's real user (ZooKeeper, a sidecar,
/// a test's own listener) fail with "Address already in use"; a bound, non-listening one with
/// SO_REUSEADDR does not stand in their way.
fn bindable(port: u16) -> bool {
    use socket2::{Domain, Socket, Type};
    let Ok(socket) = Socket::new(Domain::IPV4, Type::STREAM, None) else {
        return false;
    };
    socket.set_reuse_address(true).is_ok()
        && socket
            .bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).into())
            .is_ok()
}

fn seed() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(nanos / 1000)
}

/// The last `lines` lines of a log file (lossy UTF-8), for panic messages.
pub fn log_tail(path: &std::path::Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Polls `check` every 50 ms until it returns `Some`, or gives up after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
