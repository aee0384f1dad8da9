//! Glue between the generated `Guest` traits and [`crate::ItemAction`] /
//! [`crate::ItemBlockAction`]. Every version shares the 1.0.0 `types`
//! module, so one set of conversions serves all of them.

use crate::bindings::iar::plugin::types;
use crate::{Error, Item, ItemAction, ItemBlockAction};
use std::marker::PhantomData;

/// Implements the generated item-action export traits (1.0.0 and 1.1.0) for
/// any [`ItemAction`]; used by [`crate::export!`] and [`crate::export_both!`].
pub struct Exported<T>(PhantomData<T>);

/// Implements the 1.1.0 item-block-action export trait for any
/// [`ItemBlockAction`]; used by [`crate::export_block_action!`] and
/// [`crate::export_both!`].
pub struct ExportedBlock<T>(PhantomData<T>);

/// The item-action functions, the same for every version's `Guest` trait.
macro_rules! item_action {
    ($guest:path, $exported:ident) => {
        impl<T: ItemAction> $guest for $exported<T> {
            fn applies_to() -> Result<types::ResourceSelector, types::ActionError> {
                <T as ItemAction>::applies_to()
                    .map(Into::into)
                    .map_err(Into::into)
            }

            fn execute(
                item: String,
                backup: types::Backup,
            ) -> Result<types::ExecuteOutput, types::ActionError> {
                let item = Item::parse(item).map_err(Error::Failed)?;
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

            fn cancel(
                operation_id: String,
                backup: types::Backup,
            ) -> Result<(), types::ActionError> {
                T::cancel(&operation_id, &backup.into()).map_err(Into::into)
            }
        }
    };
}

/// The item-block-action functions.
macro_rules! item_block_action {
    ($guest:path, $exported:ident) => {
        impl<T: ItemBlockAction> $guest for $exported<T> {
            fn applies_to() -> Result<types::ResourceSelector, types::ActionError> {
                <T as ItemBlockAction>::applies_to()
                    .map(Into::into)
                    .map_err(Into::into)
            }

            fn get_related_items(
                item: String,
                backup: types::Backup,
            ) -> Result<Vec<types::ResourceIdentifier>, types::ActionError> {
                let item = Item::parse(item).map_err(Error::Failed)?;
                T::get_related_items(item, &backup.into()).map_err(Into::into)
            }
        }
    };
}

item_action!(
    crate::bindings::exports::iar::plugin::item_action::Guest,
    Exported
);
item_action!(
    crate::bindings_v1_1::exports::iar::plugin::item_action::Guest,
    Exported
);
item_block_action!(
    crate::bindings_block::exports::iar::plugin::item_block_action::Guest,
    ExportedBlock
);
item_action!(
    crate::bindings_v1_3_action::exports::iar::plugin::item_action::Guest,
    Exported
);
item_block_action!(
    crate::bindings_v1_3_block::exports::iar::plugin::item_block_action::Guest,
    ExportedBlock
);
