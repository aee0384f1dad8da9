//! The grant policy: what a plugin ConfigMap may ask for. Whoever can
//! create a ConfigMap in iar's namespace writes its `settings.yaml`, and
//! with it the plugin's read grants and limits; iar's service account
//! reads the whole cluster. The policy is the operator's bound on that: a
//! file (`iar controller --grant-policy FILE`) the operator mounts, or the
//! defaults below. A ConfigMap that asks for more is refused whole
//! (`GrantRefused`), never trimmed: a plugin that silently got less than
//! it asked for would fail later, further from the cause. Plugins from
//! files (`--plugins DIR`) are the operator's own and are not bound by it.

use iar_core::cluster::SECRETS_GRANT;
use iar_plugin::limits::{Isolation, Limits};
use iar_plugin::plugin::PluginSettings;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How many times the default limits the default policy allows.
pub const DEFAULT_HEADROOM: usize = 4;

/// The operator's bound on what any plugin ConfigMap may ask. Unknown
/// fields are errors, so a misspelt rule never leaves a default in force
/// unnoticed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct GrantPolicy {
    /// The resources a ConfigMap's `allowRead` may name, as globs over
    /// `resource.group` like `allowRead` itself. Secrets only when the
    /// exact entry `secrets` is here (no glob covers them). Default `["*"]`:
    /// every resource but Secrets.
    pub readable: Vec<String>,
    /// The resources a ConfigMap's `allowWrite` may name (contract 1.2.0:
    /// creating the objects a plugin's operations track), as globs over
    /// `resource.group`; Secrets only by the exact entry `secrets`.
    /// Default empty: no plugin ConfigMap may write until the operator
    /// says which resources.
    pub writable: Vec<String>,
    /// The most a ConfigMap's `limits` may ask, field by field. Default:
    /// [`DEFAULT_HEADROOM`] times each default limit.
    pub max_limits: MaxLimits,
    /// The `isolation` values a ConfigMap may choose. Default both.
    pub isolation: Vec<Isolation>,
    /// The hosts an `https://` reference may name: exact host names or
    /// `*.example.com` (any subdomain). Default none: a ConfigMap cannot
    /// point the controller, and its service account's network position,
    /// at an arbitrary address (a cloud metadata endpoint, an internal
    /// service) until the operator names where plugins come from.
    pub reference_hosts: Vec<String>,
}

/// The largest value each limit may have. A limit added to [`Limits`]
/// gets a field here and a line in [`MaxLimits::exceeded`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct MaxLimits {
    #[serde(with = "iar_plugin::limits::humantime_serde_compat")]
    pub deadline: Duration,
    /// The wall-clock ceiling in force (`wallClock`, or ten deadlines).
    #[serde(with = "iar_plugin::limits::humantime_serde_compat")]
    pub wall_clock: Duration,
    pub memory_bytes: usize,
    pub max_item_bytes: usize,
    pub max_related_items: usize,
    pub max_operation_id_bytes: usize,
    pub max_message_bytes: usize,
    pub max_log_lines: usize,
    pub max_stdio_bytes: usize,
    pub max_host_calls: usize,
    pub max_creates_per_backup: usize,
    pub max_resources: usize,
}

impl Default for GrantPolicy {
    fn default() -> Self {
        GrantPolicy {
            readable: vec!["*".into()],
            writable: Vec::new(),
            max_limits: MaxLimits::default(),
            isolation: vec![Isolation::Item, Isolation::Backup],
            reference_hosts: Vec::new(),
        }
    }
}

impl Default for MaxLimits {
    fn default() -> Self {
        MaxLimits::times(&Limits::default(), DEFAULT_HEADROOM)
    }
}

impl MaxLimits {
    /// `factor` times each of `limits`.
    pub fn times(limits: &Limits, factor: usize) -> MaxLimits {
        let n = |v: usize| v.saturating_mul(factor);
        MaxLimits {
            deadline: limits
                .deadline
                .saturating_mul(u32::try_from(factor).unwrap_or(u32::MAX)),
            wall_clock: limits
                .wall_clock_ceiling()
                .saturating_mul(u32::try_from(factor).unwrap_or(u32::MAX)),
            memory_bytes: n(limits.memory_bytes),
            max_item_bytes: n(limits.max_item_bytes),
            max_related_items: n(limits.max_related_items),
            max_operation_id_bytes: n(limits.max_operation_id_bytes),
            max_message_bytes: n(limits.max_message_bytes),
            max_log_lines: n(limits.max_log_lines),
            max_stdio_bytes: n(limits.max_stdio_bytes),
            max_host_calls: n(limits.max_host_calls),
            max_creates_per_backup: n(limits.max_creates_per_backup),
            max_resources: n(limits.max_resources),
        }
    }

    /// Each limit of `asked` over its maximum, as `limits.KEY ASKED (at
    /// most MAX)`.
    pub fn exceeded(&self, asked: &Limits) -> Vec<String> {
        let mut over = Vec::new();
        let mut check = |key: &str, asked: usize, max: usize| {
            if asked > max {
                over.push(format!("limits.{key} {asked} (at most {max})"));
            }
        };
        check("memoryBytes", asked.memory_bytes, self.memory_bytes);
        check("maxItemBytes", asked.max_item_bytes, self.max_item_bytes);
        check(
            "maxRelatedItems",
            asked.max_related_items,
            self.max_related_items,
        );
        check(
            "maxOperationIdBytes",
            asked.max_operation_id_bytes,
            self.max_operation_id_bytes,
        );
        check(
            "maxMessageBytes",
            asked.max_message_bytes,
            self.max_message_bytes,
        );
        check("maxLogLines", asked.max_log_lines, self.max_log_lines);
        check("maxStdioBytes", asked.max_stdio_bytes, self.max_stdio_bytes);
        check("maxHostCalls", asked.max_host_calls, self.max_host_calls);
        check(
            "maxCreatesPerBackup",
            asked.max_creates_per_backup,
            self.max_creates_per_backup,
        );
        check("maxResources", asked.max_resources, self.max_resources);
        let mut check_duration = |key: &str, asked: Duration, max: Duration| {
            if asked > max {
                over.push(format!(
                    "limits.{key} {} (at most {})",
                    humantime::format_duration(asked),
                    humantime::format_duration(max)
                ));
            }
        };
        check_duration("deadline", asked.deadline, self.deadline);
        check_duration("wallClock", asked.wall_clock_ceiling(), self.wall_clock);
        over
    }
}

/// Why a policy file cannot be used; iar does not start with one.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("grant policy {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("grant policy {path}: {reason} (rule: grant-policy)")]
    Invalid { path: PathBuf, reason: String },
}

impl GrantPolicy {
    /// Parses a policy document (YAML or JSON) and checks its globs; empty
    /// text is the defaults.
    pub fn parse(text: &str) -> Result<GrantPolicy, String> {
        let policy: GrantPolicy = if text.trim().is_empty() {
            GrantPolicy::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| e.to_string())?
        };
        for entry in &policy.readable {
            glob::Pattern::new(entry)
                .map_err(|e| format!("readable entry {entry:?} is not a glob: {e}"))?;
        }
        for entry in &policy.writable {
            glob::Pattern::new(entry)
                .map_err(|e| format!("writable entry {entry:?} is not a glob: {e}"))?;
        }
        Ok(policy)
    }

    /// Reads the policy file an operator mounted.
    pub fn read(path: &Path) -> Result<GrantPolicy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError::Read {
            path: path.into(),
            reason: e.to_string(),
        })?;
        GrantPolicy::parse(&text).map_err(|reason| PolicyError::Invalid {
            path: path.into(),
            reason,
        })
    }

    /// Everything `settings` asks beyond this policy, one entry each; empty
    /// when the policy allows it all.
    /// Why an `https://` reference may not be fetched, if it may not: its
    /// host is not among `referenceHosts` (rule `reference-host`).
    pub fn reference_refusal(&self, url: &str) -> Option<String> {
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase));
        let allowed = host.as_deref().is_some_and(|host| {
            self.reference_hosts.iter().any(|entry| {
                let entry = entry.to_ascii_lowercase();
                match entry.strip_prefix("*.") {
                    Some(domain) => host
                        .strip_suffix(domain)
                        .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                    None => entry == host,
                }
            })
        });
        (!allowed).then(|| {
            format!(
                "reference {url:?}: host {:?} is not among the policy's referenceHosts {:?} (rule: reference-host)",
                host.unwrap_or_default(),
                self.reference_hosts
            )
        })
    }

    pub fn refusals(&self, settings: &PluginSettings) -> Vec<String> {
        let mut refused = Vec::new();
        for asked in settings.grants.patterns() {
            if !self.readable.iter().any(|p| covers(p, asked)) {
                let hint = if asked == SECRETS_GRANT {
                    "; Secrets only when the policy lists `secrets`"
                } else if asked == "*" {
                    "; `*` is also what no allowRead means"
                } else {
                    ""
                };
                refused.push(format!(
                    "allowRead {asked:?} (the policy makes readable {:?}{hint})",
                    self.readable
                ));
            }
        }
        for asked in settings.write_grants.entries() {
            if !self.writable.iter().any(|p| covers(p, asked)) {
                refused.push(format!(
                    "allowWrite {asked:?} (the policy makes writable {:?})",
                    self.writable
                ));
            }
        }
        refused.extend(self.max_limits.exceeded(&settings.limits));
        let isolation = settings.limits.isolation;
        if !self.isolation.contains(&isolation) {
            refused.push(format!(
                "limits.isolation {} (the policy allows {})",
                isolation_name(isolation),
                self.isolation
                    .iter()
                    .map(|i| isolation_name(*i))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        refused
    }
}

fn isolation_name(i: Isolation) -> &'static str {
    match i {
        Isolation::Item => "item",
        Isolation::Backup => "backup",
    }
}

fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Whether every resource the grant `asked` matches is one `policy`
/// matches. Decided conservatively (a `false` may be a glob the policy
/// does cover, never the reverse): the same entry; a literal the policy's
/// glob matches; anything under `*`; a glob under `*SUFFIX` whose own
/// literal tail ends with SUFFIX. Secrets only by `secrets` on both sides.
pub fn covers(policy: &str, asked: &str) -> bool {
    if asked == SECRETS_GRANT || policy == SECRETS_GRANT {
        return policy == asked;
    }
    if policy == asked || policy == "*" {
        return true;
    }
    let Ok(pattern) = glob::Pattern::new(policy) else {
        return false;
    };
    if !has_meta(asked) {
        return pattern.matches(asked);
    }
    match policy.strip_prefix('*') {
        Some(suffix) if !has_meta(suffix) => {
            let tail = asked
                .rfind(['*', '?', ']'])
                .map_or(asked, |i| &asked[i + 1..]);
            tail.ends_with(suffix)
        }
        _ => false,
    }
}

#[cfg(test)]
mod reference_tests {
    use super::*;

    /// https references come only from the hosts the operator names:
    /// none by default, exact names, and `*.` for subdomains (never the
    /// domain's look-alikes).
    #[test]
    fn https_references_come_only_from_named_hosts() {
        let none = GrantPolicy::default();
        let refused = none
            .reference_refusal("https://169.254.169.254/latest/meta-data")
            .unwrap();
        assert!(refused.contains("rule: reference-host"), "{refused}");
        let policy = GrantPolicy {
            reference_hosts: vec!["plugins.example.com".into(), "*.corp.example".into()],
            ..GrantPolicy::default()
        };
        for ok in [
            "https://plugins.example.com/a.wasm",
            "https://PLUGINS.example.com:8443/a.wasm",
            "https://cdn.corp.example/a.wasm",
        ] {
            assert_eq!(policy.reference_refusal(ok), None, "{ok}");
        }
        for refused in [
            "https://evil-plugins.example.com/a.wasm",
            "https://corp.example/a.wasm",
            "https://xcorp.example/a.wasm",
            "https://plugins.example.com.evil.test/a.wasm",
            "https://127.0.0.1/a.wasm",
            "not a url",
        ] {
            assert!(policy.reference_refusal(refused).is_some(), "{refused}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iar_plugin::plugin::SettingsFile;

    fn settings(doc: &str) -> PluginSettings {
        SettingsFile::parse(doc).unwrap().into_settings([]).unwrap()
    }

    #[test]
    fn the_defaults_allow_the_default_settings_and_four_times_the_limits() {
        let policy = GrantPolicy::default();
        assert!(policy.refusals(&settings("")).is_empty());
        assert_eq!(policy.max_limits.deadline, Duration::from_secs(40));
        assert_eq!(policy.max_limits.memory_bytes, 256 << 20);
        assert!(
            policy
                .refusals(&settings(
                    "allowRead: ['*', pods, '*.snapshot.storage.k8s.io']\nlimits: {deadline: 40s, memoryBytes: 268435456, isolation: item}"
                ))
                .is_empty()
        );
        assert_eq!(GrantPolicy::parse("").unwrap(), policy);
        assert_eq!(GrantPolicy::parse("{}").unwrap(), policy);
    }

    #[test]
    fn secrets_and_oversized_limits_are_refused_each_by_name() {
        let policy = GrantPolicy::default();
        let refused = policy.refusals(&settings(
            "allowRead: ['*', secrets]\nlimits: {deadline: 10m, memoryBytes: 4294967296, maxHostCalls: 40000, maxLogLines: 4001}",
        ));
        // The 10 m deadline also implies a 100 m wall-clock ceiling.
        assert_eq!(refused.len(), 5, "{refused:?}");
        assert!(
            refused[0].starts_with("allowRead \"secrets\""),
            "{refused:?}"
        );
        assert!(refused[0].contains("`secrets`"), "{refused:?}");
        assert!(
            refused.contains(&"limits.memoryBytes 4294967296 (at most 268435456)".to_string()),
            "{refused:?}"
        );
        assert!(
            refused.contains(&"limits.maxLogLines 4001 (at most 4000)".to_string()),
            "{refused:?}"
        );
        assert!(
            refused.contains(&"limits.deadline 10m (at most 40s)".to_string()),
            "{refused:?}"
        );
        assert!(
            refused.contains(&"limits.wallClock 1h 40m (at most 6m 40s)".to_string()),
            "{refused:?}"
        );
    }

    #[test]
    fn a_policy_file_bounds_reads_limits_and_isolation() {
        let policy = GrantPolicy::parse(
            "readable: [pods, secrets, '*.snapshot.storage.k8s.io']\nmaxLimits: {deadline: 5s, memoryBytes: 33554432}\nisolation: [item]\n",
        )
        .unwrap();
        // The other maxima keep their defaults.
        assert_eq!(policy.max_limits.max_host_calls, 40_000);
        let ok = settings(
            "allowRead: [pods, secrets, volumesnapshots.snapshot.storage.k8s.io, '*.snapshot.storage.k8s.io']\nlimits: {deadline: 5s, memoryBytes: 33554432, isolation: item}",
        );
        assert!(
            policy.refusals(&ok).is_empty(),
            "{:?}",
            policy.refusals(&ok)
        );
        // No allowRead is `*`, which this policy does not cover; the default
        // limits (10 s, 64 MiB, backup) are over it too.
        let refused = policy.refusals(&settings(""));
        assert_eq!(refused.len(), 4, "{refused:?}");
        assert!(refused[0].contains("no allowRead"), "{refused:?}");
        assert!(
            refused.contains(&"limits.isolation backup (the policy allows item)".to_string()),
            "{refused:?}"
        );
    }

    #[test]
    fn coverage_is_never_wider_than_the_policy() {
        let yes = [
            ("*", "*"),
            ("*", "*.k8s.io"),
            ("*", "pods"),
            ("pods", "pods"),
            ("*.k8s.io", "volumesnapshots.snapshot.storage.k8s.io"),
            ("*.k8s.io", "*.snapshot.storage.k8s.io"),
            ("*.k8s.io", "v?lumes.storage.k8s.io"),
            ("secrets", "secrets"),
        ];
        let no = [
            ("*", "secrets"),
            ("secret*", "secrets"),
            ("secrets", "*"),
            ("pods", "*"),
            ("*.k8s.io", "*"),
            ("*.k8s.io", "*.io"),
            ("*.k8s.io", "*s"),
            ("p?ds", "p*ds"),
            ("pods", "p*"),
            ("*.k8s.io", "[a-z].k8s.i?"),
        ];
        for (policy, asked) in yes {
            assert!(covers(policy, asked), "{policy} covers {asked}");
        }
        for (policy, asked) in no {
            assert!(!covers(policy, asked), "{policy} does not cover {asked}");
        }
    }

    /// The example in deploy/ parses and is the defaults, written out.
    #[test]
    fn the_deployed_policy_is_the_defaults() {
        let text = include_str!("../../../../deploy/grant-policy.yaml");
        let doc = serde_yaml::Deserializer::from_str(text)
            .map(|d| serde_yaml::Value::deserialize(d).unwrap())
            .find(|d| d["kind"] == "ConfigMap")
            .expect("the policy ConfigMap");
        let policy = GrantPolicy::parse(doc["data"]["policy.yaml"].as_str().unwrap()).unwrap();
        assert_eq!(policy, GrantPolicy::default());
    }

    #[test]
    fn a_misspelt_policy_is_an_error_naming_it() {
        let err = GrantPolicy::parse("maxLimits: {deadlines: 5s}").unwrap_err();
        assert!(err.contains("deadlines"), "{err}");
        let err = GrantPolicy::parse("readabel: [pods]").unwrap_err();
        assert!(err.contains("readabel"), "{err}");
        let err = GrantPolicy::parse("readable: ['[']").unwrap_err();
        assert!(err.contains("not a glob"), "{err}");
        let err = GrantPolicy::parse("isolation: [none]").unwrap_err();
        assert!(err.contains("none"), "{err}");
    }
}
