//! Typed znode paths of one ElasticJob job (`docs/elasticjob-compat.md` §1), relative to the namespace, and the
//! reverse mapping from a path to the node it is ([`JobPaths::classify`]). Also the rules that
//! go with the paths: child order ([`sort_descending`]), job-name validity and server status.

use std::cmp::Ordering;

/// The paths of one job's nodes, relative to the namespace (`/{job}/...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPaths {
    job: String,
    root: String,
}

/// What a path under `/{job}` is. Item numbers parse as `i32` in canonical decimal
/// (`sharding/07` is [`JobNode::Other`]); anything not listed is [`JobNode::Other`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobNode {
    Root,
    Config,
    Servers,
    Server(String),
    Instances,
    Instance(String),
    /// `leader/election/instance`.
    LeaderInstance,
    /// `leader/election/latch` or one of its latch children.
    ElectionLatch,
    ShardingNecessary,
    ShardingProcessing,
    /// `sharding` itself.
    Sharding,
    /// `sharding/{i}`.
    Item(i32),
    ItemInstance(i32),
    ItemRunning(i32),
    ItemMisfire(i32),
    ItemDisabled(i32),
    ItemFailover(i32),
    ItemFailovering(i32),
    /// `leader/failover/items`.
    FailoverItems,
    /// `leader/failover/items/{i}`.
    FailoverItem(i32),
    /// `leader/failover/latch` or one of its latch children.
    FailoverLatch,
    /// `trigger`.
    Triggers,
    /// `trigger/{instance id}`.
    Trigger(String),
    /// `shardcar/retries/{i}`: shardcar's pending retry of item `i`.
    Retry(i32),
    Other,
}

impl JobPaths {
    /// Paths for job `job` (not validated here; see [`validate_job_name`]).
    pub fn new(job: &str) -> Self {
        JobPaths {
            job: job.to_owned(),
            root: format!("/{job}"),
        }
    }

    pub fn job_name(&self) -> &str {
        &self.job
    }

    fn sub(&self, rest: &str) -> String {
        format!("{}/{rest}", self.root)
    }

    /// `/{job}`: data is the job class name (shardcar writes it empty).
    pub fn root(&self) -> String {
        self.root.clone()
    }
    pub fn config(&self) -> String {
        self.sub("config")
    }
    pub fn servers(&self) -> String {
        self.sub("servers")
    }
    pub fn server(&self, ip: &str) -> String {
        self.sub(&format!("servers/{ip}"))
    }
    pub fn instances(&self) -> String {
        self.sub("instances")
    }
    pub fn instance(&self, id: &str) -> String {
        self.sub(&format!("instances/{id}"))
    }
    pub fn leader_election_latch(&self) -> String {
        self.sub("leader/election/latch")
    }
    pub fn leader_election_instance(&self) -> String {
        self.sub("leader/election/instance")
    }
    pub fn sharding_necessary(&self) -> String {
        self.sub("leader/sharding/necessary")
    }
    pub fn sharding_processing(&self) -> String {
        self.sub("leader/sharding/processing")
    }
    pub fn sharding(&self) -> String {
        self.sub("sharding")
    }
    pub fn item(&self, i: i32) -> String {
        self.sub(&format!("sharding/{i}"))
    }
    pub fn item_instance(&self, i: i32) -> String {
        self.sub(&format!("sharding/{i}/instance"))
    }
    pub fn item_running(&self, i: i32) -> String {
        self.sub(&format!("sharding/{i}/running"))
    }
    pub fn item_misfire(&self, i: i32) -> String {
        self.sub(&format!("sharding/{i}/misfire"))
    }
    pub fn item_disabled(&self, i: i32) -> String {
        self.sub(&format!("sharding/{i}/disabled"))
    }
    pub fn item_failover(&self, i: i32) -> String {
        self.sub(&format!("sharding/{i}/failover"))
    }
    pub fn item_failovering(&self, i: i32) -> String {
        self.sub(&format!("sharding/{i}/failovering"))
    }
    pub fn failover_items(&self) -> String {
        self.sub("leader/failover/items")
    }
    pub fn failover_item(&self, i: i32) -> String {
        self.sub(&format!("leader/failover/items/{i}"))
    }
    pub fn failover_latch(&self) -> String {
        self.sub("leader/failover/latch")
    }
    pub fn triggers(&self) -> String {
        self.sub("trigger")
    }
    pub fn trigger(&self, id: &str) -> String {
        self.sub(&format!("trigger/{id}"))
    }
    /// `systemTime/current`: only its mtime is used (`docs/elasticjob-compat.md` §6).
    pub fn system_time(&self) -> String {
        self.sub("systemTime/current")
    }
    /// `shardcar/sidecars`: one ephemeral child per sidecar with local instances of the job.
    pub fn sidecars(&self) -> String {
        format!("{}/sidecars", self.shardcar())
    }

    /// `shardcar/sidecars/{ip}`: the sidecar at `ip` looks after the items of its instances.
    pub fn sidecar(&self, ip: &str) -> String {
        format!("{}/{ip}", self.sidecars())
    }

    /// `/{job}/shardcar`: shardcar's own sibling node, which Java ignores.
    pub fn shardcar(&self) -> String {
        self.sub("shardcar")
    }

    /// `shardcar/retries`: the pending retries of failed items.
    pub fn retries(&self) -> String {
        self.sub("shardcar/retries")
    }

    /// `shardcar/retries/{i}`: item `i`'s pending retry.
    pub fn retry(&self, i: i32) -> String {
        format!("{}/{i}", self.retries())
    }

    /// What `path` (relative to the namespace) is, for this job.
    pub fn classify(&self, path: &str) -> JobNode {
        let Some(rest) = path.strip_prefix(self.root.as_str()) else {
            return JobNode::Other;
        };
        if rest.is_empty() {
            return JobNode::Root;
        }
        let Some(rest) = rest.strip_prefix('/') else {
            return JobNode::Other; // another job whose name starts with ours
        };
        let segs: Vec<&str> = rest.split('/').collect();
        if segs.iter().any(|s| s.is_empty()) {
            return JobNode::Other;
        }
        let item = |s: &str, node: fn(i32) -> JobNode| parse_item(s).map_or(JobNode::Other, node);
        match segs.as_slice() {
            ["config"] => JobNode::Config,
            ["servers"] => JobNode::Servers,
            ["servers", ip] => JobNode::Server((*ip).to_owned()),
            ["instances"] => JobNode::Instances,
            ["instances", id] => JobNode::Instance((*id).to_owned()),
            ["leader", "election", "instance"] => JobNode::LeaderInstance,
            ["leader", "election", "latch", ..] => JobNode::ElectionLatch,
            ["leader", "sharding", "necessary"] => JobNode::ShardingNecessary,
            ["leader", "sharding", "processing"] => JobNode::ShardingProcessing,
            ["leader", "failover", "items"] => JobNode::FailoverItems,
            ["leader", "failover", "items", i] => item(i, JobNode::FailoverItem),
            ["leader", "failover", "latch", ..] => JobNode::FailoverLatch,
            ["sharding"] => JobNode::Sharding,
            ["sharding", i] => item(i, JobNode::Item),
            ["sharding", i, "instance"] => item(i, JobNode::ItemInstance),
            ["sharding", i, "running"] => item(i, JobNode::ItemRunning),
            ["sharding", i, "misfire"] => item(i, JobNode::ItemMisfire),
            ["sharding", i, "disabled"] => item(i, JobNode::ItemDisabled),
            ["sharding", i, "failover"] => item(i, JobNode::ItemFailover),
            ["sharding", i, "failovering"] => item(i, JobNode::ItemFailovering),
            ["trigger"] => JobNode::Triggers,
            ["trigger", id] => JobNode::Trigger((*id).to_owned()),
            ["shardcar", "retries", i] => item(i, JobNode::Retry),
            _ => JobNode::Other,
        }
    }
}

/// An item number in canonical decimal form (what `Integer.toString` writes).
fn parse_item(s: &str) -> Option<i32> {
    s.parse::<i32>().ok().filter(|i| i.to_string() == s)
}

/// Java's `String.compareTo`: lexicographic over UTF-16 code units.
fn java_compare(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Sorts children as ElasticJob's `getChildrenKeys` does: descending by Java `String.compareTo`.
/// Strategies and failover depend on this order (`docs/elasticjob-compat.md` §1).
pub fn sort_descending(v: &mut [String]) {
    v.sort_by(|a, b| java_compare(b, a));
}

/// Checks that `name` can be a job name (one znode under the namespace).
///
/// # Errors
/// A message naming the problem: empty, contains `/`, is `.` or `..`, or contains a character
/// ZooKeeper rejects in paths (control characters, U+E000–U+F8FF, U+FFF0–U+FFFF).
pub fn validate_job_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("job name is empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err(format!(
            "job name {name:?} is not allowed (it is a relative path)"
        ));
    }
    if name.contains('/') {
        return Err(format!(
            "job name {name:?} contains '/', which would make it a nested path"
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(format!(
            "job name {name:?} contains the control character U+{:04X}",
            c as u32
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| ('\u{E000}'..='\u{F8FF}').contains(&c) || ('\u{FFF0}'..='\u{FFFF}').contains(&c))
    {
        return Err(format!(
            "job name {name:?} contains U+{:04X}, which ZooKeeper does not allow in paths",
            c as u32
        ));
    }
    Ok(())
}

/// The data of `servers/{ip}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerStatus {
    Enabled,
    Disabled,
}

impl ServerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerStatus::Enabled => "ENABLED",
            ServerStatus::Disabled => "DISABLED",
        }
    }

    /// Reads `servers/{ip}` data as Java does (see [`server_enabled`]).
    pub fn from_data(data: &[u8]) -> Self {
        if server_enabled(data) {
            ServerStatus::Enabled
        } else {
            ServerStatus::Disabled
        }
    }
}

/// Java's `!"DISABLED".equals(data)`: anything but exactly `DISABLED` is enabled (including
/// empty data; Java retries an empty read a few times first, which the caller may do).
pub fn server_enabled(data: &[u8]) -> bool {
    data != b"DISABLED"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_layout() {
        let p = JobPaths::new("demoJob");
        assert_eq!(p.job_name(), "demoJob");
        assert_eq!(p.root(), "/demoJob");
        assert_eq!(p.config(), "/demoJob/config");
        assert_eq!(p.servers(), "/demoJob/servers");
        assert_eq!(p.server("10.0.0.1"), "/demoJob/servers/10.0.0.1");
        assert_eq!(p.instances(), "/demoJob/instances");
        assert_eq!(
            p.instance("10.0.0.1@-@42"),
            "/demoJob/instances/10.0.0.1@-@42"
        );
        assert_eq!(p.leader_election_latch(), "/demoJob/leader/election/latch");
        assert_eq!(
            p.leader_election_instance(),
            "/demoJob/leader/election/instance"
        );
        assert_eq!(p.sharding_necessary(), "/demoJob/leader/sharding/necessary");
        assert_eq!(
            p.sharding_processing(),
            "/demoJob/leader/sharding/processing"
        );
        assert_eq!(p.sharding(), "/demoJob/sharding");
        assert_eq!(p.item(3), "/demoJob/sharding/3");
        assert_eq!(p.item_instance(3), "/demoJob/sharding/3/instance");
        assert_eq!(p.item_running(3), "/demoJob/sharding/3/running");
        assert_eq!(p.item_misfire(3), "/demoJob/sharding/3/misfire");
        assert_eq!(p.item_disabled(3), "/demoJob/sharding/3/disabled");
        assert_eq!(p.item_failover(3), "/demoJob/sharding/3/failover");
        assert_eq!(p.item_failovering(3), "/demoJob/sharding/3/failovering");
        assert_eq!(p.failover_items(), "/demoJob/leader/failover/items");
        assert_eq!(p.failover_item(3), "/demoJob/leader/failover/items/3");
        assert_eq!(p.failover_latch(), "/demoJob/leader/failover/latch");
        assert_eq!(p.triggers(), "/demoJob/trigger");
        assert_eq!(p.trigger("a@-@1"), "/demoJob/trigger/a@-@1");
        assert_eq!(p.system_time(), "/demoJob/systemTime/current");
        assert_eq!(p.shardcar(), "/demoJob/shardcar");
    }

    #[test]
    fn classify_round_trips_every_path() {
        let p = JobPaths::new("j");
        let cases = [
            (p.root(), JobNode::Root),
            (p.config(), JobNode::Config),
            (p.servers(), JobNode::Servers),
            (p.server("1.2.3.4"), JobNode::Server("1.2.3.4".into())),
            (p.instances(), JobNode::Instances),
            (
                p.instance("1.2.3.4@-@9"),
                JobNode::Instance("1.2.3.4@-@9".into()),
            ),
            (p.leader_election_instance(), JobNode::LeaderInstance),
            (p.leader_election_latch(), JobNode::ElectionLatch),
            (
                format!("{}/_c_1-latch-0000000001", p.leader_election_latch()),
                JobNode::ElectionLatch,
            ),
            (p.sharding_necessary(), JobNode::ShardingNecessary),
            (p.sharding_processing(), JobNode::ShardingProcessing),
            (p.sharding(), JobNode::Sharding),
            (p.item(0), JobNode::Item(0)),
            (p.item_instance(12), JobNode::ItemInstance(12)),
            (p.item_running(1), JobNode::ItemRunning(1)),
            (p.item_misfire(1), JobNode::ItemMisfire(1)),
            (p.item_disabled(1), JobNode::ItemDisabled(1)),
            (p.item_failover(1), JobNode::ItemFailover(1)),
            (p.item_failovering(1), JobNode::ItemFailovering(1)),
            (p.failover_items(), JobNode::FailoverItems),
            (p.failover_item(7), JobNode::FailoverItem(7)),
            (p.failover_latch(), JobNode::FailoverLatch),
            (p.triggers(), JobNode::Triggers),
            (p.trigger("x@-@1"), JobNode::Trigger("x@-@1".into())),
            (p.system_time(), JobNode::Other),
            (p.shardcar(), JobNode::Other),
            ("/j/leader".into(), JobNode::Other),
            ("/j/sharding/x".into(), JobNode::Other),
            ("/j/sharding/07".into(), JobNode::Other),
            ("/j/sharding/99999999999".into(), JobNode::Other),
            ("/j/sharding/1/other".into(), JobNode::Other),
            ("/j/servers/".into(), JobNode::Other),
            ("/jj/config".into(), JobNode::Other),
            ("/k/config".into(), JobNode::Other),
            ("j/config".into(), JobNode::Other),
        ];
        for (path, want) in cases {
            assert_eq!(p.classify(&path), want, "{path}");
        }
    }

    #[test]
    fn descending_order_is_javas() {
        let mut v: Vec<String> = ["1", "10", "9", "2", "192.0.2.2@-@1001", "192.0.2.2@-@1003"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sort_descending(&mut v);
        assert_eq!(
            v,
            ["9", "2", "192.0.2.2@-@1003", "192.0.2.2@-@1001", "10", "1"]
        );
        // UTF-16 order differs from code-point order: U+FF61 > U+1F600 in Java.
        let mut w = vec!["\u{1F600}".to_string(), "\u{FF61}".to_string()];
        sort_descending(&mut w);
        assert_eq!(w, ["\u{FF61}", "\u{1F600}"]);
    }

    #[test]
    fn job_names() {
        assert!(validate_job_name("demoJob").is_ok());
        assert!(validate_job_name("订单作业-1.v2").is_ok());
        for (bad, word) in [
            ("", "empty"),
            ("a/b", "'/'"),
            (".", "relative"),
            ("..", "relative"),
            ("a\nb", "control"),
            ("a\u{E000}", "ZooKeeper"),
        ] {
            let err = validate_job_name(bad).unwrap_err();
            assert!(err.contains(word), "{bad:?}: {err}");
        }
    }

    #[test]
    fn server_status() {
        assert_eq!(ServerStatus::Enabled.as_str(), "ENABLED");
        assert_eq!(ServerStatus::Disabled.as_str(), "DISABLED");
        assert!(server_enabled(b"ENABLED"));
        assert!(server_enabled(b""));
        assert!(server_enabled(b"disabled"));
        assert!(server_enabled(b"DISABLED "));
        assert!(!server_enabled(b"DISABLED"));
        assert_eq!(ServerStatus::from_data(b"DISABLED"), ServerStatus::Disabled);
        assert_eq!(ServerStatus::from_data(b"ENABLED"), ServerStatus::Enabled);
    }
}
