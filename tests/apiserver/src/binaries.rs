//! Where the etcd and kube-apiserver programs come from.

use std::env;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::StartError;

/// Names a kube-apiserver binary to use instead of building one.
pub const ENV_KUBE_APISERVER: &str = "IAR_KUBE_APISERVER";

/// Names a kubelet binary to use instead of building one.
pub const ENV_KUBELET: &str = "IAR_KUBELET";

/// The script that builds the Kubernetes programs of the tests (kube-apiserver,
/// the kubelet, kwok, the snapshot-controller) from one Go module, once per
/// machine, and prints the path of the one asked for.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/kubernetes/build.sh")
}

/// The etcd binary shipped by the `etcd-bin-vendored` crate.
pub(crate) fn etcd() -> Result<PathBuf, StartError> {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        etcd_bin_vendored::etcd_bin_path()
            .map(Path::to_path_buf)
            .map_err(|e| StartError::NoEtcd(e.to_string()))
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        Err(StartError::NoEtcd(format!(
            "{}-{} is not wired up in tests/apiserver/Cargo.toml",
            env::consts::OS,
            env::consts::ARCH
        )))
    }
}

/// The kube-apiserver binary: `$IAR_KUBE_APISERVER` if set, else the one
/// `tools/kubernetes/build.sh` builds (or finds in its cache). `None`
/// only when the variable is unset and there is no Go to build with.
pub(crate) fn kube_apiserver() -> Result<Option<PathBuf>, StartError> {
    from_env_or_build(ENV_KUBE_APISERVER, &["kube-apiserver"])
}

/// The kubelet binary: `$IAR_KUBELET` if set, else the one
/// `tools/kubernetes/build.sh kubelet` builds (or finds in its cache),
/// from the same module and Go build as kube-apiserver. `None`
/// only when the variable is unset and there is no Go to build with.
pub(crate) fn kubelet() -> Result<Option<PathBuf>, StartError> {
    from_env_or_build(ENV_KUBELET, &["kubelet"])
}

/// Any program `tools/kubernetes/build.sh` builds, by its name there
/// (kube-apiserver and the kubelet as [`kube_apiserver`] and [`kubelet`]
/// find them). `None` without Go.
pub(crate) fn kubernetes_tool(tool: &str) -> Result<Option<PathBuf>, StartError> {
    match tool {
        "kube-apiserver" => kube_apiserver(),
        "kubelet" => kubelet(),
        _ if find_in_path("go").is_none() => Ok(None),
        _ => built_by(&build_script(), &[tool]).map(Some),
    }
}

/// The executable `$var` names, else what the build script prints when
/// run with `args`; `None` without the variable and without Go.
fn from_env_or_build(var: &str, args: &[&str]) -> Result<Option<PathBuf>, StartError> {
    if let Some(path) = env::var_os(var) {
        let path = PathBuf::from(path);
        return if is_executable(&path) {
            Ok(Some(path))
        } else {
            Err(StartError::BadBinaryPath { path })
        };
    }
    if find_in_path("go").is_none() {
        return Ok(None);
    }
    built_by(&build_script(), args).map(Some)
}

/// The pause binary `tools/node/build.sh` builds (installing the node's
/// Debian packages first when missing); the images `pause.tar` and
/// `busybox.tar` lie next to it.
pub(crate) fn node_images() -> Result<PathBuf, StartError> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/node/build.sh");
    built_by(&script, &[])
}

/// The kwok binary `tools/kubernetes/build.sh kwok` builds (or finds in
/// its cache); its stages (`kwok-stages.yaml`) and Exec CRD
/// (`kwok-execs.crd.yaml`) lie next to it. `None` without Go.
pub(crate) fn kwok() -> Result<Option<PathBuf>, StartError> {
    if find_in_path("go").is_none() {
        return Ok(None);
    }
    built_by(&build_script(), &["kwok"]).map(Some)
}

/// The CSI snapshot-controller binary `tools/kubernetes/build.sh
/// snapshot-controller` builds (or finds in its cache); its CRDs
/// (`snapshot-crds.yaml`) lie next to it. `None` without Go.
pub(crate) fn snapshot_controller() -> Result<Option<PathBuf>, StartError> {
    if find_in_path("go").is_none() {
        return Ok(None);
    }
    built_by(&build_script(), &["snapshot-controller"]).map(Some)
}

/// Runs a build script with `args` that prints the path of what it built
/// (or found cached) as its last line.
fn built_by(script: &Path, args: &[&str]) -> Result<PathBuf, StartError> {
    // The build's progress goes straight to our stderr: a first build takes
    // minutes, and whoever waits should see why.
    let output = Command::new("bash")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(StartError::io(format!("run {script:?}")))?;
    if !output.status.success() {
        return Err(StartError::BuildFailed {
            script: script.to_path_buf(),
            status: output.status,
        });
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    if is_executable(&path) {
        Ok(path)
    } else {
        Err(StartError::BadBinaryPath { path })
    }
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub(crate) fn find_in_path(program: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}
