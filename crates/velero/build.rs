//! Compiles the gRPC services iar serves as a Velero plugin (proto/)
//! with protox, a proto compiler in Rust, so that building iar needs no
//! system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/velero/shared.proto",
        "proto/velero/backup_item_action_v2.proto",
        "proto/velero/item_block_action_v1.proto",
        "proto/velero/restore_item_action_v2.proto",
        "proto/goplugin/controller.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .compile_fds(descriptors)?;
    Ok(())
}
