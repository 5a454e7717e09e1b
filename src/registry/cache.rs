//! A local mirror of one subtree, kept current by its owner from a recursive [`Watch`]:
//! `let mut w = reg.watch_recursive(root)?; let mut c = TreeCache::load(&reg, root)?;` then
//! `c.apply(&reg, &w.next().await?)` for each event. Starting the watch before loading means no
//! change is missed (an event for something already loaded is harmless: it is re-read).
//!
//! [`Watch`]: super::Watch

use std::collections::BTreeMap;
use std::ops::Bound;

use super::path::{is_within, validate};
use super::{Node, Registry, Result, Stat, WatchEvent};

/// What a mirror keeps of a node's [`Stat`]: the fields its readers decide on (the version a
/// conditional write names, the zxids that order and fence executions, the time a running
/// node was written, the session owning an ephemeral). A thousand jobs mirror some forty nodes
/// each: the rest of the stat would be a third of every entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CachedStat {
    /// Transaction that created the node.
    pub czxid: i64,
    /// Transaction that last changed the data.
    pub mzxid: i64,
    /// Last data change (ms since the Unix epoch).
    pub mtime: i64,
    /// Owning session id for an ephemeral node, else 0.
    pub ephemeral_owner: i64,
    /// Number of data changes.
    pub version: i32,
}

impl From<Stat> for CachedStat {
    fn from(stat: Stat) -> CachedStat {
        CachedStat {
            czxid: stat.czxid,
            mzxid: stat.mzxid,
            mtime: stat.mtime,
            ephemeral_owner: stat.ephemeral_owner,
            version: stat.version,
        }
    }
}

/// A mirrored node: its data (boxed: exactly its length) and [`CachedStat`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedNode {
    pub data: Box<[u8]>,
    pub stat: CachedStat,
}

impl From<Node> for CachedNode {
    fn from(node: Node) -> CachedNode {
        CachedNode {
            data: node.data.into_boxed_slice(),
            stat: node.stat.into(),
        }
    }
}

/// A local copy of the subtree at `root`.
///
/// A sidecar keeps one per job, a thousand of them at scale, so each node is keyed by its path
/// relative to the root (`"sharding/3/instance"`; the root itself is `""`): the job's prefix is
/// not stored again with each of its nodes. Relative keys sort as the absolute paths do.
#[derive(Debug, Clone)]
pub struct TreeCache {
    root: String,
    nodes: BTreeMap<Box<str>, CachedNode>,
}

impl TreeCache {
    /// A mirror of `root` holding `nodes` (keyed by absolute path; an empty map for a subtree
    /// not read yet). Nodes outside the root are left out.
    pub fn from_nodes(root: &str, nodes: BTreeMap<String, Node>) -> TreeCache {
        let mut cache = TreeCache {
            root: root.to_string(),
            nodes: BTreeMap::new(),
        };
        cache.replace_all(nodes);
        cache
    }

    /// Replaces everything with a fresh read of the subtree (keyed by absolute path).
    pub fn replace_all(&mut self, nodes: BTreeMap<String, Node>) {
        let root = &self.root;
        self.nodes = nodes
            .into_iter()
            .filter_map(|(path, node)| Some((Box::from(relative(root, &path)?), node.into())))
            .collect();
    }

    /// The key of `path`: its path relative to the root, `None` outside the root.
    fn key<'a>(&self, path: &'a str) -> Option<&'a str> {
        relative(&self.root, path)
    }

    /// The keys below `path` start with this (`None` outside the root).
    fn prefix_below(&self, path: &str) -> Option<String> {
        let key = self.key(path)?;
        Some(if key.is_empty() {
            String::new()
        } else {
            format!("{key}/")
        })
    }

    /// The cached nodes whose keys start with `prefix`, in key order.
    fn with_prefix(&self, prefix: String) -> impl Iterator<Item = (&str, &CachedNode)> {
        self.nodes
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .map(|(k, n)| (&**k, n))
            .take_while(move |(k, _)| k.starts_with(prefix.as_str()))
    }

    /// Records what a read of `path` returned: the node, or its absence (which also removes
    /// its descendants). Paths outside the root are ignored.
    pub fn put(&mut self, path: &str, node: Option<Node>) {
        let Some(key) = self.key(path) else {
            return;
        };
        match node {
            Some(node) => {
                self.nodes.insert(key.into(), node.into());
            }
            None => self.remove_subtree(path),
        }
    }

    /// Reads the subtree at `root` (empty if absent).
    ///
    /// # Errors
    /// Connection problems, invalid path.
    pub async fn load(reg: &Registry, root: &str) -> Result<TreeCache> {
        validate(root)?;
        let nodes = reg.read_tree(root).await?;
        Ok(TreeCache::from_nodes(root, nodes))
    }

    /// Brings the mirror up to date with one event: `Created`/`DataChanged` re-read the node
    /// (absent → removed), `Deleted` removes the node and its descendants, `Resync` reloads all.
    /// Events outside the root are ignored.
    ///
    /// # Errors
    /// Connection problems; the cache is then unchanged and the caller should `Resync` later.
    pub async fn apply(&mut self, reg: &Registry, ev: &WatchEvent) -> Result<()> {
        match ev {
            WatchEvent::Resync => {
                let nodes = reg.read_tree(&self.root).await?;
                self.replace_all(nodes);
            }
            // A creation already in the cache was read after it happened (its owner read its
            // own write back, or a reload saw it): no need to read it again. Events apply in
            // order, so a delete-and-create in between arrives as `Deleted` first, and a later
            // change as `DataChanged`, which is always read.
            WatchEvent::Created(p) if self.contains(p) => {}
            WatchEvent::Created(p) | WatchEvent::DataChanged(p) if is_within(p, &self.root) => {
                let node = reg.get(p).await?;
                self.put(p, node);
            }
            WatchEvent::Deleted(p) if is_within(p, &self.root) => self.remove_subtree(p),
            _ => {}
        }
        Ok(())
    }

    /// Removes the node at `path` and everything under it.
    pub fn remove_subtree(&mut self, path: &str) {
        let Some(key) = self.key(path) else {
            return;
        };
        self.nodes.remove(key);
        let Some(prefix) = self.prefix_below(path) else {
            return;
        };
        let doomed: Vec<Box<str>> = self
            .with_prefix(prefix)
            .map(|(k, _)| Box::from(k))
            .collect();
        for k in doomed {
            self.nodes.remove(&k);
        }
    }

    /// The root this cache mirrors.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The cached node.
    pub fn get(&self, path: &str) -> Option<&CachedNode> {
        self.nodes.get(self.key(path)?)
    }

    /// The cached node's data.
    pub fn data(&self, path: &str) -> Option<&[u8]> {
        self.get(path).map(|n| &*n.data)
    }

    /// Whether the node is cached.
    pub fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// Names of the cached children of `path`, sorted.
    pub fn children(&self, path: &str) -> Vec<String> {
        let Some(prefix) = self.prefix_below(path) else {
            return Vec::new();
        };
        let len = prefix.len();
        self.with_prefix(prefix)
            .filter_map(|(k, _)| {
                let rest = &k[len..];
                (!rest.is_empty() && !rest.contains('/')).then(|| rest.to_string())
            })
            .collect()
    }

    /// Every cached node below `path` (not `path` itself), in path order, with its path
    /// relative to `path` (`"3"`, `"3/instance"`).
    pub fn descendants<'a>(
        &'a self,
        path: &str,
    ) -> impl Iterator<Item = (&'a str, &'a CachedNode)> {
        // Outside the root there is no prefix, and nothing below.
        let prefix = self.prefix_below(path);
        let len = prefix.as_ref().map_or(0, String::len);
        prefix
            .into_iter()
            .flat_map(move |p| self.with_prefix(p))
            .map(move |(k, n)| (&k[len..], n))
            .filter(|(rest, _)| !rest.is_empty())
    }
}

/// `path` relative to `root` (`""` for the root itself), `None` outside it.
fn relative<'a>(root: &str, path: &'a str) -> Option<&'a str> {
    if !is_within(path, root) {
        return None;
    }
    if root == "/" {
        return path.strip_prefix('/');
    }
    Some(path[root.len()..].strip_prefix('/').unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Stat;

    fn node(data: &str) -> Node {
        Node {
            data: data.as_bytes().to_vec(),
            stat: Stat::default(),
        }
    }

    fn cache(root: &str, paths: &[&str]) -> TreeCache {
        TreeCache::from_nodes(
            root,
            paths.iter().map(|p| (p.to_string(), node(p))).collect(),
        )
    }

    #[test]
    fn a_cached_node_keeps_its_data_and_the_stat_fields_decisions_read() {
        let stat = Stat {
            czxid: 11,
            mzxid: 12,
            pzxid: 13,
            ctime: 14,
            mtime: 15,
            version: 16,
            cversion: 17,
            ephemeral_owner: 18,
            num_children: 19,
        };
        let mut c = cache("/j", &["/j"]);
        c.put(
            "/j/sharding/0/running",
            Some(Node {
                data: b"10.0.0.1@-@1".to_vec(),
                stat,
            }),
        );
        let kept = c.get("/j/sharding/0/running").expect("the node is cached");
        assert_eq!(&*kept.data, b"10.0.0.1@-@1");
        assert_eq!(
            kept.stat,
            CachedStat {
                czxid: 11,
                mzxid: 12,
                mtime: 15,
                ephemeral_owner: 18,
                version: 16,
            }
        );
        // A fresh read replaces it whole.
        c.replace_all(BTreeMap::from([("/j".to_string(), node("again"))]));
        assert!(!c.contains("/j/sharding/0/running"));
        assert_eq!(c.get("/j").map(|n| n.stat), Some(CachedStat::default()));
    }

    #[test]
    fn keeps_only_the_subtree_and_answers_by_absolute_path() {
        let c = cache(
            "/ns/job",
            &[
                "/ns/job",
                "/ns/job/a",
                "/ns/job/a/b",
                "/ns/job2",
                "/ns/job2/a",
                "/ns",
            ],
        );
        assert_eq!(c.data("/ns/job"), Some(&b"/ns/job"[..]));
        assert_eq!(c.data("/ns/job/a/b"), Some(&b"/ns/job/a/b"[..]));
        assert!(
            !c.contains("/ns/job2"),
            "a sibling sharing the prefix is outside"
        );
        assert!(!c.contains("/ns/job2/a"));
        assert!(!c.contains("/ns"));
        assert_eq!(c.children("/ns/job"), vec!["a"]);
        assert!(c.children("/ns/job2").is_empty());
        assert_eq!(c.descendants("/ns/job2").count(), 0);
    }

    #[test]
    fn children_descendants_and_removal_follow_path_order() {
        let mut c = cache(
            "/j",
            &[
                "/j",
                "/j/sharding",
                "/j/sharding/1",
                "/j/sharding/1/instance",
                "/j/sharding/10",
                "/j/sharding/2",
                "/j/sharding-x",
            ],
        );
        assert_eq!(c.children("/j/sharding"), vec!["1", "10", "2"]);
        assert_eq!(
            c.descendants("/j/sharding")
                .map(|(k, _)| k)
                .collect::<Vec<_>>(),
            vec!["1", "1/instance", "10", "2"]
        );
        assert_eq!(c.children("/j"), vec!["sharding", "sharding-x"]);
        c.put("/j/sharding/1/running", Some(node("r")));
        c.put("/elsewhere/x", Some(node("x")));
        assert!(c.contains("/j/sharding/1/running"));
        assert!(!c.contains("/elsewhere/x"));
        c.remove_subtree("/j/sharding/1");
        assert!(!c.contains("/j/sharding/1"));
        assert!(!c.contains("/j/sharding/1/instance"));
        assert!(!c.contains("/j/sharding/1/running"));
        assert!(
            c.contains("/j/sharding/10"),
            "a sibling sharing the prefix stays"
        );
        c.put("/j/sharding", None);
        assert_eq!(c.children("/j"), vec!["sharding-x"]);
        c.remove_subtree("/j");
        assert!(c.descendants("/j").next().is_none());
        assert!(!c.contains("/j"));
    }

    #[test]
    fn the_whole_tree_as_root() {
        let c = cache("/", &["/", "/a", "/a/b", "/c"]);
        assert_eq!(c.children("/"), vec!["a", "c"]);
        assert_eq!(c.data("/a/b"), Some(&b"/a/b"[..]));
        assert_eq!(
            c.descendants("/").map(|(k, _)| k).collect::<Vec<_>>(),
            vec!["a", "a/b", "c"]
        );
    }
}
