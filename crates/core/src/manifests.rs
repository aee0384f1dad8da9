//! Reading Kubernetes manifests from files: YAML (multi-document) or JSON,
//! `List` kinds expanded, directories walked in name order.

use crate::catalog::Catalog;
use crate::item::Item;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

mod list_stream;

/// A JSON file this large is read a piece at a time when it is a plain
/// `List` ([`list_stream`]); a smaller one is read whole.
const STREAM_AT: u64 = 1 << 20;

/// A manifest that could not be read, naming the file and the document.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: document {index}: {problem}")]
    Parse {
        path: PathBuf,
        index: usize,
        #[source]
        problem: DocumentError,
    },
}

/// What is wrong with one document of a manifest file.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    #[error("{0}")]
    Yaml(#[source] Box<crate::yaml::Error>),
    /// A document, or a `List`'s item, that is not an object.
    #[error("expected an object, found {0}")]
    NotAnObject(&'static str),
    /// One item of a `List` document.
    #[error("items[{index}]: {problem}")]
    ListItem {
        index: usize,
        #[source]
        problem: Box<DocumentError>,
    },
    #[error("{0}")]
    NotAnItem(#[source] crate::item::ItemError),
}

impl DocumentError {
    fn list_item(index: usize, problem: DocumentError) -> Self {
        DocumentError::ListItem {
            index,
            problem: Box::new(problem),
        }
    }
}

pub(crate) fn is_manifest(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// Every manifest file under `path` (itself when it is a file), sorted.
pub fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let io = |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_dir() {
        std::fs::metadata(path).map_err(io)?;
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?.path();
        if entry.is_dir() {
            files.extend(manifest_files(&entry)?);
        } else if is_manifest(&entry) {
            files.push(entry);
        }
    }
    files.sort();
    Ok(files)
}

/// Parses one file's documents, expanding `*List` objects into their items.
pub fn parse_documents(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    let parse_err = |index, problem| ManifestError::Parse {
        path: path.to_path_buf(),
        index,
        problem,
    };
    let mut docs = Vec::new();
    if path.extension().and_then(|e| e.to_str()) == Some("json") {
        let v: Value =
            serde_json::from_str(text).map_err(|e| parse_err(1, DocumentError::Json(e)))?;
        docs.push(v);
    } else if let Some(json) = json_stream(text) {
        // JSON in a YAML file, read as JSON first, as kubectl does (its
        // YAMLOrJSONDecoder sniffs a leading '{'): JSON is not quite a
        // subset of YAML (a key and its ':' on different lines is valid
        // JSON and refused by YAML; a fuzzer found it). Anything that is
        // not one JSON stream is read as YAML, as before.
        docs = json;
    } else {
        // As kubectl reads YAML (crate::yaml): its empty and null
        // documents are left out, so an index counts the others.
        docs = crate::yaml::manifests(text)
            .map_err(|(i, e)| parse_err(i, DocumentError::Yaml(Box::new(e))))?;
    }
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Object(mut map)
                if map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List"))
                    && map.get("items").is_some_and(Value::is_array) =>
            {
                // Moved out, not copied: a List of 50,000 objects would
                // otherwise be held twice.
                if let Some(Value::Array(items)) = map.remove("items") {
                    // A List's items must be objects too (a fuzzer found a
                    // string item passed through as a "document").
                    for (j, item) in items.iter().enumerate() {
                        if !item.is_object() {
                            return Err(parse_err(
                                i + 1,
                                DocumentError::list_item(
                                    j,
                                    DocumentError::NotAnObject(json_type(item)),
                                ),
                            ));
                        }
                    }
                    out.extend(items);
                }
            }
            doc @ Value::Object(_) => out.push(doc),
            other => {
                return Err(parse_err(
                    i + 1,
                    DocumentError::NotAnObject(json_type(&other)),
                ));
            }
        }
    }
    Ok(out)
}

/// `text` as a stream of JSON objects, when it starts with '{' and is one.
fn json_stream(text: &str) -> Option<Vec<Value>> {
    if !text.trim_start().starts_with('{') {
        return None;
    }
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect::<Result<Vec<_>, _>>()
        .ok()
}

pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON `*List` document, its items left as the text they are: a
/// 50,000-object List is then never one parsed tree (each item is parsed
/// on its own, made an item and its parse dropped). `None` when the text is
/// not one JSON object that is a List with `items`, for
/// [`parse_documents`] to read as before.
fn json_list_items(text: &str) -> Option<Vec<&serde_json::value::RawValue>> {
    #[derive(Deserialize)]
    struct RawList<'a> {
        #[serde(borrow, default)]
        kind: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        items: Option<Vec<&'a serde_json::value::RawValue>>,
    }
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let list: RawList = serde_json::from_str(text).ok()?;
    list.kind.filter(|k| k.ends_with("List"))?;
    list.items
}

/// Reads one file into items.
pub fn read_file(path: &Path, catalog: &Catalog) -> Result<Vec<Item>, ManifestError> {
    read_file_with(path, catalog, &mut |item| item)
}

/// Reads one file into items, each passed through `keep` as it is made
/// (the manifest cluster spools it there), so the items' texts and the
/// file's are never all in memory together. A large JSON `List` is read a
/// piece at a time (`list_stream`); any other file is read whole, as
/// serde_json parses a slice several times faster than a reader.
pub fn read_file_with(
    path: &Path,
    catalog: &Catalog,
    keep: &mut dyn FnMut(Item) -> Item,
) -> Result<Vec<Item>, ManifestError> {
    if let Some(items) = stream_json_list(path, catalog, keep)? {
        return Ok(items);
    }
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(raw) = json_list_items(&text) {
        let parse_err = |problem| ManifestError::Parse {
            path: path.to_path_buf(),
            index: 1,
            problem,
        };
        return raw
            .into_iter()
            .enumerate()
            .map(|(j, raw)| {
                let value: Value = serde_json::from_str(raw.get())
                    .map_err(|e| parse_err(DocumentError::list_item(j, DocumentError::Json(e))))?;
                if !value.is_object() {
                    return Err(parse_err(DocumentError::list_item(
                        j,
                        DocumentError::NotAnObject(json_type(&value)),
                    )));
                }
                Item::from_value(value, catalog)
                    .map(|i| keep(i.text_only()))
                    .map_err(|e| parse_err(DocumentError::NotAnItem(e)))
            })
            .collect();
    }
    parse_documents(path, &text)?
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            // Kept as text: what plugins and the tarball read; a value is
            // parsed again only where one is needed.
            Item::from_value(v, catalog)
                .map(|i| keep(i.text_only()))
                .map_err(|e| ManifestError::Parse {
                    path: path.to_path_buf(),
                    index: i + 1,
                    problem: DocumentError::NotAnItem(e),
                })
        })
        .collect()
}

/// A large JSON `List`'s items, read a piece at a time; `None` for any
/// other file (or one whose elements do not all make items: the whole-file
/// read then says what is wrong, as for a small file).
fn stream_json_list(
    path: &Path,
    catalog: &Catalog,
    keep: &mut dyn FnMut(Item) -> Item,
) -> Result<Option<Vec<Item>>, ManifestError> {
    let io = |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.extension().and_then(|e| e.to_str()) != Some("json") {
        return Ok(None);
    }
    let file = std::fs::File::open(path).map_err(io)?;
    if file.metadata().map_err(io)?.len() < STREAM_AT {
        return Ok(None);
    }
    let mut items = Vec::new();
    let scanned = list_stream::split_items(file, 1 << 20, &mut |bytes| {
        let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
            return false;
        };
        match Item::from_value(value, catalog) {
            Ok(item) => {
                items.push(keep(item.text_only()));
                true
            }
            Err(_) => false,
        }
    })
    .map_err(io)?;
    let is_list = scanned.is_some_and(|s| s.kind.is_some_and(|k| k.ends_with("List")));
    Ok(is_list.then_some(items))
}

/// Reads every item under the given files and directories.
pub fn read_items(paths: &[PathBuf], catalog: &Catalog) -> Result<Vec<Item>, ManifestError> {
    let mut items = Vec::new();
    for path in paths {
        for file in manifest_files(path)? {
            items.extend(read_file(&file, catalog)?);
        }
    }
    Ok(items)
}

#[cfg(test)]
mod kubectl_yaml;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_yaml_and_lists() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n- {apiVersion: v1, kind: Secret, metadata: {name: c}}\n";
        let docs = parse_documents(Path::new("x.yaml"), text).unwrap();
        let kinds: Vec<_> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Pod", "ConfigMap", "Secret"]);
    }

    /// Found by fuzzing: valid JSON that YAML refuses (a key's ':' on the
    /// next line) in a `.yaml` file; kubectl reads it as JSON, so does iar.
    #[test]
    fn json_in_a_yaml_file_is_read_as_json() {
        let text = "{\"apiVersion\": \"v1\", \"kind\": \"Pod\",\n \"metadata\": {\"name\"\n: \"a\"}}\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"b\"}}";
        assert!(
            crate::yaml::manifests::<Value>(text).is_err(),
            "YAML refuses it"
        );
        let docs = parse_documents(Path::new("x.yaml"), text).unwrap();
        let names: Vec<_> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        // Flow-style YAML that is not JSON is still YAML.
        let docs = parse_documents(
            Path::new("x.yaml"),
            "{apiVersion: v1, kind: Pod, metadata: {name: c}}",
        )
        .unwrap();
        assert_eq!(docs[0]["metadata"]["name"], "c");
    }

    /// Found by fuzzing: a List item that is not an object was returned
    /// as a document.
    #[test]
    fn list_items_must_be_objects() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n- 0G{apiVer}}\n";
        let err = parse_documents(Path::new("x.yaml"), text)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "x.yaml: document 1: items[1]: expected an object, found a string"
        );
    }

    /// A JSON List over [`STREAM_AT`], read a piece at a time, gives the
    /// items the whole-file read gives; one whose element is not an item
    /// fails as a small file does, naming the element.
    #[test]
    fn a_large_json_list_reads_as_a_small_one() {
        let dir = tempfile::tempdir().unwrap();
        let items: Vec<Value> = (0..1500)
            .map(|i| {
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i}"), "namespace": "shop"},
                    "data": {"k": "x".repeat(800)}})
            })
            .collect();
        let list = serde_json::json!({"apiVersion": "v1", "items": items, "kind": "List"});
        let path = dir.path().join("big.json");
        let text = serde_json::to_string_pretty(&list).unwrap();
        assert!(text.len() as u64 > STREAM_AT);
        std::fs::write(&path, &text).unwrap();
        let mut kept = 0;
        let streamed = read_file_with(&path, Catalog::builtin(), &mut |i| {
            kept += 1;
            i
        })
        .unwrap();
        assert_eq!(kept, 1500);
        let whole = parse_documents(&path, &text).unwrap();
        assert_eq!(streamed.len(), whole.len());
        for (item, value) in streamed.iter().zip(&whole) {
            assert_eq!(item.value(), value);
        }
        assert_eq!(streamed[1499].id.name, "cm-1499");

        let mut broken = list.clone();
        broken["items"][700] = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap"});
        std::fs::write(&path, serde_json::to_string(&broken).unwrap()).unwrap();
        let err = read_file(&path, Catalog::builtin())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("big.json: document 1: ") && err.contains("name"),
            "{err}"
        );
    }

    #[test]
    fn garbage_names_file_and_document() {
        let err = parse_documents(Path::new("bad.yaml"), "a: 1\n---\n- just\n- a list\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "bad.yaml: document 2: expected an object, found an array"
        );
        let err = parse_documents(Path::new("bad.json"), "{nope")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("bad.json: document 1: key must be a string"),
            "{err}"
        );
    }

    /// Every item of a JSON List or a YAML file goes through `keep` once,
    /// in file order, and what `keep` returns is what is read.
    #[test]
    fn each_item_passes_through_keep_as_it_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let cm = |n: &str| {
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{n}"}}}}"#)
        };
        let list = dir.path().join("list.json");
        std::fs::write(
            &list,
            format!(r#"{{"kind":"List","items":[{},{}]}}"#, cm("a"), cm("b")),
        )
        .unwrap();
        let yaml = dir.path().join("two.yaml");
        std::fs::write(&yaml, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\n").unwrap();
        let spool = crate::spool::Spool::new().unwrap();
        for (file, want) in [(&list, ["a", "b"]), (&yaml, ["c", "d"])] {
            let mut seen = Vec::new();
            let items = read_file_with(file, Catalog::builtin(), &mut |i| {
                seen.push(i.id.name.clone());
                i.spooled(&spool)
            })
            .unwrap();
            assert_eq!(seen, want);
            assert!(items.iter().all(Item::is_spooled_only));
            let names: Vec<&str> = items.iter().map(|i| i.id.name.as_str()).collect();
            assert_eq!(names, want);
            assert_eq!(items[0].value()["metadata"]["name"], want[0]);
        }
    }
}
