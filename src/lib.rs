//! shardcar: ElasticJob-Lite coordination over ZooKeeper, served to local workers over gRPC.
//!
//! Layers, each depending only on those listed before it: [`elasticjob`] is ElasticJob-Lite
//! 3.x's namespace layout (typed paths, the byte-exact YAML, ids, Java's hash, the sharding
//! strategies); [`access`] is who may operate through the sidecar (the admin token), a policy
//! the settings read and `api` and `web` check; [`registry`] is the coordination store
//! (ZooKeeper, or in memory for standalone mode and fast tests) and its session; [`schedule`] is
//! Quartz cron and the one timer of all jobs; [`coordination`] decides and does everything about
//! a job on this sidecar — one state machine per job that decides without I/O and a driver that
//! performs its actions — and speaks only in domain terms (worker events, sources, errors);
//! [`ops`] is what operators use (execution history, metrics, the namespace operations of the
//! console), also in domain terms; [`api`] is the gRPC layer, the only one that knows tonic and
//! the protobuf types, converting both ways, validating requests and mapping errors to status
//! codes (and the Admin API's token check); [`web`] is the HTTP listener — the web console,
//! `/metrics` and the probes — whose actions go through `ops` and the Admin API's validation;
//! [`exec`] runs SCRIPT and HTTP jobs on the sidecar itself, as a worker of its own Worker API;
//! [`config`] reads a process's settings as plain values (with [`net`], which picks the
//! advertised IP as ElasticJob does), knowing none of the subsystems they configure; [`sidecar`]
//! builds each subsystem's config from those settings and wires a process together; [`ctl`] is
//! `shardcar ctl`, a client of the Admin API. The design of record is `docs/architecture.md`.
#![forbid(unsafe_code)]

pub mod access;
pub mod api;
pub mod config;
pub mod coordination;
pub mod ctl;
pub mod elasticjob;
pub mod exec;
pub mod net;
pub mod ops;
pub mod registry;
pub mod schedule;
pub mod sidecar;
#[cfg(test)]
mod testing;
pub mod web;

/// Code generated from `proto/shardcar/v1/shardcar.proto`.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("shardcar.v1");
    /// Encoded file descriptor set, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("shardcar_descriptor");
}
