//! Recursive watches: a bounded queue of [`WatchEvent`]s that, when full, drops events and
//! makes its consumer resync instead.

use super::WatchEvent;

/// How many events a [`Watch`] queues before it falls back to a [`WatchEvent::Resync`].
pub const WATCH_QUEUE: usize = 4096;

/// The producing end of a [`Watch`]: a bounded queue that, when full, drops events and makes
/// the consumer resync instead. Watch consumers are level-triggered (they re-read what an
/// event names), so a full reload loses nothing.
#[derive(Clone)]
pub(crate) struct WatchSender {
    /// Boxed events: a tokio queue allocates its slots 32 at a time, and a job's watch is
    /// mostly empty, so an idle watch holds 32 pointers rather than 32 events.
    tx: tokio::sync::mpsc::Sender<Box<WatchEvent>>,
    overflowed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Why a [`WatchSender`] did not queue an event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WatchSendError {
    /// The watch was dropped.
    Closed,
}

impl WatchSender {
    /// Queues `ev`; when the queue is full, drops it and flags the consumer to resync.
    pub(crate) fn send(&self, ev: WatchEvent) -> std::result::Result<(), WatchSendError> {
        use tokio::sync::mpsc::error::TrySendError;
        match self.tx.try_send(Box::new(ev)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                self.overflowed
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            Err(TrySendError::Closed(_)) => Err(WatchSendError::Closed),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    pub(crate) async fn closed(&self) {
        self.tx.closed().await
    }
}

/// A recursive watch; events arrive in commit order. Dropping it removes the watch. Its queue
/// is bounded ([`WATCH_QUEUE`]): a consumer that falls that far behind gets a
/// [`WatchEvent::Resync`] in place of the events that did not fit.
pub struct Watch {
    events_rx: tokio::sync::mpsc::Receiver<Box<WatchEvent>>,
    overflowed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _guard: Option<Box<dyn Send + Sync>>,
}

impl Watch {
    /// A watch and the sender that feeds it.
    pub(crate) fn channel(guard: Option<Box<dyn Send + Sync>>) -> (WatchSender, Watch) {
        Watch::with_capacity(WATCH_QUEUE, guard)
    }

    pub(crate) fn with_capacity(
        capacity: usize,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> (WatchSender, Watch) {
        let (tx, events_rx) = tokio::sync::mpsc::channel(capacity);
        let overflowed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        (
            WatchSender {
                tx,
                overflowed: overflowed.clone(),
            },
            Watch {
                events_rx,
                overflowed,
                _guard: guard,
            },
        )
    }

    pub(crate) fn set_guard(&mut self, guard: Box<dyn Send + Sync>) {
        self._guard = Some(guard);
    }

    /// The next event; `None` once the registry is closed.
    ///
    /// # Cancellation safety
    /// Cancel-safe: an event is never lost by dropping this future.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        if let Some(ev) = self.try_next() {
            return Some(ev);
        }
        self.events_rx.recv().await.map(|ev| *ev)
    }

    /// An event if one is already queued (a `Resync` once the events queued before an
    /// overflow have been read).
    pub fn try_next(&mut self) -> Option<WatchEvent> {
        if let Ok(ev) = self.events_rx.try_recv() {
            return Some(*ev);
        }
        self.overflowed
            .swap(false, std::sync::atomic::Ordering::SeqCst)
            .then_some(WatchEvent::Resync)
    }
}
