//! The gRPC services: [`worker`] (the worker contract), [`admin`] (operations) and the wire
//! conversions in [`convert`].

pub mod admin;
pub mod convert;
pub mod worker;
