//! [`SmallMap`]: an ordered map kept in one sorted vector, for the few entries a job's view holds
//! per table (its live instances, its servers, its sidecars).
//!
//! A `BTreeMap` allocates a node with room for eleven entries for its first one, and a sidecar
//! with a thousand jobs rebuilds each job's view after every change of its subtree: most of those
//! tables hold one or two entries. Lookups are binary searches; inserting keeps the order, so
//! iteration is in key order as a `BTreeMap`'s. An entry inserted after every key is appended;
//! one inserted before others moves them. That suits tables of a few entries and tables built in
//! key order (a view's, from the mirror's sorted children, even for a job with hundreds of
//! instances), not large tables changed in random order.

use std::borrow::Borrow;

/// An ordered map in a sorted vector (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmallMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        SmallMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> SmallMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    fn find<Q>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// Inserts `value` at `key`, returning the value it replaces.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.entries[at].1, value)),
            Err(at) => {
                self.entries.insert(at, (key, value));
                None
            }
        }
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|at| &self.entries[at].1)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|at| &mut self.entries[at].1)
    }

    /// Removes the entry at `key`, returning its value.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|at| self.entries.remove(at).1)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).is_ok()
    }

    /// Keeps the entries for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// The entries in key order, the values mutable.
    pub fn iter_mut(
        &mut self,
    ) -> impl DoubleEndedIterator<Item = (&K, &mut V)> + ExactSizeIterator {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values in their keys' order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The values in their keys' order, mutable.
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> + ExactSizeIterator {
        self.entries.iter_mut().map(|(_, v)| v)
    }
}

impl<K: Ord, V, Q> std::ops::Index<&Q> for SmallMap<K, V>
where
    K: Borrow<Q>,
    Q: Ord + ?Sized,
{
    type Output = V;

    /// The value at `key`; panics when there is none, as a `BTreeMap`'s index does.
    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry for the key in the SmallMap")
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SmallMap<K, V> {
    /// Collects entries in any order; a later entry for a key replaces an earlier one.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = SmallMap::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn answers_as_a_btree_map_does() {
        // The same operations on both, in a scrambled order with repeats.
        let ops = [
            ("10.0.0.3@-@1", 3),
            ("10.0.0.1@-@7", 1),
            ("10.0.0.2@-@1", 2),
            ("10.0.0.1@-@7", 9),
            ("10.0.0.10@-@1", 10),
            ("", 0),
        ];
        let mut small = SmallMap::new();
        let mut btree = BTreeMap::new();
        for (k, v) in ops {
            assert_eq!(
                small.insert(k.to_string(), v),
                btree.insert(k.to_string(), v)
            );
        }
        assert_eq!(small.len(), btree.len());
        assert_eq!(
            small.iter().collect::<Vec<_>>(),
            btree.iter().collect::<Vec<_>>()
        );
        assert_eq!(
            small.keys().rev().collect::<Vec<_>>(),
            btree.keys().rev().collect::<Vec<_>>()
        );
        for k in [
            "10.0.0.1@-@7",
            "10.0.0.10@-@1",
            "",
            "10.0.0.4@-@1",
            "10.0.0.1",
        ] {
            assert_eq!(small.get(k), btree.get(k), "{k:?}");
            assert_eq!(small.contains_key(k), btree.contains_key(k), "{k:?}");
        }
        assert_eq!(small["10.0.0.1@-@7"], 9);
        *small.get_mut("10.0.0.2@-@1").unwrap() += 20;
        *btree.get_mut("10.0.0.2@-@1").unwrap() += 20;
        assert_eq!(small.get_mut("absent"), None);
        for (v, w) in small.values_mut().zip(btree.values_mut()) {
            *v *= 2;
            *w *= 2;
        }
        for ((_, v), (_, w)) in small.iter_mut().zip(btree.iter_mut()) {
            *v += 1;
            *w += 1;
        }
        assert_eq!(
            small.values().collect::<Vec<_>>(),
            btree.values().collect::<Vec<_>>()
        );
        assert_eq!(small.remove("10.0.0.3@-@1"), btree.remove("10.0.0.3@-@1"));
        assert_eq!(small.remove("10.0.0.3@-@1"), None);
        small.retain(|k, v| {
            *v += 1;
            !k.is_empty()
        });
        btree.retain(|k, v| {
            *v += 1;
            !k.is_empty()
        });
        assert_eq!(
            small.iter().collect::<Vec<_>>(),
            btree.iter().collect::<Vec<_>>()
        );
        let collected: SmallMap<&str, i32> = [("b", 1), ("a", 2), ("b", 3)].into_iter().collect();
        assert_eq!(
            collected.iter().collect::<Vec<_>>(),
            [(&"a", &2), (&"b", &3)]
        );
        assert!(SmallMap::<String, i32>::new().is_empty());
    }

    #[test]
    #[should_panic(expected = "no entry for the key")]
    fn indexing_a_missing_key_panics_as_a_btree_map_does() {
        let map: SmallMap<String, i32> = SmallMap::new();
        let _ = map["absent"];
    }
}
