//! Velero's RestoreItemAction v2 over the wasm plugins that export
//! `restore-item-action`.

use super::{blocking, identifier, operation_progress, retrying_is_running, selector};
use crate::actions::ActionSet;
use crate::proto::generated::ResourceIdentifier;
use crate::proto::v2;
use iar_core::item::ItemRef;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct RestoreItemAction {
    pub actions: Arc<ActionSet>,
}

fn item_ref(id: ResourceIdentifier) -> ItemRef {
    ItemRef::new(id.group, id.resource, id.namespace, id.name)
}

#[tonic::async_trait]
impl v2::restore_item_action_server::RestoreItemAction for RestoreItemAction {
    async fn applies_to(
        &self,
        request: Request<v2::RestoreItemActionAppliesToRequest>,
    ) -> Result<Response<v2::RestoreItemActionAppliesToResponse>, Status> {
        let actions = self.actions.clone();
        let name = request.into_inner().plugin;
        let s = blocking(move || actions.restore_applies_to(&name)).await?;
        Ok(Response::new(v2::RestoreItemActionAppliesToResponse {
            resource_selector: Some(selector(s)),
        }))
    }

    async fn execute(
        &self,
        request: Request<v2::RestoreItemActionExecuteRequest>,
    ) -> Result<Response<v2::RestoreItemActionExecuteResponse>, Status> {
        let actions = self.actions.clone();
        let r = request.into_inner();
        let (item, out) = blocking(move || {
            actions.restore_execute(&r.plugin, &r.item, &r.item_from_backup, &r.restore)
        })
        .await?;
        Ok(Response::new(v2::RestoreItemActionExecuteResponse {
            item: item.as_bytes().to_vec(),
            additional_items: out.additional_items.into_iter().map(identifier).collect(),
            skip_restore: out.skip_restore,
            operation_id: out.operation_id.unwrap_or_default(),
            wait_for_additional_items: out.wait_for_additional_items,
            // Velero's own plugins send zero for "the default", which its
            // restore reads as its 10 minutes.
            additional_items_ready_timeout: Some(
                out.additional_items_ready_timeout
                    .unwrap_or_default()
                    .try_into()
                    .unwrap_or(prost_types::Duration {
                        seconds: i64::MAX,
                        nanos: 0,
                    }),
            ),
        }))
    }

    async fn progress(
        &self,
        request: Request<v2::RestoreItemActionProgressRequest>,
    ) -> Result<Response<v2::RestoreItemActionProgressResponse>, Status> {
        let actions = self.actions.clone();
        let r = request.into_inner();
        let progress = blocking(move || {
            retrying_is_running(actions.restore_progress(&r.plugin, &r.operation_id, &r.restore))
        })
        .await?;
        Ok(Response::new(v2::RestoreItemActionProgressResponse {
            progress: Some(operation_progress(progress)),
        }))
    }

    async fn cancel(
        &self,
        request: Request<v2::RestoreItemActionCancelRequest>,
    ) -> Result<Response<()>, Status> {
        let actions = self.actions.clone();
        let r = request.into_inner();
        blocking(move || actions.restore_cancel(&r.plugin, &r.operation_id, &r.restore)).await?;
        Ok(Response::new(()))
    }

    async fn are_additional_items_ready(
        &self,
        request: Request<v2::RestoreItemActionItemsReadyRequest>,
    ) -> Result<Response<v2::RestoreItemActionItemsReadyResponse>, Status> {
        let actions = self.actions.clone();
        let r = request.into_inner();
        let items: Vec<ItemRef> = r.additional_items.into_iter().map(item_ref).collect();
        let ready =
            blocking(move || actions.additional_items_ready(&r.plugin, &items, &r.restore)).await?;
        Ok(Response::new(v2::RestoreItemActionItemsReadyResponse {
            ready,
        }))
    }
}
