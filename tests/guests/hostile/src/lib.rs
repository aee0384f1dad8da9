//! Test fixture: a plugin that misbehaves on demand, so the host's tests can
//! check that every way a plugin can go wrong is contained and reported.
//! It is not an example to follow.
//!
//! It implements the generated `item-action` export directly instead of
//! [`iar_sdk::ItemAction`], because the SDK only lets a plugin return
//! well-formed items and some behaviours here must return broken ones.
//!
//! # Config
//!
//! `behavior` picks what `execute` does (default `ok`):
//!
//! | value | `execute` ... |
//! |---|---|
//! | `ok` | returns the item unchanged |
//! | `loop` | spins forever |
//! | `alloc` | allocates 1 MiB blocks, touching them, until memory runs out |
//! | `recurse` | recurses without bound until the stack overflows |
//! | `panic` | panics (`hostile plugin panicked on purpose`) |
//! | `not-object` | returns the item `[1,2,3]` |
//! | `not-json` | returns the item `{not json` |
//! | `rename` | returns the item with `metadata.name` + `-renamed` |
//! | `change-kind` | returns the item with `kind: Secret` |
//! | `operation` | starts operation `op-<name>` whose post-operation item is the item itself, in every phase (in finalize that is a violation) |
//! | `empty-operation-id` | returns operation id `""` |
//! | `post-items-without-operation` | names a post-operation item but no operation |
//! | `escape` | tries files, directories, environment and network (a TCP connect to `127.0.0.1:<escape-port>`, config, default 80), then fails with `sandbox: file=<denied\|OPENED>; dir=<denied\|LISTED>; env=<empty\|LEAKED>; socket=<denied\|CONNECTED>` |
//! | `oversized` | returns the item with a 20 MiB annotation |
//! | `many-additional` | names 100 000 additional items |
//! | `stdout` | writes 1 MiB to stdout and 1 MiB to stderr, then returns the item unchanged |
//! | `fail` | fails with `failed("refused on purpose")` |
//! | `fail-loud` | fails with a message of `fail-bytes` (config, default 60000) bytes of `x`, and as many on stderr |
//! | `retryable` | fails with `retryable("try again")` |
//! | `log` | logs `hello from hostile` once at each level, then returns the item unchanged |
//! | `resources` | opens WASI stdout streams in a loop and never drops them |
//! | `cluster-get` | calls `cluster-get` for the item itself `cluster-gets` times (config, default 100), then returns the item unchanged with annotation `hostile.iar.test/found` = how many were found; with `then` = `loop` it spins forever after the calls |
//! | `remember` | returns the item with annotation `hostile.iar.test/previous` = the name of the item the previous call saw in this instance (`""` for the first), kept in a global |
//! | `operation-fixed` | starts operation `op-fixed`; when the item's name ends in `-bad` it also returns the item `[1,2,3]` (which the boundary refuses) |
//! | `sleep` | sleeps for `Duration::MAX` (one WASI clock wait, no CPU) |
//! | `alias` | names `alias-count` (default 500) additional items whose names all point at one 4 MiB buffer (2 GB if the host copied each) |
//! | `nap` | sleeps `nap-ms` (default 200) and returns the item unchanged: a slow, well-behaved plugin |
//! | `log-flood` | logs `log-lines` (default 1000) lines of 4 KiB at info level, then returns the item unchanged |
//! | `clock-poll` | sleeps 1 ms at a time for ever: many short clock waits, each under any bound |
//! | `get-id` | calls `cluster-get` for the identifier in config `id-group`, `id-resource`, `id-namespace`, `id-name` and returns the item with annotation `hostile.iar.test/got` = `found:<the object's JSON>`, `none`, or `error:<message>` |
//! | `additional-id` | returns the item unchanged, naming the identifier of `get-id` as an additional item |
//! | `create-id` | (1.2.0) calls `create` for the identifier of `get-id` with config `object` (JSON), or by default an object of that identity (`apiVersion` from `id-group`, `kind` from config `kind`, default `ConfigMap`), `create-times` times (default 1), and returns the item with annotation `hostile.iar.test/created` = `ok:<the object's JSON>` or `error:<message>` (of the last try) |
//! | `delete-id` | (1.2.0) calls `delete` for the identifier of `get-id`; annotation `hostile.iar.test/deleted` = `true`, `false` or `error:<message>` |
//! | `list-id` | (1.2.0) calls `list` for `id-group`, `id-resource`, `id-namespace` and config `selector`; annotation `hostile.iar.test/listed` = the names found, comma-separated, or `error:<message>` |
//! | `run-object` | (1.4.0) calls `runs.backup` `run-gets` times (config, default 1) and returns the item with annotation `hostile.iar.test/run` = the whole Backup the host gave, or `none`, and `hostile.iar.test/run-restore` = `none`, or `some` when the host gave a Restore in a backup's call |
//! | `catalog` | (1.4.0) calls `cluster-catalog`'s `resources`, `server-version` and `home-namespace`; annotation `hostile.iar.test/catalog` = `{"resources": [[group, version, kind, resource, namespaced, verbs joined by ","]...] or "error:<message>", "version": "<git-version>" or "error:<message>", "home": "<namespace>"}` |
//! | `create-then-trap` | (1.2.0) creates as `create-id` does, then panics: the object must still be recorded |
//!
//! Any other value fails the item with a message listing the known ones, so
//! a typo in a test does not pass as `ok`.
//!
//! `progress` picks what `progress` does: `sleep` (sleeps for
//! `Duration::MAX`), `complete` (completed, 1/1),
//! `fail` (`failed("progress failed on purpose")`), `retryable`
//! (`retryable("not yet")`), `error` (completed with error
//! `operation failed on purpose`), `loop` (spins forever), `panic`,
//! `negative-time` (started at -1 s), `year-10000` (updated at
//! 253 402 300 800 s, 10000-01-01), `bad-nanos` (started with 1e9 ns);
//! anything else, or unset: not completed, started at 1 700 000 000 s.
//!
//! `applies-to` picks what `applies-to` does: unset means every item;
//! `fail` fails, `invalid-labels` returns the label selector `app in (`,
//! `loop` spins forever, `panic` panics, `sleep` sleeps for
//! `Duration::MAX`, `slow` sleeps `slow-ms` (default 1500) and then
//! applies to every item (a slow but good load).
//!
//! `cancel` logs `cancel <operation id>` at warn level and succeeds; with
//! config `cancel` = `sleep` it sleeps for `Duration::MAX` first; with
//! `cancel` = `delete-id` it deletes the identifier of `get-id` and fails
//! with the host's refusal if there is one. `progress` = `create-id` tries
//! to create as `execute` would and fails with what the host answered
//! (the host refuses: creates come only from `execute`).

use iar_sdk::bindings::exports::iar::plugin::item_action::Guest;
use iar_sdk::bindings::iar::plugin::types::{
    ActionError, Backup, ExecuteOutput, OperationProgress, ResourceIdentifier, ResourceSelector,
    Timestamp,
};
use iar_sdk::serde_json::{self, Value};
use iar_sdk::{Level, config, log};
use std::hint::black_box;

/// The `behavior` values `execute` knows.
const BEHAVIORS: &[&str] = &[
    "ok",
    "loop",
    "alloc",
    "recurse",
    "panic",
    "not-object",
    "not-json",
    "rename",
    "change-kind",
    "drop-api-version",
    "operation",
    "empty-operation-id",
    "post-items-without-operation",
    "escape",
    "oversized",
    "many-additional",
    "stdout",
    "fail",
    "retryable",
    "log",
    "resources",
    "cluster-get",
    "remember",
    "operation-fixed",
    "sleep",
    "log-flood",
    "alias",
    "nap",
    "clock-poll",
    "get-id",
    "additional-id",
    "create-id",
    "delete-id",
    "list-id",
    "create-then-trap",
    "update-id",
    "patch-id",
];

/// `create` for the configured identifier, with the configured object;
/// the last try's answer.
fn create_configured() -> Result<String, String> {
    let id = configured_id();
    let object = config("object").unwrap_or_else(|| {
        let api_version = if id.group.is_empty() {
            "v1".to_string()
        } else {
            format!("{}/v1", id.group)
        };
        serde_json::json!({
            "apiVersion": api_version,
            "kind": config("kind").unwrap_or_else(|| "ConfigMap".into()),
            "metadata": {"name": id.name, "namespace": id.namespace},
        })
        .to_string()
    });
    let times: usize = config("create-times")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut last = Err("not tried".to_string());
    for _ in 0..times.max(1) {
        last = iar_sdk::bindings_v1_2::iar::plugin::cluster_write::create(&id, &object);
    }
    last
}

/// An update's or patch's answer as `ok:<json>` or `<kind>:<text>`.
fn write_answer(answer: Result<Value, iar_sdk::WriteError>) -> String {
    use iar_sdk::WriteError as E;
    match answer {
        Ok(v) => format!("ok:{v}"),
        Err(E::Refused(m)) => format!("refused:{m}"),
        Err(E::Conflict(m)) => format!("conflict:{m}"),
        Err(E::NotFound(m)) => format!("not-found:{m}"),
        Err(E::Invalid(m)) => format!("invalid:{m}"),
        Err(E::Unavailable(m)) => format!("unavailable:{m}"),
    }
}

/// The name of the item the previous `remember` call saw: state that lives
/// as long as the instance.
static PREVIOUS: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

// The WASI import that hands out a new stdout stream handle on every call.
// Declared by hand (the same import Rust's std uses for `println!`), so the
// guest can hold handles without dropping them.
#[link(wasm_import_module = "wasi:cli/stdout@0.2.4")]
unsafe extern "C" {
    #[link_name = "get-stdout"]
    fn wasi_get_stdout() -> i32;
}

/// Opens stdout streams forever, keeping every handle.
fn open_forever() -> ! {
    let mut handles = Vec::new();
    loop {
        // SAFETY: get-stdout takes no arguments and returns a handle.
        handles.push(unsafe { wasi_get_stdout() });
        black_box(&handles);
    }
}

fn annotate(item: &str, key: &str, value: String) -> Result<ExecuteOutput, ActionError> {
    let mut value_json = parse(item)?;
    let metadata = &mut value_json["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = Value::Object(Default::default());
    }
    metadata["annotations"][key] = Value::String(value);
    Ok(output(Some(value_json.to_string())))
}

const MIB: usize = 1 << 20;

struct Hostile;

fn failed(message: impl Into<String>) -> ActionError {
    ActionError::Failed(message.into())
}

fn output(item: Option<String>) -> ExecuteOutput {
    ExecuteOutput {
        item,
        additional_items: Vec::new(),
        operation_id: None,
        post_operation_items: Vec::new(),
    }
}

fn unchanged() -> ExecuteOutput {
    output(None)
}

fn parse(item: &str) -> Result<Value, ActionError> {
    match serde_json::from_str::<Value>(item) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err(failed("hostile: the item is not a JSON object")),
        Err(e) => Err(failed(format!("hostile: the item is not JSON: {e}"))),
    }
}

fn str_at<'a>(item: &'a Value, pointer: &str) -> &'a str {
    item.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The item's identity as a resource identifier. The plural resource is
/// guessed from the kind (`Pod` → `pods`, `NetworkPolicy` →
/// `networkpolicies`), which is right for the kinds the tests use.
fn identity(item: &Value) -> ResourceIdentifier {
    let group = str_at(item, "/apiVersion")
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or("");
    let kind = str_at(item, "/kind").to_ascii_lowercase();
    let resource = if kind.ends_with('s') {
        format!("{kind}es")
    } else if let Some(stem) = kind.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{kind}s")
    };
    ResourceIdentifier {
        group: group.to_string(),
        resource,
        namespace: str_at(item, "/metadata/namespace").to_string(),
        name: str_at(item, "/metadata/name").to_string(),
    }
}

/// Waits on the monotonic clock for as long as a `Duration` can say.
fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::MAX);
    }
}

/// The identifier named in config (`id-group`, `id-resource`,
/// `id-namespace`, `id-name`), exactly as written.
fn configured_id() -> ResourceIdentifier {
    let field = |key: &str| config(key).unwrap_or_default();
    ResourceIdentifier {
        group: field("id-group"),
        resource: field("id-resource"),
        namespace: field("id-namespace"),
        name: field("id-name"),
    }
}

/// Spins forever; the optimizer cannot prove the loop has no effect.
fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

/// Allocates 1 MiB blocks and writes to every page of each, forever.
fn hoard() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; MIB];
        for (i, byte) in block.iter_mut().enumerate().step_by(4096) {
            *byte = i as u8 | 1;
        }
        hoard.push(black_box(block));
        black_box(&hoard);
    }
}

/// Recurses until the stack overflows. Not a tail call: the result goes
/// through `black_box` and is combined with a local after the call returns.
#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let frame = black_box([depth; 8]);
    if black_box(depth) == u64::MAX {
        return frame[0];
    }
    let below = black_box(recurse(black_box(depth + 1)));
    below.wrapping_add(frame[(depth % 8) as usize])
}

/// Tries to reach outside the sandbox; reports what happened in a fixed form.
fn escape() -> String {
    let file = match std::fs::File::open("/etc/passwd") {
        Ok(_) => "OPENED",
        Err(e) => {
            log(Level::Debug, &format!("escape: open /etc/passwd: {e}"));
            "denied"
        }
    };
    let listed = [".", "/"]
        .into_iter()
        .filter(|dir| match std::fs::read_dir(dir) {
            Ok(_) => true,
            Err(e) => {
                log(Level::Debug, &format!("escape: read_dir {dir:?}: {e}"));
                false
            }
        })
        .count();
    let dir = if listed == 0 { "denied" } else { "LISTED" };
    let home = std::env::var_os("HOME").is_some();
    let vars = std::env::vars_os().count();
    let env = if !home && vars == 0 {
        "empty"
    } else {
        "LEAKED"
    };
    // The test listens on this port, so a connection would be accepted if
    // the sandbox let one out.
    let port = config("escape-port").unwrap_or_else(|| "80".into());
    let socket = match std::net::TcpStream::connect(format!("127.0.0.1:{port}")) {
        Ok(_) => "CONNECTED",
        Err(e) => {
            log(
                Level::Debug,
                &format!("escape: connect 127.0.0.1:{port}: {e}"),
            );
            "denied"
        }
    };
    format!("sandbox: file={file}; dir={dir}; env={env}; socket={socket}")
}

/// Writes 1 MiB to stdout and 1 MiB to stderr, in 1 KiB lines.
fn chatter() {
    let line = "o".repeat(1023);
    for _ in 0..MIB / 1024 {
        println!("{line}");
    }
    let line = "e".repeat(1023);
    for _ in 0..MIB / 1024 {
        eprintln!("{line}");
    }
}

impl Guest for Hostile {
    fn applies_to() -> Result<ResourceSelector, ActionError> {
        let mut selector = ResourceSelector {
            included_namespaces: Vec::new(),
            excluded_namespaces: Vec::new(),
            included_resources: Vec::new(),
            excluded_resources: Vec::new(),
            label_selector: String::new(),
        };
        match config("applies-to").as_deref() {
            None => {}
            Some("fail") => return Err(failed("applies-to failed on purpose")),
            Some("invalid-labels") => selector.label_selector = "app in (".to_string(),
            Some("loop") => spin(),
            Some("sleep") => sleep_forever(),
            Some("slow") => std::thread::sleep(std::time::Duration::from_millis(
                config("slow-ms")
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or(1500),
            )),
            Some("panic") => panic!("hostile plugin panicked on purpose in applies-to"),
            Some(other) => return Err(failed(format!("unknown applies-to {other:?}"))),
        }
        Ok(selector)
    }

    fn execute(item: String, _backup: Backup) -> Result<ExecuteOutput, ActionError> {
        let behavior = config("behavior").unwrap_or_else(|| "ok".to_string());
        match behavior.as_str() {
            "ok" => Ok(unchanged()),
            "loop" => spin(),
            "alloc" => hoard(),
            "recurse" => {
                let depth = recurse(0);
                Err(failed(format!("recursion ended at {depth}?")))
            }
            "panic" => panic!("hostile plugin panicked on purpose"),
            "not-object" => Ok(output(Some("[1,2,3]".to_string()))),
            "not-json" => Ok(output(Some("{not json".to_string()))),
            "rename" => {
                let mut value = parse(&item)?;
                let name = format!("{}-renamed", str_at(&value, "/metadata/name"));
                value["metadata"]["name"] = Value::String(name);
                Ok(output(Some(value.to_string())))
            }
            "change-kind" => {
                let mut value = parse(&item)?;
                value["kind"] = Value::String("Secret".to_string());
                Ok(output(Some(value.to_string())))
            }
            "drop-api-version" => {
                let mut value = parse(&item)?;
                value["apiVersion"] = Value::from(1);
                Ok(output(Some(value.to_string())))
            }
            "operation" => {
                let id = identity(&parse(&item)?);
                Ok(ExecuteOutput {
                    operation_id: Some(format!("op-{}", id.name)),
                    post_operation_items: vec![id],
                    ..unchanged()
                })
            }
            "empty-operation-id" => Ok(ExecuteOutput {
                operation_id: Some(String::new()),
                ..unchanged()
            }),
            "post-items-without-operation" => Ok(ExecuteOutput {
                post_operation_items: vec![identity(&parse(&item)?)],
                ..unchanged()
            }),
            "escape" => Err(failed(escape())),
            "oversized" => {
                let mut value = parse(&item)?;
                let metadata = &mut value["metadata"];
                if !metadata["annotations"].is_object() {
                    metadata["annotations"] = Value::Object(Default::default());
                }
                metadata["annotations"]["hostile.iar.test/padding"] =
                    Value::String("x".repeat(20 * MIB));
                Ok(output(Some(value.to_string())))
            }
            "many-additional" => {
                let namespace = str_at(&parse(&item)?, "/metadata/namespace").to_string();
                let additional_items = (0..100_000)
                    .map(|i| ResourceIdentifier {
                        group: String::new(),
                        resource: "configmaps".to_string(),
                        namespace: namespace.clone(),
                        name: format!("hostile-{i}"),
                    })
                    .collect();
                Ok(ExecuteOutput {
                    additional_items,
                    ..unchanged()
                })
            }
            "stdout" => {
                chatter();
                Ok(unchanged())
            }
            "fail" => Err(failed("refused on purpose")),
            "fail-loud" => {
                let n = config("fail-bytes")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(60_000);
                eprint!("{}", "e".repeat(n));
                Err(failed("x".repeat(n)))
            }
            "retryable" => Err(ActionError::Retryable("try again".to_string())),
            "log" => {
                for level in [
                    Level::Trace,
                    Level::Debug,
                    Level::Info,
                    Level::Warn,
                    Level::Error,
                ] {
                    log(level, "hello from hostile");
                }
                Ok(unchanged())
            }
            "resources" => open_forever(),
            "cluster-get" => {
                let id = identity(&parse(&item)?);
                let n: usize = config("cluster-gets")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(100);
                let mut found = 0;
                for _ in 0..n {
                    match iar_sdk::bindings::iar::plugin::host::cluster_get(&id) {
                        Ok(Some(_)) => found += 1,
                        Ok(None) => {}
                        Err(e) => return Err(failed(format!("cluster-get: {e}"))),
                    }
                }
                if config("then").as_deref() == Some("loop") {
                    spin();
                }
                annotate(&item, "hostile.iar.test/found", found.to_string())
            }
            "sleep" => sleep_forever(),
            "alias" => {
                let n: usize = config("alias-count")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(500);
                let mut buffer = std::mem::ManuallyDrop::new("a".repeat(4 << 20));
                let (ptr, len) = (buffer.as_mut_ptr(), buffer.len());
                let additional_items = (0..n)
                    .map(|_| ResourceIdentifier {
                        group: String::new(),
                        resource: "configmaps".to_string(),
                        namespace: "shop".to_string(),
                        // SAFETY: none, on purpose: every name owns the same
                        // buffer. The host reads them before the guest could
                        // free any; this instance is not used again.
                        name: unsafe { String::from_raw_parts(ptr, len, len) },
                    })
                    .collect();
                Ok(ExecuteOutput {
                    additional_items,
                    ..unchanged()
                })
            }
            "nap" => {
                let ms = config("nap-ms").and_then(|n| n.parse().ok()).unwrap_or(200);
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(unchanged())
            }
            "log-flood" => {
                let n: usize = config("log-lines")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1000);
                let filler = "f".repeat(4000);
                for i in 0..n {
                    log(Level::Info, &format!("flood {i} {filler}"));
                }
                Ok(unchanged())
            }
            "clock-poll" => loop {
                std::thread::sleep(std::time::Duration::from_millis(1));
            },
            "catalog" => {
                use iar_sdk::bindings_v1_4::iar::plugin::cluster_catalog as catalog;
                let resources = match catalog::resources() {
                    Ok(rows) => Value::from(
                        rows.iter()
                            .map(|r| {
                                iar_sdk::json!([
                                    r.group,
                                    r.version,
                                    r.kind,
                                    r.resource,
                                    r.namespaced,
                                    r.verbs.join(",")
                                ])
                            })
                            .collect::<Vec<_>>(),
                    ),
                    Err(e) => Value::from(format!("error:{e}")),
                };
                let version = match catalog::server_version() {
                    Ok(v) => v.git_version,
                    Err(e) => format!("error:{e}"),
                };
                let seen = iar_sdk::json!({"resources": resources, "version": version,
                    "home": catalog::home_namespace()});
                annotate(&item, "hostile.iar.test/catalog", seen.to_string())
            }
            "run-object" => {
                let n: usize = config("run-gets").and_then(|n| n.parse().ok()).unwrap_or(1);
                let mut backup = None;
                for _ in 0..n {
                    backup = iar_sdk::bindings_v1_4::iar::plugin::runs::backup();
                }
                let restore = iar_sdk::bindings_v1_4::iar::plugin::runs::restore();
                let mut value = parse(&item)?;
                let annotations = value["metadata"]
                    .as_object_mut()
                    .ok_or_else(|| failed("no metadata"))?
                    .entry("annotations")
                    .or_insert_with(|| Value::Object(Default::default()));
                annotations["hostile.iar.test/run"] =
                    Value::from(backup.unwrap_or_else(|| "none".into()));
                annotations["hostile.iar.test/run-restore"] =
                    Value::from(restore.map_or("none", |_| "some"));
                Ok(output(Some(value.to_string())))
            }
            "get-id" => {
                let got = match iar_sdk::bindings::iar::plugin::host::cluster_get(&configured_id())
                {
                    Ok(Some(json)) => format!("found:{json}"),
                    Ok(None) => "none".to_string(),
                    Err(e) => format!("error:{e}"),
                };
                annotate(&item, "hostile.iar.test/got", got)
            }
            "create-id" => {
                let created = match create_configured() {
                    Ok(json) => format!("ok:{json}"),
                    Err(e) => format!("error:{e}"),
                };
                annotate(&item, "hostile.iar.test/created", created)
            }
            "create-then-trap" => {
                let _ = create_configured();
                panic!("hostile plugin panicked after creating");
            }
            "update-id" => {
                // The configured object as it is, or the object `create`
                // returns with its data and a label changed.
                let object = match config("update-object") {
                    Some(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
                    None => match create_configured() {
                        Ok(json) => {
                            let mut v: Value = serde_json::from_str(&json).unwrap_or_default();
                            v["data"] = serde_json::json!({"step": "updated"});
                            v["metadata"]["labels"]["hostile"] = Value::from("updated");
                            v
                        }
                        Err(e) => Value::String(format!("create failed: {e}")),
                    },
                };
                let answer = iar_sdk::update(&configured_id(), &object);
                annotate(&item, "hostile.iar.test/updated", write_answer(answer))
            }
            "patch-id" => {
                let kind = match config("patch-type").as_deref() {
                    Some("json") => iar_sdk::PatchType::Json,
                    Some("strategic") => iar_sdk::PatchType::StrategicMerge,
                    _ => iar_sdk::PatchType::Merge,
                };
                let body = config("patch").unwrap_or_else(|| "{}".into());
                let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
                let answer = iar_sdk::patch(&configured_id(), kind, &body);
                annotate(&item, "hostile.iar.test/patched", write_answer(answer))
            }
            "delete-id" => {
                let deleted = match iar_sdk::bindings_v1_2::iar::plugin::cluster_write::delete(
                    &configured_id(),
                ) {
                    Ok(b) => b.to_string(),
                    Err(e) => format!("error:{e}"),
                };
                annotate(&item, "hostile.iar.test/deleted", deleted)
            }
            "list-id" => {
                let id = configured_id();
                let selector = config("selector").unwrap_or_default();
                let listed = match iar_sdk::bindings_v1_2::iar::plugin::cluster_list::list(
                    &id.group,
                    &id.resource,
                    &id.namespace,
                    &selector,
                ) {
                    Ok(objects) => objects
                        .iter()
                        .map(|o| {
                            serde_json::from_str::<Value>(o)
                                .map(|v| str_at(&v, "/metadata/name").to_string())
                                .unwrap_or_else(|e| format!("unparsable:{e}"))
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                    Err(e) => format!("error:{e}"),
                };
                annotate(&item, "hostile.iar.test/listed", listed)
            }
            "additional-id" => Ok(ExecuteOutput {
                additional_items: vec![configured_id()],
                ..unchanged()
            }),
            "remember" => {
                let name = str_at(&parse(&item)?, "/metadata/name").to_string();
                let previous = {
                    let mut slot = PREVIOUS.lock().unwrap_or_else(|p| p.into_inner());
                    std::mem::replace(&mut *slot, name)
                };
                annotate(&item, "hostile.iar.test/previous", previous)
            }
            "operation-fixed" => {
                let id = identity(&parse(&item)?);
                let item = id.name.ends_with("-bad").then(|| "[1,2,3]".to_string());
                Ok(ExecuteOutput {
                    operation_id: Some("op-fixed".to_string()),
                    post_operation_items: vec![id],
                    ..output(item)
                })
            }
            other => Err(failed(format!(
                "hostile: unknown behavior {other:?}; known: {}",
                BEHAVIORS.join(", ")
            ))),
        }
    }

    fn progress(operation_id: String, _backup: Backup) -> Result<OperationProgress, ActionError> {
        let mut progress = OperationProgress {
            completed: false,
            error: None,
            n_completed: 0,
            n_total: 1,
            operation_units: "steps".to_string(),
            description: format!("hostile operation {operation_id}"),
            started: Some(Timestamp {
                seconds: 1_700_000_000,
                nanoseconds: 0,
            }),
            updated: None,
        };
        match config("progress").as_deref() {
            Some("create-id") => {
                return match create_configured() {
                    Ok(json) => Err(failed(format!("created from progress: {json}"))),
                    Err(e) => Err(failed(e)),
                };
            }
            Some("complete") => {
                progress.completed = true;
                progress.n_completed = 1;
            }
            Some("fail") => return Err(failed("progress failed on purpose")),
            Some("retryable") => return Err(ActionError::Retryable("not yet".to_string())),
            Some("error") => {
                progress.completed = true;
                progress.error = Some("operation failed on purpose".to_string());
            }
            Some("loop") => spin(),
            Some("sleep") => sleep_forever(),
            Some("panic") => panic!("hostile plugin panicked on purpose in progress"),
            Some("negative-time") => {
                progress.started = Some(Timestamp {
                    seconds: -1,
                    nanoseconds: 0,
                })
            }
            Some("year-10000") => {
                progress.updated = Some(Timestamp {
                    seconds: 253_402_300_800,
                    nanoseconds: 0,
                })
            }
            Some("bad-nanos") => {
                progress.started = Some(Timestamp {
                    seconds: 1_700_000_000,
                    nanoseconds: 1_000_000_000,
                })
            }
            _ => {}
        }
        Ok(progress)
    }

    fn cancel(operation_id: String, _backup: Backup) -> Result<(), ActionError> {
        if config("cancel").as_deref() == Some("sleep") {
            sleep_forever();
        }
        if config("cancel").as_deref() == Some("delete-id") {
            iar_sdk::bindings_v1_2::iar::plugin::cluster_write::delete(&configured_id())
                .map_err(failed)?;
        }
        log(Level::Warn, &format!("cancel {operation_id}"));
        Ok(())
    }
}

iar_sdk::bindings::__export_iar_plugin!(Hostile with_types_in iar_sdk::bindings);
