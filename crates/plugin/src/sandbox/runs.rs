//! Contract 1.4.0's `runs`: the whole Backup or Restore of the current
//! call, set by the caller before it enters the guest.

use super::State;
use crate::contract::latest::runs;
use std::sync::Arc;

/// The object the current call belongs to, as the guest may ask for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum RunObject {
    /// `applies-to`, or a plugin that does not import `runs`.
    #[default]
    None,
    Backup(Arc<str>),
    Restore(Arc<str>),
}

impl runs::Host for State {
    fn backup(&mut self) -> wasmtime::Result<Option<String>> {
        self.count_host_call()?;
        Ok(match &self.run_object {
            RunObject::Backup(text) => Some(text.to_string()),
            _ => None,
        })
    }

    fn restore(&mut self) -> wasmtime::Result<Option<String>> {
        self.count_host_call()?;
        Ok(match &self.run_object {
            RunObject::Restore(text) => Some(text.to_string()),
            _ => None,
        })
    }
}
