//! Claiming a fire's run ahead of its instant (`Input::FireAhead`): the claim is written the
//! lead before, the trigger goes out at the instant, never before it; a run given up before its
//! instant frees its items as if never claimed.

use super::membership::{peer_instance, reshard_writes, seen};
use super::work::peer_items_flagged;
use super::*;
use crate::registry::WatchEvent;

/// The scripts' cron fires every 5 s; the first instant after the start is 2.5 s in.
const INSTANT: u64 = 2500;
const AHEAD: Duration = Duration::from_millis(100);

fn ready_ahead(total: i32, failover: bool) -> (Script, StreamKey) {
    let (mut s, stream) = ready(total, failover);
    s.env.claim_lead = AHEAD;
    (s, stream)
}

fn instant() -> DateTime<Utc> {
    wall0() + chrono::Duration::milliseconds(INSTANT as i64)
}

fn running_writes(actions: &[Action]) -> Vec<String> {
    writes(actions)
        .into_iter()
        .filter(|w| w.ends_with("/running"))
        .collect()
}

/// The notice 100 ms before the instant, its claim answered: returns what the answer led to.
fn claimed(s: &mut Script) -> Vec<Action> {
    let notice = s.fire_ahead(INSTANT - 100, INSTANT);
    assert_eq!(
        running_writes(&notice),
        [
            "+/j/sharding/0/running",
            "=/j/sharding/0/running",
            "+/j/sharding/1/running",
            "=/j/sharding/1/running"
        ],
        "the run is claimed at the notice: {:?}",
        kinds(&notice)
    );
    s.commit_all(notice)
}

/// The claim's write among a notice's actions.
fn claim_op(notice: &[Action]) -> OpId {
    notice
        .iter()
        .find_map(|a| match a {
            Action::Commit { op, .. } => Some(*op),
            _ => None,
        })
        .expect("the claim")
}

#[test]
fn a_run_claimed_ahead_is_triggered_at_its_instant_and_not_before() {
    let (mut s, _) = ready_ahead(2, false);
    let answered = claimed(&mut s);
    assert!(
        triggers(&answered).is_empty(),
        "nothing is sent before the instant: {:?}",
        kinds(&answered)
    );
    let wake = s.state.next_wakeup(&s.env.clone()).expect("a wakeup");
    assert!(
        wake <= s.t0 + Duration::from_millis(INSTANT) + super::super::runs::HELD_FALLBACK,
        "the state looks again soon after the instant, should its fire not come"
    );
    let fired = s.fire(INSTANT);
    assert!(
        writes(&fired).is_empty(),
        "the fire writes nothing: its run is claimed"
    );
    let t = triggers(&fired);
    assert_eq!(t.len(), 1, "{:?}", kinds(&fired));
    assert_eq!(t[0].source, Source::Cron);
    assert_eq!(t[0].fire_time, instant());
    assert_eq!(
        t[0].items.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(t[0].fencing_tokens.len(), 2, "the tokens of the claim");
    let latency = fired.iter().find_map(|a| match a {
        Action::Observe(Observation::TriggerSent { latency, .. }) => Some(*latency),
        _ => None,
    });
    assert_eq!(latency, Some(Duration::ZERO), "sent at the instant itself");
    // It runs and ends as any run.
    let done = s.answer(&t[0].execution_id, &[0, 1]);
    let ended = s.commit_all(done.clone());
    assert_eq!(answered_ok(&done, &ended), 1);
    assert!(s.state.runs.is_empty() && s.state.io.locked().is_empty());
}

#[test]
fn the_fire_of_an_instant_sends_its_claimed_run_in_its_own_step_and_owes_the_rest() {
    let (mut s, _) = ready_ahead(2, false);
    claimed(&mut s);
    s.at(INSTANT);
    let fired = s.fire_step_only(instant());
    assert_eq!(triggers(&fired).len(), 1, "{:?}", kinds(&fired));
    assert!(
        s.state.reconcile_owed(),
        "the rest of the reconcile is owed"
    );
    // The driver's next step, once the instant's fires are taken up, is a full one.
    let rest = s.step(Input::Tick);
    assert!(
        triggers(&rest).is_empty() && writes(&rest).is_empty(),
        "{:?}",
        kinds(&rest)
    );
    assert!(!s.state.reconcile_owed());
}

fn answered_ok(done: &[Action], after: &[Action]) -> usize {
    answered(done)
        .into_iter()
        .chain(answered(after))
        .filter(Result::is_ok)
        .count()
}

#[test]
fn a_run_claimed_ahead_goes_out_at_its_instant_even_when_the_fire_never_comes() {
    // Its schedule may change between the notice and the instant: the state's own wakeup sends
    // it then.
    let (mut s, _) = ready_ahead(2, false);
    claimed(&mut s);
    let fallback = INSTANT + super::super::runs::HELD_FALLBACK.as_millis() as u64;
    assert!(triggers(&s.tick(INSTANT - 1)).is_empty());
    let wake = s.state.next_wakeup(&s.env.clone()).expect("a wakeup");
    assert!(wake <= s.t0 + Duration::from_millis(fallback));
    let at = s.tick(fallback);
    let t = triggers(&at);
    assert_eq!(t.len(), 1, "{:?}", kinds(&at));
    assert_eq!(t[0].fire_time, instant());
    // The timer's fire, when it comes after all, adds nothing.
    s.at(fallback + 1);
    let fired = s.fire_of(instant());
    assert!(
        triggers(&fired).is_empty() && writes(&fired).is_empty(),
        "{:?}",
        writes(&fired)
    );
}

#[test]
fn a_claim_answered_after_its_instant_is_triggered_at_once() {
    let (mut s, _) = ready_ahead(2, false);
    let notice = s.fire_ahead(INSTANT - 100, INSTANT);
    let fired = s.fire(INSTANT);
    assert!(
        triggers(&fired).is_empty() && writes(&fired).is_empty(),
        "the claim is still in flight: nothing more is started"
    );
    s.at(INSTANT + 7);
    let answered = s.commit_all(notice);
    let t = triggers(&answered);
    assert_eq!(t.len(), 1, "{:?}", kinds(&answered));
    assert_eq!(t[0].fire_time, instant());
}

#[test]
fn a_claim_refused_leaves_the_fire_to_its_instant_with_no_catch_up() {
    let (mut s, _) = ready_ahead(2, false);
    let notice = s.fire_ahead(INSTANT - 100, INSTANT);
    let op = claim_op(&notice);
    let refused = s.step(Input::Done {
        op,
        result: IoResult::Committed(Err(RegError::BadVersion("/j/sharding/0".into()))),
    });
    assert!(triggers(&refused).is_empty());
    assert!(
        !s.state.runs.missed(ME),
        "no catch-up: the fire itself decides"
    );
    let fired = s.fire(INSTANT);
    assert_eq!(
        running_writes(&fired).len(),
        4,
        "the fire starts its run at the instant: {:?}",
        writes(&fired)
    );
    let t = triggers(&s.commit_all(fired));
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].source, Source::Cron);
}

#[test]
fn a_claim_refused_after_its_instant_flags_its_items_misfire_and_catches_up() {
    // A nemesis run under CPU load (seed 2): the leader's reshard, decided 240 ms before an
    // instant, took 600 ms to commit; the old owner's claim of the moved item, sent after it
    // on the same session, was refused after the instant, and the new owner read the move only
    // after the instant: neither ran the item for it.
    let (mut s, _) = ready_ahead(2, false);
    let notice = s.fire_ahead(INSTANT - 100, INSTANT);
    let op = claim_op(&notice);
    let fired = s.fire(INSTANT);
    assert!(triggers(&fired).is_empty() && writes(&fired).is_empty());
    s.at(INSTANT + 400);
    let refused = s.step(Input::Done {
        op,
        result: IoResult::Committed(Err(RegError::BadVersion("/j/sharding/1/instance".into()))),
    });
    assert!(triggers(&refused).is_empty());
    assert_eq!(
        writes(&refused),
        ["+/j/sharding/0/misfire", "+/j/sharding/1/misfire"],
        "the items of the instant that went by are flagged for whoever owns them: {:?}",
        kinds(&refused)
    );
    assert!(
        s.state.runs.missed(ME),
        "the instance catches up on what it owns after the re-read"
    );
}

#[test]
fn a_worker_gone_before_the_instant_leaves_its_claim_freed_not_failed_over() {
    // Its run never started: nothing for failover, no item run before its fire time.
    let (mut s, stream) = ready_ahead(2, true);
    claimed(&mut s);
    s.at(INSTANT - 50);
    let ended = s.step(Input::StreamEnded {
        stream,
        end: StreamEnd::ByWorker,
    });
    let left = s.commit_all(ended.clone());
    let w: Vec<String> = writes(&ended).into_iter().chain(writes(&left)).collect();
    for i in [0, 1] {
        assert!(
            w.contains(&format!("-/j/sharding/{i}/running")),
            "item {i} freed: {w:?}"
        );
        assert!(
            !w.iter().any(|w| w.contains(&format!("/failover/items/{i}"))
                || w.contains(&format!("/sharding/{i}/failover"))),
            "item {i} neither flagged nor handed over: {w:?}"
        );
    }
    assert!(triggers(&left).is_empty());
    assert!(triggers(&s.fire(INSTANT)).is_empty());
}

#[test]
fn a_drain_before_the_instant_gives_the_claimed_run_up() {
    let (mut s, _) = ready_ahead(2, true);
    claimed(&mut s);
    s.at(INSTANT - 50);
    let drain = s.step(Input::Drain {
        reply: 99,
        deadline: s.t0 + Duration::from_secs(30),
    });
    assert!(kinds(&drain).contains(&"Shutdown"));
    let after = s.commit_all(drain.clone());
    let w: Vec<String> = writes(&drain).into_iter().chain(writes(&after)).collect();
    assert!(
        w.contains(&"-/j/sharding/0/running".to_string())
            && w.contains(&"-/j/instances/10.0.0.1@-@7".to_string())
            && !w.iter().any(|w| w.contains("failover")),
        "freed, and the instance leaves at once: {w:?}"
    );
    assert!(triggers(&after).is_empty());
}

#[test]
fn a_failover_claim_before_the_instant_takes_the_instance_and_the_fire_is_a_misfire() {
    // The run claimed ahead does not hold a crashed peer's items back; at the instant the
    // instance is busy, as it would have been without the claim.
    let mut s = Script::new("j");
    s.env.claim_lead = AHEAD;
    let tree = shared_with_peer(&s, true, PEER);
    s.join(Some(tree));
    claimed(&mut s);
    s.at(INSTANT - 60);
    let flagged = peer_items_flagged(&mut s);
    let taken = s.commit_all(flagged);
    let fo = triggers(&taken);
    assert_eq!(fo.len(), 1, "{:?}", kinds(&taken));
    assert_eq!(fo[0].source, Source::Failover);
    let fired = s.fire(INSTANT);
    assert!(triggers(&fired).is_empty(), "{:?}", kinds(&fired));
    let w = writes(&fired);
    for i in [0, 1] {
        assert!(
            w.contains(&format!("-/j/sharding/{i}/running"))
                && w.contains(&format!("+/j/sharding/{i}/misfire")),
            "item {i}: its claim freed and the fire flagged a misfire: {w:?}"
        );
    }
    s.commit_all(fired);
    let done = s.answer(&fo[0].execution_id, &[2, 3]);
    let t = triggers(&s.commit_all(done));
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].source, Source::Misfire, "caught up once idle");
}

#[test]
fn a_trigger_request_before_the_instant_runs_the_claimed_run_now_as_manual() {
    let (mut s, _) = ready_ahead(2, false);
    claimed(&mut s);
    s.at(INSTANT - 40);
    let p = s.paths.clone();
    let request = seen(
        &mut s,
        WatchEvent::Created(p.trigger(ME)),
        Some(node("", 0, 300)),
    );
    let taken = s.commit_all(request);
    let t = triggers(&taken);
    assert_eq!(t.len(), 1, "{:?}", kinds(&taken));
    assert_eq!(t[0].source, Source::Manual);
    assert_eq!(
        t[0].fire_time,
        wall0() + chrono::Duration::milliseconds(INSTANT as i64 - 40)
    );
    assert!(
        running_writes(&taken).is_empty(),
        "its items were claimed already"
    );
    let fired = s.fire(INSTANT);
    assert!(triggers(&fired).is_empty());
    assert_eq!(
        writes(&fired),
        ["+/j/sharding/0/misfire", "+/j/sharding/1/misfire"],
        "the fire finds the instance busy"
    );
}

#[test]
fn nothing_is_claimed_ahead_for_a_busy_instance() {
    let (mut s, _) = ready_ahead(2, false);
    let t = run(&mut s, 2000);
    let notice = s.fire_ahead(INSTANT - 100, INSTANT);
    assert!(writes(&notice).is_empty(), "{:?}", writes(&notice));
    let fired = s.fire(INSTANT);
    assert_eq!(
        writes(&fired),
        ["+/j/sharding/0/misfire", "+/j/sharding/1/misfire"],
        "the fire decides at its instant, as without a claim lead"
    );
    let done = s.answer(&t.execution_id, &[0, 1]);
    s.commit_all(done);
}

#[test]
fn a_reshard_keeps_off_the_claim_lead_before_a_fire_instant() {
    // 120 ms before the instant: outside RESHARD_QUIET, inside it plus the claim lead.
    let (mut s, _) = ready_ahead(4, false);
    let joined = peer_instance(&mut s, INSTANT - 120, 50);
    assert_eq!(reshard_writes(&joined), Vec::<String>::new());
    let wake = s.state.next_wakeup(&s.env.clone()).expect("a wakeup");
    assert_eq!(
        wake,
        s.t0 + Duration::from_millis(INSTANT) + super::super::leadership::RESHARD_QUIET
    );
    // Without a claim lead the same reshard goes out at once.
    let (mut s, _) = ready(4, false);
    let joined = peer_instance(&mut s, INSTANT - 120, 50);
    assert_eq!(
        reshard_writes(&joined),
        ["=/j/sharding/0/instance", "=/j/sharding/1/instance"]
    );
}
