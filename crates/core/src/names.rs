//! Kubernetes name rules, applied before an item's identity becomes a path
//! in the contents tarball. A name from a manifest or a plugin that the API
//! server would never accept (`..`, `/`, NUL, empty, too long) must not turn
//! into a tar entry that escapes `resources/` when Velero or `tar` extracts it.

/// Which Kubernetes name rule a name breaks; shown as the phrase that
/// follows "invalid name …: ".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("empty")]
    Empty,
    #[error("longer than {max} characters ({len})")]
    TooLong { max: usize, len: usize },
    #[error("must start and end with a lower-case letter or digit")]
    Ends,
    #[error("contains {0:?}")]
    Contains(char),
    /// `.` or `..`.
    #[error("{0:?} is not a name")]
    Dots(String),
}

fn at_most(s: &str, max: usize) -> Result<(), NameError> {
    if s.len() > max {
        return Err(NameError::TooLong { max, len: s.len() });
    }
    Ok(())
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63: RFC 1123 label
/// (namespaces, resource plurals, a namespace's own name).
pub fn dns_label(s: &str) -> Result<(), NameError> {
    at_most(s, 63)?;
    label_chars(s)
}

fn label_chars(s: &str) -> Result<(), NameError> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(NameError::Empty);
    }
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return Err(NameError::Ends);
    }
    if let Some(c) = s
        .chars()
        .find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
    {
        return Err(NameError::Contains(c));
    }
    Ok(())
}

/// Labels joined by dots, at most 253: RFC 1123 subdomain (API groups and
/// the names of most built-in resources).
pub fn dns_subdomain(s: &str) -> Result<(), NameError> {
    at_most(s, 253)?;
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    s.split('.').try_for_each(label_chars)
}

/// What the API server requires of every object name, whatever its kind
/// (`path.IsValidPathSegmentName` plus the 253 limit): not `.` or `..`, no
/// `/` or `%`. iar also refuses control characters (NUL among them), which no
/// resource's stricter rule allows either.
pub fn path_segment(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    at_most(s, 253)?;
    if s == "." || s == ".." {
        return Err(NameError::Dots(s.to_string()));
    }
    if let Some(c) = s.chars().find(|&c| c == '/' || c == '%' || c.is_control()) {
        return Err(NameError::Contains(c));
    }
    Ok(())
}

/// The rule Kubernetes applies to the name of an object of `resource` in the
/// core or `group` API: the stricter DNS rules for the built-ins that have
/// them, the path-segment rule for every other (RBAC names may hold `:`,
/// custom resources are checked only for that).
pub fn object_name(group: &str, resource: &str, name: &str) -> Result<(), NameError> {
    match (group, resource) {
        ("", "namespaces" | "services") => dns_label(name),
        (
            "",
            "pods"
            | "configmaps"
            | "secrets"
            | "serviceaccounts"
            | "persistentvolumes"
            | "persistentvolumeclaims"
            | "nodes"
            | "endpoints"
            | "replicationcontrollers",
        )
        | ("apps", _)
        | ("batch", _)
        | ("snapshot.storage.k8s.io", _)
        | ("storage.k8s.io", _) => dns_subdomain(name),
        _ => path_segment(name),
    }
}

/// `s` as a label value: itself when it is one (63 characters or fewer of
/// `[A-Za-z0-9._-]`, alphanumeric at both ends), otherwise `sha256-` and
/// 40 hex digits of its digest (node names and backup names may be 253
/// characters long).
pub fn label_value(s: &str) -> String {
    use sha2::{Digest, Sha256};
    let fits = !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if fits {
        s.to_string()
    } else {
        format!(
            "sha256-{}",
            &hex::encode(Sha256::digest(s.as_bytes()))[..40]
        )
    }
}

/// A uid shaped as the API server's (8-4-4-4-12 hex) for an object no API
/// server made (a manifest overlay's, a command line's restore): the first
/// 16 bytes of the SHA-256 of what `seed` names and `at`, so two differ.
pub fn uid_for(seed: &str, at: std::time::SystemTime) -> String {
    use sha2::{Digest, Sha256};
    let since = at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let h = hex::encode(&Sha256::digest(format!("{seed}@{since}").as_bytes())[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        for ok in ["a", "a-b", "0", &"x".repeat(63)] {
            dns_label(ok).unwrap();
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"x".repeat(64)] {
            assert!(dns_label(bad).is_err(), "{bad:?}");
        }
        let longest = "a.".repeat(127);
        for ok in [
            "a.b",
            "snapshot.storage.k8s.io",
            longest.trim_end_matches('.'),
        ] {
            dns_subdomain(ok).unwrap();
        }
        for bad in ["", "a..b", ".a", "a.", "a/b", &"x".repeat(254)] {
            assert!(dns_subdomain(bad).is_err(), "{bad:?}");
        }
    }
}
