//! `velero-backup.json` and `<backup>-results.gz` read back from a store
//! (`BackupStore::get_json::<BackupObject>` / `::<Results>`, what `iar
//! resume` and `iar describe` load).
//!
//! The input is stored as the backup object (plain JSON) and, gzip'd, as
//! the results file. Properties: a file that does not decode is a `Corrupt`
//! error naming its key; one that decodes is written back by `put_json` and
//! reads back equal (a spec with floats excepted: serde_json's default float
//! parsing is not guaranteed to round-trip the last bit).

#![no_main]

use iar::backup::{BackupObject, Results};
use iar::store::{BackupFile, StoreError};
use iar_fuzz::{get_json, gzip, memory_store, put_json, put_raw};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

fn round_trip<T>(file: BackupFile, bytes: Vec<u8>, same: impl Fn(&T, &T) -> bool)
where
    T: Serialize + DeserializeOwned + Debug,
{
    let store = memory_store();
    put_raw(&store, file, bytes);
    let value: T = match get_json(&store, file) {
        Ok(v) => v.expect("the file was just written"),
        Err(StoreError::Corrupt { key, .. }) => {
            assert_eq!(key, file.key(iar_fuzz::BACKUP));
            return;
        }
        Err(e) => panic!("a stored file must read or be corrupt: {e}"),
    };
    put_json(&store, file, &value)
        .unwrap_or_else(|e| panic!("read {value:?} but cannot write it back: {e}"));
    let back: T = get_json(&store, file)
        .expect("what put_json wrote reads")
        .expect("the file was just written");
    assert!(same(&back, &value), "{back:?} != {value:?}");
}

fuzz_target!(|data: &[u8]| {
    round_trip::<BackupObject>(BackupFile::Metadata, data.to_vec(), |a, b| {
        let mut a2 = a.clone();
        a2.spec = b.spec.clone();
        a2 == *b && (has_float(&b.spec) || a.spec == b.spec)
    });
    round_trip::<Results>(BackupFile::Results, gzip(data), |a, b| a == b);
});

fn has_float(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Number(n) => !(n.is_i64() || n.is_u64()),
        Value::Array(a) => a.iter().any(has_float),
        Value::Object(m) => m.values().any(has_float),
        _ => false,
    }
}
