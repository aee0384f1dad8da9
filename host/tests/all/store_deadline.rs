//! A backup's write held up on the way to the store past its lease's end:
//! refused by the store itself (a presigned PUT, `store::deadline`), where
//! object_store's own PUT, checked against the fence just before, lands
//! late over what a taker may have written. The real S3 server
//! (versitygw) behind Shopify's toxiproxy, whose latency toxic holds every
//! request for longer than the lease has left.

use crate::velero::{ACCESS_KEY, BUCKET, SECRET_KEY, s3_server, tools};
use crate::volume_repository::go_tool;
use iar::store::{BackupFile, BackupStore, StoreError};
use iar_tests::toxiproxy::{Stream, Toxiproxy};
use object_store::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(8);
/// Longer than the lease has left once the fence's own listing (itself
/// held this long) has been answered.
const HELD: Duration = Duration::from_secs(5);

/// A store under `prefix` of the bucket at `endpoint`, with or without
/// the deadline writer.
fn store(endpoint: &str, prefix: &str, deadline: bool) -> BackupStore {
    iar::tls::install_crypto();
    let builder = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(BUCKET)
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY);
    let s3 = Arc::new(builder.clone().build().unwrap());
    let prefixed = Arc::new(object_store::prefix::PrefixStore::new(
        s3.clone(),
        Path::from(prefix),
    ));
    let opened = BackupStore::from_object_store(prefixed, &format!("s3://{BUCKET}/{prefix}"));
    if !deadline {
        return opened;
    }
    let writer =
        iar::store::deadline::DeadlineWriter::for_s3(&builder, s3, Path::from(prefix), None)
            .expect("plain S3 options take deadline writes");
    opened.with_deadline_writer(writer)
}

/// Takes `backup`'s lease through the proxy, holds every request for
/// [`HELD`], writes its results, and says what the write returned and
/// whether the results are in the store once the held request had time
/// to arrive (read directly).
async fn held_write(deadline: bool, backup: &str) -> (Result<(), StoreError>, bool) {
    let Some(tools) = tools() else {
        panic!("skipped above")
    };
    let toxiproxy = go_tool("toxiproxy").expect("Go is here: tools() found it");
    let root = tempfile::tempdir().unwrap();
    let (_gateway, endpoint) = s3_server(&tools, root.path());
    let proxy = Toxiproxy::start(&toxiproxy, 1);
    let upstream = endpoint.trim_start_matches("http://").parse().unwrap();
    let through = format!("http://{}", proxy.proxy("s3", upstream));
    let writer = store(&through, "team-a", deadline);
    let lease = writer.acquire_lease(backup, LEASE).await.unwrap();
    let ends = Instant::now() + LEASE;
    proxy.add(
        "s3",
        "held",
        "latency",
        Stream::Upstream,
        serde_json::json!({ "latency": HELD.as_millis() as u64, "jitter": 0 }),
    );
    let wrote = writer
        .put(backup, BackupFile::Results, b"late".to_vec().into())
        .await;
    proxy.remove("s3", "held");
    // Whatever was held is delivered within HELD of being sent.
    tokio::time::sleep(HELD + Duration::from_secs(1)).await;
    assert!(
        Instant::now() > ends,
        "the lease ended before anything is read"
    );
    let direct = store(&endpoint, "team-a", false);
    let landed = direct
        .get(backup, BackupFile::Results)
        .await
        .unwrap()
        .is_some();
    drop(lease);
    (wrote, landed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_held_past_its_lease_is_refused_by_the_store() {
    if tools().is_none() {
        return;
    }
    let (wrote, landed) = held_write(true, "held").await;
    match wrote {
        Err(StoreError::Fenced { backup, reason }) => {
            assert_eq!(backup, "held");
            assert!(reason.contains("lease"), "{reason}");
        }
        other => panic!("a write held past the lease: {other:?}"),
    }
    assert!(!landed, "the store took a write after its lease ended");
}

/// Without the deadline, the same write lands after the lease's end: the
/// hole the deadline closes (so the test above can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_put_held_past_its_lease_lands_late() {
    if tools().is_none() {
        return;
    }
    let (wrote, landed) = held_write(false, "plain").await;
    wrote.expect("object_store's PUT waits out the latency");
    assert!(landed);
}
