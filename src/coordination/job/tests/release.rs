//! Revoke and timeout.

use super::*;

#[test]
fn a_revoked_item_is_released_only_once_the_worker_declines_it() {
    let (mut s, _) = ready(1, false);
    s.state.view.extras.execution_timeout_seconds = 1;
    let mut tree = s.tree(&config(1, false), &[(0, ME)], ME);
    tree.insert(s.paths.instance(ME), node(&instance_yaml(ME, IP), 0, 11));
    tree.insert(
        s.paths.shardcar(),
        node("executionTimeoutSeconds: 1\n", 0, 12),
    );
    s.state.cache.replace_all(tree);
    s.state.view_stale = true;
    let t = run(&mut s, 1000);
    let revoked = s.tick(2100);
    assert!(kinds(&revoked).contains(&"Revoke"));
    assert!(writes(&revoked).is_empty(), "kept until acknowledged");
    let renewals = s.tick(3000);
    assert!(
        !kinds(&renewals).contains(&"Lease"),
        "no renewal while a revoke waits for its acknowledgement"
    );
    let declined = s.decline(&t.execution_id);
    assert_eq!(answered(&declined), [Ok(())]);
    assert!(
        writes(&declined).contains(&"-/j/sharding/0/running".to_string()),
        "{:?}",
        writes(&declined)
    );
}
