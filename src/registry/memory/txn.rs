//! One atomic change to the in-memory tree: mutations applied at once with an undo log, watch
//! events kept until commit.

use super::{key, now_ms, Key, MemNode, Tree};
use crate::registry::path::{join, split, validate};
use crate::registry::{CreateMode, Error, Result, Stat, WatchEvent};

/// One atomic change: mutations are applied at once with an undo log, events kept until commit.
pub(super) struct Txn<'a> {
    pub(super) tree: &'a mut Tree,
    zxid: i64,
    now: i64,
    undo: Vec<(Key, Option<MemNode>)>,
    events: Vec<WatchEvent>,
}

impl<'a> Txn<'a> {
    pub(super) fn begin(tree: &'a mut Tree) -> Txn<'a> {
        let zxid = tree.zxid + 1;
        Txn {
            tree,
            zxid,
            now: now_ms(),
            undo: Vec::new(),
            events: Vec::new(),
        }
    }

    pub(super) fn save(&mut self, k: &Key) {
        let old = self.tree.nodes.get(k).cloned();
        self.undo.push((k.clone(), old));
    }

    pub(super) fn create(
        &mut self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        owner: i64,
    ) -> Result<(String, Stat)> {
        validate(path)?;
        if path == "/" {
            return Err(Error::NodeExists(path.to_string()));
        }
        let (parent, name) = split(path);
        let pkey = key(parent);
        let Some(pnode) = self.tree.nodes.get(&pkey) else {
            return Err(Error::NoNode(path.to_string()));
        };
        if pnode.stat.ephemeral_owner != 0 {
            return Err(Error::Other(format!(
                "cannot create {path}: its parent is an ephemeral node"
            )));
        }
        let actual = if mode.is_sequential() {
            format!("{}{:010}", join(parent, name), pnode.stat.cversion)
        } else {
            path.to_string()
        };
        let nkey = key(&actual);
        if self.tree.nodes.contains_key(&nkey) {
            return Err(Error::NodeExists(actual));
        }
        self.save(&pkey);
        self.undo.push((nkey.clone(), None));
        let (zxid, now) = (self.zxid, self.now);
        let p = self
            .tree
            .nodes
            .get_mut(&pkey)
            .expect("parent checked above");
        p.stat.cversion += 1;
        p.stat.num_children += 1;
        p.stat.pzxid = zxid;
        let stat = Stat {
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ctime: now,
            mtime: now,
            version: 0,
            cversion: 0,
            ephemeral_owner: if mode.is_ephemeral() { owner } else { 0 },
            num_children: 0,
        };
        self.tree.nodes.insert(
            nkey,
            MemNode {
                data: data.to_vec(),
                stat,
            },
        );
        self.events.push(WatchEvent::Created(actual.clone()));
        Ok((actual, stat))
    }

    pub(super) fn existing(&self, path: &str) -> Result<(Key, &MemNode)> {
        validate(path)?;
        let k = key(path);
        match self.tree.nodes.get(&k) {
            Some(n) => Ok((k, n)),
            None => Err(Error::NoNode(path.to_string())),
        }
    }

    pub(super) fn set(&mut self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        let (k, n) = self.existing(path)?;
        check_version(path, n, version)?;
        self.save(&k);
        let (zxid, now) = (self.zxid, self.now);
        let n = self.tree.nodes.get_mut(&k).expect("checked above");
        n.data = data.to_vec();
        n.stat.version += 1;
        n.stat.mzxid = zxid;
        n.stat.mtime = now;
        let stat = n.stat;
        self.events.push(WatchEvent::DataChanged(path.to_string()));
        Ok(stat)
    }

    pub(super) fn delete(&mut self, path: &str, version: Option<i32>) -> Result<()> {
        let (k, n) = self.existing(path)?;
        if path == "/" {
            return Err(Error::Other("the root node cannot be deleted".into()));
        }
        check_version(path, n, version)?;
        if n.stat.num_children > 0 {
            return Err(Error::NotEmpty(path.to_string()));
        }
        let pkey = key(split(path).0);
        self.save(&pkey);
        self.save(&k);
        self.tree.nodes.remove(&k);
        let zxid = self.zxid;
        let p = self
            .tree
            .nodes
            .get_mut(&pkey)
            .expect("a node's parent exists");
        // ZooKeeper 3.5+ bumps cversion on creates only (verified against 3.8), not on deletes.
        p.stat.num_children -= 1;
        p.stat.pzxid = zxid;
        self.events.push(WatchEvent::Deleted(path.to_string()));
        Ok(())
    }

    pub(super) fn check(&self, path: &str, version: i32) -> Result<()> {
        let (_, n) = self.existing(path)?;
        check_version(path, n, Some(version))
    }

    pub(super) fn commit(self) -> Vec<WatchEvent> {
        if !self.undo.is_empty() {
            self.tree.zxid = self.zxid;
        }
        self.events
    }

    pub(super) fn rollback(self) {
        for (k, old) in self.undo.into_iter().rev() {
            match old {
                Some(n) => self.tree.nodes.insert(k, n),
                None => self.tree.nodes.remove(&k),
            };
        }
    }
}

fn check_version(path: &str, n: &MemNode, version: Option<i32>) -> Result<()> {
    match version {
        Some(v) if v != -1 && v != n.stat.version => Err(Error::BadVersion(path.to_string())),
        _ => Ok(()),
    }
}
