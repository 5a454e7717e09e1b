//! A local mirror of one subtree, kept current by its owner from a recursive [`Watch`]:
//! `let mut w = reg.watch_recursive(root)?; let mut c = TreeCache::load(&reg, root)?;` then
//! `c.apply(&reg, &w.next().await?)` for each event. Starting the watch before loading means no
//! change is missed (an event for something already loaded is harmless: it is re-read).
//!
//! [`Watch`]: super::Watch

use std::collections::BTreeMap;

use super::path::{is_within, validate};
use super::{Node, Registry, Result, WatchEvent};

/// A local copy of the subtree at `root`.
#[derive(Debug, Clone)]
pub struct TreeCache {
    root: String,
    nodes: BTreeMap<String, Node>,
}

impl TreeCache {
    /// A mirror of `root` holding `nodes` (an empty map for a subtree not read yet).
    pub fn from_nodes(root: &str, nodes: BTreeMap<String, Node>) -> TreeCache {
        TreeCache {
            root: root.to_string(),
            nodes,
        }
    }

    /// Replaces everything with a fresh read of the subtree.
    pub fn replace_all(&mut self, nodes: BTreeMap<String, Node>) {
        self.nodes = nodes;
    }

    /// Records what a read of `path` returned: the node, or its absence (which also removes
    /// its descendants). Paths outside the root are ignored.
    pub fn put(&mut self, path: &str, node: Option<Node>) {
        if !is_within(path, &self.root) {
            return;
        }
        match node {
            Some(node) => {
                self.nodes.insert(path.to_string(), node);
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
        Ok(TreeCache {
            root: root.to_string(),
            nodes,
        })
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
                self.nodes = reg.read_tree(&self.root).await?;
            }
            // A creation already in the cache was read after it happened (its owner read its
            // own write back, or a reload saw it): no need to read it again. Events apply in
            // order, so a delete-and-create in between arrives as `Deleted` first, and a later
            // change as `DataChanged`, which is always read.
            WatchEvent::Created(p) if self.nodes.contains_key(p) => {}
            WatchEvent::Created(p) | WatchEvent::DataChanged(p) if is_within(p, &self.root) => {
                match reg.get(p).await? {
                    Some(node) => {
                        self.nodes.insert(p.clone(), node);
                    }
                    None => self.remove_subtree(p),
                }
            }
            WatchEvent::Deleted(p) if is_within(p, &self.root) => self.remove_subtree(p),
            _ => {}
        }
        Ok(())
    }

    /// Removes the node at `path` and everything under it.
    pub fn remove_subtree(&mut self, path: &str) {
        self.nodes.remove(path);
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        let doomed: Vec<String> = self
            .nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
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
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// The cached node's data.
    pub fn data(&self, path: &str) -> Option<&[u8]> {
        self.nodes.get(path).map(|n| n.data.as_slice())
    }

    /// Whether the node is cached.
    pub fn contains(&self, path: &str) -> bool {
        self.nodes.contains_key(path)
    }

    /// Names of the cached children of `path`, sorted.
    pub fn children(&self, path: &str) -> Vec<String> {
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, _)| {
                let rest = &k[prefix.len()..];
                (!rest.is_empty() && !rest.contains('/')).then(|| rest.to_string())
            })
            .collect()
    }

    /// Every cached node below `path` (not `path` itself), in path order, with its path
    /// relative to `path` (`"3"`, `"3/instance"`).
    pub fn descendants<'a>(&'a self, path: &str) -> impl Iterator<Item = (&'a str, &'a Node)> {
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        let len = prefix.len();
        self.nodes
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
            .map(move |(k, n)| (&k[len..], n))
            .filter(|(rest, _)| !rest.is_empty())
    }

    /// Every cached node, keyed by absolute path.
    pub fn nodes(&self) -> &BTreeMap<String, Node> {
        &self.nodes
    }
}
