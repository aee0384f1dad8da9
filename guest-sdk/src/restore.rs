//! Restore actions (contract 1.3.0, Velero's RestoreItemAction v2): what
//! a restore passes in, what a restore action returns, and the glue to the
//! generated `restore-item-action` export.

use crate::bindings::iar::plugin::types;
use crate::bindings_v1_3_restore::exports::iar::plugin::restore_item_action as wit;
use crate::{Error, Item, Progress, ResourceId, Result, Selector};
use serde_json::Value;
use std::marker::PhantomData;
use std::time::Duration;

/// The restore a call belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct Restore {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The Restore object's `spec` (`backupName`, `namespaceMapping`, ...).
    pub spec: Value,
}

impl Restore {
    /// The backup this restore restores (`spec.backupName`).
    pub fn backup_name(&self) -> &str {
        self.spec
            .get("backupName")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

impl From<wit::Restore> for Restore {
    fn from(r: wit::Restore) -> Self {
        Restore {
            name: r.name,
            namespace: r.namespace,
            uid: r.uid,
            spec: serde_json::from_str(&r.spec).unwrap_or(Value::Null),
        }
    }
}

/// What a restore action's `execute` is given.
#[derive(Debug)]
pub struct RestoreInput {
    /// The item as it will be created, without status, with the changes of
    /// the restore actions that ran before; still in its backed-up
    /// namespace, as Velero hands it over (the mapping comes after).
    pub item: Item,
    /// The item as it was backed up.
    pub item_from_backup: Item,
    pub restore: Restore,
}

/// What a restore action's `execute` returns.
#[derive(Clone, Debug, Default)]
pub struct RestoreOutput {
    /// `None` creates the input item as it is.
    pub item: Option<Item>,
    /// Objects to restore before this one.
    pub additional_items: Vec<ResourceId>,
    /// Do not create this item.
    pub skip_restore: bool,
    pub operation_id: Option<String>,
    /// Wait for [`RestoreItemAction::are_additional_items_ready`] before
    /// creating the item.
    pub wait_for_additional_items: bool,
    /// How long to wait; `None` is the restore tool's default.
    pub additional_items_ready_timeout: Option<Duration>,
}

impl RestoreOutput {
    /// Create the item as it came in.
    pub fn unchanged() -> Self {
        Self::default()
    }

    /// Create this (changed) item.
    pub fn item(item: Item) -> Self {
        RestoreOutput {
            item: Some(item),
            ..Self::default()
        }
    }

    /// Do not restore the item.
    pub fn skip() -> Self {
        RestoreOutput {
            skip_restore: true,
            ..Self::default()
        }
    }

    /// Restore these objects first.
    pub fn with_additional_items(mut self, ids: impl IntoIterator<Item = ResourceId>) -> Self {
        self.additional_items.extend(ids);
        self
    }

    /// And wait until they are ready (at most `timeout`, `None` for the
    /// restore tool's default) before creating this item.
    pub fn waiting_for_them(mut self, timeout: Option<Duration>) -> Self {
        self.wait_for_additional_items = true;
        self.additional_items_ready_timeout = timeout;
        self
    }

    /// This call started an asynchronous operation.
    pub fn with_operation(mut self, operation_id: impl Into<String>) -> Self {
        self.operation_id = Some(operation_id.into());
        self
    }
}

impl From<RestoreOutput> for wit::RestoreOutput {
    fn from(o: RestoreOutput) -> Self {
        wit::RestoreOutput {
            item: o.item.map(Item::into_text),
            additional_items: o.additional_items,
            skip_restore: o.skip_restore,
            operation_id: o.operation_id,
            wait_for_additional_items: o.wait_for_additional_items,
            additional_items_ready_timeout_ms: o
                .additional_items_ready_timeout
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// A restore action (contract 1.3.0): called for each item of a restore
/// that its selector matches, before the item is created.
pub trait RestoreItemAction {
    /// Which items of a restore this action is called for. Called once when
    /// the plugin is loaded.
    fn applies_to() -> Result<Selector>;

    /// Runs the action on one item of a restore.
    fn execute(input: RestoreInput) -> Result<RestoreOutput>;

    /// Progress of an operation this plugin started (possibly on a fresh
    /// instance: derive it from the id and the cluster).
    fn progress(operation_id: &str, _restore: &Restore) -> Result<Progress> {
        Err(Error::UnknownOperation(format!(
            "this plugin starts no restore operations (asked for {operation_id:?})"
        )))
    }

    /// Stops an operation this plugin started. Called once, on timeout.
    fn cancel(operation_id: &str, _restore: &Restore) -> Result<()> {
        Err(Error::UnknownOperation(format!(
            "this plugin starts no restore operations (asked to cancel {operation_id:?})"
        )))
    }

    /// Whether the additional items an `execute` asked to wait for are
    /// ready. The default says yes: nothing to wait for.
    fn are_additional_items_ready(_items: Vec<ResourceId>, _restore: &Restore) -> Result<bool> {
        Ok(true)
    }
}

/// Implements the 1.3.0 restore-item-action export trait for any
/// [`RestoreItemAction`]; used by [`crate::export_plugin!`].
pub struct ExportedRestore<T>(PhantomData<T>);

impl<T: RestoreItemAction> wit::Guest for ExportedRestore<T> {
    fn applies_to() -> std::result::Result<types::ResourceSelector, types::ActionError> {
        T::applies_to().map(Into::into).map_err(Into::into)
    }

    fn execute(
        input: wit::RestoreInput,
    ) -> std::result::Result<wit::RestoreOutput, types::ActionError> {
        let item = Item::parse(input.item).map_err(Error::Failed)?;
        let item_from_backup = Item::parse(input.item_from_backup).map_err(Error::Failed)?;
        T::execute(RestoreInput {
            item,
            item_from_backup,
            restore: input.restore.into(),
        })
        .map(Into::into)
        .map_err(Into::into)
    }

    fn progress(
        operation_id: String,
        restore: wit::Restore,
    ) -> std::result::Result<types::OperationProgress, types::ActionError> {
        T::progress(&operation_id, &restore.into())
            .map(Into::into)
            .map_err(Into::into)
    }

    fn cancel(
        operation_id: String,
        restore: wit::Restore,
    ) -> std::result::Result<(), types::ActionError> {
        T::cancel(&operation_id, &restore.into()).map_err(Into::into)
    }

    fn are_additional_items_ready(
        additional_items: Vec<types::ResourceIdentifier>,
        restore: wit::Restore,
    ) -> std::result::Result<bool, types::ActionError> {
        T::are_additional_items_ready(additional_items, &restore.into()).map_err(Into::into)
    }
}
