//! Answers the sidecar holds until they are recorded (#53): a write whose outcome is unknown is
//! resolved by a fresh read and written again if it did not land. The worker never has to send
//! an answer twice.

use super::*;

/// The commit among `actions` (its op), if any.
fn commit_op(actions: &[Action]) -> Option<OpId> {
    actions.iter().find_map(|a| match a {
        Action::Commit { op, .. } => Some(*op),
        _ => None,
    })
}

fn reload_op(actions: &[Action]) -> Option<OpId> {
    actions.iter().find_map(|a| match a {
        Action::Reload { op } => Some(*op),
        _ => None,
    })
}

/// What a read of the whole job returns when ZooKeeper holds exactly what the mirror does.
fn as_read(s: &Script) -> BTreeMap<String, Node> {
    let root = s.paths.root();
    let mut tree = BTreeMap::new();
    let node_of = |n: &crate::registry::CachedNode| Node {
        data: n.data.to_vec(),
        stat: Stat {
            czxid: n.stat.czxid,
            mzxid: n.stat.mzxid,
            mtime: n.stat.mtime,
            ephemeral_owner: n.stat.ephemeral_owner,
            version: n.stat.version,
            ..Stat::default()
        },
    };
    if let Some(n) = s.state.mirror.cache().get(&root) {
        tree.insert(root.clone(), node_of(n));
    }
    for (rest, n) in s.state.mirror.cache().descendants(&root) {
        tree.insert(format!("{root}/{rest}"), node_of(n));
    }
    tree
}

/// The answer's write fails as `error`; then the re-read after `RETRY` finds the job as `read`
/// makes it from the mirror. Returns what followed the re-read (its writes answered at once).
fn unconfirmed_then_reread(
    s: &mut Script,
    op: OpId,
    error: RegError,
    at_ms: u64,
    read: impl FnOnce(&Script) -> BTreeMap<String, Node>,
) -> Vec<Action> {
    s.at(at_ms);
    let lost = s.step(Input::Done {
        op,
        result: IoResult::Committed(Err(error)),
    });
    assert!(
        answered(&lost).is_empty(),
        "the call is neither refused nor told to send again: {:?}",
        answered(&lost)
    );
    let reread = s.tick(at_ms + 300);
    let reload = reload_op(&reread).expect("a fresh read of the job");
    let tree = read(s);
    let after = s.step(Input::Done {
        op: reload,
        result: IoResult::Loaded(Ok(tree)),
    });
    let mut all = after.clone();
    all.extend(s.commit_all(after));
    all
}

#[test]
fn an_answer_whose_write_went_unconfirmed_is_written_again_until_it_lands() {
    // #53, seed 31 of a soak with workers that never send an answer twice: ZooKeeper froze
    // between the worker's Complete and its write's reply; the re-read found the item's
    // `running` node still carrying the execution's token. The outcome was dropped, the worker
    // did not resend (the contract allows it not to), and the item never ran again.
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.at(1400);
    let sent = s.answer(&t.execution_id, &[0]);
    let op = commit_op(&sent).expect("the answer's write");
    assert!(answered(&sent).is_empty(), "the call waits for the write");

    let after = unconfirmed_then_reread(
        &mut s,
        op,
        RegError::Timeout(Duration::from_secs(1)),
        2400,
        as_read,
    );
    assert!(
        writes(&after).contains(&"-/j/sharding/0/running".to_string()),
        "the sidecar writes the answer again itself: {:?}",
        writes(&after)
    );
    assert_eq!(
        answered(&after),
        [Ok(())],
        "the waiting call hears it landed"
    );
    assert!(s.state.runs.is_empty(), "the execution is over");
    let next = run(&mut s, 6000);
    assert_eq!(next.items.len(), 1, "and the item runs again");
}

#[test]
fn an_unconfirmed_write_that_landed_is_recorded_without_writing_it_again() {
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.at(1400);
    let sent = s.answer(&t.execution_id, &[0]);
    let op = commit_op(&sent).expect("the answer's write");
    let after = unconfirmed_then_reread(&mut s, op, RegError::ConnectionLoss, 2400, |s| {
        let mut tree = as_read(s);
        tree.remove(&s.paths.item_running(0)); // the write landed; its reply was lost
        tree
    });
    assert!(writes(&after).is_empty(), "{:?}", writes(&after));
    assert_eq!(answered(&after), [Ok(())]);
    assert!(s.state.runs.is_empty());
}

#[test]
fn a_rewrite_refused_after_an_unconfirmed_write_is_read_again_not_refused() {
    // The first write went unanswered; the re-read said it had not landed; the second write is
    // refused by the fence because the first landed after all, late. A second read tells.
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.at(1400);
    let sent = s.answer(&t.execution_id, &[0]);
    let op = commit_op(&sent).expect("the answer's write");
    s.at(2400);
    s.step(Input::Done {
        op,
        result: IoResult::Committed(Err(RegError::Timeout(Duration::from_secs(1)))),
    });
    let reread = s.tick(2700);
    let reload = reload_op(&reread).expect("a re-read");
    let tree = as_read(&s);
    let again = s.step(Input::Done {
        op: reload,
        result: IoResult::Loaded(Ok(tree)),
    });
    let op = commit_op(&again).expect("written again");
    let after = unconfirmed_then_reread(
        &mut s,
        op,
        RegError::MultiFailed {
            index: 0,
            source: Box::new(RegError::BadVersion("/j/sharding/0".into())),
        },
        2800,
        |s| {
            let mut tree = as_read(s);
            tree.remove(&s.paths.item_running(0));
            tree
        },
    );
    assert_eq!(answered(&after), [Ok(())], "recorded, not refused");
    assert!(s.state.runs.is_empty());
}

#[test]
fn an_answer_that_comes_while_zookeeper_is_away_is_held_and_written_when_it_is_back() {
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.at(1200);
    s.unhealthy();
    s.at(1400);
    let sent = s.answer(&t.execution_id, &[0]);
    assert!(writes(&sent).is_empty(), "nothing can be written now");
    assert!(answered(&sent).is_empty(), "held, not refused");
    s.at(1800);
    s.healthy();
    let back = s.step(Input::Session(s.env.session.clone()));
    let reload = reload_op(&back).expect("a fresh read once connected again");
    let tree = as_read(&s);
    let after = s.step(Input::Done {
        op: reload,
        result: IoResult::Loaded(Ok(tree)),
    });
    let mut all = after.clone();
    all.extend(s.commit_all(after));
    assert!(
        writes(&all).contains(&"-/j/sharding/0/running".to_string()),
        "{:?}",
        writes(&all)
    );
    assert_eq!(answered(&all), [Ok(())]);
    assert!(s.state.runs.is_empty());
}

#[test]
fn an_answer_sent_again_while_its_write_is_in_flight_waits_with_it() {
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.at(1400);
    let first = s.answer(&t.execution_id, &[0]);
    let second = s.answer(&t.execution_id, &[0]);
    assert!(commit_op(&second).is_none(), "one write for both");
    assert!(
        answered(&second).is_empty(),
        "no UNAVAILABLE for the repeat"
    );
    let done = s.commit_all(first);
    assert_eq!(
        answered(&done),
        [Ok(()), Ok(())],
        "both calls hear it landed"
    );
}

#[test]
fn a_held_answer_of_a_session_that_expired_is_refused_and_the_execution_ends() {
    let (mut s, _) = ready(1, false);
    let t = run(&mut s, 1000);
    s.at(1400);
    let sent = s.answer(&t.execution_id, &[0]);
    let op = commit_op(&sent).expect("the answer's write");
    s.at(2400);
    let lost = s.step(Input::Done {
        op,
        result: IoResult::Committed(Err(RegError::Timeout(Duration::from_secs(1)))),
    });
    assert!(answered(&lost).is_empty());
    s.at(12_000);
    s.env.session = SessionState::Connected {
        generation: 2,
        session_id: 78,
    };
    s.env.proof = Some(s.env.now);
    let expired = s.step(Input::Session(s.env.session.clone()));
    let refused = answered(&expired);
    assert_eq!(refused.len(), 1, "{:?}", kinds(&expired));
    let error = refused[0].clone().unwrap_err();
    assert!(error.contains("session expired"), "{error}");
    assert!(s.state.runs.is_empty(), "nothing waits on the worker");
}

#[test]
fn a_partial_decline_that_comes_while_zookeeper_is_away_is_released_when_it_is_back() {
    // A worker gives one item of two back while the session is down: the sidecar replied OK and
    // holds the decline; nothing may wait for the worker to send it again.
    let (mut s, _) = ready(2, false);
    let t = run(&mut s, 1000);
    assert_eq!(t.items.len(), 2);
    s.at(1200);
    s.unhealthy();
    s.at(1400);
    let declined = s.decline_items(&t.execution_id, &[1]);
    assert!(writes(&declined).is_empty(), "nothing can be written now");
    assert_eq!(answered(&declined), [Ok(())], "the decline is taken");
    s.at(1800);
    s.healthy();
    let back = s.step(Input::Session(s.env.session.clone()));
    let reload = reload_op(&back).expect("a fresh read once connected again");
    let tree = as_read(&s);
    let after = s.step(Input::Done {
        op: reload,
        result: IoResult::Loaded(Ok(tree)),
    });
    let mut all = after.clone();
    all.extend(s.commit_all(after));
    assert!(
        writes(&all).contains(&"-/j/sharding/1/running".to_string()),
        "the declined item is released by the sidecar itself: {:?}",
        writes(&all)
    );
    let answered_0 = s.answer(&t.execution_id, &[0]);
    let done = s.commit_all(answered_0);
    assert_eq!(answered(&done), [Ok(())]);
    assert!(s.state.runs.is_empty(), "the execution is over");
    let next = run(&mut s, 6000);
    assert_eq!(next.items.len(), 2, "and both items run again");
}

#[test]
fn a_partial_decline_whose_release_got_no_reply_is_written_again() {
    let (mut s, _) = ready(2, false);
    let t = run(&mut s, 1000);
    s.at(1400);
    let declined = s.decline_items(&t.execution_id, &[1]);
    assert_eq!(answered(&declined), [Ok(())]);
    let op = commit_op(&declined).expect("the release's write");
    let all = unconfirmed_then_reread(&mut s, op, RegError::ConnectionLoss, 2400, as_read);
    assert!(
        writes(&all).contains(&"-/j/sharding/1/running".to_string()),
        "written again: {:?}",
        kinds(&all)
    );
    let done = s.answer(&t.execution_id, &[0]);
    let done = s.commit_all(done);
    assert_eq!(answered(&done), [Ok(())]);
    assert!(s.state.runs.is_empty(), "the execution is over");
}
