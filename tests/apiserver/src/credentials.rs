//! Files the API server and its clients need, generated per server: bearer
//! tokens, the service-account signing key, the kubeconfig.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::StartError;

/// Who a client authenticates as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum User {
    /// User `admin` in group `system:masters`: every request is allowed.
    Admin,
    /// User `restricted`, in no group but `system:authenticated`: allowed
    /// only what a test's Role grants it.
    Restricted,
    /// The service account `deploy/` runs iar as
    /// (`system:serviceaccount:iar-system:iar`): allowed exactly what
    /// deploy's RBAC binds to it, so a test proves that role is enough.
    Controller,
    /// The node agent's service account in `deploy/node-agent.yaml`
    /// (`system:serviceaccount:iar-system:iar-node-agent`).
    NodeAgent,
}

impl User {
    /// The user name (and kubeconfig context name) RBAC bindings refer to.
    pub fn name(self) -> &'static str {
        match self {
            User::Admin => "admin",
            User::Restricted => "restricted",
            User::Controller => "system:serviceaccount:iar-system:iar",
            User::NodeAgent => "system:serviceaccount:iar-system:iar-node-agent",
        }
    }
}

pub(crate) struct Tokens {
    pub(crate) admin: String,
    pub(crate) restricted: String,
    pub(crate) controller: String,
    pub(crate) node_agent: String,
}

impl Tokens {
    pub(crate) fn generate() -> Result<Tokens, StartError> {
        Ok(Tokens {
            admin: random_hex()?,
            restricted: random_hex()?,
            controller: random_hex()?,
            node_agent: random_hex()?,
        })
    }

    pub(crate) fn get(&self, user: User) -> &str {
        match user {
            User::Admin => &self.admin,
            User::Restricted => &self.restricted,
            User::Controller => &self.controller,
            User::NodeAgent => &self.node_agent,
        }
    }

    /// kube-apiserver's `--token-auth-file`: `token,user,uid,"groups"`.
    pub(crate) fn write_auth_file(&self, path: &Path) -> Result<(), StartError> {
        let csv = format!(
            "{},admin,admin,\"system:masters\"\n{},restricted,restricted\n\
             {},{},iar-controller,\"system:serviceaccounts,system:serviceaccounts:iar-system\"\n\
             {},{},iar-node-agent,\"system:serviceaccounts,system:serviceaccounts:iar-system\"\n",
            self.admin,
            self.restricted,
            self.controller,
            User::Controller.name(),
            self.node_agent,
            User::NodeAgent.name()
        );
        fs::write(path, csv).map_err(StartError::io(format!("write {path:?}")))
    }
}

/// 128 random bits from the kernel, as hex. The server listens on loopback
/// only; unguessable tokens still keep other local users out of it.
fn random_hex() -> Result<String, StartError> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(StartError::io("read /dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Generates the service-account signing key pair (P-256) with the
/// `openssl` CLI, returning (private, public) paths. The API server refuses
/// to start without one; nothing in the tests checks its tokens, so the CLI
/// (present wherever git and curl are) spares compiling a crypto crate.
pub(crate) fn service_account_key(dir: &Path) -> Result<(PathBuf, PathBuf), StartError> {
    let private = service_account_key_path(dir);
    let public = dir.join("sa.pub");
    // A restarted server keeps its key: the tokens it signed stay valid.
    if private.exists() && public.exists() {
        return Ok((private, public));
    }
    run_openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        path_str(&private)?,
    ])?;
    run_openssl(&[
        "pkey",
        "-in",
        path_str(&private)?,
        "-pubout",
        "-out",
        path_str(&public)?,
    ])?;
    Ok((private, public))
}

/// Where [`service_account_key`] writes the private key.
pub(crate) fn service_account_key_path(dir: &Path) -> PathBuf {
    dir.join("sa.key")
}

fn run_openssl(args: &[&str]) -> Result<(), StartError> {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .map_err(StartError::io(
            "run openssl (needed for the service-account key)",
        ))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(StartError::Io {
            what: format!("openssl {}", args.join(" ")),
            source: std::io::Error::other(String::from_utf8_lossy(&output.stderr).into_owned()),
        })
    }
}

fn path_str(path: &Path) -> Result<&str, StartError> {
    path.to_str().ok_or_else(|| StartError::Io {
        what: format!("path {path:?}"),
        source: std::io::Error::other("not UTF-8"),
    })
}

/// A kubeconfig with one cluster and a context per [`User`] (named after
/// it); `admin` is the current context. JSON is valid YAML, so kubectl and
/// kube-rs read it as is.
pub(crate) fn write_kubeconfig(
    path: &Path,
    url: &str,
    ca: &Path,
    tokens: &Tokens,
) -> Result<(), StartError> {
    let users = [
        User::Admin,
        User::Restricted,
        User::Controller,
        User::NodeAgent,
    ];
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "iar-test",
            "cluster": { "server": url, "certificate-authority": ca },
        }],
        "users": users.map(|u| serde_json::json!({
            "name": u.name(),
            "user": { "token": tokens.get(u) },
        })),
        "contexts": users.map(|u| serde_json::json!({
            "name": u.name(),
            "context": { "cluster": "iar-test", "user": u.name() },
        })),
        "current-context": User::Admin.name(),
    });
    let text = serde_json::to_string_pretty(&config).expect("a JSON value serializes");
    fs::write(path, text).map_err(StartError::io(format!("write {path:?}")))
}

/// The certificates between the API server and kubelets: a CA (the
/// kubelets' `authentication.x509.clientCAFile`), the API server's client
/// certificate signed by it (`--kubelet-client-certificate/-key`: user
/// `kube-apiserver-kubelet-client` in group `system:masters`, so a
/// kubelet's webhook authorizer allows exec, logs and the rest), and
/// serving certificates issued to kubelets ([`KubeletPki::issue_serving`]).
///
/// The API server does not check kubelets' serving certificates (no
/// `--kubelet-certificate-authority`): kwok serves its own.
pub(crate) struct KubeletPki {
    pub(crate) ca_cert: PathBuf,
    ca_key: PathBuf,
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
}

impl KubeletPki {
    /// Generates the CA and the API server's client certificate in `dir`.
    pub(crate) fn generate(dir: &Path) -> Result<KubeletPki, StartError> {
        let pki = KubeletPki {
            ca_cert: dir.join("kubelet-ca.crt"),
            ca_key: dir.join("kubelet-ca.key"),
            client_cert: dir.join("kubelet-client.crt"),
            client_key: dir.join("kubelet-client.key"),
        };
        run_openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "7",
            "-subj",
            "/CN=iar-test-kubelet-ca",
            "-keyout",
            path_str(&pki.ca_key)?,
            "-out",
            path_str(&pki.ca_cert)?,
        ])?;
        pki.sign(
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "extendedKeyUsage=clientAuth\n",
            &pki.client_key,
            &pki.client_cert,
        )?;
        Ok(pki)
    }

    /// A serving certificate for a kubelet reached as `localhost` or
    /// 127.0.0.1, signed by the CA: (certificate, key) in `dir`.
    pub(crate) fn issue_serving(&self, dir: &Path) -> Result<(PathBuf, PathBuf), StartError> {
        let (cert, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
        self.sign(
            "/CN=localhost",
            "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
            &key,
            &cert,
        )?;
        Ok((cert, key))
    }

    /// A fresh P-256 key at `key` and a certificate for `subject` with
    /// `extensions` at `cert`, signed by the CA.
    fn sign(
        &self,
        subject: &str,
        extensions: &str,
        key: &Path,
        cert: &Path,
    ) -> Result<(), StartError> {
        let csr = cert.with_extension("csr");
        let ext = cert.with_extension("ext");
        fs::write(&ext, extensions).map_err(StartError::io(format!("write {ext:?}")))?;
        run_openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            path_str(key)?,
            "-out",
            path_str(&csr)?,
        ])?;
        let serial = format!("0x{}", random_hex()?);
        run_openssl(&[
            "x509",
            "-req",
            "-days",
            "7",
            "-in",
            path_str(&csr)?,
            "-CA",
            path_str(&self.ca_cert)?,
            "-CAkey",
            path_str(&self.ca_key)?,
            "-set_serial",
            &serial,
            "-extfile",
            path_str(&ext)?,
            "-out",
            path_str(cert)?,
        ])?;
        let _ = (fs::remove_file(&csr), fs::remove_file(&ext));
        Ok(())
    }
}
