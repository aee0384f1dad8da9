//! Glue between the generated `Guest` trait and [`crate::ItemAction`].

use crate::bindings::exports::iar::plugin::item_action::Guest;
use crate::bindings::iar::plugin::types;
use crate::{Error, Item, ItemAction};
use std::marker::PhantomData;

/// Implements the generated export trait for any [`ItemAction`]; used by
/// [`crate::export!`].
pub struct Exported<T>(PhantomData<T>);

impl<T: ItemAction> Guest for Exported<T> {
    fn applies_to() -> Result<types::ResourceSelector, types::ActionError> {
        T::applies_to().map(Into::into).map_err(Into::into)
    }

    fn execute(
        item: String,
        backup: types::Backup,
    ) -> Result<types::ExecuteOutput, types::ActionError> {
        let item = Item::parse(&item).map_err(Error::Failed)?;
        T::execute(item, &backup.into())
            .map(Into::into)
            .map_err(Into::into)
    }

    fn progress(
        operation_id: String,
        backup: types::Backup,
    ) -> Result<types::OperationProgress, types::ActionError> {
        T::progress(&operation_id, &backup.into())
            .map(Into::into)
            .map_err(Into::into)
    }

    fn cancel(operation_id: String, backup: types::Backup) -> Result<(), types::ActionError> {
        T::cancel(&operation_id, &backup.into()).map_err(Into::into)
    }
}
