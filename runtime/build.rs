//! Compiles `proto/*.proto` into Rust with `protox`, a protobuf compiler written in Rust,
//! so that building the crate needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/collective.proto", "proto/ps.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Segment payloads are the bulk of every message: `Bytes` avoids a copy on decode.
        .bytes(".engine.collective.v1.Segment.payload")
        .bytes(".engine.ps.v1.Tensor.data")
        .compile_fds(descriptors)?;
    Ok(())
}
