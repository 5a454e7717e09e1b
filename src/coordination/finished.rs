//! The sidecar's memory of recently finished executions, so that a repeated answer is
//! idempotent and a late one gets a precise refusal after its job's state has forgotten it.

use std::hash::BuildHasher;

/// How a finished execution is remembered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub instance_id: String,
    /// Why its items were taken back, if they were: later answers are refused.
    pub revoked: Option<String>,
}

/// The sidecar's memory of recently finished executions (bounded, oldest forgotten first),
/// so a repeated answer is idempotent and a late one gets a precise refusal — also after
/// the job's actor has retired.
///
/// Full, it holds [`crate::coordination::FINISHED_MEMORY`] executions for as long as the sidecar runs, so
/// each is kept small: a ring of `capacity` slots in the order they were remembered, the 128
/// bits of a sidecar's own execution id rather than its text, each instance id once (shared by
/// its executions' slots), and an index holding only a slot's number.
#[derive(Debug)]
pub struct FinishedExecutions {
    /// The remembered executions; once full, the next one replaces the slot at `oldest`.
    ring: Vec<Slot>,
    oldest: usize,
    capacity: usize,
    /// The slot of each remembered execution, by its key's hash.
    index: hashbrown::HashTable<u32>,
    hasher: std::hash::RandomState,
    /// Each instance id of a remembered execution, once.
    instances: std::collections::HashSet<std::sync::Arc<str>>,
}

/// An execution id as [`FinishedExecutions`] keys it: the bits of an id [`crate::coordination::job::runs::execution_id`]
/// made (32 lowercase hex digits, so each text has exactly one key), any other text as it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum IdKey {
    Bits([u8; 16]),
    Text(Box<str>),
}

impl IdKey {
    fn of(execution_id: &str) -> IdKey {
        let hex = execution_id.len() == 32
            && execution_id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if hex {
            if let Ok(bits) = u128::from_str_radix(execution_id, 16) {
                return IdKey::Bits(bits.to_be_bytes());
            }
        }
        IdKey::Text(execution_id.into())
    }
}

/// [`Finished`] as it is kept, with its key.
#[derive(Debug)]
struct Slot {
    key: IdKey,
    instance_id: std::sync::Arc<str>,
    revoked: Option<Box<str>>,
}

impl FinishedExecutions {
    pub fn new(capacity: usize) -> Self {
        assert!(
            u32::try_from(capacity).is_ok(),
            "slots are numbered in 32 bits"
        );
        // Both are sized once: the ring's untouched pages cost nothing until it fills, and the
        // index never grows (so never holds two tables at once).
        FinishedExecutions {
            ring: Vec::with_capacity(capacity),
            oldest: 0,
            capacity,
            index: hashbrown::HashTable::with_capacity(capacity),
            hasher: Default::default(),
            instances: Default::default(),
        }
    }

    pub fn insert(&mut self, execution_id: &str, finished: Finished) {
        if self.capacity == 0 {
            return;
        }
        let key = IdKey::of(execution_id);
        let hash = self.hasher.hash_one(&key);
        let instance_id = self.intern(finished.instance_id);
        let revoked = finished.revoked.map(String::into_boxed_str);
        let ring = &mut self.ring;
        if let Some(&at) = self.index.find(hash, |&s| ring[s as usize].key == key) {
            // Remembered already: its outcome is replaced, its place in the order kept.
            let slot = &mut ring[at as usize];
            let old = std::mem::replace(&mut slot.instance_id, instance_id);
            slot.revoked = revoked;
            self.release(old);
            return;
        }
        let slot = Slot {
            key,
            instance_id,
            revoked,
        };
        let at = if self.ring.len() < self.capacity {
            self.ring.push(slot);
            self.ring.len() - 1
        } else {
            let at = self.oldest;
            self.oldest = (at + 1) % self.capacity;
            let old = std::mem::replace(&mut self.ring[at], slot);
            let old_hash = self.hasher.hash_one(&old.key);
            if let Ok(entry) = self.index.find_entry(old_hash, |&s| s as usize == at) {
                entry.remove();
            }
            self.release(old.instance_id);
            at
        };
        let (ring, hasher) = (&self.ring, &self.hasher);
        self.index
            .insert_unique(hash, at as u32, |&s| hasher.hash_one(&ring[s as usize].key));
    }

    /// The shared copy of `instance_id`, made on its first execution.
    fn intern(&mut self, instance_id: String) -> std::sync::Arc<str> {
        if let Some(shared) = self.instances.get(instance_id.as_str()) {
            return shared.clone();
        }
        let shared: std::sync::Arc<str> = instance_id.into();
        self.instances.insert(shared.clone());
        shared
    }

    /// Drops a slot's instance id, and the shared copy with its last slot.
    fn release(&mut self, instance_id: std::sync::Arc<str>) {
        // Held by the set and by `instance_id` alone: no other slot has it.
        if std::sync::Arc::strong_count(&instance_id) == 2 {
            self.instances.remove(&instance_id);
        }
    }

    /// The reply to an answer for a finished execution, or `None` if it is not remembered.
    pub fn reply(
        &self,
        execution_id: &str,
        instance_id: &str,
    ) -> Option<Result<(), super::CoordError>> {
        use super::CoordError;
        let key = IdKey::of(execution_id);
        let at = self.index.find(self.hasher.hash_one(&key), |&s| {
            self.ring[s as usize].key == key
        })?;
        let finished = &self.ring[*at as usize];
        Some(if &*finished.instance_id != instance_id {
            Err(CoordError::PermissionDenied(format!(
                "execution {execution_id} belongs to instance {}, not {instance_id}",
                finished.instance_id
            )))
        } else if let Some(reason) = &finished.revoked {
            Err(CoordError::FailedPrecondition(format!(
                "execution {execution_id} was taken back ({reason}); its answers are refused"
            )))
        } else {
            Ok(())
        })
    }
}

#[cfg(test)]
mod finished_tests {
    use super::*;
    use crate::coordination::CoordError;

    #[test]
    fn replies_and_forgets_the_oldest() {
        let mut f = FinishedExecutions::new(2);
        f.insert(
            "a",
            Finished {
                instance_id: "i".into(),
                revoked: None,
            },
        );
        f.insert(
            "b",
            Finished {
                instance_id: "i".into(),
                revoked: Some("timeout".into()),
            },
        );
        assert!(matches!(f.reply("a", "i"), Some(Ok(()))));
        assert!(matches!(
            f.reply("a", "j"),
            Some(Err(CoordError::PermissionDenied(_)))
        ));
        assert!(matches!(
            f.reply("b", "i"),
            Some(Err(CoordError::FailedPrecondition(_)))
        ));
        f.insert(
            "c",
            Finished {
                instance_id: "i".into(),
                revoked: None,
            },
        );
        assert!(f.reply("a", "i").is_none(), "the oldest is forgotten");
        assert!(f.reply("c", "i").is_some());
    }

    #[test]
    fn own_ids_are_kept_as_bits_and_answer_only_to_their_exact_text() {
        let id = crate::coordination::job::runs::execution_id(0x5eed, 1);
        assert!(matches!(IdKey::of(&id), IdKey::Bits(_)));
        let mut f = FinishedExecutions::new(4);
        let finished = |revoked: Option<&str>| Finished {
            instance_id: "10.0.0.1@-@1".into(),
            revoked: revoked.map(String::from),
        };
        f.insert(&id, finished(None));
        assert!(matches!(f.reply(&id, "10.0.0.1@-@1"), Some(Ok(()))));
        assert!(matches!(
            f.reply(&id, "10.0.0.2@-@1"),
            Some(Err(CoordError::PermissionDenied(m))) if m.contains("10.0.0.1@-@1")
        ));
        // The same bits spelled otherwise are another id, which no execution had.
        assert!(f.reply(&id.to_uppercase(), "10.0.0.1@-@1").is_none());
        assert!(f.reply(&format!("+{}", &id[1..]), "10.0.0.1@-@1").is_none());
        // Text that is not 32 lowercase hex digits is kept as text.
        let odd = "x".repeat(32);
        assert!(matches!(IdKey::of(&odd), IdKey::Text(_)));
        f.insert(&odd, finished(Some("lease expired")));
        assert!(matches!(
            f.reply(&odd, "10.0.0.1@-@1"),
            Some(Err(CoordError::FailedPrecondition(m))) if m.contains("lease expired")
        ));
        // Inserting an id again keeps one entry.
        f.insert(&id, finished(None));
        assert_eq!((f.index.len(), f.ring.len()), (2, 2));
    }

    #[test]
    fn a_full_ring_forgets_in_order_and_keeps_each_instance_id_once_while_it_has_executions() {
        let done = |instance: &str| Finished {
            instance_id: instance.into(),
            revoked: None,
        };
        let mut f = FinishedExecutions::new(3);
        for (id, instance) in [("a", "i"), ("b", "i"), ("c", "j"), ("d", "j"), ("e", "j")] {
            f.insert(id, done(instance));
        }
        assert!(f.reply("a", "i").is_none() && f.reply("b", "i").is_none());
        for id in ["c", "d", "e"] {
            assert!(matches!(f.reply(id, "j"), Some(Ok(()))), "{id}");
        }
        // "i" has no execution left; "j" is held once, by the set and its three slots.
        assert_eq!(f.instances.len(), 1);
        assert_eq!(
            std::sync::Arc::strong_count(f.instances.get("j").unwrap()),
            4
        );
        // An id remembered already gets its new outcome in its old place in the order.
        f.insert(
            "d",
            Finished {
                instance_id: "k".into(),
                revoked: Some("lease expired".into()),
            },
        );
        assert!(matches!(
            f.reply("d", "k"),
            Some(Err(CoordError::FailedPrecondition(_)))
        ));
        assert_eq!(f.instances.len(), 2);
        f.insert("f", done("j"));
        assert!(f.reply("c", "j").is_none(), "c was the oldest");
        assert!(f.reply("d", "k").is_some());
        f.insert("g", done("j"));
        assert!(f.reply("d", "k").is_none(), "then d");
        assert_eq!(f.instances.len(), 1, "k left with its only execution");
        // Round after round, the index follows the ring.
        for n in 0..100 {
            f.insert(&n.to_string(), done("j"));
        }
        assert_eq!((f.index.len(), f.ring.len()), (3, 3));
        assert!(f.reply("96", "j").is_none());
        for n in 97..100 {
            assert!(matches!(f.reply(&n.to_string(), "j"), Some(Ok(()))));
        }
    }

    #[test]
    fn a_memory_of_no_executions_remembers_none() {
        let mut f = FinishedExecutions::new(0);
        f.insert(
            "a",
            Finished {
                instance_id: "i".into(),
                revoked: None,
            },
        );
        assert!(f.reply("a", "i").is_none());
        assert!(f.instances.is_empty());
    }
}
