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
    // Relative relocations packed as DT_RELR (glibc 2.36, binutils 2.38): the dynamic loader
    // reads ~20 KB of them at start instead of a 1.3 MB table, which otherwise stays resident
    // for the life of the process. The binary stays position-independent.
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    Ok(())
}
