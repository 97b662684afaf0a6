//! Appending a live recording to a `.vramcap` file on a writer thread of its own.
//!
//! The sampler hands batches over a bounded channel (`push` never blocks it); the writer thread
//! encodes them and writes a `BATCHES` chunk at least every half second with a plain `write(2)`,
//! so a process killed with SIGKILL loses at most the last second of samples (with half a second
//! to spare for a busy machine) and the file still opens. `finish` writes the last chunk and the
//! end marker and syncs the file to disk. When a write fails (a full disk), the partial chunk is
//! cut off and the end marker written if it fits, so the file keeps every complete chunk and
//! opens as a whole recording.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::codec::put_varint;
use super::items::BatchCoder;
use super::{VramcapError, chunk_type, header_bytes, put_chunk};
use crate::model::{CaptureMeta, DeviceFacts, SampleBatch};

/// Longest time a batch waits in memory before it is written to the file: half the promised
/// "at most the last second is lost", so a loaded machine that runs the writer late still keeps
/// the promise (`tests/all/record_faults.rs` kills `record` 100 times to check it).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(500);
/// Batches that may queue for the writer before `push` starts dropping them (about 80 s at the
/// fastest 20 ms interval): a stalled disk must not grow memory without bound.
const QUEUE_BATCHES: usize = 4096;
/// A chunk is written early once its payload reaches this size.
const MAX_PENDING_BYTES: usize = 1 << 20;

/// What the recorder has done so far, for progress lines and the UI's recording indicator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecorderStatus {
    /// Bytes in the file, header included.
    pub bytes_written: u64,
    /// Batches written to the file.
    pub batches_written: u64,
    /// Device samples (one device at one tick) written to the file.
    pub samples_written: u64,
    /// Batches dropped because the writer fell behind or had stopped after an error.
    pub batches_dropped: u64,
    /// The error that stopped writing (disk full, file removed, ...), if any.
    pub last_error: Option<String>,
}

/// Appends batches to a capture file on its own writer thread (never on the UI or sampler thread).
pub struct Recorder {
    file_name: String,
    sender: Option<SyncSender<SampleBatch>>,
    status: Arc<Mutex<RecorderStatus>>,
    writer: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Creates (or replaces) `path`, writes the header and starts the writer thread. Callers that
    /// must not overwrite check for an existing file first.
    pub fn create(
        path: &Path,
        meta: &CaptureMeta,
        devices: &[DeviceFacts],
    ) -> Result<Recorder, VramcapError> {
        let file_name = path.display().to_string();
        let io = |action: &'static str| {
            let file = file_name.clone();
            move |source| VramcapError::Io {
                file,
                action,
                source,
            }
        };
        let mut file = File::create(path).map_err(io("create the file"))?;
        let header = header_bytes(meta, devices);
        file.write_all(&header).map_err(io("write the header"))?;
        let status = Arc::new(Mutex::new(RecorderStatus {
            bytes_written: header.len() as u64,
            ..Default::default()
        }));
        let (sender, receiver) = mpsc::sync_channel(QUEUE_BATCHES);
        let writer = ChunkWriter {
            file,
            file_name: file_name.clone(),
            status: Arc::clone(&status),
            coder: BatchCoder::default(),
        };
        let writer = std::thread::Builder::new()
            .name("vramcap-writer".to_owned())
            .spawn(move || writer.run(receiver))
            .map_err(io("start the writer thread"))?;
        Ok(Recorder {
            file_name,
            sender: Some(sender),
            status,
            writer: Some(writer),
        })
    }

    /// Queues a batch for writing. Never blocks: if the writer is far behind, the batch is dropped
    /// and counted in [`RecorderStatus::batches_dropped`].
    pub fn push(&self, batch: &SampleBatch) {
        let Some(sender) = &self.sender else { return };
        match sender.try_send(batch.clone()) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                lock(&self.status).batches_dropped += 1
            }
        }
    }

    /// What has been written so far.
    pub fn status(&self) -> RecorderStatus {
        lock(&self.status).clone()
    }

    /// Writes what is queued and the end marker, syncs and closes the file.
    pub fn finish(mut self) -> Result<RecorderStatus, VramcapError> {
        self.close();
        let status = self.status();
        match &status.last_error {
            Some(problem) => Err(VramcapError::Recording {
                file: self.file_name.clone(),
                problem: problem.clone(),
            }),
            None => Ok(status),
        }
    }

    /// Writes what is queued and the end marker and waits for the writer thread: [`Recorder::status`]
    /// is final afterwards (what [`Recorder::finish`] then reports).
    pub fn close(&mut self) {
        self.sender = None;
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            lock(&self.status).last_error = Some("the writer thread panicked".to_owned());
        }
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("file", &self.file_name)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl Drop for Recorder {
    /// Dropping a recorder closes the file cleanly, as `finish` does.
    fn drop(&mut self) {
        self.close();
    }
}

fn lock(status: &Mutex<RecorderStatus>) -> std::sync::MutexGuard<'_, RecorderStatus> {
    status.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The writer thread's state.
struct ChunkWriter {
    file: File,
    file_name: String,
    status: Arc<Mutex<RecorderStatus>>,
    coder: BatchCoder,
}

impl ChunkWriter {
    fn run(mut self, receiver: Receiver<SampleBatch>) {
        let mut pending = Vec::new();
        let mut pending_batches: u64 = 0;
        let mut pending_samples: u64 = 0;
        let mut oldest_pending: Option<Instant> = None;
        loop {
            let received = match oldest_pending {
                Some(since) => {
                    receiver.recv_timeout(FLUSH_INTERVAL.saturating_sub(since.elapsed()))
                }
                None => receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let closing = match received {
                Ok(batch) => {
                    self.coder.put(&mut pending, &batch);
                    pending_batches += 1;
                    pending_samples += batch.devices.len() as u64;
                    oldest_pending.get_or_insert_with(Instant::now);
                    false
                }
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => true,
            };
            let due = oldest_pending.is_some_and(|since| since.elapsed() >= FLUSH_INTERVAL);
            if pending_batches > 0 && (closing || due || pending.len() >= MAX_PENDING_BYTES) {
                let mut payload = Vec::with_capacity(pending.len() + 10);
                put_varint(&mut payload, pending_batches);
                payload.append(&mut pending);
                if !self.write_chunk(
                    chunk_type::BATCHES,
                    &payload,
                    pending_batches,
                    pending_samples,
                ) {
                    lock(&self.status).batches_dropped += pending_batches;
                    self.close_after_error();
                    self.drain_after_error(&receiver);
                    return;
                }
                pending_batches = 0;
                pending_samples = 0;
                oldest_pending = None;
            }
            if closing {
                // EINVAL: the "file" cannot be synced at all (/dev/null, a pipe); nothing is lost.
                if !self.write_chunk(chunk_type::END, &[], 0, 0) {
                    self.close_after_error();
                } else if let Err(err) = self.file.sync_all()
                    && err.kind() != std::io::ErrorKind::InvalidInput
                {
                    self.fail(format!("cannot sync the file to disk: {err}"));
                }
                return;
            }
        }
    }

    /// Writes one chunk and updates the status; on failure records the error and returns false.
    fn write_chunk(&mut self, kind: u8, payload: &[u8], batches: u64, samples: u64) -> bool {
        let mut chunk = Vec::with_capacity(payload.len() + super::CHUNK_FRAME_BYTES);
        put_chunk(&mut chunk, kind, payload);
        match self.file.write_all(&chunk) {
            Ok(()) => {
                let mut status = lock(&self.status);
                status.bytes_written += chunk.len() as u64;
                status.batches_written += batches;
                status.samples_written += samples;
                true
            }
            Err(err) => {
                let problem = match err.kind() {
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                        format!(
                            "the disk is full: cannot write to {} ({err})",
                            self.file_name
                        )
                    }
                    _ => format!("cannot write to {}: {err}", self.file_name),
                };
                self.fail(problem);
                false
            }
        }
    }

    fn fail(&self, problem: String) {
        lock(&self.status).last_error = Some(problem);
    }

    /// After a failed write: cuts the file back to its last complete chunk (a failed write may
    /// have left part of one) and writes the end marker, which the cut freed room for, so the file
    /// opens as a whole recording. Best effort: if even that fails, the file still ends on a chunk
    /// boundary, or a partial chunk that readers recover from.
    fn close_after_error(&mut self) {
        let complete_bytes = lock(&self.status).bytes_written;
        let cut = self
            .file
            .set_len(complete_bytes)
            .and_then(|()| self.file.seek(SeekFrom::Start(complete_bytes)));
        if cut.is_err() {
            return;
        }
        let mut end = Vec::new();
        put_chunk(&mut end, chunk_type::END, &[]);
        if self.file.write_all(&end).is_ok() {
            lock(&self.status).bytes_written += end.len() as u64;
            let _ = self.file.sync_all();
        } else {
            let _ = self.file.set_len(complete_bytes);
        }
    }

    /// After a write error nothing more is written (a partial chunk may end the file, which a
    /// reader recovers from); queued and later batches are counted as dropped.
    fn drain_after_error(&self, receiver: &Receiver<SampleBatch>) {
        for _ in receiver.iter() {
            lock(&self.status).batches_dropped += 1;
        }
    }
}
