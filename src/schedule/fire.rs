//! What the timer sends and where it goes: one [`Fire`] of a schedule, into its job's
//! [`FireSink`], which for a job is a [`FireQueue`] in its command queue: fires take their place
//! among the owner's other commands, in order, at most [`FIRE_QUEUE`] waiting at a time (the
//! timer drops a fire beyond that). A queue of their own would cost every job a channel and its
//! first block of slots (~1 KB).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use super::burst::Taken;

/// One fire of one schedule: `fire_time` is the scheduled instant (after a stall, the missed
/// instant; compare it with the clock to detect a misfire).
///
/// With a claim lead ([`Timer::spawn_with`](super::Timer::spawn_with)), each instant is announced twice: first `ahead`,
/// the lead before it (`fire_time` is still the instant to come), then at the instant itself.
#[derive(Debug, PartialEq, Eq)]
pub struct Fire {
    pub key: String,
    pub fire_time: DateTime<Utc>,
    /// The notice that comes the claim lead before the instant, not the fire itself.
    pub ahead: bool,
    /// A fire at its instant counts in the timer's [`Burst`](super::Burst) until this is dropped: its job
    /// holds it until it has taken the fire up (its trigger queued, or its claim sent).
    pub taken: Option<Taken>,
}

/// Why a fire was not queued; the fire comes back with it.
#[derive(Debug)]
pub enum FireRefused {
    /// Too many fires of the schedule wait already: this one is dropped.
    Full(Box<Fire>),
    /// Nothing takes fires any more: the schedule is cancelled.
    Closed(Box<Fire>),
}

/// Where a schedule's fires go: its job's queue. [`FireSink::try_fire`] never waits (the timer
/// sends under its lock). Boxed fires: a queue holds pointers, and is empty nearly always.
pub trait FireSink: Send + Sync {
    /// Queues `fire`, or gives it back with the reason.
    fn try_fire(&self, fire: Box<Fire>) -> Result<(), FireRefused>;
    /// Whether nothing takes fires any more.
    fn is_closed(&self) -> bool;
}

/// A schedule's [`FireSink`], shared by the timer and its owner.
pub type FireSender = Arc<dyn FireSink>;

/// How many fires of one schedule may wait in its owner's queue.
pub const FIRE_QUEUE: usize = 4;

/// The fires of one schedule, queued among the commands of type `C` its owner reads; see the
/// module docs.
pub struct FireQueue<C> {
    /// The owner's command queue.
    tx: mpsc::Sender<Box<C>>,
    /// Fires queued and not yet taken out by the owner.
    waiting: AtomicUsize,
}

impl<C: From<Box<Fire>>> FireQueue<C> {
    pub fn new(tx: mpsc::Sender<Box<C>>) -> FireQueue<C> {
        FireQueue {
            tx,
            waiting: AtomicUsize::new(0),
        }
    }

    /// The owner took a fire out of its queue.
    pub fn taken_out(&self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
    }

    /// The owner's command queue.
    pub fn sender(&self) -> &mpsc::Sender<Box<C>> {
        &self.tx
    }
}

impl<C: From<Box<Fire>> + Send + 'static> FireSink for FireQueue<C> {
    fn try_fire(&self, fire: Box<Fire>) -> Result<(), FireRefused> {
        // Closed first, whatever is waiting: an owner that is gone takes nothing out, and the
        // timer cancels a schedule only on `Closed`.
        if self.tx.is_closed() {
            return Err(FireRefused::Closed(fire));
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= FIRE_QUEUE {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(FireRefused::Full(fire));
        }
        match self.tx.try_reserve() {
            Ok(permit) => {
                permit.send(Box::new(C::from(fire)));
                Ok(())
            }
            Err(e) => {
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                Err(match e {
                    mpsc::error::TrySendError::Full(()) => FireRefused::Full(fire),
                    mpsc::error::TrySendError::Closed(()) => FireRefused::Closed(fire),
                })
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An owner's commands: fires among others.
    #[derive(Debug)]
    enum Cmd {
        Fire(Box<Fire>),
        Other,
    }

    impl From<Box<Fire>> for Cmd {
        fn from(fire: Box<Fire>) -> Cmd {
            Cmd::Fire(fire)
        }
    }

    fn fire(second: u32) -> Box<Fire> {
        Box::new(Fire {
            key: "j#1".into(),
            fire_time: chrono::DateTime::from_timestamp(1_700_000_000 + i64::from(second), 0)
                .expect("a valid instant"),
            ahead: false,
            taken: None,
        })
    }

    fn second_of(cmd: &Cmd) -> Option<i64> {
        match cmd {
            Cmd::Fire(f) => Some(f.fire_time.timestamp() - 1_700_000_000),
            Cmd::Other => None,
        }
    }

    #[tokio::test]
    async fn fires_wait_among_the_commands_in_order_a_few_at_a_time() {
        let (tx, mut rx) = mpsc::channel(1024);
        let fires = FireQueue::<Cmd>::new(tx.clone());
        for s in 0..FIRE_QUEUE as u32 {
            assert!(fires.try_fire(fire(s)).is_ok(), "fire {s} is queued");
        }
        // One more than FIRE_QUEUE waiting: dropped, and given back.
        match fires.try_fire(fire(9)) {
            Err(FireRefused::Full(f)) => assert_eq!(f.fire_time.timestamp(), 1_700_000_009),
            other => panic!("expected Full, got {other:?}"),
        }
        // A command queued now comes after the fires queued before it.
        tx.try_send(Box::new(Cmd::Other))
            .expect("room for a command");
        // The owner takes one out: another fire fits, behind the command.
        let first = rx.recv().await.expect("a queued fire");
        assert_eq!(second_of(&first), Some(0));
        fires.taken_out();
        assert!(fires.try_fire(fire(4)).is_ok());
        let mut order = Vec::new();
        while let Ok(cmd) = rx.try_recv() {
            order.push(second_of(&cmd));
        }
        assert_eq!(order, [Some(1), Some(2), Some(3), None, Some(4)]);
        // The command queue closed (its owner retired) with fires never taken out: refused as
        // closed, not as full, so that the timer cancels the schedule.
        rx.close();
        assert!(fires.is_closed());
        assert!(matches!(
            fires.try_fire(fire(5)),
            Err(FireRefused::Closed(_))
        ));
    }
}
