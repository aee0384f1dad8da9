//! The fault campaign's workload and dice: a volume whose files a seeded
//! generator keeps changing (growing, shrinking, truncating, renaming,
//! hard-linking, deleting), and the faults each round injects, all drawn
//! from one seed so a failing run replays.

use iar_tests::fixtures::noise;
use std::path::Path;

/// splitmix64: small, seedable, and the same on every machine.
pub(crate) struct Dice(u64);

impl Dice {
    pub(crate) fn new(seed: u64) -> Dice {
        Dice(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What one round does to the volume: `changes` edits of its files, each
/// an ordinary thing an application does to its data.
pub(crate) fn change_volume(dir: &Path, dice: &mut Dice, changes: u64) {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    for _ in 0..changes {
        let names = names(&data);
        let pick = |dice: &mut Dice| -> Option<String> {
            (!names.is_empty()).then(|| names[dice.below(names.len() as u64) as usize].clone())
        };
        match (dice.below(7), pick(dice)) {
            // Too few files, or a new one anyway.
            (_, None) | (0, _) => {
                let size = dice.below(256 << 10) as usize;
                let name = format!("f{:05}", dice.below(100_000));
                std::fs::write(data.join(name), noise(dice.next(), size)).unwrap();
            }
            (1, Some(f)) => {
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .open(data.join(f))
                    .unwrap();
                file.write_all(&noise(dice.next(), dice.below(64 << 10) as usize))
                    .unwrap();
            }
            (2, Some(f)) => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(data.join(f))
                    .unwrap();
                let len = file.metadata().unwrap().len();
                file.set_len(dice.below(len + 1)).unwrap();
            }
            // copytruncate's second half: emptied in place.
            (3, Some(f)) => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(data.join(f))
                    .unwrap();
                file.set_len(0).unwrap();
            }
            (4, Some(f)) => {
                let to = format!("r{:05}", dice.below(100_000));
                std::fs::rename(data.join(f), data.join(to)).unwrap();
            }
            (5, Some(f)) => {
                let to = data.join(format!("l{:05}", dice.below(100_000)));
                if !to.exists() {
                    std::fs::hard_link(data.join(f), to).unwrap();
                }
            }
            (_, Some(f)) => {
                if names.len() > 4 {
                    std::fs::remove_file(data.join(f)).unwrap();
                }
            }
        }
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    out.sort();
    out
}

/// The faults a round may inject, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fault {
    /// SIGKILL of the node agent at a random moment, then a new agent.
    AgentKill,
    /// SIGSTOP of the node agent past the controller's silence, then
    /// SIGCONT: it wakes to a request the controller has failed.
    AgentStopPastSilence,
    /// SIGSTOP of the node agent for a moment, then SIGCONT.
    AgentStopBrief,
    /// The S3 server killed at a random moment and started again on its
    /// port a moment later.
    StoreRestart,
    /// SIGSTOP of the S3 server for a few seconds (a frozen store), then
    /// SIGCONT.
    StoreStop,
    /// The controller (in this process: its task aborted, as a crash
    /// drops everything it held) started again.
    ControllerRestart,
    /// An operator's `restic prune` on the repository, while the backup
    /// may be writing: restic's locks must keep it from any pack the
    /// backup is about to reference.
    ResticPrune,
    /// `iar repository prune --instant` (deletes unused packs at once),
    /// likewise.
    IarPrune,
    /// A second writer: restic's own `backup` of another directory into
    /// the same repository, tagged `foreign`, while iar may be writing.
    ResticBackup,
    /// The file system under the store and the agent's cache (a tmpfs
    /// the campaign mounts) filled to its last few KiB for a few seconds.
    /// Without root (no mount), not injected, and said.
    DiskFull,
    /// Latency (toxiproxy) on every connection of the agent and the
    /// controller to the store, for a few seconds.
    StoreSlow,
    /// Every connection of the agent and the controller to the store
    /// reset by the peer, new ones too, for a few seconds.
    StoreReset,
    /// The agent cut off from the store while it runs: its connections
    /// stay open and nothing answers (a partition), for up to 15 s.
    AgentStorePartition,
    /// The agent cut off from the API server likewise, at times past the
    /// controller's silence.
    AgentApiPartition,
    /// The controller cut off from the store likewise.
    ControllerStorePartition,
    /// The controller cut off from the API server likewise, often past its
    /// 3 s leader lease: it must stop writing, then take the lease again.
    ControllerApiPartition,
    /// Every connection of the agent and the controller to the API server
    /// reset, new ones too, for a few seconds: a load balancer in front of
    /// the API server dropping everyone.
    ApiServerDown,
    /// The seed's kube-apiserver killed (SIGKILL) and started again on its
    /// port 0–2 s later: watches break, clients are refused until it is
    /// ready (seconds).
    ApiServerRestart,
    /// The seed's etcd killed and started again on its data 0.5–3 s
    /// later: the API server answers errors and timeouts meanwhile.
    EtcdRestart,
    /// `iar gc` from the command line, beside the controller's own sweep.
    IarGc,
    /// The store answers every request 500 or 503 (S3's `InternalError`,
    /// `SlowDown`) for 1–6 s, through an HTTP hop before it; the
    /// connections open then are closed.
    StoreUnavailable,
    /// The seed's node gone for good: its agent killed and never started
    /// again, its Node object deleted. Only in the last round, of a
    /// quarter of the seeds, on dice of its own (so every other draw of a
    /// seed stays what it was): not in [`Fault::ALL`].
    NodeGone,
}

impl Fault {
    pub(crate) const ALL: [Fault; 21] = [
        Fault::AgentKill,
        Fault::AgentStopPastSilence,
        Fault::AgentStopBrief,
        Fault::StoreRestart,
        Fault::StoreStop,
        Fault::ControllerRestart,
        Fault::ResticPrune,
        Fault::IarPrune,
        Fault::ResticBackup,
        Fault::DiskFull,
        Fault::StoreSlow,
        Fault::StoreReset,
        Fault::AgentStorePartition,
        Fault::AgentApiPartition,
        Fault::ControllerStorePartition,
        Fault::ControllerApiPartition,
        Fault::ApiServerDown,
        Fault::StoreUnavailable,
        Fault::ApiServerRestart,
        Fault::EtcdRestart,
        Fault::IarGc,
    ];

    /// A round's faults: none to three (1.5 on average), with their
    /// delays after the backup's creation.
    pub(crate) fn draw(dice: &mut Dice) -> Vec<(Fault, std::time::Duration)> {
        let count = [0, 1, 1, 2, 2, 3][dice.below(6) as usize];
        (0..count)
            .map(|_| {
                let fault = Fault::ALL[dice.below(Fault::ALL.len() as u64) as usize];
                let delay = std::time::Duration::from_millis(dice.below(3_000));
                (fault, delay)
            })
            .collect()
    }
}

/// What becomes of a round's backup besides its faults, drawn from its
/// own dice (so a seed's faults are the ones it drew before fates
/// existed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Kept until the seed ends, and restored again then: nothing the
    /// later rounds' deletions, expiries and prunes did may take its data.
    Kept,
    /// A 3 s TTL: the controller's garbage collection deletes it once it
    /// has ended, mid-campaign.
    Expires,
    /// Its Backup resource deleted 0–1.5 s after its creation, often while
    /// it runs (a small backup may have ended).
    DeletedMidFlight,
}

impl Fate {
    pub(crate) fn draw(dice: &mut Dice) -> Fate {
        match dice.below(6) {
            0 => Fate::Expires,
            1 => Fate::DeletedMidFlight,
            _ => Fate::Kept,
        }
    }
}
