//! Errors at the host/guest boundary. Every one names the plugin, what the
//! host was doing (the call and its item or operation) and the rule broken.

use iar_core::item::ItemRef;
use std::fmt;
use std::time::Duration;

/// What a plugin itself reported (the contract's `action-error`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "kind", content = "message", rename_all = "kebab-case")]
pub enum ActionError {
    /// Permanent.
    #[error("failed: {0}")]
    Failed(String),
    /// Transient; progress is retried.
    #[error("retryable: {0}")]
    Retryable(String),
    /// Not an operation this plugin started.
    #[error("unknown operation: {0}")]
    UnknownOperation(String),
}

impl ActionError {
    /// The plugin's own words.
    pub fn message(&self) -> &str {
        match self {
            ActionError::Failed(m)
            | ActionError::Retryable(m)
            | ActionError::UnknownOperation(m) => m,
        }
    }

    /// The same answer with other words.
    pub fn with_message(self, m: String) -> Self {
        match self {
            ActionError::Failed(_) => ActionError::Failed(m),
            ActionError::Retryable(_) => ActionError::Retryable(m),
            ActionError::UnknownOperation(_) => ActionError::UnknownOperation(m),
        }
    }
}

/// The rule a call broke. Display is one sentence, ending in the rule's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("ran past its CPU deadline of {0:?} and was stopped (rule: cpu-deadline)")]
    Deadline(Duration),
    #[error(
        "ran past its wall-clock ceiling of {0:?} (time in host calls and WASI waits included) and was stopped (rule: wall-clock)"
    )]
    WallClock(Duration),
    #[error(
        "tried to grow its memory to {requested} bytes, over its cap of {limit} (rule: memory-cap)"
    )]
    MemoryCap { limit: usize, requested: usize },
    #[error(
        "made more than {limit} host calls in one call and was stopped (rule: host-call-limit)"
    )]
    HostCalls { limit: usize },
    #[error(
        "held more than {limit} WASI resources (streams, pollables) at once and was stopped (rule: resource-table)"
    )]
    ResourceTable { limit: usize },
    #[error("overflowed its wasm stack (rule: stack-limit)")]
    StackOverflow,
    #[error("trapped: {message} (rule: no-trap)")]
    Trap { message: String },
    #[error("could not be instantiated: {0} (rule: instantiate)")]
    Instantiate(String),
    #[error("returned an error: {0}")]
    Action(ActionError),
    #[error("returned an item that is not valid JSON: {0} (rule: item-is-json-object)")]
    ItemNotJson(String),
    #[error("returned an item that is {0}, not a JSON object (rule: item-is-json-object)")]
    ItemNotObject(&'static str),
    #[error(
        "changed the item's {field} from {before:?} to {after:?} (rule: item-identity-unchanged)"
    )]
    IdentityChanged {
        field: &'static str,
        before: String,
        after: String,
    },
    /// A change to the item its grants do not cover (`allowMutate`):
    /// restored, or stored for a restore, it would be a write.
    #[error("changed the item at {path:?}, which {need} (rule: {rule})")]
    ChangeNotGranted {
        rule: &'static str,
        path: String,
        need: String,
    },
    #[error("returned {what} of {size}, over the limit of {limit} (rule: output-size)")]
    OutputTooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
    },
    #[error(
        "handed the host more than {limit} bytes of strings and lists in one call, counting every entry that points at the same buffer (rule: output-size)"
    )]
    LiftBudget { limit: usize },
    #[error(
        "returned operation id {0:?} during the finalize phase; it was not recorded (rule: no-operation-in-finalize)"
    )]
    OperationInFinalize(String),
    #[error("returned an empty operation id (rule: operation-id-non-empty)")]
    EmptyOperationId,
    #[error(
        "returned operation id {0:?}, which it already returned in this backup or restore (rule: operation-id-unique)"
    )]
    DuplicateOperationId(String),
    #[error(
        "returned post-operation items without an operation id (rule: post-operation-items-need-operation)"
    )]
    PostItemsWithoutOperation,
    #[error(
        "asked the restore to wait for its additional items and named none (rule: wait-without-items)"
    )]
    WaitWithoutItems,
    #[error("named additional item {item}, which {why} (rule: additional-item-outside-restore)")]
    AdditionalItemOutsideRestore { item: String, why: String },
    #[error(
        "{what} in this {run} would reach {spent}, over the plugin's budget of {limit} across the {run}'s calls (rule: run-budget)"
    )]
    RunBudget {
        what: &'static str,
        run: &'static str,
        spent: String,
        limit: String,
    },
    #[error("returned {list} entry {index} whose {part} (rule: invalid-identifier)")]
    InvalidIdentifier {
        list: &'static str,
        index: usize,
        part: Box<iar_core::identifier::InvalidPart>,
    },
    #[error("reported {field} = {value}, which is negative (rule: progress-sane)")]
    NegativeProgress { field: &'static str, value: i64 },
    #[error("reported {field} with {nanos} nanoseconds, not below 1e9 (rule: progress-sane)")]
    InvalidTimestamp { field: &'static str, nanos: u32 },
    #[error(
        "reported {field} = {seconds} s since 1970, outside 1970 through 9999 (rule: progress-sane)"
    )]
    TimestampOutOfRange { field: &'static str, seconds: i64 },
    #[error("returned an invalid applies-to selector: {0} (rule: valid-selector)")]
    InvalidSelector(String),
    #[error("was asked for {0}, which it does not export (rule: plugin-world)")]
    NotExported(crate::contract::Interface),
}

impl Violation {
    /// The rule's short name, as printed at the end of the message.
    pub fn rule(&self) -> &'static str {
        match self {
            Violation::Deadline(_) => "cpu-deadline",
            Violation::WallClock(_) => "wall-clock",
            Violation::MemoryCap { .. } => "memory-cap",
            Violation::StackOverflow => "stack-limit",
            Violation::HostCalls { .. } => "host-call-limit",
            Violation::ResourceTable { .. } => "resource-table",
            Violation::Trap { .. } => "no-trap",
            Violation::Instantiate(_) => "instantiate",
            Violation::Action(_) => "plugin-error",
            Violation::ItemNotJson(_) | Violation::ItemNotObject(_) => "item-is-json-object",
            Violation::IdentityChanged { .. } => "item-identity-unchanged",
            Violation::ChangeNotGranted { rule, .. } => rule,
            Violation::OutputTooLarge { .. } | Violation::LiftBudget { .. } => "output-size",
            Violation::OperationInFinalize(_) => "no-operation-in-finalize",
            Violation::EmptyOperationId => "operation-id-non-empty",
            Violation::DuplicateOperationId(_) => "operation-id-unique",
            Violation::PostItemsWithoutOperation => "post-operation-items-need-operation",
            Violation::WaitWithoutItems => "wait-without-items",
            Violation::AdditionalItemOutsideRestore { .. } => "additional-item-outside-restore",
            Violation::RunBudget { .. } => "run-budget",
            Violation::InvalidIdentifier { .. } => iar_core::identifier::RULE,
            Violation::NegativeProgress { .. }
            | Violation::InvalidTimestamp { .. }
            | Violation::TimestampOutOfRange { .. } => "progress-sane",
            Violation::InvalidSelector(_) => "valid-selector",
            Violation::NotExported(_) => "plugin-world",
        }
    }
}

/// Which call of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Instantiate,
    AppliesTo,
    Execute,
    Progress,
    Cancel,
    /// item-block-action's applies-to.
    BlockAppliesTo,
    GetRelatedItems,
    /// restore-item-action's calls.
    RestoreAppliesTo,
    RestoreExecute,
    RestoreProgress,
    RestoreCancel,
    AdditionalItemsReady,
}

impl Call {
    /// The contract interface the call is part of.
    pub fn interface(self) -> crate::contract::Interface {
        use crate::contract::Interface;
        match self {
            Call::BlockAppliesTo | Call::GetRelatedItems => Interface::ItemBlockAction,
            Call::RestoreAppliesTo
            | Call::RestoreExecute
            | Call::RestoreProgress
            | Call::RestoreCancel
            | Call::AdditionalItemsReady => Interface::RestoreItemAction,
            Call::Instantiate | Call::AppliesTo | Call::Execute | Call::Progress | Call::Cancel => {
                Interface::ItemAction
            }
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Call::Instantiate => "instantiate",
            Call::AppliesTo => "applies-to",
            Call::Execute => "execute",
            Call::Progress => "progress",
            Call::Cancel => "cancel",
            Call::BlockAppliesTo => "item-block-action applies-to",
            Call::GetRelatedItems => "get-related-items",
            Call::RestoreAppliesTo => "restore-item-action applies-to",
            Call::RestoreExecute => "restore execute",
            Call::RestoreProgress => "restore progress",
            Call::RestoreCancel => "restore cancel",
            Call::AdditionalItemsReady => "are-additional-items-ready",
        })
    }
}

/// What a call was about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    None,
    Item(ItemRef),
    Operation { id: String, item: ItemRef },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::None => Ok(()),
            Target::Item(item) => write!(f, " of {item}"),
            Target::Operation { id, item } => write!(f, " of operation {id:?} (item {item})"),
        }
    }
}

/// A call into a plugin that did not end well.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin:?}: {call}{target}: {violation}")]
pub struct CallError {
    pub plugin: String,
    pub call: Call,
    pub target: Target,
    pub violation: Violation,
    /// The tail of what the guest wrote to stderr during the call (a panic
    /// message, for example).
    pub stderr: String,
}

impl CallError {
    /// Whether the host may try the same call again later (a plugin's own
    /// `retryable` answer). Deadline and trap errors are not retryable: a
    /// plugin that looped once is likely to loop again.
    pub fn is_retryable(&self) -> bool {
        matches!(self.violation, Violation::Action(ActionError::Retryable(_)))
    }
}

/// A plugin that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {plugin:?}: cannot read {path}: {source}")]
    Read {
        plugin: String,
        path: String,
        source: std::io::Error,
    },
    #[error("plugin {plugin:?}: {reason} (rule: valid-component)")]
    Invalid {
        plugin: String,
        #[source]
        reason: InvalidComponent,
    },
    #[error(
        "plugin {plugin:?}: does not export {expected} (rule: plugin-world); it exports [{found}]"
    )]
    WrongWorld {
        plugin: String,
        expected: String,
        found: String,
    },
    #[error(
        "plugin {plugin:?}: built for contract iar:plugin@{found}, this host supports {supported} (rule: contract-version)"
    )]
    UnsupportedVersion {
        plugin: String,
        found: String,
        supported: String,
    },
    #[error(
        "plugin {plugin:?}: declares a shared memory, which the memory cap cannot bound (rule: shared-memory)"
    )]
    SharedMemory { plugin: String },
    #[error("plugin {plugin:?}: {reason} (rule: component-limits)")]
    ComponentLimits {
        plugin: String,
        #[source]
        reason: crate::contract::ShapeError,
    },
    /// Its core modules' memories start larger than its cap: every
    /// instantiation would fail, so the load does.
    #[error(
        "plugin {plugin:?}: its image starts with {initial} bytes of linear memory (its data), over its memory cap of {cap} bytes, so no instance of it can start (rule: memory-cap); give it limits.memoryBytes for its image and its heap"
    )]
    ImageOverCap {
        plugin: String,
        initial: u64,
        cap: usize,
    },
    #[error("plugin {plugin:?}: cannot be linked: {reason} (rule: imports-available)")]
    Link {
        plugin: String,
        #[source]
        reason: EngineError,
    },
    #[error("plugin {plugin:?}: compiling failed: {reason}")]
    Compile {
        plugin: String,
        #[source]
        reason: EngineError,
    },
    #[error(transparent)]
    AppliesTo(Box<CallError>),
}

/// An error of wasmtime's (compiling, linking), kept as the source and
/// shown with its causes as `{:#}` shows them.
#[derive(Debug)]
pub struct EngineError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl EngineError {
    pub(crate) fn from_anyhow(e: anyhow::Error) -> Self {
        EngineError(e.into())
    }

    pub(crate) fn from_wasmtime(e: wasmtime::Error) -> Self {
        EngineError(e.into_boxed_dyn_error())
    }
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// Why a file is not a valid component.
#[derive(Debug, thiserror::Error)]
pub enum InvalidComponent {
    #[error("{0}")]
    Shape(#[source] crate::contract::ShapeError),
    /// wasmparser's validation, before anything is compiled.
    #[error("invalid component: {0}")]
    Validation(#[source] wasmparser::BinaryReaderError),
}

impl From<CallError> for LoadError {
    fn from(e: CallError) -> Self {
        LoadError::AppliesTo(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::EngineError;
    use std::error::Error;

    /// An engine error reads as `{:#}` read it when it was a string, and
    /// keeps the error as its source.
    #[test]
    fn an_engine_error_shows_its_causes_and_keeps_them() {
        let e = anyhow::anyhow!("unknown import `iar:plugin/host`").context("linking");
        let shown = format!("{e:#}");
        let e = EngineError::from_anyhow(e);
        assert_eq!(e.to_string(), shown);
        assert_eq!(e.source().unwrap().to_string(), "linking");
        let w = EngineError::from_wasmtime(wasmtime::Error::msg("no such export"));
        assert_eq!(w.to_string(), "no such export");
    }
}
