//! Which of a pod's volumes get a file-system backup, a snapshot, or
//! nothing, decided per volume in Velero's order: a matching volume policy
//! from the backup's resource policy wins; otherwise the pod's opt-in
//! (`backup.velero.io/backup-volumes`) or opt-out
//! (`backup.velero.io/backup-volumes-excludes`) annotation against the
//! backup's `defaultVolumesToFsBackup`. Never the default flag alone: with
//! the default off, a volume that opts in is still backed up, and whoever
//! waits for the pod's volumes must wait for it.
//!
//! The policy format is Velero's (`internal/resourcepolicies`):
//!
//! ```yaml
//! version: v1
//! volumePolicies:
//! - conditions:
//!     capacity: "0,100Gi"          # inclusive; an empty or zero upper bound is unbounded
//!     storageClass: [gp3]
//!     csi: {driver: ebs.csi.aws.com, volumeAttributes: {type: io2}}
//!     nfs: {server: 10.0.0.1, path: /export}   # `nfs: {}` matches any NFS volume
//!     volumeTypes: [emptyDir, nfs]
//!     pvcLabels: {tier: db}
//!   action: {type: fs-backup}      # fs-backup | snapshot | skip
//! ```
//!
//! The first policy whose conditions all hold wins.

use iar_core::item::Item;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

pub const OPT_IN: &str = "backup.velero.io/backup-volumes";
pub const OPT_OUT: &str = "backup.velero.io/backup-volumes-excludes";

/// What happens to one volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeAction {
    FsBackup,
    Snapshot,
    Skip,
}

/// Which rule decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `volumePolicies[index]` matched.
    Policy(usize),
    /// A volume type fs-backup never reads (hostPath, secret, ...).
    UnsupportedType,
    /// Listed in the opt-in annotation.
    OptIn,
    /// Listed in the opt-out annotation.
    OptOut,
    /// `defaultVolumesToFsBackup: true` and not opted out.
    DefaultOn,
    /// `defaultVolumesToFsBackup` off and not opted in.
    DefaultOff,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeDecision {
    pub volume: String,
    /// The claim, for a PVC volume.
    pub pvc: Option<String>,
    pub action: VolumeAction,
    pub rule: Rule,
    /// Why, in words, for results and logs.
    pub reason: String,
}

/// A resource policy that does not parse or validate; names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("resource policy: {field}: {reason}")]
pub struct PolicyError {
    pub field: String,
    pub reason: String,
}

fn perr(field: impl Into<String>, reason: impl Into<String>) -> PolicyError {
    PolicyError {
        field: field.into(),
        reason: reason.into(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicies {
    version: String,
    #[serde(default, rename = "volumePolicies")]
    volume_policies: Vec<RawPolicy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    conditions: RawConditions,
    action: RawAction,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAction {
    #[serde(rename = "type")]
    kind: String,
    // Velero's action has free-form parameters; none of iar's actions use them.
    #[serde(default)]
    #[allow(dead_code)]
    parameters: Option<serde::de::IgnoredAny>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConditions {
    capacity: Option<String>,
    storage_class: Option<Vec<String>>,
    csi: Option<CsiCondition>,
    nfs: Option<NfsCondition>,
    volume_types: Option<Vec<String>>,
    pvc_labels: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CsiCondition {
    #[serde(default)]
    pub driver: String,
    #[serde(default)]
    pub volume_attributes: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NfsCondition {
    #[serde(default)]
    pub server: String,
    #[serde(default)]
    pub path: String,
}

/// An inclusive byte range; `None` upper is unbounded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    pub lower: f64,
    pub upper: Option<f64>,
}

impl Capacity {
    /// Velero's `"lower,upper"`: either side may be empty; an upper bound of
    /// zero means unbounded, as in Velero.
    pub fn parse(s: &str) -> Result<Capacity, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [lower, upper] = parts[..] else {
            return Err(format!("{s:?}: want \"lower,upper\", e.g. \"0,100Gi\""));
        };
        let q = |p: &str| {
            if p.is_empty() {
                Ok(0.0)
            } else {
                parse_quantity(p)
            }
        };
        let (lower, upper) = (q(lower)?, q(upper)?);
        let upper = (upper != 0.0).then_some(upper);
        if let Some(u) = upper
            && u < lower
        {
            return Err(format!("{s:?}: upper bound below lower bound"));
        }
        Ok(Capacity { lower, upper })
    }

    pub fn contains(&self, bytes: f64) -> bool {
        bytes >= self.lower && self.upper.is_none_or(|u| bytes <= u)
    }
}

/// A Kubernetes resource quantity in bytes: "100Gi", "1.5G", "512", "1e3".
pub fn parse_quantity(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a quantity"))?;
    let mult = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| format!("{s:?}: bad exponent"))?;
            10f64.powi(exp)
        }
        u => return Err(format!("{s:?}: unknown suffix {u:?}")),
    };
    if n < 0.0 {
        return Err(format!("{s:?} is negative"));
    }
    Ok(n * mult)
}

/// One validated volume policy.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumePolicy {
    pub capacity: Option<Capacity>,
    pub storage_class: Option<Vec<String>>,
    pub csi: Option<CsiCondition>,
    pub nfs: Option<NfsCondition>,
    pub volume_types: Option<Vec<String>>,
    pub pvc_labels: Option<BTreeMap<String, String>>,
    pub action: VolumeAction,
}

/// A backup's resource policy (its volume policies).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourcePolicies {
    pub volume_policies: Vec<VolumePolicy>,
}

impl ResourcePolicies {
    /// From the YAML Velero keeps in the policy ConfigMap.
    pub fn parse(yaml: &str) -> Result<Self, PolicyError> {
        let raw: RawPolicies =
            iar_core::yaml::from_str(yaml).map_err(|e| perr("document", e.to_string()))?;
        if raw.version != "v1" {
            return Err(perr(
                "version",
                format!("{:?} is not supported; want \"v1\"", raw.version),
            ));
        }
        let mut volume_policies = Vec::new();
        for (i, p) in raw.volume_policies.into_iter().enumerate() {
            let at = |f: &str| format!("volumePolicies[{i}].{f}");
            let action = match p.action.kind.as_str() {
                "fs-backup" => VolumeAction::FsBackup,
                "snapshot" => VolumeAction::Snapshot,
                "skip" => VolumeAction::Skip,
                other => {
                    return Err(perr(
                        at("action.type"),
                        format!("{other:?} is not one of fs-backup, snapshot, skip"),
                    ));
                }
            };
            let c = p.conditions;
            let capacity = c
                .capacity
                .as_deref()
                .map(Capacity::parse)
                .transpose()
                .map_err(|e| perr(at("conditions.capacity"), e))?;
            volume_policies.push(VolumePolicy {
                capacity,
                storage_class: c.storage_class,
                csi: c.csi,
                nfs: c.nfs,
                volume_types: c.volume_types,
                pvc_labels: c.pvc_labels,
                action,
            });
        }
        Ok(ResourcePolicies { volume_policies })
    }

    /// The first policy whose conditions all hold, with its index.
    pub fn first_match(&self, v: &VolumeFacts) -> Option<(usize, VolumeAction)> {
        self.volume_policies
            .iter()
            .position(|p| p.matches(v))
            .map(|i| (i, self.volume_policies[i].action))
    }
}

impl VolumePolicy {
    fn matches(&self, v: &VolumeFacts) -> bool {
        // A pod volume that is not backed by a PV has no size; Velero then
        // does not match a capacity condition (there is nothing to compare).
        if let Some(c) = &self.capacity
            && !v.capacity.is_some_and(|b| c.contains(b))
        {
            return false;
        }
        if let Some(classes) = &self.storage_class
            && !v
                .storage_class
                .as_ref()
                .is_some_and(|s| classes.contains(s))
        {
            return false;
        }
        if let Some(want) = &self.csi {
            let Some((driver, attrs)) = &v.csi else {
                return false;
            };
            if !want.driver.is_empty() && &want.driver != driver {
                return false;
            }
            if !want
                .volume_attributes
                .iter()
                .all(|(k, val)| attrs.get(k) == Some(val))
            {
                return false;
            }
        }
        if let Some(want) = &self.nfs {
            let Some((server, path)) = &v.nfs else {
                return false;
            };
            if (!want.server.is_empty() && &want.server != server)
                || (!want.path.is_empty() && &want.path != path)
            {
                return false;
            }
        }
        if let Some(types) = &self.volume_types
            && !types.iter().any(|t| t.eq_ignore_ascii_case(&v.volume_type))
        {
            return false;
        }
        if let Some(labels) = &self.pvc_labels
            && !labels
                .iter()
                .all(|(k, val)| v.pvc_labels.get(k) == Some(val))
        {
            return false;
        }
        true
    }
}

/// What a policy can see of one volume: the PV's source when the volume is
/// a bound PVC, the pod volume's own source otherwise.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeFacts {
    pub name: String,
    pub pvc: Option<String>,
    /// The volume source's key: "persistentVolumeClaim" (unbound), "csi",
    /// "nfs", "emptyDir", "hostPath", "configMap", ...
    pub volume_type: String,
    pub capacity: Option<f64>,
    pub storage_class: Option<String>,
    pub csi: Option<(String, BTreeMap<String, String>)>,
    pub nfs: Option<(String, String)>,
    pub pvc_labels: BTreeMap<String, String>,
}

/// Volume source keys of a pod volume or PV spec: everything but the
/// fields that are not sources.
fn source_type(spec: &Value) -> String {
    const NOT_SOURCES: &[&str] = &[
        "name",
        "capacity",
        "accessModes",
        "claimRef",
        "persistentVolumeReclaimPolicy",
        "storageClassName",
        "mountOptions",
        "volumeMode",
        "nodeAffinity",
        "volumeAttributesClassName",
    ];
    spec.as_object()
        .and_then(|m| m.keys().find(|k| !NOT_SOURCES.contains(&k.as_str())))
        .cloned()
        .unwrap_or_default()
}

fn strings(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn csi_of(v: &Value) -> Option<(String, BTreeMap<String, String>)> {
    let csi = v.get("csi")?;
    Some((
        csi.get("driver")?.as_str()?.to_string(),
        strings(csi.get("volumeAttributes")),
    ))
}

fn nfs_of(v: &Value) -> Option<(String, String)> {
    let nfs = v.get("nfs")?;
    let s = |k: &str| nfs.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some((s("server"), s("path")))
}

/// A PVC volume's claim and bound PV, as the block holds them.
#[derive(Clone, Debug, Default)]
pub struct Claim {
    pub pvc: Option<Value>,
    pub pv: Option<Value>,
}

/// The facts of one pod volume (`volume` is an element of `spec.volumes`).
pub fn volume_facts(volume: &Value, claim: &Claim) -> VolumeFacts {
    let name = volume
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let pvc = volume
        .pointer("/persistentVolumeClaim/claimName")
        .and_then(Value::as_str)
        .map(String::from);
    let mut facts = VolumeFacts {
        name,
        pvc: pvc.clone(),
        volume_type: source_type(volume),
        csi: csi_of(volume),
        nfs: nfs_of(volume),
        ..VolumeFacts::default()
    };
    if pvc.is_some() {
        if let Some(pvc) = &claim.pvc {
            facts.pvc_labels = strings(pvc.pointer("/metadata/labels"));
            facts.storage_class = pvc
                .pointer("/spec/storageClassName")
                .and_then(Value::as_str)
                .map(String::from);
        }
        if let Some(pv) = claim.pv.as_ref().and_then(|pv| pv.get("spec")) {
            facts.volume_type = source_type(pv);
            facts.csi = csi_of(pv);
            facts.nfs = nfs_of(pv);
            facts.capacity = pv
                .pointer("/capacity/storage")
                .and_then(Value::as_str)
                .and_then(|q| parse_quantity(q).ok());
            if let Some(sc) = pv.get("storageClassName").and_then(Value::as_str) {
                facts.storage_class = Some(sc.to_string());
            }
        }
    }
    facts
}

/// Why fs-backup can never read this volume, if it cannot: the types
/// Velero always skips (their content comes from the API, or is the
/// node's), and the default service-account token.
pub fn unsupported_for_fs_backup(facts: &VolumeFacts) -> Option<String> {
    const SKIPPED: &[&str] = &[
        "hostPath",
        "secret",
        "configMap",
        "projected",
        "downwardAPI",
    ];
    if let Some(t) = SKIPPED
        .iter()
        .find(|t| t.eq_ignore_ascii_case(&facts.volume_type))
    {
        return Some(format!(
            "{t} volumes are never backed up from the file system"
        ));
    }
    if facts.name.starts_with("default-token-") {
        return Some("the default service-account token is never backed up".into());
    }
    None
}

fn annotation_list(pod: &Item, key: &str) -> Vec<String> {
    pod.value()
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Decides every volume of `pod`, in `spec.volumes` order. `claim` gives a
/// PVC volume's claim and PV by claim name (from the pod's block).
pub fn decide_pod_volumes(
    pod: &Item,
    claim: &dyn Fn(&str) -> Claim,
    policies: Option<&ResourcePolicies>,
    default_volumes_to_fs_backup: bool,
) -> Vec<VolumeDecision> {
    let opt_in = annotation_list(pod, OPT_IN);
    let opt_out = annotation_list(pod, OPT_OUT);
    let volumes = pod
        .value()
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    volumes
        .iter()
        .map(|volume| {
            let pvc = volume
                .pointer("/persistentVolumeClaim/claimName")
                .and_then(Value::as_str);
            let c = pvc.map(claim).unwrap_or_default();
            let facts = volume_facts(volume, &c);
            decide(
                &facts,
                policies,
                &opt_in,
                &opt_out,
                default_volumes_to_fs_backup,
            )
        })
        .collect()
}

/// One volume's decision. Pure: the table tests call it directly.
pub fn decide(
    facts: &VolumeFacts,
    policies: Option<&ResourcePolicies>,
    opt_in: &[String],
    opt_out: &[String],
    default_volumes_to_fs_backup: bool,
) -> VolumeDecision {
    let decision = |action, rule, reason: String| VolumeDecision {
        volume: facts.name.clone(),
        pvc: facts.pvc.clone(),
        action,
        rule,
        reason,
    };
    // Without an fs-backup, a PVC is left to the snapshotters; any other
    // volume is simply not backed up.
    let not_fs = |rule: Rule, why: String| {
        if facts.pvc.is_some() {
            decision(
                VolumeAction::Snapshot,
                rule,
                format!("{why}; left to volume snapshots"),
            )
        } else {
            decision(VolumeAction::Skip, rule, why)
        }
    };
    let unsupported = unsupported_for_fs_backup(facts);
    if let Some((i, action)) = policies.and_then(|p| p.first_match(facts)) {
        let rule = Rule::Policy(i);
        let by = format!("volume policy volumePolicies[{i}] matched");
        return match action {
            VolumeAction::Skip => decision(VolumeAction::Skip, rule, format!("{by}: skip")),
            VolumeAction::Snapshot if facts.pvc.is_some() => {
                decision(VolumeAction::Snapshot, rule, format!("{by}: snapshot"))
            }
            VolumeAction::Snapshot => decision(
                VolumeAction::Skip,
                rule,
                format!("{by}: snapshot, but only a PVC can be snapshotted"),
            ),
            VolumeAction::FsBackup => match unsupported {
                Some(why) => decision(
                    VolumeAction::Skip,
                    rule,
                    format!("{by}: fs-backup, but {why}"),
                ),
                None => decision(VolumeAction::FsBackup, rule, format!("{by}: fs-backup")),
            },
        };
    }
    if let Some(why) = unsupported {
        return decision(VolumeAction::Skip, Rule::UnsupportedType, why);
    }
    let listed = |list: &[String]| list.iter().any(|v| v == &facts.name);
    if default_volumes_to_fs_backup {
        if listed(opt_out) {
            return not_fs(Rule::OptOut, format!("opted out by {OPT_OUT}"));
        }
        decision(
            VolumeAction::FsBackup,
            Rule::DefaultOn,
            "defaultVolumesToFsBackup is true".into(),
        )
    } else if listed(opt_in) {
        decision(
            VolumeAction::FsBackup,
            Rule::OptIn,
            format!("opted in by {OPT_IN}"),
        )
    } else {
        not_fs(
            Rule::DefaultOff,
            format!("defaultVolumesToFsBackup is false and not opted in by {OPT_IN}"),
        )
    }
}

/// The backup spec's `defaultVolumesToFsBackup` (false when absent).
pub fn default_volumes_to_fs_backup(spec: &Value) -> bool {
    spec.get("defaultVolumesToFsBackup")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests;
