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
    order_text()?;
    Ok(())
}

/// Lays the functions a running sidecar executes together at the start of the release binary's
/// `.text`, hottest first (`scripts/text-order.txt`, written by `scripts/text-order.sh`). Code is
/// resident in 64 KiB windows around each page run, and the ~1.6 MB a sidecar runs is spread
/// over nearly every window of the ~6 MB otherwise: ~3.7 MB less resident at every size
/// (`docs/benchmarks.md`, "The release profile"). Symbols the file names that are gone are
/// skipped, and functions it does not name follow the ones it does, so a stale file costs
/// memory, not correctness.
///
/// Only where the linker is rustc's own LLD, which reads the file: the default of rustc 1.90 and
/// later on x86-64 Linux, unless a linker is chosen in Cargo's configuration or the flags.
fn order_text() -> Result<(), Box<dyn std::error::Error>> {
    let order = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("scripts/text-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let default_linker =
        var("RUSTC_LINKER").is_empty() && !flags.contains("linker") && !flags.contains("fuse-ld");
    if var("TARGET") != "x86_64-unknown-linux-gnu"
        || var("PROFILE") != "release"
        || !default_linker
        || rustc_minor_version()? < 90
        || !order.is_file()
    {
        return Ok(());
    }
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    Ok(())
}

/// The minor version of the compiler building this (`rustc 1.95.0 (...)` gives 95).
fn rustc_minor_version() -> Result<u32, Box<dyn std::error::Error>> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc)
        .arg("--version")
        .output()?;
    let version = String::from_utf8(out.stdout)?;
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("cannot read rustc's version from {version:?}"))?;
    Ok(minor)
}
