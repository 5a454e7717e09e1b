//! Picking the IP a sidecar advertises when none is configured, the way ElasticJob's
//! `IpUtils` does (`docs/elasticjob-compat.md` §2.3): the last interface that is up, not loopback
//! and not virtual, and its first IPv4 address.

use std::net::IpAddr;
use std::path::Path;

/// The detected IPv4 address, or 127.0.0.1 when the host has no other.
pub fn detect_ip() -> String {
    let Ok(interfaces) = if_addrs::get_if_addrs() else {
        return "127.0.0.1".into();
    };
    let is_virtual = |name: &str| Path::new("/sys/devices/virtual/net").join(name).exists();
    let candidates: Vec<_> = interfaces
        .iter()
        .filter(|i| !i.is_loopback())
        .filter_map(|i| match i.ip() {
            IpAddr::V4(ip) if !ip.is_loopback() && !ip.is_unspecified() && !ip.is_link_local() => {
                Some((i.name.clone(), ip))
            }
            _ => None,
        })
        .collect();
    candidates
        .iter()
        .rev()
        .find(|(name, _)| !is_virtual(name))
        .or_else(|| candidates.first())
        .map(|(_, ip)| ip.to_string())
        .unwrap_or_else(|| "127.0.0.1".into())
}
