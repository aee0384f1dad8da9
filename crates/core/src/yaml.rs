//! YAML for every crate of iar, with serde-saphyr (serde_yaml 0.9 is
//! archived; docs/decisions.md says why this successor). Two readings:
//!
//! - [`manifests`](Self::manifests): Kubernetes objects read as kubectl
//!   reads them (apimachinery's YAMLOrJSONDecoder over sigs.k8s.io/yaml and
//!   go-yaml v2, a YAML 1.1 reader): `yes`/`on`/`y` are booleans, `0755` is
//!   octal, a key given twice keeps its last value, merge keys `<<` merge,
//!   and `.inf`/`.nan` are refused (kubectl cannot write them as JSON
//!   either). `manifests/kubectl_yaml.rs` pins each case against kubectl.
//! - [`from_str`]: iar's own files (plugin settings, grant policies, test
//!   files, volume policies), read into typed structs with the same scalar
//!   rules, a key given twice refused.
//!
//! Errors are one line, with the line and column, without the source
//! snippet serde-saphyr can draw (iar's messages are one line each).

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A YAML text that could not be read, with where.
pub type Error = serde_saphyr::Error;

/// A value that could not be written as YAML.
pub type WriteError = serde_saphyr::SerializeError;

/// The options both readings share.
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        // kubectl (go-yaml v2) reads a leading-zero integer as octal.
        legacy_octal_numbers: true,
        with_snippet: false,
        // serde-saphyr's default budget is for configuration files (1,024
        // documents, 250,000 nodes, 64 levels); a manifest file may hold
        // a cluster's worth of objects, as serde_yaml read them. Nesting
        // stays bounded at serde_yaml's 128; the alias limits (billion
        // laughs) are kept.
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: None,
            max_events: usize::MAX,
            max_documents: usize::MAX,
            max_nodes: usize::MAX,
            max_total_scalar_bytes: usize::MAX,
            max_depth: 128,
        },
    }
}

/// How manifests are read: as kubectl, see the module's comment.
fn manifest_options() -> serde_saphyr::Options {
    let mut options = options();
    // go-yaml v2 without strict mode, as sigs.k8s.io/yaml.Unmarshal uses it:
    // the last of two equal keys wins.
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
    options
}

/// One YAML document (of iar's own files) as `T`; a key given twice is an
/// error.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options())
}

/// [`from_str`] from bytes (UTF-8).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    serde_saphyr::from_slice_with_options(bytes, options())
}

/// Every document of a YAML stream, read as kubectl reads manifests.
/// Empty and `null` documents are left out, as kubectl skips them; the
/// error of the first document that does not read ends the stream, its
/// position counted among the documents read so far (from 1).
pub fn manifests<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, (usize, Error)> {
    let mut reader = text.as_bytes();
    let mut docs = Vec::new();
    for doc in serde_saphyr::read_with_options::<_, T>(&mut reader, manifest_options()) {
        match doc {
            Ok(doc) => docs.push(doc),
            Err(e) => return Err((docs.len() + 1, e)),
        }
    }
    Ok(docs)
}

/// `value` as YAML.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, WriteError> {
    serde_saphyr::to_string(value)
}
