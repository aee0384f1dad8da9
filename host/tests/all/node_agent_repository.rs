//! Pod volume data in the namespace's restic repository, written by a real
//! `iar node-agent` process (a kwok node, the real kube-apiserver, the
//! controller's volume requests) to a real S3 server (versitygw): three
//! backups of a changing volume, each the parent of the next; the middle
//! one restored file by file; a deletion and a prune that give the first
//! backup's data back; a corrupted pack found by `check`; a wrong password
//! refused, on the agent and on a restore, naming the rule.

use crate::controller::{create_backup, start_controller, wait_phase};
use crate::node_agent::{Agent, fs_backup_spec, pod_with_volume};
use crate::pod_hooks::{KwokCluster, kwok_cluster};
use crate::velero::{BUCKET, s3_env, s3_server, s3_store, tools};
use crate::volume_repository::files;
use iar::backup::object::BackupPhase;
use iar::backup::volumes::{RestoreOptions, VolumeBackup as Record, VolumePhase, restore_volume};
use iar::k8s::plugins::PluginRegistry;
use iar::k8s::volume_backup::{BACKUP_LABEL, VolumeBackup};
use iar::repository::{Password, VolumeRepository};
use iar::store::{BackupFile, BackupStore};
use iar_apiserver::User;
use iar_tests::fixtures::noise;
use kube::api::{Api, ListParams};
use std::path::Path;
use std::process::Command;

const NS: &str = "repo-shop";
const PASSWORD: &str = "correct horse battery staple";

/// Round `round`'s change to the volume: a few rows rewritten, one file
/// added and one removed; round 0 writes the first state, with a 2 MiB
/// file that only the first backup holds.
fn change(dir: &Path, round: u64) {
    if round == 0 {
        std::fs::create_dir_all(dir.join("pg")).unwrap();
        for i in 0..120 {
            std::fs::write(dir.join(format!("pg/{i:03}")), noise(1000 + i, 4096)).unwrap();
        }
        std::fs::write(dir.join("first-only.bin"), noise(7, 2 << 20)).unwrap();
        return;
    }
    if round == 1 {
        std::fs::remove_file(dir.join("first-only.bin")).unwrap();
    }
    for i in 0..3 {
        let row = round * 10 + i;
        std::fs::write(
            dir.join(format!("pg/{row:03}")),
            noise(round * 100 + i, 4096),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join(format!("added-{round}")),
        format!("round {round}\n"),
    )
    .unwrap();
    std::fs::remove_file(dir.join(format!("pg/{:03}", 100 + round))).unwrap();
}

/// The repository's data packs as versitygw keeps them (one file each).
fn pack_bytes(packs: &Path) -> u64 {
    let mut total = 0;
    for d in std::fs::read_dir(packs).unwrap() {
        for p in std::fs::read_dir(d.unwrap().path()).unwrap() {
            total += p.unwrap().metadata().unwrap().len();
        }
    }
    total
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

fn open_repository(store: &BackupStore, password: &str) -> Result<VolumeRepository, String> {
    let password = Password::new(password).unwrap();
    VolumeRepository::open(store, NS, &password, &tokio::runtime::Handle::current())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_agent_backs_volumes_up_into_the_namespaces_repository_on_s3() {
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(NS, &["kwok-repo"]).await
    else {
        return;
    };
    let Some(tools) = tools() else { return };
    let gateway_root = tempfile::tempdir().unwrap();
    let (_gateway, endpoint) = s3_server(&tools, gateway_root.path());
    let url = format!("s3://{BUCKET}");
    let store = s3_store(&endpoint);

    let root = tempfile::tempdir().unwrap();
    let dir = pod_with_volume(
        kwok,
        &admin,
        NS,
        "db-0",
        "kwok-repo",
        "pv-repo",
        root.path(),
        serde_json::json!({}),
    )
    .await;
    let password_file = root.path().join("repository-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    // The node's agent, on S3, with the repository password in `file`.
    let agent_with = |file: &Path| {
        Agent::start_with(
            server,
            User::Admin,
            NS,
            "kwok-repo",
            root.path(),
            &url,
            |c| {
                s3_env(c, &endpoint);
                c.arg("--repository-password-file").arg(file);
            },
        )
    };
    let agent = agent_with(&password_file);
    let (_, controller) = start_controller(
        admin.clone(),
        NS,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;

    // Three backups, the volume changing before each.
    let mut states = Vec::new();
    let mut uids = Vec::new();
    let mut keys = Vec::new();
    for (round, name) in ["b1", "b2", "b3"].into_iter().enumerate() {
        change(&dir, round as u64);
        states.push(files(&dir));
        create_backup(&admin, NS, name, fs_backup_spec(NS)).await;
        let done = wait_phase(&admin, NS, name, BackupPhase::Completed).await;
        assert_eq!(
            done.status.as_ref().unwrap().errors,
            0,
            "{name}: {:?}\n{}",
            done.status,
            agent.log()
        );
        uids.push(done.metadata.uid.clone().unwrap());
        let records: Vec<Record> = store
            .get_json(name, BackupFile::VolumeBackups)
            .await
            .unwrap()
            .expect("volume backups recorded");
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].phase, VolumePhase::Completed, "{records:?}");
        let key = records[0].manifest_key.clone().unwrap();
        assert!(
            key.starts_with(&format!("restic/{NS}/snapshots/")),
            "{name}'s volume is not in the namespace's repository: {key}"
        );
        // The request names the same snapshot.
        let requests = Api::<VolumeBackup>::namespaced(admin.clone(), NS)
            .list(&ListParams::default().labels(&format!("{BACKUP_LABEL}={name}")))
            .await
            .unwrap();
        let status = requests.items[0].status.clone().unwrap();
        assert_eq!(status.snapshot_id.as_deref(), Some(key.as_str()));
        keys.push(key);
    }

    // Each snapshot's parent is the one before, and it carries the
    // backup's name and uid as tags.
    let (s, u) = (store.clone(), uids.clone());
    let snapshots = blocking(move || {
        let r = open_repository(&s, PASSWORD).unwrap();
        [0, 1, 2].map(|i| {
            let found = r.snapshots_of(&format!("b{}", i + 1), &u[i]).unwrap();
            assert_eq!(found.len(), 1, "{found:?}");
            found.into_iter().next().unwrap()
        })
    })
    .await;
    assert_eq!(snapshots[0].parent, None);
    assert_eq!(snapshots[1].parent, Some(snapshots[0].id));
    assert_eq!(snapshots[2].parent, Some(snapshots[1].id));
    for (i, snap) in snapshots.iter().enumerate() {
        let backup_tag = format!("backup=b{}", i + 1);
        let uid_tag = format!("backup-uid={}", uids[i]);
        assert!(
            snap.tags.contains(&backup_tag) && snap.tags.contains(&uid_tag),
            "{}",
            snap.tags
        );
    }

    // The middle backup comes back exactly, file by file.
    let with_password = |p: &str| RestoreOptions {
        repository_password: Some(Password::new(p).unwrap()),
        ..RestoreOptions::default()
    };
    let restored = tempfile::tempdir().unwrap();
    restore_volume(
        &store,
        "b2",
        &keys[1],
        restored.path(),
        &with_password(PASSWORD),
    )
    .await
    .unwrap();
    assert_eq!(files(restored.path()), states[1]);

    // A wrong password is refused by rule, and nothing is written.
    let elsewhere = tempfile::tempdir().unwrap();
    let e = restore_volume(
        &store,
        "b2",
        &keys[1],
        elsewhere.path(),
        &with_password("not the password"),
    )
    .await
    .unwrap_err();
    assert!(e.contains("rule: repository-password"), "{e}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);

    // `iar delete` forgets b1's snapshot; a prune then gives back the
    // 2 MiB only b1 held, and b2 still restores.
    let packs = gateway_root
        .path()
        .join(BUCKET)
        .join(format!("restic/{NS}/data"));
    let before = pack_bytes(&packs);
    let mut delete = Command::new(crate::support::iar_bin());
    delete
        .args([
            "delete",
            "b1",
            "--store",
            &url,
            "--repository-password-file",
        ])
        .arg(&password_file);
    s3_env(&mut delete, &endpoint);
    let out = delete.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let (s, u) = (store.clone(), uids[0].clone());
    let (left, pruned, findings) = blocking(move || {
        let r = open_repository(&s, PASSWORD).unwrap();
        let left = r.snapshots_of("b1", &u).unwrap().len();
        let pruned = r.prune(true).unwrap();
        (left, pruned, r.check(true).unwrap())
    })
    .await;
    assert_eq!(left, 0, "b1's snapshot is still listed");
    assert_eq!(findings, Vec::<String>::new());
    let freed = before.saturating_sub(pack_bytes(&packs));
    assert!(
        freed >= 2 << 20,
        "the prune gave back {freed} bytes ({pruned:?}), not b1's 2 MiB"
    );
    let again = tempfile::tempdir().unwrap();
    restore_volume(
        &store,
        "b2",
        &keys[1],
        again.path(),
        &with_password(PASSWORD),
    )
    .await
    .unwrap();
    assert_eq!(files(again.path()), states[1]);

    // A pack with one byte flipped on the S3 server: `check` finds it.
    let largest = std::fs::read_dir(&packs)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|p| p.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&largest).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&largest, bytes).unwrap();
    let s = store.clone();
    let findings =
        blocking(move || open_repository(&s, PASSWORD).unwrap().check(true).unwrap()).await;
    assert!(
        !findings.is_empty(),
        "check found nothing in a corrupted pack"
    );

    // An agent given the wrong password fails the volume, naming the rule,
    // and writes no second key into the repository.
    drop(agent);
    let wrong = root.path().join("wrong-password");
    std::fs::write(&wrong, "not the password\n").unwrap();
    let agent = agent_with(&wrong);
    create_backup(&admin, NS, "b4", fs_backup_spec(NS)).await;
    wait_phase(&admin, NS, "b4", BackupPhase::PartiallyFailed).await;
    controller.abort();
    let requests = Api::<VolumeBackup>::namespaced(admin.clone(), NS)
        .list(&ListParams::default().labels(&format!("{BACKUP_LABEL}=b4")))
        .await
        .unwrap();
    let status = requests.items[0].status.clone().unwrap();
    assert_eq!(status.phase, Some(VolumePhase::Failed), "{}", agent.log());
    let message = status.message.unwrap_or_default();
    assert!(message.contains("rule: repository-password"), "{message}");
    let keys_dir = gateway_root
        .path()
        .join(BUCKET)
        .join(format!("restic/{NS}/keys"));
    assert_eq!(std::fs::read_dir(keys_dir).unwrap().count(), 1);
}
