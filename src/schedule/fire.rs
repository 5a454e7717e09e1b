//! What the timer sends: one [`Fire`] of a schedule, into its job's [`FireSink`].

use std::sync::Arc;

use chrono::{DateTime, Utc};

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
