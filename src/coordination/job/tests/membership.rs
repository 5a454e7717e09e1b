//! Joining and leaving.

use super::*;

#[test]
fn a_join_sets_the_job_up_registers_then_answers_with_registered_assignment_and_lease() {
    let mut s = Script::new("j");
    let actions = s.step(Input::Join {
        reply: 1,
        stream: 1,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
    });
    assert_eq!(kinds(&actions), ["SetUp"], "nothing else before the setup");
    let tree = s.tree(&config(2, false), &[], "");
    let actions = s.step(Input::Done {
        op: setup_op(&actions).unwrap(),
        result: IoResult::SetUp(Ok(tree)),
    });
    assert_eq!(writes(&actions), ["+/j/instances/10.0.0.1@-@7"]);
    assert!(
        !kinds(&actions).contains(&"Reply"),
        "no reply before the node exists"
    );
    let registered = s.commit_all(actions);
    let k = kinds(&registered);
    let order: Vec<_> = k
        .iter()
        .filter(|k| ["Registered", "Assignment", "Lease", "Reply"].contains(k))
        .collect();
    assert_eq!(order, [&"Registered", &"Assignment", &"Lease", &"Reply"]);
}

#[test]
fn a_subscribe_cancelled_before_its_instance_exists_leaves_no_ghost() {
    // #9 defect 1: the stream ends while the instance node is being created.
    let mut s = Script::new("j");
    let actions = s.step(Input::Join {
        reply: 1,
        stream: 1,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
    });
    let tree = s.tree(&config(2, false), &[], "");
    let actions = s.step(Input::Done {
        op: setup_op(&actions).unwrap(),
        result: IoResult::SetUp(Ok(tree)),
    });
    let ended = s.step(Input::StreamEnded {
        stream: 1,
        end: StreamEnd::ByWorker,
    });
    assert!(
        writes(&ended).is_empty(),
        "its create is still in flight: {:?}",
        writes(&ended)
    );
    let after = s.commit_all(actions);
    assert!(
        writes(&after).contains(&"-/j/instances/10.0.0.1@-@7".to_string()),
        "the instance created for a stream that already ended is removed at once: {:?}",
        kinds(&after)
    );
    assert!(!kinds(&after).contains(&"Registered"));
    assert!(kinds(&after).contains(&"EndStream"));
    assert!(
        s.state.idle(),
        "nothing is left of the cancelled subscription"
    );
}

#[test]
fn a_subscribe_cancelled_while_the_job_is_set_up_leaves_no_ghost() {
    // Found by the nemesis (seed 1123): a Subscribe cancelled 11 ms after it was sent, while a
    // new job driver was still setting the job up. The end of the stream came before the join
    // had a local instance, was dropped, and the instance then lived on without a stream,
    // owning items and leading the job.
    let mut s = Script::new("j");
    let actions = s.step(Input::Join {
        reply: 1,
        stream: 1,
        instance_id: ME.into(),
        config: None,
        overwrite: false,
    });
    assert_eq!(kinds(&actions), ["SetUp"]);
    let ended = s.step(Input::StreamEnded {
        stream: 1,
        end: StreamEnd::ByWorker,
    });
    assert!(writes(&ended).is_empty(), "{:?}", kinds(&ended));
    let tree = s.tree(&config(2, false), &[], "");
    let after = s.step(Input::Done {
        op: setup_op(&actions).unwrap(),
        result: IoResult::SetUp(Ok(tree)),
    });
    let after = s.commit_all(after);
    assert!(
        !writes(&after).contains(&"+/j/instances/10.0.0.1@-@7".to_string()),
        "no instance is created for a stream that already ended: {:?}",
        writes(&after)
    );
    assert!(!kinds(&after).contains(&"Registered"));
    assert!(
        s.state.idle(),
        "nothing is left of the cancelled subscription"
    );
}

#[test]
fn a_worker_that_closes_its_stream_leaves_at_once_and_its_running_items_fail_over() {
    let (mut s, stream) = ready(2, true);
    let t = run(&mut s, 1000);
    let left = s.step(Input::StreamEnded {
        stream,
        end: StreamEnd::ByWorker,
    });
    assert_eq!(
        writes(&left),
        [
            "-/j/instances/10.0.0.1@-@7",
            "=/j/sharding/0",
            "-/j/sharding/0/running",
            "+/j/leader/failover",
            "+/j/leader/failover/items",
            "+/j/leader/failover/items/0",
            "=/j/sharding/1",
            "-/j/sharding/1/running",
            "+/j/leader/failover/items/1",
            "-/j/leader/election/instance"
        ],
        "instance, fenced release with failover flags (and missing parents), leadership: one multi-op"
    );
    let late = s.answer(&t.execution_id, &[0]);
    assert!(
        answered(&late)[0].is_err(),
        "an answer after the stream ended is refused"
    );
}

#[test]
fn a_stream_the_sidecar_closed_keeps_its_items_until_the_workers_lease_has_run_out() {
    let (mut s, stream) = ready(1, true);
    run(&mut s, 1000); // the trigger came with a fresh lease, sent at 1.0 s
    let ended = s.step(Input::StreamEnded {
        stream,
        end: StreamEnd::BySidecar,
    });
    assert!(
        writes(&ended).is_empty(),
        "keepalive closed it: the worker may still run"
    );
    let waiting = s.tick(3900);
    assert!(
        writes(&waiting).is_empty(),
        "its lease (sent at 1 s, 3 s long) still runs: {:?}",
        kinds(&waiting)
    );
    let released = s.tick(4000);
    eprintln!("{:?}", kinds(&released));
    assert!(
        writes(&released).contains(&"+/j/leader/failover/items/0".to_string()),
        "{:?}",
        writes(&released)
    );
}

#[test]
fn the_job_retires_once_its_last_instance_has_left_and_its_node_is_gone() {
    let (mut s, stream) = ready(1, false);
    assert!(!s.state.idle());
    let left = s.step(Input::StreamEnded {
        stream,
        end: StreamEnd::ByWorker,
    });
    let after = s.commit_all(left.clone());
    let all: Vec<String> = writes(&left).into_iter().chain(writes(&after)).collect();
    assert!(
        all.contains(&"-/j/instances/10.0.0.1@-@7".to_string()),
        "{all:?}"
    );
    assert!(
        all.contains(&"-/j/shardcar/sidecars/10.0.0.1".to_string()),
        "the sidecar stops looking after the job: {all:?}"
    );
    assert!(s.state.idle(), "nothing left: the driver retires the job");
}
