//! The gRPC services: [`worker`] (the worker contract) and the wire conversions in [`convert`].

pub mod convert;
pub mod worker;
