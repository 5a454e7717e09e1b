//! Test-only access to the ZooKeeper trees that real ElasticJob 3.0.4 wrote
//! (`tests/vectors/*.json`, see its README).

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Node {
    pub path: String,
    pub data: String,
    pub ephemeral: bool,
}

/// One dump of one job: the nodes under the namespace `/vec`, with the namespace stripped.
#[derive(Debug, Clone)]
pub(crate) struct Dump {
    pub file: String,
    pub job: String,
    pub total: i32,
    /// `None` when the job set no strategy (the YAML has no `jobShardingStrategyType`).
    pub strategy: Option<String>,
    pub params: String,
    pub failover: bool,
    pub nodes: Vec<Node>,
}

impl Dump {
    pub fn data(&self, path: &str) -> Option<&str> {
        self.nodes
            .iter()
            .find(|n| n.path == path)
            .map(|n| n.data.as_str())
    }

    /// Names of the direct children of `path`.
    pub fn children(&self, path: &str) -> Vec<String> {
        let prefix = format!("{path}/");
        self.nodes
            .iter()
            .filter_map(|n| n.path.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_owned)
            .collect()
    }
}

#[derive(Deserialize)]
struct File {
    job: String,
    sharding_total_count: i32,
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default)]
    params: Option<String>,
    failover: bool,
    #[serde(default)]
    nodes: Option<Vec<Node>>,
    #[serde(default)]
    while_running: Option<Vec<Node>>,
    #[serde(default)]
    during_failover: Option<Vec<Node>>,
}

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors");

/// Every dump of every vector file (the failover file gives two), namespace stripped.
pub(crate) fn all_dumps() -> Vec<Dump> {
    let mut files: Vec<_> = std::fs::read_dir(DIR)
        .unwrap_or_else(|e| panic!("cannot read {DIR}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "expected the 9 vector files in {DIR}");
    let mut out = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let f: File = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (suffix, nodes) in [
            ("", f.nodes),
            ("#while_running", f.while_running),
            ("#during_failover", f.during_failover),
        ] {
            let Some(nodes) = nodes else { continue };
            let nodes = nodes
                .into_iter()
                .filter_map(|mut n| {
                    let rest = n.path.strip_prefix("/vec")?;
                    if rest.is_empty() {
                        return None;
                    }
                    n.path = rest.to_owned();
                    Some(n)
                })
                .collect();
            out.push(Dump {
                file: format!("{name}{suffix}"),
                job: f.job.clone(),
                total: f.sharding_total_count,
                strategy: f.strategy.clone(),
                params: f.params.clone().unwrap_or_default(),
                failover: f.failover,
                nodes,
            });
        }
    }
    out
}

/// `(dump name, node)` for every node of every dump.
pub(crate) fn all_nodes() -> Vec<(String, Node)> {
    all_dumps()
        .into_iter()
        .flat_map(|d| {
            let file = d.file.clone();
            d.nodes.into_iter().map(move |n| (file.clone(), n))
        })
        .collect()
}
