//! Compiles `proto/shardcar/v1/shardcar.proto` with the protoc shipped by the
//! `protoc-bin-vendored` crate, so a build needs no system protoc and downloads nothing.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // `prost::Name` for every message: `ctl --json` finds its descriptor by full name.
    config.enable_type_names();
    let well_known = protoc_bin_vendored::include_path()?;
    tonic_prost_build::configure()
        // prost's codec with small starting buffers (src/api/codec.rs).
        .codec_path("crate::api::codec::LeanCodec")
        .file_descriptor_set_path(out.join("shardcar_descriptor.bin"))
        .compile_with_config(
            config,
            &[PathBuf::from("proto/shardcar/v1/shardcar.proto")],
            &[PathBuf::from("proto"), well_known],
        )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
