//! The generated gRPC messages, client and server of `proto/collective.proto`.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("engine.collective.v1");
