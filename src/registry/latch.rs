//! A mutex compatible with Curator's `LeaderLatch` (which ElasticJob uses for leader election),
//! so Java ElasticJob processes and shardcar exclude each other on the same directory.
//!
//! Each contender creates an EPHEMERAL_SEQUENTIAL node `{dir}/_c_{uuid}-latch-NNNNNNNNNN`
//! (Curator's "protected" naming; missing parents are created as CONTAINER nodes). The contender
//! with the lowest sequence number (the last 10 digits, whatever the prefix) holds the latch; the
//! others each wait for the deletion of their predecessor. The uuid lets a cancelled contender
//! find and delete a node whose create reply it never saw.

use super::path::{join, validate};
use super::{CreateMode, Error, Registry, Result};

/// Curator's protected-mode prefix.
const PROTECTED_PREFIX: &str = "_c_";
/// Curator `LeaderLatch`'s lock name.
const LATCH_NAME: &str = "latch-";

/// A held latch. Release it with [`Latch::release`]; dropping it deletes the node in the
/// background. The latch is also lost when the session that created it expires: compare
/// [`Latch::generation`] with the registry's session state.
#[derive(Debug)]
pub struct Latch {
    reg: Registry,
    path: String,
    generation: u64,
    released: bool,
}

impl Latch {
    /// The contender node that holds the latch.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The session generation that owns the node; the latch is lost when that session ends.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Deletes the node, letting the next contender in.
    ///
    /// # Errors
    /// Connection problems; an already-gone node (expired session) is not an error.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        match self.reg.delete(&self.path, None).await {
            Ok(()) | Err(Error::NoNode(_)) | Err(Error::Closed) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Latch {
    fn drop(&mut self) {
        if !self.released {
            delete_in_background(self.reg.clone(), self.path.clone());
        }
    }
}

fn delete_in_background(reg: Registry, path: String) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            if let Err(e) = reg.delete(&path, None).await {
                if !matches!(e, Error::NoNode(_) | Error::Closed) {
                    tracing::warn!(%path, error = %e, "could not delete latch node; it goes with the session");
                }
            }
        });
    }
}

/// Deletes our contender node unless disarmed, also when its create reply was never seen.
struct Contender {
    reg: Registry,
    dir: String,
    prefix: String,
    path: Option<String>,
    armed: bool,
}

impl Drop for Contender {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(path) = self.path.take() {
            delete_in_background(self.reg.clone(), path);
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (reg, dir, prefix) = (self.reg.clone(), self.dir.clone(), self.prefix.clone());
        // Requests on one session are ordered, so this listing sees a create still in flight.
        rt.spawn(async move {
            if let Ok(names) = reg.children(&dir).await {
                for name in names.into_iter().filter(|n| n.starts_with(&prefix)) {
                    let _ = reg.delete(&join(&dir, &name), None).await;
                }
            }
        });
    }
}

/// The sequence number of a contender node name (its last 10 characters), if it has one.
pub(crate) fn sequence(name: &str) -> Option<i64> {
    let tail = name.get(name.len().checked_sub(10)?..)?;
    if tail.bytes().all(|b| b.is_ascii_digit()) {
        tail.parse().ok()
    } else {
        None
    }
}

#[allow(
    clippy::disallowed_methods,
    reason = "a Curator latch node's random name prefix: an I/O edge of the registry"
)]
fn uuid_v4() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    let hex = |r: std::ops::Range<usize>| r.map(|i| format!("{:02x}", b[i])).collect::<String>();
    format!(
        "{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// Creates `dir` and missing ancestors as CONTAINER nodes (as Curator does).
async fn ensure_containers(reg: &Registry, dir: &str) -> Result<()> {
    let mut at = String::new();
    for comp in dir.split('/').filter(|c| !c.is_empty()) {
        at.push('/');
        at.push_str(comp);
        match reg.create(&at, &[], CreateMode::Container).await {
            Ok(_) | Err(Error::NodeExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(crate) async fn acquire(reg: &Registry, dir: &str) -> Result<Latch> {
    validate(dir)?;
    let prefix = format!("{PROTECTED_PREFIX}{}-{LATCH_NAME}", uuid_v4());
    let mut me = Contender {
        reg: reg.clone(),
        dir: dir.to_string(),
        prefix,
        path: None,
        armed: true,
    };
    let mut generation = reg.session().borrow().generation();
    loop {
        if me.path.is_none() {
            generation = reg.session().borrow().generation();
            let want = join(dir, &me.prefix);
            let created = match reg
                .create(&want, &[], CreateMode::EphemeralSequential)
                .await
            {
                Err(Error::NoNode(_)) => {
                    ensure_containers(reg, dir).await?;
                    reg.create(&want, &[], CreateMode::EphemeralSequential)
                        .await
                }
                r => r,
            };
            me.path = Some(created?.0);
        }
        let ours = me.path.clone().expect("set above");
        let our_name = &ours[ours.rfind('/').map_or(0, |i| i + 1)..];
        let our_seq = sequence(our_name)
            .ok_or_else(|| Error::Other(format!("latch node {ours} has no sequence")))?;
        let names = match reg.children(dir).await {
            Ok(n) => n,
            // The directory (a container) was reaped with our node: start over.
            Err(Error::NoNode(_)) => Vec::new(),
            Err(e) => return Err(e),
        };
        if !names.iter().any(|n| n == our_name) {
            // Our ephemeral is gone (the session expired): queue again.
            me.path = None;
            continue;
        }
        let predecessor = names
            .iter()
            .filter_map(|n| sequence(n).map(|s| (s, n)))
            .filter(|(s, n)| *s < our_seq && *n != our_name)
            .max_by_key(|(s, _)| *s);
        match predecessor {
            None => {
                me.armed = false;
                return Ok(Latch {
                    reg: reg.clone(),
                    path: ours,
                    generation,
                    released: false,
                });
            }
            Some((_, name)) => reg.wait_deleted(&join(dir, name)).await?,
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn sequence_parsing_and_uuid_shape() {
        assert_eq!(sequence("_c_abc-latch-0000000007"), Some(7));
        assert_eq!(sequence("latch-0000000123"), Some(123));
        assert_eq!(sequence("x-12"), None);
        assert_eq!(sequence("abc-latch-00000000x1"), None);
        let u = uuid_v4();
        let parts: Vec<&str> = u.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            vec![8, 4, 4, 4, 12],
            "{u}"
        );
        assert!(parts[2].starts_with('4'), "{u}");
        assert!(u.chars().all(|c| c.is_ascii_hexdigit() || c == '-'));
    }

    /// Runs one contender per registry, each several times; asserts nobody overlaps.
    pub(crate) async fn assert_mutual_exclusion(regs: Vec<Registry>, dir: &str, rounds: usize) {
        let inside = Arc::new(AtomicUsize::new(0));
        let entries = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for reg in regs.clone() {
            let (inside, entries, dir) = (inside.clone(), entries.clone(), dir.to_string());
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let latch = reg.acquire_latch(&dir).await.expect("acquire");
                    assert!(latch.path().contains("-latch-"), "{}", latch.path());
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    entries.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    latch.release().await.expect("release");
                }
            }));
        }
        for t in tasks {
            t.await.expect("contender task");
        }
        assert_eq!(entries.load(Ordering::SeqCst), regs.len() * rounds);
        assert!(
            regs[0].children(dir).await.expect("dir").is_empty(),
            "contender nodes left behind"
        );
    }

    /// A cancelled contender leaves no node behind, and a dropped latch is released.
    pub(crate) async fn assert_cancel_safety(a: &Registry, b: &Registry, dir: &str) {
        let held = a.acquire_latch(dir).await.expect("acquire");
        let waiting = tokio::time::timeout(Duration::from_millis(300), b.acquire_latch(dir)).await;
        assert!(waiting.is_err(), "second contender must wait");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while a.children(dir).await.expect("dir").len() != 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "cancelled contender node not deleted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(held);
        let next = tokio::time::timeout(Duration::from_secs(5), b.acquire_latch(dir)).await;
        let next = next
            .expect("dropped latch must be released")
            .expect("acquire");
        next.release().await.expect("release");
    }
}
