//! Dumps a ZooKeeper namespace with a plain `zookeeper_client::Client`, for assertions against
//! ElasticJob's layout. Paths are absolute and include the namespace (`/ns/job/config`), the same
//! form as `tests/vectors/`.
use std::collections::BTreeMap;
use std::time::Duration;
use zookeeper_client::Client;

/// Path → (data as lossy UTF-8, ephemeral).
pub type ZkTree = BTreeMap<String, (String, bool)>;

/// Every node under `/{namespace}` (the namespace node included); empty if it does not exist.
/// Nodes deleted while walking are skipped.
///
/// # Panics
/// When ZooKeeper cannot be reached within 10 s or a read fails otherwise.
pub async fn zk_tree(connect: &str, namespace: &str) -> ZkTree {
    let root = format!("/{}", namespace.trim_matches('/'));
    let client = tokio::time::timeout(Duration::from_secs(10), Client::connect(connect))
        .await
        .unwrap_or_else(|_| panic!("no ZooKeeper session to {connect} within 10 s"))
        .unwrap_or_else(|e| panic!("cannot connect to ZooKeeper at {connect}: {e}"));
    let mut tree = ZkTree::new();
    let mut pending = vec![root];
    while let Some(path) = pending.pop() {
        let (data, stat) = match client.get_data(&path).await {
            Ok(found) => found,
            Err(zookeeper_client::Error::NoNode) => continue,
            Err(e) => panic!("cannot read {path} from {connect}: {e}"),
        };
        let children = match client.list_children(&path).await {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => continue,
            Err(e) => panic!("cannot list {path} on {connect}: {e}"),
        };
        for child in children {
            pending.push(format!("{}/{child}", path.trim_end_matches('/')));
        }
        let text = String::from_utf8_lossy(&data).into_owned();
        tree.insert(path, (text, stat.ephemeral_owner != 0));
    }
    tree
}
