//! shardcar: ElasticJob-Lite coordination over ZooKeeper, served to local workers over gRPC.
//!
//! - [`registry`]: the store interface (ZooKeeper, or in-memory for standalone mode).
//! - [`elasticjob`]: ElasticJob-Lite 3.x's namespace layout: paths, YAML codecs, ids, hashing.
//! - [`coordination`]: per-job election, sharding, executions and failover.
//! - [`schedule`]: Quartz cron and the one timer that drives every job.
//! - [`api`]: the gRPC services. [`sidecar`]: the process. [`config`]: its settings.
//! - [`ops`]: execution history, metrics and the namespace operations of the Admin API;
//!   [`ctl`]: `shardcar ctl`, the Admin API's command line.
#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod coordination;
pub mod ctl;
pub mod elasticjob;
pub mod net;
pub mod ops;
pub mod registry;
pub mod schedule;
pub mod sidecar;

/// Code generated from `proto/shardcar/v1/shardcar.proto`.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("shardcar.v1");
    /// Encoded file descriptor set, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("shardcar_descriptor");
}
