//! `iar` as a Velero plugin: Velero's server starts the `iar` binary from
//! its plugin directory like any plugin, and every wasm plugin of iar's
//! plugin directory is one BackupItemAction v2 to Velero, `iar.dev/NAME`.
//!
//! The protocol is hashicorp go-plugin's, as a non-Go plugin speaks it:
//! the magic cookie in the environment, a unix socket, the handshake line
//! on stdout, gRPC with `grpc.health.v1.Health` ("plugin" SERVING) and
//! go-plugin's controller. Velero's services are compiled from
//! `proto/`. go-plugin's broker and stdio services are not served:
//! its client treats them as optional (it logs stdout and stderr as lines).
//!
//! Every call goes through the same boundary as in iar's own backups: CPU
//! deadline, wall-clock ceiling, memory cap, read grants, output limits,
//! and no new operation while the backup is finalizing.

#![allow(clippy::result_large_err)]

pub mod actions;
pub mod handshake;
mod proto;
mod services;

use actions::ActionSet;
use iar_core::cluster::{ClusterReader, NoCluster};
use iar_plugin::runtime::{Runtime, RuntimeConfig};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio_stream::wrappers::UnixListenerStream;

/// Where a plugin process finds its wasm plugins unless told:
/// `iar-plugins/` beside the binary (Velero's plugin directory holds both;
/// Velero skips files that are not executable, with a warning).
pub const DIR_ENV: &str = "IAR_PLUGIN_DIR";

/// What one plugin process serves.
pub struct Config {
    /// The directory of `*.wasm` plugins (and their `NAME.yaml` settings).
    pub plugin_dir: PathBuf,
    /// The path Velero started the binary by (`argv[0]`).
    pub command: String,
}

impl Config {
    /// From the process: `$IAR_PLUGIN_DIR`, else `iar-plugins/` beside the
    /// binary.
    pub fn from_env() -> Config {
        let command = std::env::args().next().unwrap_or_else(|| "iar".into());
        let plugin_dir = std::env::var_os(DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(&command)
                    .parent()
                    .unwrap_or(std::path::Path::new("."))
                    .join("iar-plugins")
            });
        Config {
            plugin_dir,
            command,
        }
    }
}

/// The cluster plugins read with `cluster-get`: the API server of the pod's
/// service account (or `KUBECONFIG`) when there is one, else none, and a
/// read is refused as it is in `iar run` without `--cluster`.
async fn cluster() -> Arc<dyn ClusterReader> {
    let configured = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || std::env::var_os("KUBECONFIG").is_some();
    if configured {
        match iar_k8s::client().await {
            Ok(client) => {
                return Arc::new(iar_k8s::live::LiveCluster::new(
                    client,
                    tokio::runtime::Handle::current(),
                ));
            }
            Err(e) => tracing::warn!("no API server for cluster-get: {e}"),
        }
    }
    Arc::new(NoCluster)
}

/// The namespace of iar's plugin ConfigMaps for a plugin process:
/// `$IAR_PLUGIN_NAMESPACE`, else Velero's own (`$VELERO_NAMESPACE`, which
/// `velero install` sets on its server); neither: no ConfigMaps.
pub const NAMESPACE_ENV: &str = "IAR_PLUGIN_NAMESPACE";
/// A grant policy file bounding what ConfigMaps may grant (as the
/// controller's `--grant-policy`).
pub const GRANT_POLICY_ENV: &str = "IAR_GRANT_POLICY";
/// How long a starting plugin process waits for the first list of plugin
/// ConfigMaps (each verified and compiled) before it serves without them.
const CONFIGMAP_SYNC: std::time::Duration = std::time::Duration::from_secs(60);

/// iar's plugin ConfigMaps, watched for as long as the process runs, as the
/// controller watches them (the same label, digest check, settings, grant
/// policy and status); `None` outside a cluster or without a namespace.
async fn configmap_plugins(
    runtime: &Runtime,
) -> anyhow::Result<Option<Arc<iar_k8s::plugins::PluginRegistry>>> {
    use iar_k8s::plugins::{GrantPolicy, PluginRegistry, WatchOptions, watch_forever};
    let Some(namespace) = std::env::var(NAMESPACE_ENV)
        .or_else(|_| std::env::var("VELERO_NAMESPACE"))
        .ok()
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none()
        && std::env::var_os("KUBECONFIG").is_none()
    {
        return Ok(None);
    }
    let grant_policy = match std::env::var_os(GRANT_POLICY_ENV) {
        Some(path) => GrantPolicy::read(std::path::Path::new(&path))?,
        None => GrantPolicy::default(),
    };
    let client = iar_k8s::client().await?;
    let registry = PluginRegistry::new();
    let options = WatchOptions {
        grant_policy,
        ..WatchOptions::default()
    };
    tokio::spawn(watch_forever(
        client,
        namespace,
        runtime.clone(),
        registry.clone(),
        options,
    ));
    if tokio::time::timeout(CONFIGMAP_SYNC, registry.wait_synced())
        .await
        .is_err()
    {
        tracing::warn!(
            "plugin ConfigMaps not listed within {CONFIGMAP_SYNC:?}: serving the directory's plugins only"
        );
    }
    Ok(Some(registry))
}

/// A new `iar-velero-*` directory for the socket, under `parent` (else the
/// temporary directory), mode 0700 whatever the umask: whoever can reach
/// the socket can call the plugins with items and backups of their own.
/// Created 0700 (`DirBuilderExt::mode`, through tempfile's permissions),
/// which a umask can only narrow, then set 0700 explicitly, which it
/// cannot touch.
fn socket_dir(parent: Option<&std::ffi::OsStr>) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let owner_only = || std::fs::Permissions::from_mode(0o700);
    let mut dir = tempfile::Builder::new();
    dir.prefix("iar-velero-").permissions(owner_only());
    let dir = match parent {
        Some(parent) => dir.tempdir_in(parent),
        None => dir.tempdir(),
    }?;
    std::fs::set_permissions(dir.path(), owner_only())?;
    Ok(dir)
}

/// Serves until the client asks go-plugin's controller to shut down, or the
/// process is told to stop (SIGTERM, SIGINT).
pub async fn serve(config: Config) -> anyhow::Result<()> {
    use anyhow::Context;
    handshake::check_versions(std::env::var("PLUGIN_PROTOCOL_VERSIONS").ok().as_deref())?;
    let runtime = Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
    let configmaps = configmap_plugins(&runtime)
        .await
        .context("watching iar's plugin ConfigMaps")?;
    let actions = Arc::new(
        ActionSet::open(&config.plugin_dir, runtime, cluster().await, configmaps).with_context(
            || {
                format!(
                    "reading the wasm plugin directory {} (set {DIR_ENV})",
                    config.plugin_dir.display()
                )
            },
        )?,
    );

    // go-plugin's client may say where sockets go; the directory is removed
    // when the process ends.
    let dir = socket_dir(std::env::var_os("PLUGIN_UNIX_SOCKET_DIR").as_deref())
        .context("creating the plugin socket's directory")?;
    let socket = dir.path().join("plugin.sock");
    let listener = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("listening on {}", socket.display()))?;

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("plugin", tonic_health::ServingStatus::Serving)
        .await;
    let shutdown = Arc::new(Notify::new());
    let router = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(
            proto::plugin::grpc_controller_server::GrpcControllerServer::new(
                services::Controller {
                    shutdown: shutdown.clone(),
                },
            ),
        )
        .add_service(
            proto::generated::plugin_lister_server::PluginListerServer::new(services::Lister {
                actions: actions.clone(),
                command: config.command.clone(),
            }),
        )
        .add_service(
            proto::v2::backup_item_action_server::BackupItemActionServer::new(
                services::BackupItemAction {
                    actions: actions.clone(),
                },
            )
            // Items are bounded by the plugin's limits, not by gRPC's 4 MiB
            // default; go-plugin's client allows any size too.
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            proto::v2::restore_item_action_server::RestoreItemActionServer::new(
                services::RestoreItemAction {
                    actions: actions.clone(),
                },
            )
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            proto::v1::item_block_action_server::ItemBlockActionServer::new(
                services::ItemBlockAction { actions },
            )
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX),
        );

    // The listener is bound before the line is printed: the client dials as
    // soon as it reads it.
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", handshake::line(&socket))?;
        out.flush()?;
    }
    tracing::info!(
        plugins = %config.plugin_dir.display(),
        "serving Velero on {}",
        socket.display()
    );
    let stop = async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.notified() => {}
            _ = tokio::signal::ctrl_c() => {}
            () = term => {}
        }
    };
    router
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stop)
        .await
        .context("serving gRPC")?;
    drop(dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    /// The socket's directory is 0700 under the usual umask (022, which
    /// left it 0755 before), in the temporary directory and under
    /// `PLUGIN_UNIX_SOCKET_DIR`'s parent alike.
    #[test]
    fn the_socket_directory_is_owner_only_whatever_the_umask() {
        // SAFETY: umask(2) only swaps the process's mask; it is put back
        // below. 022 is the common default, so other tests creating files
        // meanwhile see what they would anyway.
        let old = unsafe { libc::umask(0o022) };
        let parent = tempfile::tempdir().unwrap();
        let dirs = [
            super::socket_dir(None),
            super::socket_dir(Some(parent.path().as_os_str())),
        ];
        unsafe { libc::umask(old) };
        for dir in dirs {
            let dir = dir.unwrap();
            let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o7777, 0o700, "{}", dir.path().display());
            assert!(
                dir.path()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("iar-velero-")
            );
        }
    }
}
