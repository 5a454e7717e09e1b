//! Cron schedules in Quartz syntax (what ElasticJob's `config.cron` holds) and the one timer
//! thread that fires every job's schedule.
//!
//! [`CronSchedule`] (`cron`) parses Quartz expressions (seconds first, 6 or 7 fields, `?`, `L`,
//! `W`, `#`, Quartz weekday numbering 1 = SUN … 7 = SAT) with croner and evaluates them in the
//! job's time zone. [`Timer`] (`timer`) is a handle to a single thread that keeps a heap of
//! deadlines for all jobs and sends a [`Fire`] (`fire`) at each instant, within
//! the operating system's timer slack of it (a task would wake at the runtime's next
//! millisecond tick): no task or thread per job (ElasticJob runs a Quartz scheduler and a thread
//! per job, issue #510). The fires of an instant that their jobs have not taken up yet are its
//! [`Burst`] (`burst`), which answers wait behind. A schedule's fires wait in its owner's command
//! queue, a few at most ([`FireQueue`], `fire`).

mod burst;
mod cron;
mod fire;
mod lead;
mod timer;

pub use burst::{Burst, Taken, ANSWER_WAIT_MAX};
pub use cron::{validate_time_zone, CronError, CronSchedule};
pub use fire::{Fire, FireQueue, FireRefused, FireSender, FireSink, FIRE_QUEUE};
pub use lead::ClaimLead;
pub use timer::{Timer, WarmUp};
