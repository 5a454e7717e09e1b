//! A parsed, read-only view of one job's ZooKeeper subtree, built from the job's [`TreeCache`].
//!
//! Every decision of the coordinator (who leads, who owns which item, what a fire runs) is a
//! pure function of a `JobView` plus the sidecar's local state, so it can be tested with plain
//! tables and no registry at all.

use std::collections::BTreeMap;

use crate::elasticjob::config::{JobConfiguration, MAX_SHARDING_TOTAL_COUNT};
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::instance::{ip_of, parse_instance_yaml};
use crate::elasticjob::paths::{server_enabled, sort_descending, JobPaths};
use crate::registry::{Stat, TreeCache};

/// What the job's subtree says about one sharding item (`sharding/{i}/*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemView {
    /// The data version of `sharding/{i}`: the item's execution epoch (see `failover.rs`).
    pub version: Option<i32>,
    /// `sharding/{i}/instance`: the owner's instance id and the node's stat.
    pub owner: Option<(String, Stat)>,
    /// `sharding/{i}/running`: the running instance's id (empty for ElasticJob < 3.0.2).
    pub running: Option<(String, Stat)>,
    pub misfire: bool,
    pub disabled: bool,
    /// `sharding/{i}/failover`: the instance that took the item over.
    pub failover: Option<String>,
    /// `sharding/{i}/failovering`: the instance running the taken-over item.
    pub failovering: Option<String>,
}

/// The job's state as last seen in the registry.
#[derive(Debug, Clone, Default)]
pub struct JobView {
    /// `None` when `config` is absent or unreadable (see `config_error`).
    pub config: Option<JobConfiguration>,
    pub config_error: Option<String>,
    /// `/{job}/shardcar`: settings beyond ElasticJob's (defaults when absent or unreadable).
    pub extras: JobExtras,
    /// Live instances: id → the server IP from its YAML (or from the id).
    pub instances: BTreeMap<String, String>,
    /// `servers/{ip}` → enabled.
    pub servers: BTreeMap<String, bool>,
    /// `leader/election/instance`: the leader's id and the node's data version.
    pub leader: Option<(String, i32)>,
    pub necessary: bool,
    pub processing: bool,
    pub has_sharding_root: bool,
    /// Every `sharding/{i}` node present, including items beyond the total count.
    pub items: BTreeMap<i32, ItemView>,
    /// `leader/failover/items/{i}`.
    pub failover_items: Vec<i32>,
    /// `trigger/{id}` children.
    pub triggers: Vec<String>,
    /// IPs of the shardcar sidecars looking after instances of this job
    /// (`shardcar/sidecars/{ip}`), with the session that owns each node.
    pub sidecars: BTreeMap<String, i64>,
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

impl JobView {
    /// Builds the view of the job `paths` from a cache of its subtree.
    pub fn from_cache(cache: &TreeCache, paths: &JobPaths) -> JobView {
        let mut view = JobView::default();
        match cache.data(&paths.config()) {
            Some(data) => match JobConfiguration::from_yaml(data) {
                Ok(config)
                    if !(1..=MAX_SHARDING_TOTAL_COUNT).contains(&config.sharding_total_count) =>
                {
                    view.config_error = Some(format!(
                        "shardingTotalCount is {}; shardcar works with 1 to {MAX_SHARDING_TOTAL_COUNT} items: set a count in that range (ElasticJob's console or JobConfigurationAPI)",
                        config.sharding_total_count
                    ));
                }
                Ok(config) => view.config = Some(config),
                Err(e) => view.config_error = Some(e.to_string()),
            },
            None => view.config_error = Some("the job has no config node".to_string()),
        }
        view.extras = cache
            .data(&paths.shardcar())
            .and_then(|d| JobExtras::from_yaml(d).ok())
            .unwrap_or_default();
        for id in cache.children(&paths.instances()) {
            let ip = cache
                .data(&paths.instance(&id))
                .and_then(|d| parse_instance_yaml(d).ok())
                .map(|info| info.server_ip)
                .filter(|ip| !ip.is_empty())
                .unwrap_or_else(|| ip_of(&id).to_string());
            view.instances.insert(id, ip);
        }
        for ip in cache.children(&paths.servers()) {
            let enabled = cache
                .data(&paths.server(&ip))
                .map(server_enabled)
                .unwrap_or(true);
            view.servers.insert(ip, enabled);
        }
        if let Some(node) = cache.get(&paths.leader_election_instance()) {
            view.leader = Some((text(&node.data), node.stat.version));
        }
        view.necessary = cache.contains(&paths.sharding_necessary());
        view.processing = cache.contains(&paths.sharding_processing());
        view.has_sharding_root = cache.contains(&paths.sharding());
        for name in cache.children(&paths.sharding()) {
            let Ok(i) = name.parse::<i32>() else { continue };
            let owned = |path: String| cache.get(&path).map(|n| (text(&n.data), n.stat));
            let item = ItemView {
                version: cache.get(&paths.item(i)).map(|n| n.stat.version),
                owner: owned(paths.item_instance(i)),
                running: owned(paths.item_running(i)),
                misfire: cache.contains(&paths.item_misfire(i)),
                disabled: cache.contains(&paths.item_disabled(i)),
                failover: cache.data(&paths.item_failover(i)).map(text),
                failovering: cache.data(&paths.item_failovering(i)).map(text),
            };
            view.items.insert(i, item);
        }
        view.failover_items = cache
            .children(&paths.failover_items())
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        view.triggers = cache.children(&paths.triggers());
        for ip in cache.children(&paths.sidecars()) {
            if let Some(node) = cache.get(&paths.sidecar(&ip)) {
                view.sidecars.insert(ip, node.stat.ephemeral_owner);
            }
        }
        view
    }

    /// The configured item count, 0 without a config.
    pub fn total(&self) -> i32 {
        self.config.as_ref().map_or(0, |c| c.sharding_total_count)
    }

    /// Whether `servers/{ip}` is enabled (absent counts as enabled, as in ElasticJob).
    pub fn server_enabled(&self, ip: &str) -> bool {
        self.servers.get(ip).copied().unwrap_or(true)
    }

    /// ElasticJob's available instances: live instances whose server is enabled, in
    /// descending id order (the input order every strategy expects).
    pub fn available_instances(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .instances
            .iter()
            .filter(|(_, ip)| self.server_enabled(ip))
            .map(|(id, _)| id.clone())
            .collect();
        sort_descending(&mut ids);
        ids
    }

    /// The owner of item `i`, if any.
    pub fn owner(&self, i: i32) -> Option<&str> {
        self.items
            .get(&i)
            .and_then(|it| it.owner.as_ref())
            .map(|(id, _)| id.as_str())
    }

    /// Items below the total count owned by `instance_id`, or none when `server_ip` is disabled.
    pub fn items_of(&self, instance_id: &str, server_ip: &str) -> Vec<i32> {
        if !self.server_enabled(server_ip) {
            return Vec::new();
        }
        (0..self.total())
            .filter(|i| self.owner(*i) == Some(instance_id))
            .collect()
    }

    /// Items taken over by `instance_id` through failover (`sharding/{i}/failover`).
    pub fn failover_items_of(&self, instance_id: &str) -> Vec<i32> {
        self.items
            .iter()
            .filter(|(i, it)| **i < self.total() && it.failover.as_deref() == Some(instance_id))
            .map(|(i, _)| *i)
            .collect()
    }

    /// The sharding epoch: the highest `mzxid` among the owner nodes of the current items.
    /// Every sidecar computes the same number for the same assignment, and it grows with
    /// every change of ownership.
    pub fn epoch(&self) -> i64 {
        (0..self.total())
            .filter_map(|i| self.items.get(&i).and_then(|it| it.owner.as_ref()))
            .map(|(_, stat)| stat.mzxid)
            .max()
            .unwrap_or(0)
    }
}
