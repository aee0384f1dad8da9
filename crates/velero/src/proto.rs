//! The gRPC services generated from `proto/` by build.rs. The module
//! names are the proto packages: Velero's client calls `generated.*` and
//! `v1.*` (ItemBlockAction), `v2.*`, go-plugin's calls `plugin.*`.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod generated {
    tonic::include_proto!("generated");
}

pub mod v1 {
    tonic::include_proto!("v1");
}

pub mod v2 {
    tonic::include_proto!("v2");
}

pub mod plugin {
    tonic::include_proto!("plugin");
}
