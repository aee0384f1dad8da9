//! `iar install --print`: every manifest of `deploy/`, consistent with
//! each other, for one namespace, image, store and set of Secrets — what
//! the README's install section otherwise does in seven kubectl commands
//! and hand edits of two files. The manifests are the ones in `deploy/`,
//! compiled in: what is tested is what is printed.

use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::ExitCode;

/// `deploy/`'s manifests, in the order they apply: the namespace first,
/// the CRDs before anything reads them, the grant policy before any
/// plugin ConfigMap, the workloads last.
const MANIFESTS: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../../deploy/namespace.yaml"),
    ),
    ("rbac.yaml", include_str!("../../../deploy/rbac.yaml")),
    ("crd.yaml", include_str!("../../../deploy/crd.yaml")),
    (
        "grant-policy.yaml",
        include_str!("../../../deploy/grant-policy.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../../../deploy/deployment.yaml"),
    ),
    (
        "node-agent.yaml",
        include_str!("../../../deploy/node-agent.yaml"),
    ),
];

/// What `deploy/` says, and each flag replaces.
const NAMESPACE: &str = "iar-system";
const IMAGE: &str = "iar:0.1.0";
const STORE: &str = "s3://iar-backups";
const STORE_SECRET: &str = "iar-store";
const REPOSITORY_SECRET: &str = "iar-repository";

#[derive(clap::Args)]
pub struct InstallArgs {
    /// Print the manifests (to pipe into `kubectl apply -f -`); iar
    /// applies nothing itself.
    #[arg(long, required = true)]
    print: bool,
    /// The store every replica and node agent writes to.
    #[arg(long, env = "IAR_STORE")]
    store: String,
    #[arg(long, default_value = NAMESPACE)]
    namespace: String,
    /// iar's image, as your nodes pull it.
    #[arg(long, default_value = IMAGE)]
    image: String,
    /// The store's credentials, as object_store reads them: a file of
    /// `KEY=VALUE` lines (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_REGION, AWS_ENDPOINT and AWS_ALLOW_HTTP=true for an http
    /// endpoint such as MinIO's, …), printed as the Secret `iar-store`.
    /// Without it the Secret is left to you (or to the pods' own
    /// identity: it is optional).
    #[arg(long, value_name = "FILE")]
    store_credentials: Option<PathBuf>,
    /// The volume repositories' password (one line), printed as the
    /// Secret `iar-repository`. It encrypts every namespace's pod volume
    /// data: keep a copy, as without it no volume restores. Without this
    /// flag the Secret must exist before the pods start.
    #[arg(long, value_name = "FILE")]
    repository_password_file: Option<PathBuf>,
    /// Let the controller run Restore resources: binds its ServiceAccount
    /// to cluster-admin (deploy/restorer.yaml says why nothing narrower
    /// restores a backup of RBAC). Without it, `iar restore --cluster`
    /// restores with your own credentials.
    #[arg(long)]
    restores: bool,
}

/// Printed only with `--restores`.
const RESTORER: &str = include_str!("../../../deploy/restorer.yaml");

pub fn install(args: InstallArgs) -> anyhow::Result<ExitCode> {
    let text = manifests(&args)?;
    out!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// Every manifest, rewritten for `args`, as one multi-document YAML.
fn manifests(args: &InstallArgs) -> anyhow::Result<String> {
    check_name("--namespace", &args.namespace)?;
    if args.image.trim().is_empty() || args.image.contains(char::is_whitespace) {
        bail!("--image {:?} is not an image reference", args.image);
    }
    if !args.store.contains("://") {
        bail!(
            "--store {:?}: a cluster's replicas and agents share the store, so it is a URL (s3://bucket, gs://bucket, az://container)",
            args.store
        );
    }
    let mut out = String::new();
    for (file, text) in MANIFESTS {
        out.push_str(&format!("# deploy/{file}\n"));
        out.push_str(&rewrite(text, args));
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("---\n");
        if *file == "grant-policy.yaml" {
            out.push_str(&secrets(args)?);
        }
        if *file == "rbac.yaml" && args.restores {
            out.push_str("# deploy/restorer.yaml\n");
            out.push_str(&rewrite(RESTORER, args));
            out.push_str("---\n");
        }
    }
    Ok(out)
}

/// `text` with the namespace, image and store of `args`. Each is a
/// literal `deploy/` uses nowhere else; a test holds the output free of
/// the defaults when every flag is given.
fn rewrite(text: &str, args: &InstallArgs) -> String {
    text.replace(NAMESPACE, &args.namespace)
        .replace(IMAGE, &args.image)
        .replace(STORE, &args.store)
}

/// The Secrets the flags give, as manifests.
fn secrets(args: &InstallArgs) -> anyhow::Result<String> {
    let mut out = String::new();
    if let Some(file) = &args.store_credentials {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("--store-credentials {}", file.display()))?;
        let mut data = serde_json::Map::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                bail!(
                    "--store-credentials {} line {}: not KEY=VALUE",
                    file.display(),
                    n + 1
                );
            };
            data.insert(key.trim().to_string(), value.trim().into());
        }
        out.push_str(&secret(STORE_SECRET, &args.namespace, data)?);
    }
    if let Some(file) = &args.repository_password_file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("--repository-password-file {}", file.display()))?;
        // As the node agent and the controller read it: the first line.
        let password = text.lines().next().unwrap_or_default();
        if password.is_empty() {
            bail!(
                "--repository-password-file {}: the first line is empty",
                file.display()
            );
        }
        let mut data = serde_json::Map::new();
        data.insert("password".into(), password.into());
        out.push_str(&secret(REPOSITORY_SECRET, &args.namespace, data)?);
    }
    Ok(out)
}

fn secret(
    name: &str,
    namespace: &str,
    data: serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<String> {
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": data,
    });
    Ok(format!("{}---\n", iar::yaml::to_string(&secret)?))
}

/// A namespace name: a DNS label.
fn check_name(flag: &str, name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !ok {
        bail!("{flag} {name:?} is not a namespace name (a DNS label: a-z, 0-9, '-')");
    }
    Ok(())
}
