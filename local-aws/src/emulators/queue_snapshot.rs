//! What the delivery queues hold, kept across a restart of `careerctl local`. The SQS
//! emulator keeps its queues in memory, so when the stack stops every message of every
//! delivery queue is written to a file, with its receive count (attempts stay counted) and
//! its remaining wait, and the next start puts them back. A crash (SIGKILL) skips the save,
//! and what the queues held is lost.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use career_core::clock::Timestamp;
use serde::{Deserialize, Serialize};

use crate::emulators::{HeldMessage, LocalService};
use crate::resources::QueueUrls;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSnapshot {
    saved_at: Timestamp,
    /// The messages of each queue, by the queue's name in [`QueueUrls::all`].
    queues: BTreeMap<String, Vec<HeldMessage>>,
}

impl QueueSnapshot {
    /// Every message the emulator's delivery queues hold now.
    pub async fn take(sqs: &LocalService, queues: &QueueUrls) -> anyhow::Result<Self> {
        let mut snapshot = QueueSnapshot { saved_at: Timestamp::now(), queues: BTreeMap::new() };
        for (name, url) in queues.all() {
            let held = sqs.held_messages(url).await?;
            if !held.is_empty() {
                snapshot.queues.insert(name.to_owned(), held);
            }
        }
        Ok(snapshot)
    }

    /// Puts every message back on the queue of the same name.
    pub async fn restore(&self, sqs: &LocalService, queues: &QueueUrls) -> anyhow::Result<()> {
        for (name, url) in queues.all() {
            if let Some(held) = self.queues.get(name) {
                sqs.put_back(url, held).await?;
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.queues.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many messages each queue holds, for people: `main lane: 2, retry lane: 1`.
    pub fn counts(&self) -> String {
        let counts: Vec<String> = self.queues.iter().map(|(name, held)| format!("{name}: {}", held.len())).collect();
        counts.join(", ")
    }

    /// Writes the snapshot to `path` (through a temporary file, so a half-written one is never read).
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let partial = path.with_extension("partial");
        let json = serde_json::to_vec_pretty(self).expect("snapshots serialize");
        std::fs::write(&partial, json).with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
    }

    /// The snapshot at `path`, if there is one.
    pub fn read(path: &Path) -> anyhow::Result<Option<Self>> {
        let reading = || format!("reading {}", path.display());
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).with_context(reading),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(reading),
        }
    }
}
