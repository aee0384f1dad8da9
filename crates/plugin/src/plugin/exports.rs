//! Which contract interfaces a component exports, per contract version, and
//! the typed handles to call them. The only place that knows there is more
//! than one version: above it, every call takes and returns `latest` types.

use crate::contract::{Interface, latest, since_v1_0, since_v1_1, since_v1_3};
use crate::sandbox::State;
use wasmtime::component::{Instance, InstancePre};
use wasmtime::{AsContextMut, Store};

/// Where the item-action functions are, by the version that exports them.
enum ActionIndices {
    V1_0(since_v1_0::action::GuestIndices),
    V1_1(since_v1_1::action::GuestIndices),
}

/// A plugin's linked component and the exports found on it, resolved once
/// at load so that a call never looks up a name.
pub(crate) struct Exports {
    pre: InstancePre<State>,
    action: Option<ActionIndices>,
    block: Option<since_v1_1::block_action::GuestIndices>,
    restore: Option<since_v1_3::restore_action::GuestIndices>,
}

impl Exports {
    /// `version` and `interfaces` are what the component's export names
    /// said; this checks that the functions behind them have the contract's
    /// types (a mismatch is a link error).
    pub(crate) fn new(
        pre: InstancePre<State>,
        version: &str,
        interfaces: &[Interface],
    ) -> wasmtime::Result<Self> {
        let has = |i| interfaces.contains(&i);
        let (action, block) = match version {
            "1.0.0" => (
                has(Interface::ItemAction)
                    .then(|| since_v1_0::action::GuestIndices::new(&pre).map(ActionIndices::V1_0))
                    .transpose()?,
                None,
            ),
            _ => (
                has(Interface::ItemAction)
                    .then(|| since_v1_1::action::GuestIndices::new(&pre).map(ActionIndices::V1_1))
                    .transpose()?,
                has(Interface::ItemBlockAction)
                    .then(|| since_v1_1::block_action::GuestIndices::new(&pre))
                    .transpose()?,
            ),
        };
        // restore-item-action exists from 1.3.0 on (check_version refused
        // an older export of it).
        let restore = has(Interface::RestoreItemAction)
            .then(|| since_v1_3::restore_action::GuestIndices::new(&pre))
            .transpose()?;
        Ok(Exports {
            pre,
            action,
            block,
            restore,
        })
    }

    pub(crate) fn has(&self, interface: Interface) -> bool {
        match interface {
            Interface::ItemAction => self.action.is_some(),
            Interface::ItemBlockAction => self.block.is_some(),
            Interface::RestoreItemAction => self.restore.is_some(),
        }
    }

    pub(crate) fn interfaces(&self) -> Vec<Interface> {
        Interface::ALL
            .into_iter()
            .filter(|i| self.has(*i))
            .collect()
    }

    /// A fresh instance and its typed exports.
    pub(crate) fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Guest> {
        let instance = self.pre.instantiate(&mut *store)?;
        self.load(store, &instance)
    }

    fn load(&self, mut store: impl AsContextMut, instance: &Instance) -> wasmtime::Result<Guest> {
        let action = match &self.action {
            None => None,
            Some(ActionIndices::V1_0(i)) => Some(Action::V1_0(i.load(&mut store, instance)?)),
            Some(ActionIndices::V1_1(i)) => Some(Action::V1_1(i.load(&mut store, instance)?)),
        };
        let block = match &self.block {
            None => None,
            Some(i) => Some(i.load(&mut store, instance)?),
        };
        let restore = match &self.restore {
            None => None,
            Some(i) => Some(i.load(&mut store, instance)?),
        };
        Ok(Guest {
            action,
            block,
            restore,
        })
    }
}

/// The exports of one live instance.
pub(crate) struct Guest {
    pub(crate) action: Option<Action>,
    pub(crate) block: Option<latest::block_action::Guest>,
    pub(crate) restore: Option<latest::restore_action::Guest>,
}

/// The item action of one live instance, whichever version exports it. The
/// versions share their types, so each call is the same on both.
pub(crate) enum Action {
    V1_0(since_v1_0::action::Guest),
    V1_1(since_v1_1::action::Guest),
}

/// Calls the same function on whichever version the instance has.
macro_rules! on_either {
    ($action:expr, $g:ident => $call:expr) => {
        match $action {
            Action::V1_0($g) => $call,
            Action::V1_1($g) => $call,
        }
    };
}

type Answer<T> = wasmtime::Result<Result<T, latest::types::ActionError>>;

impl Action {
    pub(crate) fn applies_to(
        &self,
        store: &mut Store<State>,
    ) -> Answer<latest::types::ResourceSelector> {
        on_either!(self, g => g.call_applies_to(store))
    }

    pub(crate) fn execute(
        &self,
        store: &mut Store<State>,
        item: &str,
        backup: &latest::types::Backup,
    ) -> Answer<latest::types::ExecuteOutput> {
        on_either!(self, g => g.call_execute(store, item, backup))
    }

    pub(crate) fn progress(
        &self,
        store: &mut Store<State>,
        operation_id: &str,
        backup: &latest::types::Backup,
    ) -> Answer<latest::types::OperationProgress> {
        on_either!(self, g => g.call_progress(store, operation_id, backup))
    }

    pub(crate) fn cancel(
        &self,
        store: &mut Store<State>,
        operation_id: &str,
        backup: &latest::types::Backup,
    ) -> Answer<()> {
        on_either!(self, g => g.call_cancel(store, operation_id, backup))
    }
}
