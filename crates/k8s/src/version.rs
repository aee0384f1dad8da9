//! The oldest Kubernetes iar runs on, checked when the controller and the
//! node agent start, so that an install on an older cluster is refused with
//! its reason rather than half working: the node agent's admission policy
//! (deploy/node-agent.yaml) compares a request's node with the
//! `authentication.kubernetes.io/node-name` extra of the agent's token,
//! which service-account tokens carry from Kubernetes 1.32. Below that the
//! policy refuses every status the agents write, and no volume backup ends.

/// Major and minor.
pub const MINIMUM: (u32, u32) = (1, 32);

/// The rule an older cluster breaks.
pub const RULE: &str = "kubernetes-version";

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("asking the API server its version: {0}")]
    Ask(#[source] kube::Error),
    #[error(
        "the API server is Kubernetes {0}, older than 1.32, the oldest iar runs on: the node agent's admission policy needs the node-name claim of service-account tokens (rule: kubernetes-version)"
    )]
    TooOld(String),
    #[error(
        "the API server's version {0:?} is not a Kubernetes version (rule: kubernetes-version)"
    )]
    Unreadable(String),
}

/// `major` and `minor` as the API server reports them ("1", "32+" on some
/// distributions): the leading digits.
pub fn parse(major: &str, minor: &str) -> Option<(u32, u32)> {
    let digits = |s: &str| -> Option<u32> {
        let d: String = s.chars().take_while(char::is_ascii_digit).collect();
        d.parse().ok()
    };
    Some((digits(major)?, digits(minor)?))
}

/// Whether a version is new enough; `shown` is how to name it.
pub fn judge(major: &str, minor: &str, shown: &str) -> Result<(), VersionError> {
    match parse(major, minor) {
        Some(v) if v >= MINIMUM => Ok(()),
        Some(_) => Err(VersionError::TooOld(shown.to_string())),
        None => Err(VersionError::Unreadable(shown.to_string())),
    }
}

/// Asks the API server its version and judges it.
pub async fn check(client: &kube::Client) -> Result<(), VersionError> {
    let info = crate::reach::at_start("asking the API server's version", || {
        client.apiserver_version()
    })
    .await
    .map_err(VersionError::Ask)?;
    judge(&info.major, &info.minor, &info.git_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_than_1_32_is_refused_by_rule_and_newer_taken() {
        assert!(judge("1", "36", "v1.36.3").is_ok());
        assert!(judge("1", "32+", "v1.32.1-eks").is_ok());
        assert!(judge("2", "0", "v2.0.0").is_ok());
        let e = judge("1", "31", "v1.31.9").unwrap_err().to_string();
        assert!(
            e.contains("v1.31.9") && e.contains("rule: kubernetes-version"),
            "{e}"
        );
        let e = judge("", "x", "garbage").unwrap_err().to_string();
        assert!(e.contains("not a Kubernetes version"), "{e}");
    }
}
