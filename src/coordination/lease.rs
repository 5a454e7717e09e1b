//! Worker leases (DESIGN.md §1): every worker stream gets a `Lease` event, renewed at a third
//! of its length, and only while the ZooKeeper session is connected and has answered
//! recently. A worker whose lease runs out stops on its own, so the workers of a frozen or
//! cut-off sidecar stop before its session can expire and their items be given to others.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::proto::{worker_event::Event, Lease, WorkerEvent};
use crate::registry::{Registry, SessionState};

/// The sending end of one worker's event stream.
pub type EventSender = tokio::sync::mpsc::Sender<Result<WorkerEvent, tonic::Status>>;

/// Hands out and renews leases for every worker stream of the sidecar.
#[derive(Clone)]
pub struct Leases {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    valid_for: Duration,
    /// A renewal is only sent when the registry answered within this long.
    max_reply_age: Duration,
    sequence: AtomicU64,
    /// Stream key → sender. Locked only to copy or edit the map, never across an await.
    streams: Mutex<HashMap<u64, EventSender>>,
}

impl Leases {
    /// Starts the renewal task. `valid_for` is capped at half the session timeout.
    pub fn spawn(
        registry: Registry,
        valid_for: Duration,
        session_timeout: Duration,
        cancel: CancellationToken,
    ) -> Leases {
        let valid_for = valid_for.min(session_timeout / 2);
        let leases = Leases {
            inner: Arc::new(Inner {
                registry,
                valid_for,
                max_reply_age: session_timeout / 4,
                sequence: AtomicU64::new(0),
                streams: Mutex::new(HashMap::new()),
            }),
        };
        let task = leases.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(valid_for / 3);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tick.tick() => task.renew_all(),
                }
            }
        });
        leases
    }

    /// How long each lease is valid from its receipt.
    pub fn valid_for(&self) -> Duration {
        self.inner.valid_for
    }

    /// Whether a lease may be granted now: the session is connected and answered recently.
    pub fn may_grant(&self) -> bool {
        let connected = matches!(
            *self.inner.registry.session().borrow(),
            SessionState::Connected { .. }
        );
        connected && self.inner.registry.last_reply().elapsed() < self.inner.max_reply_age
    }

    /// Adds a stream and grants its first lease at once (if one may be granted).
    pub fn add(&self, key: u64, sender: EventSender) {
        if self.may_grant() {
            self.send(&sender);
        }
        self.inner
            .streams
            .lock()
            .expect("lease map poisoned")
            .insert(key, sender);
    }

    /// Stops renewing a stream's lease.
    pub fn remove(&self, key: u64) {
        self.inner
            .streams
            .lock()
            .expect("lease map poisoned")
            .remove(&key);
    }

    fn renew_all(&self) {
        if !self.may_grant() {
            return;
        }
        // Copy the senders so the lock is not held while sending.
        let senders: Vec<EventSender> = self
            .inner
            .streams
            .lock()
            .expect("lease map poisoned")
            .values()
            .cloned()
            .collect();
        for sender in &senders {
            self.send(sender);
        }
    }

    fn send(&self, sender: &EventSender) {
        let lease = Lease {
            valid_for: Some(
                prost_types::Duration::try_from(self.inner.valid_for).unwrap_or_default(),
            ),
            sequence: self.inner.sequence.fetch_add(1, Ordering::Relaxed) + 1,
        };
        // A full stream is a slow worker; its job actor releases it on the next event it sends.
        let _ = sender.try_send(Ok(WorkerEvent {
            event: Some(Event::Lease(lease)),
        }));
    }
}
