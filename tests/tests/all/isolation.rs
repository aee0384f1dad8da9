//! Isolation: how far a guest's global state reaches. The hostile guest's
//! `remember` behaviour keeps the previous item's name in a global and
//! writes it into the next item's output, so a leak shows in the output.

use crate::support::*;
use iar::{BackupRef, Isolation, Limits, NoCluster, Phase, PluginInstance};
use std::sync::Arc;
use std::time::Instant;

const PREVIOUS: &str = "hostile.iar.test/previous";

fn remembering(isolation: Isolation) -> PluginInstance {
    let runtime = runtime();
    let limits = Limits {
        isolation,
        ..Limits::default()
    };
    load_with(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", "remember")],
        limits,
    )
    .instance(Arc::new(NoCluster))
}

/// What the guest remembered from before this item: `""` when nothing.
fn leaked(instance: &mut PluginInstance, name: &str, backup: &BackupRef) -> String {
    let out = instance
        .execute(&pod(name), backup, &never_seen)
        .expect("remember runs");
    let item = out.item.expect("remember annotates the item").into_value();
    item["metadata"]["annotations"][PREVIOUS]
        .as_str()
        .expect("the annotation")
        .to_string()
}

fn other_backup() -> BackupRef {
    BackupRef {
        object: None,
        name: "weekly".into(),
        uid: "99999999-2222-3333-4444-555555555555".into(),
        ..backup(Phase::Backup)
    }
}

/// `isolation: item`: every call gets a fresh instance, so nothing one item
/// leaves in the guest reaches the next item, even in the same backup.
#[test]
fn item_isolation_stops_state_crossing_items() {
    let mut instance = remembering(Isolation::Item);
    let nightly = backup(Phase::Backup);
    assert_eq!(leaked(&mut instance, "web-0", &nightly), "");
    assert_eq!(leaked(&mut instance, "web-1", &nightly), "");
    assert_eq!(leaked(&mut instance, "web-2", &other_backup()), "");
    assert_eq!(instance.instantiations(), 3);
}

/// `isolation: backup` (the default): calls of one backup pass share the
/// instance, so state does cross items within the pass (documented; pick
/// `item` for plugins that handle Secrets), but a call for another backup,
/// or for the finalize pass of the same one, gets a fresh instance.
#[test]
fn backup_isolation_shares_a_pass_but_never_crosses_backups() {
    assert_eq!(Limits::default().isolation, Isolation::Backup);
    let mut instance = remembering(Isolation::Backup);
    let nightly = backup(Phase::Backup);
    assert_eq!(leaked(&mut instance, "web-0", &nightly), "");
    assert_eq!(
        leaked(&mut instance, "web-1", &nightly),
        "web-0",
        "within one pass the instance, and its globals, are shared"
    );
    assert_eq!(instance.instantiations(), 1);

    // The same PluginInstance reused for another backup: fresh.
    assert_eq!(leaked(&mut instance, "web-2", &other_backup()), "");
    assert_eq!(instance.instantiations(), 2);

    // Back to the first backup, finalize pass: fresh again.
    assert_eq!(leaked(&mut instance, "web-3", &backup(Phase::Finalize)), "");
    assert_eq!(instance.instantiations(), 3);
}

/// What isolation costs: executes per second with a fresh instance per item
/// against one instance reused. Run on a quiet machine with
/// `cargo test -p iar-tests --release --test all -- --ignored --nocapture isolation::isolation_cost`.
#[test]
#[ignore = "a measurement, not a check; run on a quiet machine"]
fn isolation_cost() {
    let runtime = runtime();
    let items: Vec<_> = (0..500).map(|i| pod(&format!("web-{i}"))).collect();
    let nightly = backup(Phase::Backup);
    for isolation in [Isolation::Backup, Isolation::Item] {
        let limits = Limits {
            isolation,
            ..Limits::default()
        };
        let labels = load_with(
            &runtime,
            artifacts::LABELS,
            &[("labels", "backed-up-by=iar")],
            limits,
        );
        let mut instance = labels.instance(Arc::new(NoCluster));
        // Warm up: the first instantiation and the code's first run.
        for item in items.iter().take(20) {
            instance.execute(item, &nightly, &never_seen).unwrap();
        }
        let started = Instant::now();
        for item in &items {
            instance.execute(item, &nightly, &never_seen).unwrap();
        }
        let per_item = started.elapsed() / items.len() as u32;
        println!(
            "isolation {isolation:?}: {per_item:?} per item ({} instantiations)",
            instance.instantiations()
        );
    }
}
