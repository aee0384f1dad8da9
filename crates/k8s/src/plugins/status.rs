//! Each plugin's state, visible without pod logs: annotations on its
//! ConfigMap (merge patch) and an Event on it.

use super::configmap::ConfigMapError;
use iar_plugin::plugin::LoadError;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::sync::Arc;

pub const ANNOTATION_STATUS: &str = "iar.dev/status";
pub const ANNOTATION_MESSAGE: &str = "iar.dev/status-message";
pub const ANNOTATION_DIGEST: &str = "iar.dev/loaded-digest";
pub const ANNOTATION_GENERATION: &str = "iar.dev/generation";

/// Events take at most 1 kB of note; annotations are kept as short.
const MAX_MESSAGE: usize = 1000;

/// The outcome of the last load of a plugin ConfigMap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Ready,
    /// `enabled: "false"`: not loaded.
    Disabled,
    DigestMismatch,
    /// Not a valid component, or the compiler refused it.
    CompileError,
    /// Another world, an unsupported contract version, or imports the host
    /// does not provide.
    ContractMismatch,
    SettingsInvalid,
    /// No digest, no component, or a reference that cannot be read.
    SourceInvalid,
    /// `applies-to` failed or returned an invalid selector.
    AppliesToFailed,
    /// An older ConfigMap holds a plugin of this name.
    NameConflict,
    /// The settings ask for more than the operator's grant policy allows.
    GrantRefused,
    /// Reading, compiling or `applies-to` took longer than the load timeout.
    LoadTimeout,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ready => "Ready",
            Status::Disabled => "Disabled",
            Status::DigestMismatch => "DigestMismatch",
            Status::CompileError => "CompileError",
            Status::ContractMismatch => "ContractMismatch",
            Status::SettingsInvalid => "SettingsInvalid",
            Status::SourceInvalid => "SourceInvalid",
            Status::AppliesToFailed => "AppliesToFailed",
            Status::NameConflict => "NameConflict",
            Status::GrantRefused => "GrantRefused",
            Status::LoadTimeout => "LoadTimeout",
        }
    }

    pub fn of_configmap_error(e: &ConfigMapError) -> Status {
        match e.rule() {
            "digest-match" => Status::DigestMismatch,
            "plugin-settings" | "plugin-name" => Status::SettingsInvalid,
            _ => Status::SourceInvalid,
        }
    }

    pub fn of_load_error(e: &LoadError) -> Status {
        match e {
            LoadError::WrongWorld { .. }
            | LoadError::UnsupportedVersion { .. }
            | LoadError::Link { .. } => Status::ContractMismatch,
            LoadError::AppliesTo(_) => Status::AppliesToFailed,
            // Its limits cannot hold it: the settings are what to change.
            LoadError::ImageOverCap { .. } => Status::SettingsInvalid,
            LoadError::Read { .. }
            | LoadError::Invalid { .. }
            | LoadError::SharedMemory { .. }
            | LoadError::ComponentLimits { .. }
            | LoadError::Compile { .. } => Status::CompileError,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One status to write on one ConfigMap.
#[derive(Clone, Debug)]
pub struct Report {
    /// As the watch's store holds it.
    pub configmap: Arc<ConfigMap>,
    pub status: Status,
    pub message: String,
    /// The digest of the version serving now (the previous one when a new
    /// version was refused); `None` when none is loaded.
    pub loaded_digest: Option<String>,
}

fn shorten(s: &str) -> String {
    if s.len() <= MAX_MESSAGE {
        return s.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

pub(crate) struct StatusWriter {
    api: Api<ConfigMap>,
    client: kube::Client,
    reporter: Reporter,
    /// Per ConfigMap, the note of its last Event and the recorder that
    /// published it. kube's recorder folds a repeat of one reason on one
    /// object into the first Event (a series) and keeps the first note,
    /// so a second, different `GrantRefused` would show the first one's
    /// reason; a new note gets a new recorder, and so an Event of its own.
    recorders: std::sync::Mutex<std::collections::HashMap<String, (String, Recorder)>>,
}

impl StatusWriter {
    pub(crate) fn new(client: kube::Client, namespace: &str) -> Self {
        let instance = std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok());
        StatusWriter {
            api: Api::namespaced(client.clone(), namespace),
            client,
            reporter: Reporter {
                controller: "iar".into(),
                instance,
            },
            recorders: Default::default(),
        }
    }

    /// Drops what is kept for a deleted ConfigMap.
    pub(crate) fn forget(&self, configmap: &str) {
        self.recorders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(configmap);
    }

    /// Writes the annotations and the Event. Failures are logged, not
    /// returned: a status that cannot be written must not stop loading.
    pub(crate) async fn write(&self, report: &Report, generation: u64) {
        let name = report.configmap.metadata.name.clone().unwrap_or_default();
        let message = shorten(&report.message);
        let patch = serde_json::json!({
            "metadata": {"annotations": {
                ANNOTATION_STATUS: report.status.as_str(),
                ANNOTATION_MESSAGE: message,
                // null removes it: nothing of this ConfigMap is loaded.
                ANNOTATION_DIGEST: report.loaded_digest.as_ref().map(|d| format!("sha256:{d}")),
                ANNOTATION_GENERATION: generation.to_string(),
            }}
        });
        match self
            .api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            // Deleted meanwhile: nothing left to annotate.
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(e) => tracing::warn!(configmap = %name, "cannot write the plugin status: {e}"),
        }
        let recorder = {
            let mut recorders = self.recorders.lock().unwrap_or_else(|e| e.into_inner());
            match recorders.get(&name) {
                Some((note, recorder)) if *note == message => recorder.clone(),
                _ => {
                    let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
                    recorders.insert(name.clone(), (message.clone(), recorder.clone()));
                    recorder
                }
            }
        };
        let event = Event {
            type_: match report.status {
                Status::Ready | Status::Disabled => EventType::Normal,
                _ => EventType::Warning,
            },
            reason: report.status.as_str().into(),
            note: Some(message),
            action: "LoadPlugin".into(),
            secondary: None,
        };
        if let Err(e) = recorder
            .publish(&event, &report.configmap.object_ref(&()))
            .await
        {
            tracing::warn!(configmap = %name, "cannot publish the plugin event: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let s = "é".repeat(800);
        let cut = shorten(&s);
        assert!(cut.len() <= MAX_MESSAGE + "…".len());
        assert!(cut.ends_with('…'));
        assert_eq!(shorten("short"), "short");
    }
}
