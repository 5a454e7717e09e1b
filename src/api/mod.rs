//! The gRPC services: [`worker`] (the worker contract), [`admin`] (operations, behind the admin
//! token of [`auth`]); the wire conversions in [`convert`] and [`events`], the status mapping in
//! [`error`], and [`connection`], which tells the coordinator who closed a worker's connection.

pub mod admin;
pub mod auth;
pub mod codec;
pub mod connection;
pub mod convert;
pub mod error;
pub mod events;
pub mod jobfile;
pub mod serve;
pub mod worker;
