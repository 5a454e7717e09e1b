//! Tests of the timer: its deadlines, its thread, and the burst of fires its jobs take up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::*;
use crate::schedule::burst::Burst;
use crate::schedule::fire::{Fire, FireSink};
use crate::schedule::lead::ClaimLead;

/// A queue of fires alone, for these tests (a job's fires go into its command queue): a fire
/// that does not fit is dropped.
impl FireSink for mpsc::Sender<Box<Fire>> {
    fn try_fire(&self, fire: Box<Fire>) -> Result<(), FireRefused> {
        self.try_send(fire).map_err(|e| match e {
            mpsc::error::TrySendError::Full(fire) => FireRefused::Full(fire),
            mpsc::error::TrySendError::Closed(fire) => FireRefused::Closed(fire),
        })
    }

    fn is_closed(&self) -> bool {
        mpsc::Sender::is_closed(self)
    }
}

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn every_second(key: &str, timer: &Timer, tx: &mpsc::Sender<Box<Fire>>) {
    timer.schedule(
        key.to_owned(),
        CronSchedule::parse("* * * * * ?", "UTC").unwrap(),
        Arc::new(tx.clone()),
    );
}

/// Schedule `j` on `state`, every 5 s from 2026-02-01T00:00:00Z; returns that instant.
fn every_five_seconds(state: &mut Deadlines) -> DateTime<Utc> {
    let (tx, _rx) = mpsc::channel(8);
    let t0 = utc("2026-02-01T00:00:00Z");
    state.schedule(
        "j".into(),
        CronSchedule::parse("0/5 * * * * ?", "UTC").unwrap(),
        Arc::new(tx),
        t0,
    );
    t0
}

#[test]
fn stalled_schedule_fires_once_then_continues_from_now() {
    let mut state = Deadlines::default();
    let t0 = every_five_seconds(&mut state);
    assert_eq!(state.next_deadline(), Some(utc("2026-02-01T00:00:05Z")));
    assert!(state.take_due(utc("2026-02-01T00:00:04Z")).sends.is_empty());
    // The process was paused for 37 s: one fire for the missed 00:00:05 instant.
    let due = state.take_due(utc("2026-02-01T00:00:42Z"));
    let fires: Vec<Fire> = due.sends.into_iter().map(|(_, f)| *f).collect();
    assert_eq!(
        fires,
        [Fire {
            key: "j".into(),
            fire_time: utc("2026-02-01T00:00:05Z"),
            ahead: false,
            taken: None,
        }]
    );
    assert_eq!(state.next_deadline(), Some(utc("2026-02-01T00:00:45Z")));
    // A schedule replaced fires on its new cron only; one cancelled, never.
    let (tx2, _rx2) = mpsc::channel(8);
    state.schedule(
        "j".into(),
        CronSchedule::parse("0 0 * * * ?", "UTC").unwrap(),
        Arc::new(tx2),
        t0,
    );
    assert_eq!(state.next_deadline(), Some(utc("2026-02-01T01:00:00Z")));
    state.cancel("j");
    assert_eq!(state.next_deadline(), None);
    assert!(state.take_due(utc("2026-02-02T00:00:00Z")).sends.is_empty());
}

#[tokio::test]
async fn fires_on_consecutive_seconds_then_cancel_stops_it() {
    let timer = Timer::spawn();
    let (tx, mut rx) = mpsc::channel(16);
    every_second("j", &timer, &tx);
    let mut times = Vec::new();
    for _ in 0..3 {
        let fire = tokio::time::timeout(Duration::from_secs(3), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(fire.key, "j");
        assert_eq!(fire.fire_time.nanosecond(), 0);
        assert!(Utc::now() >= fire.fire_time, "fired early");
        times.push(fire.fire_time);
    }
    assert_eq!(times[1] - times[0], chrono::Duration::seconds(1));
    assert_eq!(times[2] - times[1], chrono::Duration::seconds(1));
    timer.cancel("j");
    // Anything already sent is drained; nothing arrives after that.
    while rx.try_recv().is_ok() {}
    assert!(tokio::time::timeout(Duration::from_millis(1500), rx.recv())
        .await
        .is_err());
}

#[tokio::test]
async fn warm_up_is_called_once_per_instant_within_its_lead_before_it() {
    let lead = Duration::from_millis(300);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let record = calls.clone();
    let timer = Timer::spawn_with(
        &TaskTracker::new(),
        ClaimLead::new(Duration::ZERO),
        Some(WarmUp {
            lead,
            hook: Box::new(move || record.lock().unwrap().push(Utc::now())),
        }),
    );
    // No schedule, no warm-up.
    std::thread::sleep(Duration::from_millis(1200));
    assert!(calls.lock().unwrap().is_empty());
    // Two schedules on the same instants share each warm-up.
    let (tx, mut rx) = mpsc::channel(16);
    every_second("a", &timer, &tx);
    every_second("b", &timer, &tx);
    let mut fires = Vec::new();
    while fires.len() < 6 {
        let fire = tokio::time::timeout(Duration::from_secs(3), rx.recv())
            .await
            .unwrap()
            .unwrap();
        fires.push(fire.fire_time);
    }
    timer.close();
    let calls = calls.lock().unwrap().clone();
    // Each call was for the next whole second, at most `lead` before it, and no instant was
    // warmed twice. (A thread stalled past an instant's warm-up point skips that warm-up, so
    // only "at least one" is certain.)
    let instants: Vec<DateTime<Utc>> = calls
        .iter()
        .map(|t| t.with_nanosecond(0).unwrap() + chrono::Duration::seconds(1))
        .collect();
    for (t, at) in calls.iter().zip(&instants) {
        assert!(
            *at - *t <= chrono::Duration::from_std(lead).unwrap(),
            "warmed up at {t} for {at}: earlier than the lead"
        );
    }
    let mut distinct = instants.clone();
    distinct.dedup();
    assert_eq!(distinct, instants, "an instant warmed up twice: {calls:?}");
    assert!(
        instants.iter().any(|at| fires.contains(at)),
        "no warm-up for any of {fires:?}: {calls:?}"
    );
}

#[tokio::test]
async fn replace_sends_to_the_new_schedule_only() {
    let timer = Timer::spawn();
    let (tx1, mut rx1) = mpsc::channel(16);
    let (tx2, mut rx2) = mpsc::channel(16);
    every_second("j", &timer, &tx1);
    every_second("j", &timer, &tx2);
    let fire = tokio::time::timeout(Duration::from_secs(3), rx2.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fire.key, "j");
    assert!(rx1.try_recv().is_err());
}

#[tokio::test]
async fn many_keys_share_one_task_and_a_full_queue_does_not_block_others() {
    let timer = Timer::spawn();
    let (tx, mut rx) = mpsc::channel(1000);
    for i in 0..200 {
        every_second(&format!("job-{i}"), &timer, &tx);
    }
    let (full_tx, _full_rx) = mpsc::channel(1);
    every_second("full", &timer, &full_tx);
    let mut seen = std::collections::HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    while seen.len() < 200 {
        let fire = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap()
            .unwrap();
        seen.insert(fire.key);
    }
    // Keep going past a second fire of the full queue: others still arrive.
    let before = Utc::now();
    loop {
        let fire = tokio::time::timeout_at(deadline + Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        if fire.fire_time > before {
            break;
        }
    }
}

#[tokio::test]
async fn task_ends_when_the_last_handle_is_dropped() {
    let timer = Timer::spawn();
    let weak = Arc::downgrade(&timer.shared);
    let clone = timer.clone();
    drop(timer);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(weak.upgrade().is_some(), "a clone is still alive");
    drop(clone);
    for _ in 0..100 {
        if weak.upgrade().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timer task still holds its state");
}

#[test]
fn each_instant_is_announced_the_claim_lead_before_it_then_fired() {
    let mut state = Deadlines::new(ClaimLead::new(Duration::from_millis(500)));
    every_five_seconds(&mut state);
    let fires = |due: DueNow| -> Vec<(DateTime<Utc>, bool)> {
        due.sends
            .into_iter()
            .map(|(_, f)| (f.fire_time, f.ahead))
            .collect()
    };
    // One schedule at the instant: the shortest lead.
    assert_eq!(state.next_deadline(), Some(utc("2026-02-01T00:00:04.950Z")));
    assert!(fires(state.take_due(utc("2026-02-01T00:00:04.949Z"))).is_empty());
    let noticed = state.take_due(utc("2026-02-01T00:00:04.950Z"));
    assert_eq!(noticed.noticed, [(utc("2026-02-01T00:00:05Z"), 1)]);
    assert_eq!(
        fires(noticed),
        [(utc("2026-02-01T00:00:05Z"), true)],
        "the notice carries the instant to come"
    );
    assert_eq!(state.next_deadline(), Some(utc("2026-02-01T00:00:05Z")));
    assert!(
        fires(state.take_due(utc("2026-02-01T00:00:04.990Z"))).is_empty(),
        "one notice per instant"
    );
    assert_eq!(
        fires(state.take_due(utc("2026-02-01T00:00:05Z"))),
        [(utc("2026-02-01T00:00:05Z"), false)]
    );
    assert_eq!(
        state.next_deadline(),
        Some(utc("2026-02-01T00:00:09.950Z")),
        "the next instant's notice"
    );
    // A stall past the next instant: its notice is dropped, the fire goes out at once.
    assert_eq!(
        fires(state.take_due(utc("2026-02-01T00:00:10.002Z"))),
        [(utc("2026-02-01T00:00:10Z"), false)]
    );
}

#[test]
fn an_instant_of_many_fires_is_announced_earlier_than_one_of_few() {
    let mut state = Deadlines::new(ClaimLead::new(Duration::from_millis(500)));
    let (tx, _rx) = mpsc::channel(8);
    let t0 = utc("2026-02-01T00:00:00Z");
    // 1000 schedules at :05 and one at :07.
    for i in 0..1000 {
        state.schedule(
            format!("j{i}"),
            CronSchedule::parse("5 * * * * ?", "UTC").unwrap(),
            Arc::new(tx.clone()),
            t0,
        );
    }
    state.schedule(
        "alone".into(),
        CronSchedule::parse("7 * * * * ?", "UTC").unwrap(),
        Arc::new(tx.clone()),
        t0,
    );
    // Before anything was measured, 1000 claims are given 457 ms (see `ClaimLead`).
    assert_eq!(state.next_deadline(), Some(utc("2026-02-01T00:00:04.543Z")));
    let due = state.take_due(utc("2026-02-01T00:00:04.543Z"));
    assert_eq!(due.noticed, [(utc("2026-02-01T00:00:05Z"), 1000)]);
    assert_eq!(due.sends.len(), 1000);
    assert!(due.sends.iter().all(|(_, f)| f.ahead));
    assert_eq!(
        state.take_due(utc("2026-02-01T00:00:05Z")).sends.len(),
        1000
    );
    assert_eq!(state.next_deadline(), Some(utc("2026-02-01T00:00:06.950Z")));
    // A schedule put at an instant whose notices went out gets its notice at once.
    let late = state.take_due(utc("2026-02-01T00:00:06.960Z"));
    assert_eq!(late.noticed, [(utc("2026-02-01T00:00:07Z"), 1)]);
    state.schedule(
        "late".into(),
        CronSchedule::parse("7 * * * * ?", "UTC").unwrap(),
        Arc::new(tx),
        utc("2026-02-01T00:00:06.961Z"),
    );
    let due = state.take_due(utc("2026-02-01T00:00:06.962Z"));
    let sent: Vec<(String, bool)> = due
        .sends
        .iter()
        .map(|(_, f)| (f.key.clone(), f.ahead))
        .collect();
    assert_eq!(sent, [("late".to_string(), true)]);
}

#[test]
fn without_a_lead_nothing_is_announced() {
    let mut state = Deadlines::new(ClaimLead::new(Duration::ZERO));
    every_five_seconds(&mut state);
    assert_eq!(state.next_deadline(), Some(utc("2026-02-01T00:00:05Z")));
    assert!(state
        .take_due(utc("2026-02-01T00:00:04.990Z"))
        .sends
        .is_empty());
}

#[tokio::test]
async fn a_burst_settles_when_its_last_fire_is_taken_up_and_never_waits_past_its_bound() {
    let burst = Arc::new(Burst::default());
    // Nothing sent: no wait.
    let t = std::time::Instant::now();
    burst.settled(Duration::from_secs(5)).await;
    assert!(t.elapsed() < Duration::from_secs(1));
    // Two fires out: the wait ends when the second is taken up, not the first.
    let first = burst.count();
    let second = burst.count();
    assert_eq!(burst.pending(), 2);
    let waiter = {
        let burst = burst.clone();
        tokio::spawn(async move { burst.settled(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "settled with a fire still pending");
    drop(second);
    tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("settled once every fire was taken up")
        .unwrap();
    assert_eq!(burst.pending(), 0);
    // A fire never taken up holds an answer back for `max` at most.
    let _lost = burst.count();
    let t = std::time::Instant::now();
    burst.settled(Duration::from_millis(100)).await;
    assert!(t.elapsed() >= Duration::from_millis(100));
}

#[tokio::test]
async fn a_fire_at_its_instant_counts_in_the_burst_until_its_job_drops_it_and_a_notice_does_not() {
    let timer = Timer::spawn_with(
        &TaskTracker::new(),
        ClaimLead::new(Duration::from_millis(200)),
        None,
    );
    let (tx, mut rx) = mpsc::channel(16);
    every_second("j", &timer, &tx);
    let mut seen = (false, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !(seen.0 && seen.1) && std::time::Instant::now() < deadline {
        let Ok(mut fire) = rx.try_recv() else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        if fire.ahead {
            assert!(fire.taken.is_none(), "a notice counted in the burst");
            seen.0 = true;
        } else {
            assert!(fire.taken.is_some(), "a fire not counted in the burst");
            assert_eq!(timer.burst().pending(), 1);
            fire.taken = None;
            assert_eq!(timer.burst().pending(), 0);
            seen.1 = true;
        }
    }
    assert!(seen.0 && seen.1, "no notice and fire within 5 s: {seen:?}");
}
