//! Prometheus metrics of this process, served by `iar controller` on
//! `/metrics`. One registry per process: the boundary, the loaders and the
//! controller all count into it without being handed it, as a scrape sees
//! the process as a whole.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub plugin: String,
    pub call: String,
    /// `ok`, or the rule the call broke (`cpu-deadline`, `plugin-error`, …).
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub plugin: String,
    pub call: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub plugin: String,
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    latency: Family<LatencyLabels, Histogram>,
    violations: Family<RuleLabels, Counter>,
    load_failures: Family<ReasonLabels, Counter>,
    operations: Family<PhaseLabels, Gauge>,
    backups: Family<PhaseLabels, Gauge>,
    cluster_requests: Counter,
    /// The last phase of each backup, by `namespace/name`, that
    /// `backups` counts: a phase change moves one backup between two
    /// counts.
    backup_phases: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

/// See [`Metrics::call_ok`]: the same series as `plugin_call` with `ok`.
#[derive(Clone, Debug)]
pub struct CallOk {
    count: Counter,
    latency: Histogram,
}

impl CallOk {
    pub fn record(&self, took: Duration) {
        self.count.inc();
        self.latency.observe(took.as_secs_f64());
    }
}

/// 50 µs to ~26 s: a plugin call is typically 0.1–1 ms, a deadline 10 s.
fn latency_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.000_05, 2.0, 20,
    ))
}

impl Metrics {
    /// A registry of its own; the process's is [`global`].
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("iar");
        let calls = Family::<CallLabels, Counter>::default();
        let latency = Family::<LatencyLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let violations = Family::<RuleLabels, Counter>::default();
        let load_failures = Family::<ReasonLabels, Counter>::default();
        let operations = Family::<PhaseLabels, Gauge>::default();
        let backups = Family::<PhaseLabels, Gauge>::default();
        registry.register(
            "plugin_calls",
            "Plugin calls by plugin, call and outcome (ok or the rule broken)",
            calls.clone(),
        );
        registry.register(
            "plugin_call_duration_seconds",
            "Wall time of plugin calls, boundary checks included",
            latency.clone(),
        );
        registry.register(
            "sandbox_violations",
            "Calls refused or stopped by a boundary rule, by plugin and rule",
            violations.clone(),
        );
        registry.register(
            "plugin_load_failures",
            "Plugins that could not be loaded, by reason",
            load_failures.clone(),
        );
        registry.register(
            "operations",
            "Asynchronous plugin operations tracked by this process, by phase",
            operations.clone(),
        );
        registry.register(
            "backups",
            "Backups this process has seen, by phase",
            backups.clone(),
        );
        let cluster_requests = Counter::default();
        registry.register(
            "cluster_requests",
            "Requests to the API server for backups: discovery, list pages, gets, plugin reads and writes",
            cluster_requests.clone(),
        );
        Metrics {
            registry,
            calls,
            latency,
            violations,
            load_failures,
            operations,
            backups,
            cluster_requests,
            backup_phases: Default::default(),
        }
    }

    /// The counter of a plugin's successful calls of one kind and their
    /// latency histogram, to keep: counting through them takes no lock on
    /// the families and builds no labels, which showed in a backup's
    /// profile (three label strings per call, twice).
    pub fn call_ok(&self, plugin: &str, call: &str) -> CallOk {
        CallOk {
            count: self
                .calls
                .get_or_create(&CallLabels {
                    plugin: plugin.into(),
                    call: call.into(),
                    outcome: "ok".into(),
                })
                .clone(),
            latency: self
                .latency
                .get_or_create(&LatencyLabels {
                    plugin: plugin.into(),
                    call: call.into(),
                })
                .clone(),
        }
    }

    pub fn plugin_call(&self, plugin: &str, call: &str, outcome: &str, took: Duration) {
        self.calls
            .get_or_create(&CallLabels {
                plugin: plugin.into(),
                call: call.into(),
                outcome: outcome.into(),
            })
            .inc();
        self.latency
            .get_or_create(&LatencyLabels {
                plugin: plugin.into(),
                call: call.into(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn violation(&self, plugin: &str, rule: &str) {
        self.violations
            .get_or_create(&RuleLabels {
                plugin: plugin.into(),
                rule: rule.into(),
            })
            .inc();
    }

    /// Counts `n` requests a live cluster made to the API server.
    pub fn cluster_requests(&self, n: u64) {
        self.cluster_requests.inc_by(n);
    }

    pub fn load_failure(&self, reason: &str) {
        self.load_failures
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }

    /// Adds `delta` to the count of operations in `phase` (negative when
    /// they leave it). The operations map calls this as its operations
    /// change, so a scrape reads the gauge and copies nothing.
    pub fn operations_in_phase(&self, phase: &str, delta: i64) {
        if delta != 0 {
            self.operations
                .get_or_create(&PhaseLabels {
                    phase: phase.to_string(),
                })
                .inc_by(delta);
        }
    }

    /// Records a backup's phase (`backup`: `namespace/name`); the
    /// `backups` gauge counts each backup in its latest phase, moved from
    /// its previous phase's count to the new one's (a phase left by every
    /// backup shows 0).
    pub fn backup_phase(&self, backup: &str, phase: &str) {
        let mut phases = self.backup_phases.lock().unwrap_or_else(|p| p.into_inner());
        let before = phases.insert(backup.to_string(), phase.to_string());
        if before.as_deref() != Some(phase) {
            self.move_backup(before.as_deref(), Some(phase));
        }
    }

    /// A backup garbage collection deleted is no longer counted.
    pub fn backup_deleted(&self, backup: &str) {
        let mut phases = self.backup_phases.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(before) = phases.remove(backup) {
            self.move_backup(Some(&before), None);
        }
    }

    fn move_backup(&self, from: Option<&str>, to: Option<&str>) {
        let gauge = |phase: &str| {
            self.backups.get_or_create(&PhaseLabels {
                phase: phase.to_string(),
            })
        };
        if let Some(from) = from {
            gauge(from).dec();
        }
        if let Some(to) = to {
            gauge(to).inc();
        }
    }

    /// The Prometheus text exposition (OpenMetrics) of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}
