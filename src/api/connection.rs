//! Who ended a worker's connection: the worker, or this sidecar?
//!
//! The answer decides how soon a worker's items may go to others when its stream ends. A
//! worker that closed its side (its process died, it closed its channel, it cancelled the
//! stream) knows its stream is over and runs nothing it delivered any more: its items can move
//! at once. A connection this sidecar closed — HTTP/2 keepalive found the worker unresponsive
//! (stopped, swapped out, in a long pause) — may have a worker behind it that does not know
//! yet and works on until its lease ends: its items move only then.
//!
//! [`TrackedIo`] wraps each accepted connection and records which side closed it first, and
//! when the worker last sent anything: a worker that was talking right up to the close (a
//! graceful GOAWAY, say) closed it itself, whatever the socket saw first.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::coordination::{Connection, StreamEnd};

const OPEN: u8 = 0;
const CLOSED_BY_PEER: u8 = 1;
const CLOSED_BY_US: u8 = 2;

/// A worker that sent something this shortly before the close was not unresponsive.
const TALKING: Duration = Duration::from_millis(500);

/// What is known about one connection's end.
#[derive(Debug)]
pub struct ConnState {
    epoch: Instant,
    closed: AtomicU8,
    /// Milliseconds since `epoch`.
    closed_at: AtomicU64,
    last_read: AtomicU64,
}

impl ConnState {
    #[allow(
        clippy::disallowed_methods,
        reason = "a connection's transport notes when it closed: an I/O edge"
    )]
    fn new() -> ConnState {
        ConnState {
            epoch: Instant::now(),
            closed: AtomicU8::new(OPEN),
            closed_at: AtomicU64::new(0),
            last_read: AtomicU64::new(0),
        }
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "a connection's transport notes when it closed: an I/O edge"
    )]
    fn ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn close(&self, by: u8) {
        if self
            .closed
            .compare_exchange(OPEN, by, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.closed_at.store(self.ms(), Ordering::SeqCst);
        }
    }

    fn read(&self) {
        self.last_read.store(self.ms(), Ordering::SeqCst);
    }
}

impl Connection for ConnState {
    fn end(&self) -> StreamEnd {
        match self.closed.load(Ordering::SeqCst) {
            CLOSED_BY_US => {
                let silent = self
                    .closed_at
                    .load(Ordering::SeqCst)
                    .saturating_sub(self.last_read.load(Ordering::SeqCst));
                if Duration::from_millis(silent) < TALKING {
                    StreamEnd::ByWorker
                } else {
                    StreamEnd::BySidecar
                }
            }
            // Still open: the worker cancelled its stream. Closed by the peer: it went away.
            _ => StreamEnd::ByWorker,
        }
    }
}

/// An accepted connection that records its end in a [`ConnState`], which handlers find in
/// their request's extensions.
pub struct TrackedIo<T> {
    inner: T,
    state: Arc<ConnState>,
}

impl<T> TrackedIo<T> {
    pub fn new(inner: T) -> TrackedIo<T> {
        TrackedIo {
            inner,
            state: Arc::new(ConnState::new()),
        }
    }

    /// What is known about this connection's end, shared with its requests.
    pub fn state(&self) -> Arc<ConnState> {
        self.state.clone()
    }
}

impl<T> Drop for TrackedIo<T> {
    fn drop(&mut self) {
        self.state.close(CLOSED_BY_US);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        match &poll {
            Poll::Ready(Ok(())) if buf.filled().len() == before => this.state.close(CLOSED_BY_PEER),
            Poll::Ready(Ok(())) => this.state.read(),
            Poll::Ready(Err(_)) => this.state.close(CLOSED_BY_PEER),
            Poll::Pending => {}
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, data);
        if let Poll::Ready(Err(_)) = &poll {
            this.state.close(CLOSED_BY_PEER);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.state.close(CLOSED_BY_US);
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Err(_)) = &poll {
            this.state.close(CLOSED_BY_PEER);
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_closed_first_decides() {
        let open = ConnState::new();
        assert_eq!(
            open.end(),
            StreamEnd::ByWorker,
            "a cancelled stream on an open connection"
        );
        let peer = ConnState::new();
        peer.close(CLOSED_BY_PEER);
        peer.close(CLOSED_BY_US);
        assert_eq!(peer.end(), StreamEnd::ByWorker);
        let silent = ConnState::new();
        silent.read();
        std::thread::sleep(TALKING + Duration::from_millis(50));
        silent.close(CLOSED_BY_US);
        assert_eq!(
            silent.end(),
            StreamEnd::BySidecar,
            "keepalive closed a silent worker"
        );
        let talking = ConnState::new();
        talking.read();
        talking.close(CLOSED_BY_US);
        assert_eq!(
            talking.end(),
            StreamEnd::ByWorker,
            "a worker that was talking closed it"
        );
    }
}
