//! The invariant checker of the failure scenarios. It records every run of every item — from
//! each worker's triggers, answers, revokes and leases, and from when a test killed or froze a
//! worker or its sidecar — and asserts what shardcar promises:
//! - no item is run by two workers at overlapping times;
//! - every run that was interrupted (its worker or sidecar died, or it was revoked) is run
//!   again later as FAILOVER.
//!
//! - (strict workers) a fencing store that refuses a token lower than the last it accepted for
//!   an item accepts the write every completed run makes as it ends: a refused write would be a
//!   run that believed it held a valid lease while a newer holder had already written.
//!
//! A run starts when its `Trigger` is received and ends at the earliest of: the worker's
//! answer, a `Revoke` naming the item, the moment the test froze or killed the worker, or the
//! end of the worker's lease once its sidecar was frozen or killed (the worker stops on its own
//! then). A run with none of these is still going when the ledger is checked.
use super::TimedEvent;
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::TriggerSource;
use std::time::{Duration, Instant};

/// What the test did to a worker, if anything.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// The worker process was killed or frozen at this instant: its work stopped there.
    Worker(Instant),
    /// Its sidecar was killed or frozen then: the worker worked on until its lease ran out.
    Sidecar(Instant),
    /// The worker process was frozen then: it is counted as working on until its lease ran
    /// out (it may wake and run on until it reads the time), the strictest reading.
    Frozen(Instant),
}

/// One run of one item by one worker.
#[derive(Clone, Debug)]
pub struct Run {
    pub worker: String,
    pub item: i32,
    pub execution: String,
    pub source: i32,
    pub start: Instant,
    /// `None`: still running.
    pub end: Option<Instant>,
    pub answered: bool,
}

/// The write a completed strict run makes to its store as it ends, under its fencing token.
#[derive(Clone, Debug)]
pub struct Write {
    pub worker: String,
    pub item: i32,
    pub execution: String,
    pub token: i64,
    pub at: Instant,
}

#[derive(Default)]
pub struct Ledger {
    runs: Vec<Run>,
    writes: Vec<Write>,
    origin: Option<Instant>,
}

/// When the lease a worker held at `before` ran out (its last lease received by then).
pub fn lease_end(events: &[TimedEvent], before: Instant) -> Option<Instant> {
    events
        .iter()
        .filter(|(at, _)| *at <= before)
        .filter_map(|(at, e)| match &e.event {
            Some(Event::Lease(l)) => {
                let d = l.valid_for.unwrap_or_default();
                Some(*at + Duration::new(d.seconds as u64, d.nanos as u32))
            }
            _ => None,
        })
        .max()
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Records every run of `worker` from its events and the answers it sent.
    pub fn record(
        &mut self,
        worker: &str,
        events: &[TimedEvent],
        answers: &[(String, Instant)],
        stop: Option<Stop>,
    ) {
        let stopped_at = stop.map(|s| match s {
            Stop::Worker(at) => at,
            Stop::Sidecar(at) | Stop::Frozen(at) => lease_end(events, at).unwrap_or(at),
        });
        for (start, event) in events {
            let Some(Event::Trigger(t)) = &event.event else {
                continue;
            };
            self.origin = Some(self.origin.map_or(*start, |o| o.min(*start)));
            for item in t.items.iter().map(|i| i.item) {
                let answer = answers
                    .iter()
                    .filter(|(e, _)| *e == t.execution_id)
                    .map(|(_, at)| *at)
                    .min();
                let revoke = events
                    .iter()
                    .filter(|(at, e)| {
                        at >= start
                            && matches!(&e.event, Some(Event::Revoke(r)) if r.items.contains(&item))
                    })
                    .map(|(at, _)| *at)
                    .min();
                let stopped = stopped_at.filter(|s| s >= start);
                let end = [answer, revoke, stopped].into_iter().flatten().min();
                self.runs.push(Run {
                    worker: worker.to_string(),
                    item,
                    execution: t.execution_id.clone(),
                    source: t.source,
                    start: *start,
                    end,
                    answered: answer.is_some() && end == answer,
                });
            }
        }
    }

    /// Records the runs of a strict worker (`TestWorker::set_strict`), which knows when each of
    /// its runs started and stopped; declined triggers were never run. A run still going when
    /// the test froze or killed the worker's sidecar ran on until its lease ended (`stop`).
    pub fn record_strict(
        &mut self,
        worker: &str,
        runs: &[super::worker::StrictRun],
        events: &[TimedEvent],
        stop: Option<Stop>,
    ) {
        let stopped_at = stop.map(|s| match s {
            Stop::Worker(at) => at,
            Stop::Sidecar(at) | Stop::Frozen(at) => lease_end(events, at).unwrap_or(at),
        });
        for run in runs {
            if run.outcome == Some(super::worker::RunEnd::Declined) {
                continue;
            }
            self.origin = Some(self.origin.map_or(run.start, |o| o.min(run.start)));
            let end = match (run.end, stopped_at.filter(|s| *s >= run.start)) {
                (Some(e), Some(s)) => Some(e.min(s)),
                (e, s) => e.or(s),
            };
            if run.outcome == Some(super::worker::RunEnd::Completed) {
                for item in &run.items {
                    let token = *run.tokens.get(item).unwrap_or_else(|| {
                        panic!(
                            "{worker}: trigger {} has no token for item {item}",
                            run.execution_id
                        )
                    });
                    self.writes.push(Write {
                        worker: worker.to_string(),
                        item: *item,
                        execution: run.execution_id.clone(),
                        token,
                        at: run.end.expect("a completed run has ended"),
                    });
                }
            }
            for item in &run.items {
                self.runs.push(Run {
                    worker: worker.to_string(),
                    item: *item,
                    execution: run.execution_id.clone(),
                    source: run.source,
                    start: run.start,
                    end,
                    answered: run.outcome == Some(super::worker::RunEnd::Completed)
                        && run.reply == Some(Ok(())),
                });
            }
        }
    }

    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    fn describe(&self, run: &Run) -> String {
        let origin = self.origin.unwrap_or(run.start);
        let end = run
            .end
            .map_or("still running".to_string(), |e| format!("{:?}", e - origin));
        format!(
            "{} ran item {} ({}) from {:?} to {end}",
            run.worker,
            run.item,
            run.execution,
            run.start - origin
        )
    }

    /// No item is run by two workers at overlapping times.
    pub fn assert_no_overlap(&self) {
        let mut items: Vec<i32> = self.runs.iter().map(|r| r.item).collect();
        items.sort_unstable();
        items.dedup();
        for item in items {
            let mut runs: Vec<&Run> = self.runs.iter().filter(|r| r.item == item).collect();
            runs.sort_by_key(|r| r.start);
            for pair in runs.windows(2) {
                let ok = pair[0].end.is_some_and(|end| end <= pair[1].start);
                assert!(
                    ok,
                    "item {item} ran twice at once:\n  {}\n  {}",
                    self.describe(pair[0]),
                    self.describe(pair[1])
                );
            }
        }
    }

    /// Replays every completed strict run's write into a store that refuses a token lower than
    /// the last one it accepted for the item, in the order the writes were made, and asserts
    /// that it refused none. Returns how many writes it accepted (so a test can tell that it
    /// checked something).
    pub fn assert_fencing_store_accepts_every_write(&self) -> usize {
        let mut writes = self.writes.clone();
        writes.sort_by_key(|w| w.at);
        let mut last: std::collections::HashMap<i32, &Write> = std::collections::HashMap::new();
        for w in &writes {
            if let Some(prev) = last.get(&w.item) {
                let origin = self.origin.unwrap_or(w.at);
                assert!(
                    w.token >= prev.token,
                    "the fencing store refused a write of item {}: {} ({}) wrote token {} at {:?}, \
                     after {} ({}) had written token {} at {:?}",
                    w.item,
                    w.worker,
                    w.execution,
                    w.token,
                    w.at - origin,
                    prev.worker,
                    prev.execution,
                    prev.token,
                    prev.at - origin
                );
            }
            last.insert(w.item, w);
        }
        writes.len()
    }

    /// Every run that did not end with its worker's answer ran again later as FAILOVER.
    pub fn assert_interrupted_reran(&self) {
        for run in self.runs.iter().filter(|r| !r.answered) {
            let Some(end) = run.end else { continue };
            let rerun = self.runs.iter().any(|r| {
                r.item == run.item && r.start >= end && r.source == TriggerSource::Failover as i32
            });
            assert!(
                rerun,
                "an interrupted run never ran again as FAILOVER: {}",
                self.describe(run)
            );
        }
    }
}
