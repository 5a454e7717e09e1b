//! shardcar: ElasticJob-Lite coordination over ZooKeeper, served to local workers over gRPC.
#![forbid(unsafe_code)]

/// Code generated from `proto/shardcar/v1/shardcar.proto`.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("shardcar.v1");
    /// Encoded file descriptor set, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("shardcar_descriptor");
}
