//! Worker leases (DESIGN.md §1): every worker stream gets a `Lease` event, renewed at a third
//! of its length, and only while the ZooKeeper session is connected and has answered
//! recently. A worker whose lease runs out stops on its own, so the workers of a frozen or
//! cut-off sidecar stop before its session can expire and their items be given to others.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Stream key → its lease. Locked only for short sections without an await (sends are
    /// `try_send`).
    streams: Mutex<HashMap<u64, StreamLease>>,
}

struct StreamLease {
    sender: EventSender,
    /// When the latest lease was sent.
    granted: Option<Instant>,
    /// How many times the lease ran out before a renewal.
    lapses: u64,
}

impl StreamLease {
    /// Whether the worker may have stopped: a lease is counted as run out a little before
    /// `valid_for` has passed since the send, since a renewal sent at the last moment could
    /// reach the worker after its own deadline. Healthy renewals come every third of it.
    fn lapsed(&self, valid_for: Duration) -> bool {
        self.granted
            .is_none_or(|g| g.elapsed() > valid_for * 9 / 10)
    }
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
        let mut stream = StreamLease {
            sender,
            granted: None,
            lapses: 0,
        };
        if self.may_grant() {
            self.grant(&mut stream);
        }
        self.streams().insert(key, stream);
    }

    /// Stops renewing a stream's lease.
    pub fn remove(&self, key: u64) {
        self.streams().remove(&key);
    }

    /// How many times the stream's lease has run out, counting a lease that is out now.
    /// Work started under a count lower than the current one was stopped by its worker.
    pub fn lapses(&self, key: u64) -> u64 {
        let valid_for = self.inner.valid_for;
        self.streams()
            .get(&key)
            .map_or(u64::MAX, |s| s.lapses + u64::from(s.lapsed(valid_for)))
    }

    fn streams(&self) -> std::sync::MutexGuard<'_, HashMap<u64, StreamLease>> {
        self.inner.streams.lock().expect("lease map poisoned")
    }

    fn renew_all(&self) {
        if !self.may_grant() {
            return;
        }
        for stream in self.streams().values_mut() {
            self.grant(stream);
        }
    }

    fn grant(&self, stream: &mut StreamLease) {
        if stream.granted.is_some() && stream.lapsed(self.inner.valid_for) {
            stream.lapses += 1;
        }
        let lease = Lease {
            valid_for: Some(
                prost_types::Duration::try_from(self.inner.valid_for).unwrap_or_default(),
            ),
            sequence: self.inner.sequence.fetch_add(1, Ordering::Relaxed) + 1,
        };
        // A full stream is a slow worker: no renewal for it, so its lease runs out.
        let sent = stream.sender.try_send(Ok(WorkerEvent {
            event: Some(Event::Lease(lease)),
        }));
        if sent.is_ok() {
            stream.granted = Some(Instant::now());
        }
    }
}
