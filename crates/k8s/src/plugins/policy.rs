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
    /// The resources a ConfigMap's `allowMutate` may name (changing the
    /// items its plugin returns, which a restore creates), as globs over
    /// `resource.group`; what decides rights (RBAC, webhook
    /// configurations, Secrets, ServiceAccounts, `RESOURCE/security`) only
    /// by the exact entry. Default empty: no plugin ConfigMap changes an
    /// item until the operator says which resources.
    pub mutable: Vec<String>,
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
/// gets a field here and a check in [`MaxLimits::exceeded`], which does
/// not compile until it has one.
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
    #[serde(with = "iar_plugin::limits::humantime_serde_compat")]
    pub max_ready_wait: Duration,
    pub max_items_per_run: usize,
    #[serde(with = "iar_plugin::limits::humantime_serde_compat")]
    pub max_ready_wait_per_run: Duration,
    pub max_error_bytes_per_run: usize,
}

impl Default for GrantPolicy {
    fn default() -> Self {
        GrantPolicy {
            readable: vec!["*".into()],
            writable: Vec::new(),
            mutable: Vec::new(),
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
        let times = u32::try_from(factor).unwrap_or(u32::MAX);
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
            max_ready_wait: limits.max_ready_wait.saturating_mul(times),
            max_items_per_run: n(limits.max_items_per_run),
            max_ready_wait_per_run: limits.max_ready_wait_per_run.saturating_mul(times),
            max_error_bytes_per_run: n(limits.max_error_bytes_per_run),
        }
    }

    /// Each limit of `asked` over its maximum, as `limits.KEY ASKED (at
    /// most MAX)`.
    ///
    /// Both structs are destructured without `..`: a field added to
    /// [`Limits`] (or here) does not compile until it is capped below, or
    /// said here why it needs no cap.
    pub fn exceeded(&self, asked: &Limits) -> Vec<String> {
        let Limits {
            deadline,
            // Capped as the ceiling in force (`wallClock`, or ten deadlines).
            wall_clock: _,
            memory_bytes,
            max_item_bytes,
            max_related_items,
            max_operation_id_bytes,
            max_message_bytes,
            max_log_lines,
            max_stdio_bytes,
            max_host_calls,
            max_creates_per_backup,
            max_resources,
            // Not a size: the policy's `isolation` list bounds it
            // (`GrantPolicy::refusals`).
            isolation: _,
            max_ready_wait,
            max_items_per_run,
            max_ready_wait_per_run,
            max_error_bytes_per_run,
        } = asked;
        let MaxLimits {
            deadline: max_deadline,
            wall_clock: max_wall_clock,
            memory_bytes: max_memory_bytes,
            max_item_bytes: max_max_item_bytes,
            max_related_items: max_max_related_items,
            max_operation_id_bytes: max_max_operation_id_bytes,
            max_message_bytes: max_max_message_bytes,
            max_log_lines: max_max_log_lines,
            max_stdio_bytes: max_max_stdio_bytes,
            max_host_calls: max_max_host_calls,
            max_creates_per_backup: max_max_creates_per_backup,
            max_resources: max_max_resources,
            max_ready_wait: max_max_ready_wait,
            max_items_per_run: max_max_items_per_run,
            max_ready_wait_per_run: max_max_ready_wait_per_run,
            max_error_bytes_per_run: max_max_error_bytes_per_run,
        } = self;
        let mut over = Vec::new();
        let mut check = |key: &str, asked: usize, max: usize| {
            if asked > max {
                over.push(format!("limits.{key} {asked} (at most {max})"));
            }
        };
        check("memoryBytes", *memory_bytes, *max_memory_bytes);
        check("maxItemBytes", *max_item_bytes, *max_max_item_bytes);
        check(
            "maxRelatedItems",
            *max_related_items,
            *max_max_related_items,
        );
        check(
            "maxOperationIdBytes",
            *max_operation_id_bytes,
            *max_max_operation_id_bytes,
        );
        check(
            "maxMessageBytes",
            *max_message_bytes,
            *max_max_message_bytes,
        );
        check("maxLogLines", *max_log_lines, *max_max_log_lines);
        check("maxStdioBytes", *max_stdio_bytes, *max_max_stdio_bytes);
        check("maxHostCalls", *max_host_calls, *max_max_host_calls);
        check(
            "maxCreatesPerBackup",
            *max_creates_per_backup,
            *max_max_creates_per_backup,
        );
        check("maxResources", *max_resources, *max_max_resources);
        check("maxItemsPerRun", *max_items_per_run, *max_max_items_per_run);
        check(
            "maxErrorBytesPerRun",
            *max_error_bytes_per_run,
            *max_max_error_bytes_per_run,
        );
        let mut check_duration = |key: &str, asked: Duration, max: Duration| {
            if asked > max {
                over.push(format!(
                    "limits.{key} {} (at most {})",
                    humantime::format_duration(asked),
                    humantime::format_duration(max)
                ));
            }
        };
        check_duration("deadline", *deadline, *max_deadline);
        check_duration("wallClock", asked.wall_clock_ceiling(), *max_wall_clock);
        check_duration("maxReadyWait", *max_ready_wait, *max_max_ready_wait);
        check_duration(
            "maxReadyWaitPerRun",
            *max_ready_wait_per_run,
            *max_max_ready_wait_per_run,
        );
        over
    }
}

/// Why a policy file cannot be used; iar does not start with one.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("grant policy {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("grant policy {path}: {source} (rule: grant-policy)")]
    Invalid {
        path: PathBuf,
        #[source]
        source: PolicyProblem,
    },
}

/// What is wrong with a policy document.
#[derive(Debug, thiserror::Error)]
pub enum PolicyProblem {
    #[error("{0}")]
    Yaml(#[source] Box<iar_core::yaml::Error>),
    /// `list` is `readable`, `writable` or `mutable`.
    #[error("{list} entry {entry:?} is not a glob: {source}")]
    Glob {
        list: &'static str,
        entry: String,
        #[source]
        source: glob::PatternError,
    },
}

impl GrantPolicy {
    /// Parses a policy document (YAML or JSON) and checks its globs; empty
    /// text is the defaults.
    pub fn parse(text: &str) -> Result<GrantPolicy, PolicyProblem> {
        let policy: GrantPolicy = if text.trim().is_empty() {
            GrantPolicy::default()
        } else {
            iar_core::yaml::from_str(text).map_err(|e| PolicyProblem::Yaml(Box::new(e)))?
        };
        for (list, entries) in [
            ("readable", &policy.readable),
            ("writable", &policy.writable),
            ("mutable", &policy.mutable),
        ] {
            for entry in entries {
                glob::Pattern::new(entry).map_err(|source| PolicyProblem::Glob {
                    list,
                    entry: entry.clone(),
                    source,
                })?;
            }
        }
        Ok(policy)
    }

    /// Reads the policy file an operator mounted.
    pub fn read(path: &Path) -> Result<GrantPolicy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.into(),
            source,
        })?;
        GrantPolicy::parse(&text).map_err(|source| PolicyError::Invalid {
            path: path.into(),
            source,
        })
    }

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

    /// Everything `settings` asks beyond this policy, one entry each; empty
    /// when the policy allows it all.
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
        for asked in settings.mutate_grants.entries() {
            if !self.mutable.iter().any(|p| covers_mutate(p, asked)) {
                refused.push(format!(
                    "allowMutate {asked:?} (the policy makes mutable {:?})",
                    self.mutable
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

/// Whether the policy entry `policy` allows the `allowMutate` entry
/// `asked`: as [`covers`], but what decides rights only by its exact
/// entry, so a policy's `*` never grants a ClusterRoleBinding change.
pub fn covers_mutate(policy: &str, asked: &str) -> bool {
    use iar_core::cluster::mutate::{SECURITY_SUFFIX, is_rights_resource};
    if asked.ends_with(SECURITY_SUFFIX) || is_rights_resource(asked) {
        return policy == asked;
    }
    covers(policy, asked)
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
    fn item_changes_need_the_policy_and_rights_changes_its_exact_entry() {
        let asked = settings(
            "allowMutate: [pods, 'deployments.apps/security', clusterroles.rbac.authorization.k8s.io]",
        );
        // No policy allowance: no mutate grant at all.
        let refused = GrantPolicy::default().refusals(&asked);
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(
            refused[0].starts_with("allowMutate \"pods\""),
            "{refused:?}"
        );
        // A glob covers plain resources, never what decides rights.
        let policy = GrantPolicy::parse("mutable: ['*']").unwrap();
        assert_eq!(policy.refusals(&asked).len(), 2);
        let policy = GrantPolicy::parse(
            "mutable: ['*', 'deployments.apps/security', clusterroles.rbac.authorization.k8s.io]",
        )
        .unwrap();
        assert!(policy.refusals(&asked).is_empty());
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

    /// Each limit one above its cap is refused, alone and by its settings
    /// key; at the cap it is not. The keys are read from `Limits`' own
    /// serialization, so a limit added without a case here fails this
    /// test, and `MaxLimits` has a maximum for each of them.
    #[test]
    fn each_limit_over_its_cap_is_refused_by_name() {
        type Set = fn(&mut Limits, &MaxLimits, u32);
        let cases: &[(&str, Set)] = &[
            ("deadline", |l, m, by| {
                l.deadline = m.deadline + Duration::from_millis(by.into());
                // Else the implied ten-deadline ceiling is over too.
                l.wall_clock = Some(m.deadline);
            }),
            ("wallClock", |l, m, by| {
                l.wall_clock = Some(m.wall_clock + Duration::from_millis(by.into()))
            }),
            ("memoryBytes", |l, m, by| {
                l.memory_bytes = m.memory_bytes + by as usize
            }),
            ("maxItemBytes", |l, m, by| {
                l.max_item_bytes = m.max_item_bytes + by as usize
            }),
            ("maxRelatedItems", |l, m, by| {
                l.max_related_items = m.max_related_items + by as usize
            }),
            ("maxOperationIdBytes", |l, m, by| {
                l.max_operation_id_bytes = m.max_operation_id_bytes + by as usize
            }),
            ("maxMessageBytes", |l, m, by| {
                l.max_message_bytes = m.max_message_bytes + by as usize
            }),
            ("maxLogLines", |l, m, by| {
                l.max_log_lines = m.max_log_lines + by as usize
            }),
            ("maxStdioBytes", |l, m, by| {
                l.max_stdio_bytes = m.max_stdio_bytes + by as usize
            }),
            ("maxHostCalls", |l, m, by| {
                l.max_host_calls = m.max_host_calls + by as usize
            }),
            ("maxCreatesPerBackup", |l, m, by| {
                l.max_creates_per_backup = m.max_creates_per_backup + by as usize
            }),
            ("maxResources", |l, m, by| {
                l.max_resources = m.max_resources + by as usize
            }),
            ("maxReadyWait", |l, m, by| {
                l.max_ready_wait = m.max_ready_wait + Duration::from_millis(by.into())
            }),
            ("maxItemsPerRun", |l, m, by| {
                l.max_items_per_run = m.max_items_per_run + by as usize
            }),
            ("maxReadyWaitPerRun", |l, m, by| {
                l.max_ready_wait_per_run =
                    m.max_ready_wait_per_run + Duration::from_millis(by.into())
            }),
            ("maxErrorBytesPerRun", |l, m, by| {
                l.max_error_bytes_per_run = m.max_error_bytes_per_run + by as usize
            }),
        ];
        let keys = |v: serde_json::Value| -> Vec<String> {
            let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        let every_limit = Limits {
            wall_clock: Some(Duration::from_secs(1)),
            ..Limits::default()
        };
        let mut limits = keys(serde_json::to_value(every_limit).unwrap());
        limits.retain(|k| k != "isolation");
        let mut covered: Vec<String> = cases.iter().map(|(k, _)| k.to_string()).collect();
        covered.sort();
        assert_eq!(covered, limits, "a case per limit");
        let max = MaxLimits::default();
        assert_eq!(
            keys(serde_json::to_value(&max).unwrap()),
            limits,
            "a maximum per limit"
        );
        for (key, set) in cases {
            let mut at_cap = Limits::default();
            set(&mut at_cap, &max, 0);
            assert_eq!(
                max.exceeded(&at_cap),
                Vec::<String>::new(),
                "{key} at its cap"
            );
            let mut over = Limits::default();
            set(&mut over, &max, 1);
            let refused = max.exceeded(&over);
            assert_eq!(refused.len(), 1, "{key}: {refused:?}");
            assert!(
                refused[0].starts_with(&format!("limits.{key} ")),
                "{key}: {refused:?}"
            );
        }
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
        let doc = iar_core::yaml::manifests::<serde_json::Value>(text)
            .unwrap()
            .into_iter()
            .find(|d| d["kind"] == "ConfigMap")
            .expect("the policy ConfigMap");
        let policy = GrantPolicy::parse(doc["data"]["policy.yaml"].as_str().unwrap()).unwrap();
        assert_eq!(policy, GrantPolicy::default());
    }

    #[test]
    fn a_misspelt_policy_is_an_error_naming_it() {
        let err = |text| GrantPolicy::parse(text).unwrap_err().to_string();
        let e = err("maxLimits: {deadlines: 5s}");
        assert!(e.contains("deadlines"), "{e}");
        let e = err("readabel: [pods]");
        assert!(e.contains("readabel"), "{e}");
        let e = err("readable: ['[']");
        assert!(e.contains("not a glob"), "{e}");
        let e = err("isolation: [none]");
        assert!(e.contains("none"), "{e}");
    }
}
