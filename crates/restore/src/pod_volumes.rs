//! Pod volume data back into restored pods, as Velero's pod volume
//! restore does: a pod that had volumes backed up file by file is created
//! with an init container first, [`RESTORE_WAIT`], that waits until each
//! such volume holds `.velero/<restore uid>`; whoever runs the restore
//! then asks the node agent of the pod's node to write the volume's
//! snapshot into it and that file last ([`PodVolumeRestorer`]), and
//! waits for its end. Into a directory there is no pod to fill: each
//! volume is a warning naming the command that writes it out.

use crate::hooks::RESTORE_WAIT;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Where iar is in its image (deploy/Dockerfile: a scratch image, no
/// PATH).
pub const IAR_IN_IMAGE: &str = "/usr/local/bin/iar";

/// Where [`RESTORE_WAIT`] mounts each volume it waits for.
pub const WAIT_MOUNT_ROOT: &str = "/restores";

/// The file a volume's restore writes last, under the volume: what the
/// init container waits for (Velero's `.velero/<restore uid>`).
pub fn done_file(restore_uid: &str) -> String {
    format!(".velero/{restore_uid}")
}

/// A pod volume the backup holds, as its record in the store says (the
/// fields a restore needs of `iar_backup`'s record).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackedUpVolume {
    pub pod_namespace: String,
    pub pod_name: String,
    pub volume: String,
    pub phase: String,
}

/// One created pod's volumes to fill.
#[derive(Clone, Debug)]
pub struct PodVolumeJob {
    /// The restored pod: where it was created, and its name.
    pub namespace: String,
    pub pod: String,
    /// The backed-up pod: its namespace (whose repository holds the
    /// data) and name.
    pub source_namespace: String,
    pub source_pod: String,
    pub backup: String,
    pub restore_name: String,
    /// The pod's volumes, by name.
    pub volumes: Vec<String>,
}

/// How one pod's volume restores ended.
#[derive(Debug, Default)]
pub struct PodVolumeReport {
    pub completed: usize,
    pub failed: usize,
    pub log: Vec<String>,
    pub warnings: Vec<String>,
    pub errors: Vec<String>,
}

/// Fills a created pod's volumes (the cluster controller: a VolumeRestore
/// per volume, served by the node agent of the pod's node). Blocking: run
/// on a thread of its own, bounded by its own timeouts and `stop`.
pub trait PodVolumeRestorer: Send + Sync {
    fn restore(
        &self,
        restore_uid: &str,
        job: PodVolumeJob,
        stop: Option<Arc<AtomicBool>>,
    ) -> PodVolumeReport;
}

/// What a restore into a cluster needs for pod volumes.
#[derive(Clone)]
pub struct PodVolumes {
    pub restorer: Arc<dyn PodVolumeRestorer>,
    /// The image [`RESTORE_WAIT`] runs (iar's own: `iar restore-wait`).
    pub image: String,
}

/// The Completed volume backups of pod `ns/name` whose volume the pod
/// (as backed up, `pod`) still has, in the pod's order.
pub fn volumes_of(records: &[BackedUpVolume], ns: &str, name: &str, pod: &Value) -> Vec<String> {
    let listed: Vec<&str> = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .collect();
    listed
        .into_iter()
        .filter(|v| {
            records.iter().any(|r| {
                r.pod_namespace == ns
                    && r.pod_name == name
                    && r.volume == *v
                    && r.phase == "Completed"
            })
        })
        .map(str::to_string)
        .collect()
}

/// Takes out of `pod` a [`RESTORE_WAIT`] init container an earlier
/// restore gave it: it waits for that restore's data, which never comes.
pub fn remove_restore_wait(pod: &mut Value) {
    if let Some(Value::Array(init)) = pod.pointer_mut("/spec/initContainers") {
        init.retain(|c| c.get("name").and_then(Value::as_str) != Some(RESTORE_WAIT));
        if init.is_empty()
            && let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut)
        {
            spec.remove("initContainers");
        }
    }
}

/// Puts [`RESTORE_WAIT`] first among `pod`'s init containers (replacing
/// one of that name the backed-up pod had from an earlier restore), with
/// each of `volumes` mounted under [`WAIT_MOUNT_ROOT`]; it runs
/// `iar restore-wait <uid> <mount>...`, which ends once every volume holds
/// [`done_file`]. Velero's helper runs as the pod's first container too,
/// so that the pod's own containers and its restore hooks' init
/// containers see the data.
pub fn add_restore_wait(pod: &mut Value, volumes: &[String], restore_uid: &str, image: &str) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let mut command = vec![
        IAR_IN_IMAGE.to_string(),
        "restore-wait".to_string(),
        restore_uid.to_string(),
    ];
    let mounts: Vec<Value> = volumes
        .iter()
        .map(|v| {
            let path = format!("{WAIT_MOUNT_ROOT}/{v}");
            command.push(path.clone());
            json!({"name": v, "mountPath": path})
        })
        .collect();
    let wait = json!({
        "name": RESTORE_WAIT,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "volumeMounts": mounts,
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
        },
    });
    let mut all = vec![wait];
    if let Some(Value::Array(own)) = spec.remove("initContainers") {
        all.extend(
            own.into_iter()
                .filter(|c| c.get("name").and_then(Value::as_str) != Some(RESTORE_WAIT)),
        );
    }
    spec.insert("initContainers".into(), Value::Array(all));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pod: &str, volume: &str, phase: &str) -> BackedUpVolume {
        BackedUpVolume {
            pod_namespace: "shop".into(),
            pod_name: pod.into(),
            volume: volume.into(),
            phase: phase.into(),
        }
    }

    fn pod() -> Value {
        json!({"metadata": {"namespace": "shop", "name": "db-0"},
        "spec": {
            "volumes": [{"name": "data"}, {"name": "logs"}, {"name": "cache"}],
            "initContainers": [{"name": "restore-wait", "image": "old"}, {"name": "migrate"}],
            "containers": [{"name": "db"}],
        }})
    }

    /// Only Completed records of this pod's volumes, in the pod's order;
    /// a record of a volume the pod no longer has, another pod's, or a
    /// failed one brings no wait.
    #[test]
    fn the_volumes_to_fill_are_the_pods_completed_ones() {
        let records = [
            record("db-0", "logs", "Completed"),
            record("db-0", "data", "Completed"),
            record("db-0", "cache", "Failed"),
            record("db-0", "gone", "Completed"),
            record("db-1", "data", "Completed"),
        ];
        assert_eq!(
            volumes_of(&records, "shop", "db-0", &pod()),
            ["data", "logs"]
        );
        assert!(volumes_of(&[], "shop", "db-0", &pod()).is_empty());
        assert!(volumes_of(&records, "other", "db-0", &pod()).is_empty());
    }

    /// The wait goes first, once (an earlier restore's is replaced), with
    /// each volume mounted where its command looks.
    #[test]
    fn the_wait_goes_first_with_each_volume_mounted() {
        let mut p = pod();
        add_restore_wait(&mut p, &["data".into(), "logs".into()], "uid-1", "iar:1");
        let init = p["spec"]["initContainers"].as_array().unwrap();
        let names: Vec<_> = init.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["restore-wait", "migrate"]);
        assert_eq!(init[0]["image"], "iar:1");
        assert_eq!(
            init[0]["command"],
            json!([
                "/usr/local/bin/iar",
                "restore-wait",
                "uid-1",
                "/restores/data",
                "/restores/logs"
            ])
        );
        assert_eq!(
            init[0]["volumeMounts"],
            json!([{"name": "data", "mountPath": "/restores/data"},
                   {"name": "logs", "mountPath": "/restores/logs"}])
        );
        assert_eq!(done_file("uid-1"), ".velero/uid-1");
        // Restored again with nothing to fill: an old wait goes.
        remove_restore_wait(&mut p);
        let names: Vec<_> = p["spec"]["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["migrate"]);
    }
}
