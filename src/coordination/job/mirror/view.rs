//! A parsed, read-only view of one job's ZooKeeper subtree, built from the job's [`TreeCache`].
//!
//! Every decision of the coordinator (who leads, who owns which item, what a fire runs) is a
//! pure function of a `JobView` plus the sidecar's local state, so it can be tested with plain
//! tables and no registry at all.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::coordination::small_map::SmallMap;
use crate::elasticjob::config::{JobConfiguration, MAX_SHARDING_TOTAL_COUNT};
use crate::elasticjob::extras::{JobExtras, PendingRetry};
use crate::elasticjob::instance::{ip_of, parse_instance_yaml};
use crate::elasticjob::paths::{server_enabled, sort_descending, JobPaths};
use crate::registry::{CachedStat, TreeCache};

/// What the job's subtree says about one sharding item (`sharding/{i}/*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemView {
    /// The data version of `sharding/{i}`: the item's execution epoch (see `failover.rs`).
    pub version: Option<i32>,
    /// `sharding/{i}/instance`: the owner's instance id and the node's stat.
    pub owner: Option<(String, CachedStat)>,
    /// `sharding/{i}/running`: the running instance's id (empty for ElasticJob < 3.0.2).
    pub running: Option<(String, CachedStat)>,
    pub misfire: bool,
    pub disabled: bool,
    /// `sharding/{i}/failover`: the instance that took the item over.
    pub failover: Option<String>,
    /// `sharding/{i}/failovering`: the instance running the taken-over item.
    pub failovering: Option<String>,
    /// `shardcar/retries/{i}`: the item failed and runs again (as the attempt it says, once
    /// due), unless a fire runs it first.
    pub retry: Option<PendingRetry>,
}

/// The job's state as last seen in the registry.
#[derive(Debug, Clone, Default)]
pub struct JobView {
    /// `None` when `config` is absent or unreadable (see `config_error`). Shared with the
    /// parse memo (a view is rebuilt after every change of the subtree; the config seldom
    /// changes).
    pub config: Option<Arc<JobConfiguration>>,
    pub config_error: Option<String>,
    /// `/{job}/shardcar`: settings beyond ElasticJob's (defaults when absent or unreadable).
    pub extras: JobExtras,
    /// Live instances: id → the server IP from its YAML (or from the id).
    pub instances: SmallMap<String, String>,
    /// Live instances: id → the session that owns its (ephemeral) node.
    pub instance_sessions: SmallMap<String, i64>,
    /// `servers/{ip}` → enabled.
    pub servers: SmallMap<String, bool>,
    /// `leader/election/instance`: the leader's id and the node's data version.
    pub leader: Option<(String, i32)>,
    pub necessary: bool,
    pub processing: bool,
    pub has_sharding_root: bool,
    /// Every `sharding/{i}` node present, including items beyond the total count. Boxed: a
    /// B-tree node has room for eleven values, and most jobs have fewer items than that.
    pub items: BTreeMap<i32, Box<ItemView>>,
    /// `leader/failover/items/{i}`.
    pub failover_items: Vec<i32>,
    /// `trigger/{id}` children.
    pub triggers: Vec<String>,
    /// IPs of the shardcar sidecars looking after instances of this job
    /// (`shardcar/sidecars/{ip}`), with the session that owns each node.
    pub sidecars: SmallMap<String, i64>,
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// A config node's YAML parsed: the config, or why it cannot be used.
type ParsedConfig = Result<Arc<JobConfiguration>, String>;

/// What parsing the job's YAML nodes gave last time, keyed by the exact bytes parsed, so a
/// view rebuilt after a change elsewhere in the subtree (every run writes several nodes)
/// parses nothing again. Owned by whoever rebuilds a job's view again and again.
#[derive(Debug, Default)]
pub struct ParseMemo {
    config: Option<(Vec<u8>, ParsedConfig)>,
    extras: Option<(Vec<u8>, JobExtras)>,
    /// Instance id → its node's data and the server IP read from it.
    instance_ips: SmallMap<String, (Vec<u8>, String)>,
}

impl ParseMemo {
    fn config(&mut self, data: &[u8]) -> ParsedConfig {
        match &self.config {
            Some((seen, parsed)) if seen.as_slice() == data => parsed.clone(),
            _ => {
                let parsed = JobConfiguration::from_yaml(data)
                    .map(Arc::new)
                    .map_err(|e| e.to_string());
                self.config = Some((data.to_vec(), parsed.clone()));
                parsed
            }
        }
    }

    fn extras(&mut self, data: &[u8]) -> JobExtras {
        match &self.extras {
            Some((seen, parsed)) if seen.as_slice() == data => *parsed,
            _ => {
                let parsed = JobExtras::from_yaml(data).unwrap_or_default();
                self.extras = Some((data.to_vec(), parsed));
                parsed
            }
        }
    }

    fn instance_ip(&mut self, id: &str, data: Option<&[u8]>) -> String {
        let parse = |data: Option<&[u8]>| {
            data.and_then(|d| parse_instance_yaml(d).ok())
                .map(|info| info.server_ip)
                .filter(|ip| !ip.is_empty())
                .unwrap_or_else(|| ip_of(id).to_string())
        };
        let Some(data) = data else {
            return parse(None);
        };
        match self.instance_ips.get(id) {
            Some((seen, ip)) if seen.as_slice() == data => ip.clone(),
            _ => {
                let ip = parse(Some(data));
                self.instance_ips
                    .insert(id.to_string(), (data.to_vec(), ip.clone()));
                ip
            }
        }
    }
}

/// Whether `name` is how an `i32` prints (`"7"`, `"-7"`, not `"07"` or `"+7"`).
fn canonical_number(name: &str) -> bool {
    let digits = name.strip_prefix('-').unwrap_or(name);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && name != "-0"
}

impl JobView {
    /// Builds the view of the job `paths` from a cache of its subtree.
    #[cfg(test)]
    pub fn from_cache(cache: &TreeCache, paths: &JobPaths) -> JobView {
        JobView::from_cache_memo(cache, paths, &mut ParseMemo::default())
    }

    /// Builds the view of the job `paths` from a cache of its subtree, parsing only the YAML
    /// nodes whose bytes `memo` has not seen.
    pub fn from_cache_memo(cache: &TreeCache, paths: &JobPaths, memo: &mut ParseMemo) -> JobView {
        let mut view = JobView::default();
        match cache.data(&paths.config()).map(|data| memo.config(data)) {
            Some(Ok(config))
                if !(1..=MAX_SHARDING_TOTAL_COUNT).contains(&config.sharding_total_count) =>
            {
                view.config_error = Some(format!(
                    "shardingTotalCount is {}; shardcar works with 1 to {MAX_SHARDING_TOTAL_COUNT} items: set a count in that range (ElasticJob's console or JobConfigurationAPI)",
                    config.sharding_total_count
                ));
            }
            Some(Ok(config)) => view.config = Some(config),
            Some(Err(e)) => view.config_error = Some(e),
            None => view.config_error = Some("the job has no config node".to_string()),
        }
        view.extras = cache
            .data(&paths.shardcar())
            .map(|d| memo.extras(d))
            .unwrap_or_default();
        let ids = cache.children(&paths.instances());
        // `ids` is sorted (the cache's children are).
        memo.instance_ips
            .retain(|id, _| ids.binary_search(id).is_ok());
        for id in ids {
            let node = cache.get(&paths.instance(&id));
            if let Some(node) = node {
                view.instance_sessions
                    .insert(id.clone(), node.stat.ephemeral_owner);
            }
            let ip = memo.instance_ip(&id, node.map(|n| n.data.as_ref()));
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
        let sharding = paths.sharding();
        view.has_sharding_root = cache.contains(&sharding);
        // One walk over `sharding/`: `{i}` and `{i}/{node}`, in path order, so an item's own
        // node comes before its children.
        for (rest, node) in cache.descendants(&sharding) {
            let (name, leaf) = match rest.split_once('/') {
                Some((name, leaf)) => (name, Some(leaf)),
                None => (rest, None),
            };
            let Ok(i) = name.parse::<i32>() else { continue };
            if !canonical_number(name) {
                // `sharding/07` counts as item 7, whose nodes are `sharding/7/...`.
                if leaf.is_none() {
                    let item = Self::item_at(cache, paths, i);
                    view.items.insert(i, Box::new(item));
                }
                continue;
            }
            match leaf {
                None => {
                    view.items.insert(
                        i,
                        Box::new(ItemView {
                            version: Some(node.stat.version),
                            ..ItemView::default()
                        }),
                    );
                }
                Some(leaf) => {
                    // Only under an item node seen (its path sorts first).
                    let Some(item) = view.items.get_mut(&i) else {
                        continue;
                    };
                    let owned = || Some((text(&node.data), node.stat));
                    match leaf {
                        "instance" => item.owner = owned(),
                        "running" => item.running = owned(),
                        "misfire" => item.misfire = true,
                        "disabled" => item.disabled = true,
                        "failover" => item.failover = Some(text(&node.data)),
                        "failovering" => item.failovering = Some(text(&node.data)),
                        _ => {}
                    }
                }
            }
        }
        view.failover_items = cache
            .children(&paths.failover_items())
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        view.triggers = cache.children(&paths.triggers());
        for (name, node) in cache.descendants(&paths.retries()) {
            let Ok(i) = name.parse::<i32>() else { continue };
            if let (Some(item), Some(retry)) =
                (view.items.get_mut(&i), PendingRetry::from_data(&node.data))
            {
                item.retry = Some(retry);
            }
        }
        for ip in cache.children(&paths.sidecars()) {
            if let Some(node) = cache.get(&paths.sidecar(&ip)) {
                view.sidecars.insert(ip, node.stat.ephemeral_owner);
            }
        }
        view
    }

    /// Item `i` read node by node from its canonical paths.
    fn item_at(cache: &TreeCache, paths: &JobPaths, i: i32) -> ItemView {
        let owned = |path: String| cache.get(&path).map(|n| (text(&n.data), n.stat));
        ItemView {
            version: cache.get(&paths.item(i)).map(|n| n.stat.version),
            owner: owned(paths.item_instance(i)),
            running: owned(paths.item_running(i)),
            misfire: cache.contains(&paths.item_misfire(i)),
            disabled: cache.contains(&paths.item_disabled(i)),
            failover: cache.data(&paths.item_failover(i)).map(text),
            failovering: cache.data(&paths.item_failovering(i)).map(text),
            retry: None,
        }
    }

    /// The configured item count, 0 without a config.
    /// Item → parameter, from the config's `shardingItemParameters` (none when unreadable).
    pub fn item_parameters(&self) -> crate::coordination::job::Parameters {
        self.config
            .as_ref()
            .and_then(|c| c.item_parameters().ok())
            .unwrap_or_default()
    }

    pub fn total(&self) -> i32 {
        self.config.as_ref().map_or(0, |c| c.sharding_total_count)
    }

    /// Whether the job is resident ([`JobExtras::resident`]): its items are held, not fired.
    pub fn resident(&self) -> bool {
        self.extras.resident
    }

    /// Whether runs write `running` nodes: the config's `monitorExecution`, and always for a
    /// resident job, whose hand-offs rest on them (a config edited later to turn it off does
    /// not take that fence away).
    pub fn monitored(&self) -> bool {
        self.resident() || self.config.as_ref().is_some_and(|c| c.monitor_execution)
    }

    /// Whether failover applies: the config's flag, never for a resident job, whose items move
    /// with the sharding.
    pub fn failover_on(&self) -> bool {
        !self.extras.resident && self.config.as_ref().is_some_and(|c| c.failover)
    }

    /// Whether a fire that finds its instance busy flags `misfire`: the config's flag.
    pub fn misfire_on(&self) -> bool {
        self.config.as_ref().is_some_and(|c| c.misfire)
    }

    /// Whether `servers/{ip}` is enabled (absent counts as enabled, as in ElasticJob).
    pub fn server_enabled(&self, ip: &str) -> bool {
        self.servers.get(ip).copied().unwrap_or(true)
    }

    /// Whether live instance `id` is a shardcar sidecar's: its node belongs to the session of
    /// a sidecar node of this job (both are ephemeral nodes of the one session of the sidecar
    /// that registered it). An ElasticJob JVM on the same host as a sidecar has a session of
    /// its own, so the host alone does not tell.
    pub fn via_sidecar(&self, id: &str) -> bool {
        let Some(session) = self.instance_sessions.get(id) else {
            return false;
        };
        // 0 is no session: a persistent node, never a sidecar's ephemeral one.
        *session != 0 && self.sidecars.values().any(|s| s == session)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elasticjob::instance::instance_yaml;
    use crate::registry::{Node, Stat};

    fn node(data: &str, version: i32) -> Node {
        Node {
            data: data.as_bytes().to_vec(),
            stat: Stat {
                version,
                mzxid: i64::from(version) + 100,
                ..Stat::default()
            },
        }
    }

    /// Job `j`'s subtree holding only its config, of `total` items.
    fn with_config(p: &JobPaths, total: i32) -> BTreeMap<String, Node> {
        let config = JobConfiguration::new("j", total).to_yaml();
        BTreeMap::from([(p.config(), node(&config, 0))])
    }

    /// The items as read node by node for every child of `sharding/` that is a number: the
    /// reading the single walk must agree with.
    fn items_node_by_node(cache: &TreeCache, paths: &JobPaths) -> BTreeMap<i32, Box<ItemView>> {
        cache
            .children(&paths.sharding())
            .iter()
            .filter_map(|name| name.parse::<i32>().ok())
            .map(|i| (i, Box::new(JobView::item_at(cache, paths, i))))
            .collect()
    }

    #[test]
    fn the_walk_over_sharding_reads_what_each_path_holds() {
        let p = JobPaths::new("j");
        let mut nodes = with_config(&p, 3);
        nodes.insert(p.sharding(), node("", 0));
        nodes.insert(p.item(0), node("", 4));
        nodes.insert(p.item_instance(0), node("a@-@1", 2));
        nodes.insert(p.item_running(0), node("a@-@1", 1));
        nodes.insert(p.item_misfire(0), node("", 0));
        nodes.insert(p.item(1), node("", 7));
        nodes.insert(p.item_disabled(1), node("", 0));
        nodes.insert(p.item_failover(1), node("b@-@2", 0));
        nodes.insert(p.item_failovering(1), node("b@-@2", 0));
        nodes.insert(format!("{}/unknown", p.item(1)), node("", 0));
        nodes.insert(format!("{}/x", p.item_instance(1)), node("deeper", 0));
        // 10 sorts between 1's children and 2.
        nodes.insert(p.item(10), node("", 1));
        nodes.insert(p.item_instance(10), node("c@-@3", 0));
        // A child cached without its item node is no item.
        nodes.insert(p.item_instance(5), node("orphan", 0));
        // Numbers not written as ElasticJob writes them, and names that are no number.
        nodes.insert(format!("{}/07", p.sharding()), node("", 0));
        nodes.insert(p.item(7), node("", 3));
        nodes.insert(p.item_running(7), node("d@-@4", 1));
        nodes.insert(format!("{}/+8", p.sharding()), node("", 0));
        nodes.insert(p.item_instance(8), node("e@-@5", 0));
        nodes.insert(format!("{}/00", p.sharding()), node("", 0));
        nodes.insert(format!("{}/-0", p.sharding()), node("", 0));
        nodes.insert(p.item(-3), node("", 2));
        nodes.insert(format!("{}/x", p.sharding()), node("", 0));
        nodes.insert(format!("{}/x/instance", p.sharding()), node("f", 0));
        let cache = TreeCache::from_nodes(&p.root(), nodes);
        let view = JobView::from_cache(&cache, &p);
        assert_eq!(view.items, items_node_by_node(&cache, &p));
        assert_eq!(
            view.items.keys().copied().collect::<Vec<_>>(),
            vec![-3, 0, 1, 7, 8, 10]
        );
        assert_eq!(view.items[&0].version, Some(4));
        assert_eq!(view.items[&0].owner.as_ref().unwrap().0, "a@-@1");
        assert!(view.items[&0].misfire && !view.items[&0].disabled);
        assert_eq!(view.items[&1].failovering.as_deref(), Some("b@-@2"));
        assert_eq!(view.items[&1].owner, None);
        assert_eq!(view.items[&8].version, None);
        assert_eq!(view.items[&8].owner.as_ref().unwrap().0, "e@-@5");
    }

    #[test]
    fn canonical_numbers() {
        for yes in ["0", "7", "10", "-3", "2147483647"] {
            assert!(canonical_number(yes), "{yes}");
        }
        for no in ["", "-", "00", "07", "+7", "-0", "-07", "x", "1x"] {
            assert!(!canonical_number(no), "{no}");
        }
    }

    #[test]
    fn the_memo_parses_a_node_again_only_when_its_bytes_change() {
        let p = JobPaths::new("j");
        let mut nodes = with_config(&p, 3);
        nodes.insert(p.instances(), node("", 0));
        nodes.insert(
            p.instance("10.0.0.1@-@1"),
            node(&instance_yaml("10.0.0.1@-@1", "10.0.0.9"), 0),
        );
        nodes.insert(p.instance("10.0.0.2@-@2"), node("", 0));
        let mut cache = TreeCache::from_nodes(&p.root(), nodes);
        let mut memo = ParseMemo::default();
        let first = JobView::from_cache_memo(&cache, &p, &mut memo);
        assert_eq!(first.total(), 3);
        assert_eq!(first.instances["10.0.0.1@-@1"], "10.0.0.9");
        assert_eq!(first.instances["10.0.0.2@-@2"], "10.0.0.2");
        // The same bytes: the memo's result, equal to a fresh parse.
        let again = JobView::from_cache_memo(&cache, &p, &mut memo);
        assert_eq!(again.config, JobView::from_cache(&cache, &p).config);
        // New bytes are parsed: a new total, then an unreadable config, then a fixed one.
        cache.put(
            &p.config(),
            Some(node(&JobConfiguration::new("j", 5).to_yaml(), 1)),
        );
        assert_eq!(JobView::from_cache_memo(&cache, &p, &mut memo).total(), 5);
        cache.put(&p.config(), Some(node("shardingTotalCount: [", 2)));
        let broken = JobView::from_cache_memo(&cache, &p, &mut memo);
        assert!(broken.config.is_none());
        assert_eq!(
            broken.config_error,
            JobView::from_cache(&cache, &p).config_error
        );
        assert!(broken.config_error.is_some());
        cache.put(
            &p.config(),
            Some(node(&JobConfiguration::new("j", 2).to_yaml(), 3)),
        );
        assert_eq!(JobView::from_cache_memo(&cache, &p, &mut memo).total(), 2);
        // An instance's new data is read; a gone instance leaves the memo.
        cache.put(
            &p.instance("10.0.0.1@-@1"),
            Some(node(&instance_yaml("10.0.0.1@-@1", "10.0.0.8"), 1)),
        );
        cache.put(&p.instance("10.0.0.2@-@2"), None);
        let view = JobView::from_cache_memo(&cache, &p, &mut memo);
        assert_eq!(view.instances["10.0.0.1@-@1"], "10.0.0.8");
        assert_eq!(view.instances.len(), 1);
        assert_eq!(memo.instance_ips.len(), 1);
    }
}
