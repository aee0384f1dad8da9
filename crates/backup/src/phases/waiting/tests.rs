//! The waiting phase alone: a backup waiting for its operations, on a
//! local store, polled with a stepped clock (an operation's timeout is
//! reached by advancing the clock, not by waiting).

use super::super::Step;
use super::super::test_support::{Parts, hostile};
use crate::backup::object::{BackupPhase, rfc3339};
use iar_core::item::ItemRef;
use iar_core::operations::{Operation, OperationPhase, OperationSpec, OperationsMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

fn operation(plugin: &str, id: &str, created: SystemTime) -> Operation {
    let spec = OperationSpec {
        backup_name: "b".into(),
        backup_uid: "uid-1".into(),
        backup_item_action: plugin.into(),
        resource_identifier: ItemRef::new("", "configmaps", "shop", "cm"),
        operation_id: id.into(),
        post_operation_items: Vec::new(),
    };
    Operation::new(spec, created)
}

/// The operations the store holds for `b`, as another process would read
/// them.
async fn stored_operations(parts: &Parts) -> Vec<Operation> {
    let fresh = OperationsMap::new();
    fresh.load("b", &parts.store).await.unwrap();
    fresh.get("b").await.unwrap()
}

/// An operation whose plugin is not in the backup's pinned set fails at
/// once, naming the rule; with nothing left pending the backup moves to
/// finalizing (partially failed) and asks to be stepped again at once.
#[tokio::test]
async fn an_operation_of_a_plugin_not_pinned_fails_and_the_backup_goes_on() {
    let parts = Parts::new();
    parts
        .put_object("b", BackupPhase::WaitingForPluginOperations)
        .await;
    let created = parts.now();
    parts
        .operations
        .insert_loaded("b", vec![operation("gone", "op-1", created)])
        .await;
    let mut run = parts.load("b").await;

    let step = parts.waiting().step(&mut run).await.unwrap();
    assert!(matches!(step, Step::Requeue(d) if d.is_zero()), "{step:?}");
    let stored = parts.stored("b").await;
    assert_eq!(stored.status.phase, BackupPhase::FinalizingPartiallyFailed);
    assert_eq!(
        (
            stored.status.backup_item_operations_attempted,
            stored.status.backup_item_operations_failed
        ),
        (1, 1)
    );
    let ops = stored_operations(&parts).await;
    assert_eq!(ops[0].status.phase, OperationPhase::Failed);
    assert!(
        ops[0].status.error.contains("(rule: pinned-plugin-set)"),
        "{}",
        ops[0].status.error
    );
    assert_eq!(ops[0].status.updated, Some(created), "stamped by the clock");
    let results = parts.results("b").await;
    let errors: Vec<&String> = results.errors.all().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("operation \"op-1\" of plugin \"gone\" on configmaps shop/cm:"),
        "{errors:?}"
    );
}

/// A waiting backup with no operation left pending finalizes, clean.
#[tokio::test]
async fn no_pending_operation_moves_the_backup_to_finalizing() {
    let parts = Parts::new();
    parts
        .put_object("b", BackupPhase::WaitingForPluginOperations)
        .await;
    let mut done = operation("p", "op-1", parts.now());
    done.status.phase = OperationPhase::Completed;
    parts.operations.insert_loaded("b", vec![done]).await;
    let mut run = parts.load("b").await;
    let step = parts.waiting().step(&mut run).await.unwrap();
    assert!(matches!(step, Step::Requeue(d) if d.is_zero()), "{step:?}");
    let stored = parts.stored("b").await;
    assert_eq!(stored.status.phase, BackupPhase::Finalizing);
    assert_eq!(stored.status.backup_item_operations_completed, 1);
    assert!(parts.results("b").await.errors.all().next().is_none());
}

/// An operation still running is polled once a period; its timeout is
/// counted from its creation on the clock: just short of it the operation
/// runs on, at it the plugin is asked to cancel and the operation fails
/// with the timeout, and the backup goes on to finalizing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_times_out_when_the_clock_passes_its_timeout() {
    let plugin = hostile();
    let name = plugin.name().to_string();
    let parts = Parts::with(Arc::new(iar_core::NoCluster), vec![plugin]);
    let timeout = parts.settings.operation_timeout;
    parts
        .put_object("b", BackupPhase::WaitingForPluginOperations)
        .await;
    let created = parts.now();
    parts
        .operations
        .insert_loaded("b", vec![operation(&name, "op-1", created)])
        .await;
    let mut run = parts.load("b").await;
    let waiting = parts.waiting();

    // The clock stands still while it polls: the whole period is left.
    let step = waiting.step(&mut run).await.unwrap();
    assert!(
        matches!(step, Step::Requeue(d) if d == parts.settings.sync_period),
        "{step:?}"
    );
    let ops = stored_operations(&parts).await;
    assert_eq!(ops[0].status.phase, OperationPhase::InProgress);
    assert_eq!(ops[0].status.description, "hostile operation op-1");

    parts.clock.advance(timeout - Duration::from_secs(1));
    let step = waiting.step(&mut run).await.unwrap();
    assert!(matches!(step, Step::Requeue(d) if !d.is_zero()), "{step:?}");
    assert_eq!(
        stored_operations(&parts).await[0].status.phase,
        OperationPhase::InProgress,
        "one second short of its timeout"
    );
    assert_eq!(
        parts.stored("b").await.status.phase,
        BackupPhase::WaitingForPluginOperations
    );

    parts.clock.advance(Duration::from_secs(1));
    let step = waiting.step(&mut run).await.unwrap();
    assert!(matches!(step, Step::Requeue(d) if d.is_zero()), "{step:?}");
    let op = &stored_operations(&parts).await[0];
    assert_eq!(op.status.phase, OperationPhase::Failed);
    assert_eq!(
        op.status.error,
        format!(
            "asynchronous action timed out after {} (created {}); cancel requested",
            humantime::format_duration(timeout),
            rfc3339(created)
        )
    );
    assert_eq!(op.status.updated, Some(created + timeout));
    assert_eq!(
        parts.stored("b").await.status.phase,
        BackupPhase::FinalizingPartiallyFailed
    );
    let log = parts.journal.lines("b");
    assert!(
        log.iter().any(|l| l.ends_with("cancel op-1")),
        "the plugin was asked to cancel: {log:#?}"
    );
}

/// A spec's `itemOperationTimeout` wins over the settings' default.
#[tokio::test]
async fn the_specs_operation_timeout_wins() {
    let parts = Parts::new();
    let mut object = parts
        .put_object("b", BackupPhase::WaitingForPluginOperations)
        .await;
    let run = super::super::record::Run {
        object: object.clone(),
        results: Default::default(),
    };
    assert_eq!(
        parts.waiting().timeout_for(&run),
        parts.settings.operation_timeout
    );
    object.spec = serde_json::json!({"itemOperationTimeout": "90m"});
    let run = super::super::record::Run {
        object,
        results: Default::default(),
    };
    assert_eq!(
        parts.waiting().timeout_for(&run),
        Duration::from_secs(90 * 60)
    );
}
