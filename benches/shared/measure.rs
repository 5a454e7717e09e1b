//! What both benchmark programs read the same way: percentiles, ZooKeeper's last zxid, and a
//! process's figures from /proc.

use crate::common::{zookeeper::four_letter_word, ZooKeeper};

/// The `p`th percentile of `sorted` (nearest rank), NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The last zxid ZooKeeper (node 0) committed, from its `srvr` four-letter word.
pub async fn zxid(zk: &ZooKeeper) -> Result<i64, String> {
    let srvr = four_letter_word(zk.client_port(0), "srvr")
        .await
        .ok_or("ZooKeeper does not answer srvr")?;
    let line = srvr
        .lines()
        .find(|l| l.starts_with("Zxid:"))
        .ok_or("no Zxid line in srvr")?;
    i64::from_str_radix(
        line.trim_start_matches("Zxid:")
            .trim()
            .trim_start_matches("0x"),
        16,
    )
    .map_err(|e| format!("bad zxid {line:?}: {e}"))
}

/// A numeric field of /proc/<pid>/status (`"VmRSS:"` in KiB, `"Threads:"`), if the process
/// is there.
pub fn proc_field(pid: u32, name: &str) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}
