//! The gRPC services a Velero plugin process serves: Velero's plugin lister,
//! BackupItemAction v2, ItemBlockAction v1, RestoreItemAction v2 (in
//! `restore`), and go-plugin's controller. Every call into wasm
//! runs on a blocking thread, never on the runtime's.

use super::actions::{ActionSet, Refusal};
use super::proto::generated::{
    self, Empty, ListPluginsResponse, OperationProgress, PluginIdentifier, ResourceIdentifier,
};
use super::proto::{plugin as goplugin, v1, v2};
use iar_core::item::ItemRef;
use iar_plugin::contract::Interface;
use iar_plugin::plugin::{ActionError, Progress, Violation};
use std::sync::Arc;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

/// Velero's plugin kinds (pkg/plugin/framework/common): a BackupItemAction
/// v2 and an ItemBlockAction (Velero 1.15 and later).
pub const KIND_BACKUP_ITEM_ACTION_V2: &str = "BackupItemActionV2";
pub const KIND_ITEM_BLOCK_ACTION: &str = "ItemBlockAction";
/// And a RestoreItemAction v2 (Velero 1.11 and later).
pub const KIND_RESTORE_ITEM_ACTION_V2: &str = "RestoreItemActionV2";

/// The kind Velero knows a contract interface by.
fn kind(interface: Interface) -> &'static str {
    match interface {
        Interface::ItemAction => KIND_BACKUP_ITEM_ACTION_V2,
        Interface::ItemBlockAction => KIND_ITEM_BLOCK_ACTION,
        Interface::RestoreItemAction => KIND_RESTORE_ITEM_ACTION_V2,
    }
}

/// The gRPC status of a refusal. The message is the whole sentence (plugin,
/// item, rule); Velero logs it for the item and goes on with the backup.
fn status(refusal: Refusal) -> Status {
    match refusal {
        Refusal::BadRequest(m) => Status::invalid_argument(m),
        Refusal::UnknownAction(m) => Status::not_found(m),
        Refusal::Load(m) => Status::failed_precondition(m),
        Refusal::Call(e) => {
            let message = e.to_string();
            match e.violation {
                Violation::Deadline(_) | Violation::WallClock(_) => {
                    Status::deadline_exceeded(message)
                }
                Violation::MemoryCap { .. }
                | Violation::HostCalls { .. }
                | Violation::ResourceTable { .. }
                | Violation::OutputTooLarge { .. }
                | Violation::LiftBudget { .. } => Status::resource_exhausted(message),
                // Velero's own plugins answer their errors with Unknown.
                _ => Status::unknown(message),
            }
        }
    }
}

mod restore;
pub use restore::RestoreItemAction;

fn selector(s: iar_core::select::ResourceSelector) -> generated::ResourceSelector {
    generated::ResourceSelector {
        included_namespaces: s.included_namespaces,
        excluded_namespaces: s.excluded_namespaces,
        included_resources: s.included_resources,
        excluded_resources: s.excluded_resources,
        selector: s.label_selector,
    }
}

/// A transient failure is not the end of an operation: Velero fails an
/// operation whose Progress returns an error, so a retryable one is
/// reported as still running, and Velero asks again until its operation
/// timeout.
fn retrying_is_running(answer: Result<Progress, Refusal>) -> Result<Progress, Refusal> {
    match answer {
        Err(Refusal::Call(e)) => match &e.violation {
            Violation::Action(ActionError::Retryable(why)) => Ok(Progress {
                description: format!("retrying: {why}"),
                ..Progress::default()
            }),
            _ => Err(Refusal::Call(e)),
        },
        other => other,
    }
}

/// Runs a call into wasm on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("the plugin call's thread ended: {e}")))?
        .map_err(status)
}

fn identifier(id: ItemRef) -> ResourceIdentifier {
    let id = id.into_fields();
    ResourceIdentifier {
        group: id.group,
        resource: id.resource,
        namespace: id.namespace,
        name: id.name,
    }
}

/// Go's zero `time.Time` as protobuf's `timestamppb.New` writes it
/// (0001-01-01T00:00:00Z): what Velero's own Go plugins send for a time
/// they do not know, and what its operations controller skips. An absent
/// timestamp would read as the Unix epoch (`velero backup describe`:
/// "Updated: 1970-01-01").
const GO_ZERO_TIME: prost_types::Timestamp = prost_types::Timestamp {
    seconds: -62_135_596_800,
    nanos: 0,
};

fn operation_progress(p: Progress) -> OperationProgress {
    OperationProgress {
        completed: p.completed,
        err: p.error.unwrap_or_default(),
        n_completed: p.n_completed,
        n_total: p.n_total,
        operation_units: p.operation_units,
        description: p.description,
        started: Some(p.started.map_or(GO_ZERO_TIME, Into::into)),
        updated: Some(p.updated.map_or(GO_ZERO_TIME, Into::into)),
    }
}

/// Velero's plugin lister: what this binary serves.
pub struct Lister {
    pub actions: Arc<ActionSet>,
    /// The path Velero started this binary by; Velero starts it again by
    /// this path to dispense an action.
    pub command: String,
}

#[tonic::async_trait]
impl generated::plugin_lister_server::PluginLister for Lister {
    async fn list_plugins(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<ListPluginsResponse>, Status> {
        // Each action under the kinds its plugin exports, and no other: a
        // block-only plugin listed as a BackupItemAction would be called
        // on every item and fail each one.
        let actions = self.actions.clone();
        let listed = tokio::task::spawn_blocking(move || actions.listed())
            .await
            .map_err(|e| Status::internal(format!("listing the plugins: {e}")))?;
        let plugins = listed
            .into_iter()
            .map(|(name, interface)| PluginIdentifier {
                command: self.command.clone(),
                kind: kind(interface).to_string(),
                name,
            })
            .collect();
        Ok(Response::new(ListPluginsResponse { plugins }))
    }
}

/// BackupItemAction v2 over the wasm plugins.
pub struct BackupItemAction {
    pub actions: Arc<ActionSet>,
}

#[tonic::async_trait]
impl v2::backup_item_action_server::BackupItemAction for BackupItemAction {
    async fn applies_to(
        &self,
        request: Request<v2::BackupItemActionAppliesToRequest>,
    ) -> Result<Response<v2::BackupItemActionAppliesToResponse>, Status> {
        let actions = self.actions.clone();
        let name = request.into_inner().plugin;
        let s = blocking(move || actions.applies_to(&name)).await?;
        Ok(Response::new(v2::BackupItemActionAppliesToResponse {
            resource_selector: Some(selector(s)),
        }))
    }

    async fn execute(
        &self,
        request: Request<v2::ExecuteRequest>,
    ) -> Result<Response<v2::ExecuteResponse>, Status> {
        let actions = self.actions.clone();
        let r = request.into_inner();
        let (item, out) = blocking(move || actions.execute(&r.plugin, &r.item, &r.backup)).await?;
        Ok(Response::new(v2::ExecuteResponse {
            item: item.as_bytes().to_vec(),
            additional_items: out.additional_items.into_iter().map(identifier).collect(),
            operation_id: out.operation_id.unwrap_or_default(),
            post_operation_items: out
                .post_operation_items
                .into_iter()
                .map(identifier)
                .collect(),
        }))
    }

    async fn progress(
        &self,
        request: Request<v2::BackupItemActionProgressRequest>,
    ) -> Result<Response<v2::BackupItemActionProgressResponse>, Status> {
        let actions = self.actions.clone();
        let r = request.into_inner();
        let progress = blocking(move || {
            retrying_is_running(actions.progress(&r.plugin, &r.operation_id, &r.backup))
        })
        .await?;
        Ok(Response::new(v2::BackupItemActionProgressResponse {
            progress: Some(operation_progress(progress)),
        }))
    }

    async fn cancel(
        &self,
        request: Request<v2::BackupItemActionCancelRequest>,
    ) -> Result<Response<()>, Status> {
        let actions = self.actions.clone();
        let r = request.into_inner();
        blocking(move || actions.cancel(&r.plugin, &r.operation_id, &r.backup)).await?;
        Ok(Response::new(()))
    }
}

/// Velero's ItemBlockAction over the wasm plugins that export
/// `item-block-action`.
pub struct ItemBlockAction {
    pub actions: Arc<ActionSet>,
}

#[tonic::async_trait]
impl v1::item_block_action_server::ItemBlockAction for ItemBlockAction {
    async fn applies_to(
        &self,
        request: Request<v1::ItemBlockActionAppliesToRequest>,
    ) -> Result<Response<v1::ItemBlockActionAppliesToResponse>, Status> {
        let actions = self.actions.clone();
        let name = request.into_inner().plugin;
        let s = blocking(move || actions.block_applies_to(&name)).await?;
        Ok(Response::new(v1::ItemBlockActionAppliesToResponse {
            resource_selector: Some(selector(s)),
        }))
    }

    async fn get_related_items(
        &self,
        request: Request<v1::ItemBlockActionGetRelatedItemsRequest>,
    ) -> Result<Response<v1::ItemBlockActionGetRelatedItemsResponse>, Status> {
        let actions = self.actions.clone();
        let r = request.into_inner();
        let related =
            blocking(move || actions.related_items(&r.plugin, &r.item, &r.backup)).await?;
        Ok(Response::new(v1::ItemBlockActionGetRelatedItemsResponse {
            related_items: related.into_iter().map(identifier).collect(),
        }))
    }
}

/// go-plugin's controller: `Shutdown` ends the process gracefully.
pub struct Controller {
    pub shutdown: Arc<Notify>,
}

#[tonic::async_trait]
impl goplugin::grpc_controller_server::GrpcController for Controller {
    async fn shutdown(
        &self,
        _: Request<goplugin::Empty>,
    ) -> Result<Response<goplugin::Empty>, Status> {
        self.shutdown.notify_one();
        Ok(Response::new(goplugin::Empty {}))
    }
}
