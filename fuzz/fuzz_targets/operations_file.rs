//! `<backup>-itemoperations.json.gz` read back from a store
//! (`BackupStore::get_json::<Vec<Operation>>`, what `iar resume` and the
//! progress loop load).
//!
//! The input is stored twice: verbatim (a corrupt or foreign file: the
//! gunzip path) and gzip'd (the JSON path). Properties: a file that does not
//! decode is a `Corrupt` error naming the key; one that decodes is written
//! back by `put_json` (the operations file must hold what it read) and reads
//! back equal.

#![no_main]

use iar::operations::Operation;
use iar::store::{BackupFile, StoreError};
use iar_fuzz::{get_json, gzip, memory_store, put_json, put_raw};
use libfuzzer_sys::fuzz_target;

const FILE: BackupFile = BackupFile::ItemOperations;

fn check(bytes: Vec<u8>) {
    let store = memory_store();
    put_raw(&store, FILE, bytes);
    let ops: Vec<Operation> = match get_json(&store, FILE) {
        Ok(ops) => ops.expect("the file was just written"),
        Err(StoreError::Corrupt { key, .. }) => {
            assert_eq!(key, FILE.key(iar_fuzz::BACKUP));
            return;
        }
        Err(e) => panic!("a stored file must read or be corrupt: {e}"),
    };
    put_json(&store, FILE, &ops)
        .unwrap_or_else(|e| panic!("read {ops:?} but cannot write it back: {e}"));
    let back: Vec<Operation> = get_json(&store, FILE)
        .expect("what put_json wrote reads")
        .expect("the file was just written");
    assert_eq!(back, ops);
}

fuzz_target!(|data: &[u8]| {
    check(data.to_vec());
    check(gzip(data));
});
