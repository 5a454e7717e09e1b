//! A TCP proxy owned by a test, to cut or freeze a connection without root or iptables: a
//! worker talks to its sidecar through it, or a sidecar to a ZooKeeper node.
//!
//! Modes apply to every connection, present and future:
//! - [`Mode::Forward`]: bytes flow both ways.
//! - [`Mode::Freeze`]: bytes are read from both ends but held, as if the peer were a stopped
//!   process whose socket buffers keep filling: keepalive pings go unanswered, and an end that
//!   closes its side has that close held too. Back to `Forward`, held bytes (and closes) are
//!   delivered in order.
//! - [`Mode::Partition`]: like `Freeze`, but on leaving it every held connection is closed
//!   instead of delivered (a network partition long enough for both ends to give up), and new
//!   connections are accepted and held silent meanwhile.
//! - [`Mode::DropFromClient`]: what clients send is read and thrown away, never delivered;
//!   upstream's bytes still flow. A request sent meanwhile never reaches upstream (and what the
//!   client sends after it, cut mid-stream, makes upstream close the connection).
//!
//! The proxy counts what it holds, so a test can wait for "the sidecar has closed its side" or
//! "the worker has sent its request" before it lets anything through: races are arranged, not
//! waited for.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with the bytes of its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Forward,
    Freeze,
    Partition,
    DropFromClient,
}

#[derive(Default)]
struct Counters {
    /// Connections accepted.
    accepted: AtomicU64,
    /// Bytes read from clients while not forwarding, and not delivered yet.
    held_from_client: AtomicU64,
    /// Bytes read from upstream while not forwarding, and not delivered yet.
    held_from_upstream: AtomicU64,
    /// Upstream closes seen while not forwarding (held).
    upstream_closes_held: AtomicU64,
    /// Client closes seen while not forwarding (held).
    client_closes_held: AtomicU64,
    /// Bytes from clients thrown away by [`Mode::DropFromClient`].
    dropped_from_client: AtomicU64,
}

/// A running proxy; dropping it closes every connection.
pub struct Proxy {
    addr: SocketAddr,
    target: SocketAddr,
    mode_tx: watch::Sender<Mode>,
    counters: Arc<Counters>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `target`.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", super::free_port()))
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (mode_tx, mode_rx) = watch::channel(Mode::Forward);
        let counters = Arc::new(Counters::default());
        let accept = tokio::spawn(accept_loop(listener, target, mode_rx, counters.clone()));
        Proxy {
            addr,
            target,
            mode_tx,
            counters,
            accept,
        }
    }

    /// Where clients connect: `127.0.0.1:{port}`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:{port}`, for a gRPC client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    pub fn set_mode(&self, mode: Mode) {
        self.mode_tx.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode_tx.borrow()
    }

    pub fn freeze(&self) {
        self.set_mode(Mode::Freeze);
    }

    pub fn partition(&self) {
        self.set_mode(Mode::Partition);
    }

    /// Back to forwarding (delivering what a freeze held, dropping what a partition held).
    pub fn heal(&self) {
        self.set_mode(Mode::Forward);
    }

    /// Bytes from clients thrown away by [`Mode::DropFromClient`].
    pub fn dropped_from_client(&self) -> u64 {
        self.counters.dropped_from_client.load(Ordering::SeqCst)
    }

    pub fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::SeqCst)
    }

    /// Bytes from clients held by a freeze or partition.
    pub fn held_from_client(&self) -> u64 {
        self.counters.held_from_client.load(Ordering::SeqCst)
    }

    /// Bytes from upstream held by a freeze or partition.
    pub fn held_from_upstream(&self) -> u64 {
        self.counters.held_from_upstream.load(Ordering::SeqCst)
    }

    /// Closes by upstream held by a freeze or partition.
    pub fn upstream_closes_held(&self) -> u64 {
        self.counters.upstream_closes_held.load(Ordering::SeqCst)
    }

    /// Closes by clients held by a freeze or partition.
    pub fn client_closes_held(&self) -> u64 {
        self.counters.client_closes_held.load(Ordering::SeqCst)
    }

    /// Waits until `check` holds for this proxy, or panics after `timeout` naming `what`.
    pub async fn wait(&self, what: &str, timeout: Duration, check: impl Fn(&Proxy) -> bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        while !check(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "proxy to {}: no {what} within {timeout:?}",
                self.target
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Connections end with their tasks: the mode channel closes, and each pump returns.
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    mode_rx: watch::Receiver<Mode>,
    counters: Arc<Counters>,
) {
    let mut connections = Vec::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        counters.accepted.fetch_add(1, Ordering::SeqCst);
        let mode_rx = mode_rx.clone();
        let counters = counters.clone();
        connections.push(tokio::spawn(async move {
            // A partition holds new connections silent until it heals, then drops them.
            let mut waiting = mode_rx.clone();
            if *waiting.borrow() == Mode::Partition {
                let _ = waiting.wait_for(|m| *m != Mode::Partition).await;
                return;
            }
            let Ok(upstream) = TcpStream::connect(target).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (client_r, client_w) = client.into_split();
            let (up_r, up_w) = upstream.into_split();
            let to_upstream = pump(client_r, up_w, mode_rx.clone(), counters.clone(), true);
            let to_client = pump(up_r, client_w, mode_rx, counters, false);
            tokio::join!(to_upstream, to_client);
        }));
        connections.retain(|c: &JoinHandle<()>| !c.is_finished());
    }
}

/// Copies `from` to `to` under the proxy's mode. While not forwarding it keeps reading (so the
/// sender never blocks) and holds the bytes and a close; on `Forward` it delivers them, on
/// leaving a partition it drops them and closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode_rx: watch::Receiver<Mode>,
    counters: Arc<Counters>,
    from_client: bool,
) {
    let held_bytes = if from_client {
        &counters.held_from_client
    } else {
        &counters.held_from_upstream
    };
    let held_closes = if from_client {
        &counters.client_closes_held
    } else {
        &counters.upstream_closes_held
    };
    let mut held: Vec<u8> = Vec::new();
    let mut closed = false;
    let mut buf = vec![0u8; 16 * 1024];
    // Upstream's bytes flow while clients' are dropped.
    let forwards =
        |mode: Mode| mode == Mode::Forward || (mode == Mode::DropFromClient && !from_client);
    loop {
        let mode = *mode_rx.borrow_and_update();
        if forwards(mode) {
            if !held.is_empty() {
                held_bytes.fetch_sub(held.len() as u64, Ordering::SeqCst);
                if to.write_all(&held).await.is_err() {
                    return;
                }
                held.clear();
            }
            if closed {
                held_closes.fetch_sub(1, Ordering::SeqCst);
                let _ = to.shutdown().await;
                return;
            }
        }
        if closed {
            // Nothing more to read: wait for the mode to change, then deliver or drop.
            let was_partitioned = mode == Mode::Partition;
            if mode_rx.changed().await.is_err() {
                return;
            }
            if was_partitioned && *mode_rx.borrow() != Mode::Partition {
                held_bytes.fetch_sub(held.len() as u64, Ordering::SeqCst);
                held_closes.fetch_sub(1, Ordering::SeqCst);
                return; // dropping both halves closes the connection
            }
            continue;
        }
        tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    if forwards(*mode_rx.borrow()) && held.is_empty() {
                        let _ = to.shutdown().await;
                        return;
                    }
                    closed = true;
                    held_closes.fetch_add(1, Ordering::SeqCst);
                }
                Ok(n) if from_client && *mode_rx.borrow() == Mode::DropFromClient => {
                    counters.dropped_from_client.fetch_add(n as u64, Ordering::SeqCst);
                }
                Ok(n) => {
                    if forwards(*mode_rx.borrow()) && held.is_empty() {
                        if to.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    } else {
                        held.extend_from_slice(&buf[..n]);
                        held_bytes.fetch_add(n as u64, Ordering::SeqCst);
                    }
                }
            },
            changed = mode_rx.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = *mode_rx.borrow();
                if now != Mode::Partition && mode == Mode::Partition {
                    // The partition healed: what it held is lost, and so is the connection.
                    held_bytes.fetch_sub(held.len() as u64, Ordering::SeqCst);
                    return;
                }
            }
        }
    }
}
