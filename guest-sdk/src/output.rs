//! What a plugin returns: selectors, execute output, progress and errors.

use crate::bindings::iar::plugin::types;
use crate::{Item, ResourceId};

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Permanent: not retried. The item (execute) or operation (progress) fails.
    Failed(String),
    /// Transient: the host retries `progress` until the operation times out.
    Retryable(String),
    /// The operation id is not one this plugin started.
    UnknownOperation(String),
}

impl Error {
    /// A permanent failure with a message.
    pub fn failed(message: impl Into<String>) -> Self {
        Error::Failed(message.into())
    }
}

impl From<Error> for types::ActionError {
    fn from(e: Error) -> Self {
        match e {
            Error::Failed(m) => types::ActionError::Failed(m),
            Error::Retryable(m) => types::ActionError::Retryable(m),
            Error::UnknownOperation(m) => types::ActionError::UnknownOperation(m),
        }
    }
}

/// The result type of every [`crate::ItemAction`] function.
pub type Result<T> = std::result::Result<T, Error>;

/// Which items an action applies to (Velero's ResourceSelector).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub included_namespaces: Vec<String>,
    pub excluded_namespaces: Vec<String>,
    pub included_resources: Vec<String>,
    pub excluded_resources: Vec<String>,
    pub label_selector: String,
}

fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Vec<String> {
    items.into_iter().map(Into::into).collect()
}

impl Selector {
    /// Every item.
    pub fn all() -> Self {
        Self::default()
    }

    /// Items of these resources ("pods", "pvc", "deployments.apps", globs).
    pub fn resources<S: Into<String>>(resources: impl IntoIterator<Item = S>) -> Self {
        Selector {
            included_resources: strings(resources),
            ..Self::default()
        }
    }

    /// Also exclude these resources.
    pub fn excluding_resources<S: Into<String>>(mut self, r: impl IntoIterator<Item = S>) -> Self {
        self.excluded_resources.extend(strings(r));
        self
    }

    /// Only items in these namespaces (cluster-scoped items then never match).
    pub fn in_namespaces<S: Into<String>>(mut self, ns: impl IntoIterator<Item = S>) -> Self {
        self.included_namespaces.extend(strings(ns));
        self
    }

    /// Never items in these namespaces.
    pub fn excluding_namespaces<S: Into<String>>(
        mut self,
        ns: impl IntoIterator<Item = S>,
    ) -> Self {
        self.excluded_namespaces.extend(strings(ns));
        self
    }

    /// Only items whose labels match this Kubernetes label selector.
    pub fn with_labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = selector.into();
        self
    }
}

impl From<Selector> for types::ResourceSelector {
    fn from(s: Selector) -> Self {
        types::ResourceSelector {
            included_namespaces: s.included_namespaces,
            excluded_namespaces: s.excluded_namespaces,
            included_resources: s.included_resources,
            excluded_resources: s.excluded_resources,
            label_selector: s.label_selector,
        }
    }
}

/// What `execute` returns.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// `None` keeps the input item unchanged.
    pub item: Option<Item>,
    pub additional_items: Vec<ResourceId>,
    pub operation_id: Option<String>,
    pub post_operation_items: Vec<ResourceId>,
}

impl Output {
    /// Store the item as it came in.
    pub fn unchanged() -> Self {
        Self::default()
    }

    /// Store this (changed) item.
    pub fn item(item: Item) -> Self {
        Output {
            item: Some(item),
            ..Self::default()
        }
    }

    /// Also back up these objects.
    pub fn with_additional_items(mut self, ids: impl IntoIterator<Item = ResourceId>) -> Self {
        self.additional_items.extend(ids);
        self
    }

    /// This call started an asynchronous operation. `post_operation_items`
    /// are the objects it will change; they are read again and re-run through
    /// the actions when the backup is finalized.
    pub fn with_operation(
        mut self,
        operation_id: impl Into<String>,
        post_operation_items: impl IntoIterator<Item = ResourceId>,
    ) -> Self {
        self.operation_id = Some(operation_id.into());
        self.post_operation_items.extend(post_operation_items);
        self
    }
}

impl From<Output> for types::ExecuteOutput {
    fn from(o: Output) -> Self {
        types::ExecuteOutput {
            item: o.item.map(Item::into_text),
            additional_items: o.additional_items,
            operation_id: o.operation_id,
            post_operation_items: o.post_operation_items,
        }
    }
}

/// A point in time since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timestamp {
    pub seconds: i64,
    pub nanoseconds: u32,
}

impl Timestamp {
    /// Parses an RFC 3339 time as Kubernetes writes it
    /// (`2024-05-01T10:00:00Z`, optionally with fractional seconds).
    pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
        let s = s.strip_suffix('Z')?;
        let (date, time) = s.split_once('T')?;
        let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
        let (y, m, day) = (d.next()??, d.next()??, d.next()??);
        let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
        let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
        let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
        let nanos = if frac.is_empty() {
            0
        } else {
            let digits: String = frac.chars().take(9).collect();
            digits.parse::<u32>().ok()? * 10u32.pow(9 - digits.len() as u32)
        };
        // Days from civil date (Howard Hinnant's algorithm).
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        Some(Timestamp {
            seconds: days * 86_400 + hh * 3600 + mm * 60 + ss,
            nanoseconds: nanos,
        })
    }
}

/// How far an operation has come.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub completed: bool,
    pub error: Option<String>,
    pub n_completed: i64,
    pub n_total: i64,
    pub operation_units: String,
    pub description: String,
    pub started: Option<Timestamp>,
    pub updated: Option<Timestamp>,
}

impl From<Progress> for types::OperationProgress {
    fn from(p: Progress) -> Self {
        let ts = |t: Timestamp| types::Timestamp {
            seconds: t.seconds,
            nanoseconds: t.nanoseconds,
        };
        types::OperationProgress {
            completed: p.completed,
            error: p.error,
            n_completed: p.n_completed,
            n_total: p.n_total,
            operation_units: p.operation_units,
            description: p.description,
            started: p.started.map(ts),
            updated: p.updated.map(ts),
        }
    }
}
