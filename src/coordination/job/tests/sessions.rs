//! Sessions.

use super::*;

#[test]
fn after_a_session_expiry_nothing_from_the_old_session_is_accepted_or_written() {
    // #19 case 1.
    let (mut s, _) = ready(1, true);
    let t = run(&mut s, 1000);
    s.at(9000);
    s.env.session = SessionState::Connected {
        generation: 2,
        session_id: 78,
    };
    s.env.proof = None;
    let new = s.step(Input::Session(s.env.session.clone()));
    assert!(
        kinds(&new).contains(&"Revoke"),
        "the worker is told its work is void"
    );
    let late = s.answer(&t.execution_id, &[0]);
    assert_eq!(
        kinds(&late),
        ["Remembered"],
        "an answer from the old session is refused, from the memory of its execution"
    );
    for a in s.step(Input::Tick) {
        if let Action::Commit { generation, .. } = a {
            assert_eq!(generation, 2, "writes are made in the new session only");
        }
    }
}

#[test]
fn a_write_decided_in_a_session_carries_it() {
    let (mut s, _) = ready(1, false);
    let fired = s.fire(1000);
    assert!(fired
        .iter()
        .any(|a| matches!(a, Action::Commit { generation: 1, .. })));
}

#[test]
fn a_refused_write_is_decided_again_only_after_a_fresh_read() {
    let (mut s, _) = ready(1, false);
    let fired = s.fire(1000);
    let op = fired
        .iter()
        .find_map(|a| match a {
            Action::Commit { op, .. } => Some(*op),
            _ => None,
        })
        .unwrap();
    let refused = s.step(Input::Done {
        op,
        result: IoResult::Committed(Err(RegError::BadVersion("/j/sharding/0".into()))),
    });
    assert!(writes(&refused).is_empty(), "no retry on the same view");
    assert!(!kinds(&refused).contains(&"Reload"), "after a short pause");
    let later = s.tick(1300);
    assert!(kinds(&later).contains(&"Reload"));
}

#[test]
fn retries_keep_the_earliest_instant() {
    // #9: `retry_at` was overwritten instead of taking the earlier instant.
    let (mut s, _) = ready(1, false);
    let env = s.env.clone();
    s.state.io.retry_after(env.now, Duration::from_millis(100));
    s.state.io.retry_after(env.now, Duration::from_secs(5));
    assert_eq!(
        s.state.io.retry_at(),
        Some(env.now + Duration::from_millis(100))
    );
}

#[test]
fn a_reconnect_in_the_same_session_reads_the_job_again_and_recreates_nothing() {
    // Persistent watches may lose events across a reconnect (ZOOKEEPER-4698).
    let (mut s, _) = ready(1, false);
    s.at(1000);
    s.env.session = SessionState::Disconnected {
        generation: 1,
        since: s.env.now,
    };
    assert!(writes(&s.step(Input::Session(s.env.session.clone()))).is_empty());
    s.healthy();
    let back = s.step(Input::Session(s.env.session.clone()));
    assert!(kinds(&back).contains(&"Reload"), "{:?}", kinds(&back));
    assert!(
        writes(&back).is_empty(),
        "a reconnect within the session re-creates nothing (peers would read a crash)"
    );
}
