//! The generated gRPC messages, client and server of `proto/ps.proto`.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("engine.ps.v1");
