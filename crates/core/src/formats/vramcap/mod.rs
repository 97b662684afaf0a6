//! The `.vramcap` capture format: a versioned header followed by append-only, length-prefixed,
//! CRC32-checked chunks. `docs/capture-format.md` is the byte-level specification.
//!
//! Two kinds of files share the container:
//! - a **recording** ([`Recorder`]) appends `BATCHES` chunks at least once a second while the
//!   sampler runs, so a recorder killed with SIGKILL loses at most the last second; reading replays
//!   the batches through [`Capture::ingest`], giving exactly the capture the live view had;
//! - a **saved capture** ([`write_bytes`], [`write_file`]) stores an in-memory [`Capture`] column by
//!   column (series, process tracks, ...), so that `read(write(c)) == c` for any capture. The
//!   columns are cut into time windows, each written whole (every column's items of the window)
//!   and closed by a `WINDOW_END` chunk, so a cut file keeps every earlier window exactly.
//!
//! Reading never panics: a foreign file, an unknown future version or a damaged header is an
//! [`VramcapError`]; damage after the header (truncation, flipped bits, a killed recorder) opens
//! everything before the damage and describes it in [`Capture::recovery`].

mod codec;
mod items;
#[cfg(feature = "native")]
mod recorder;

#[cfg(feature = "native")]
pub use recorder::{Recorder, RecorderStatus};

use codec::{ByteReader, DecodeError, DecodeResult, put_signed, put_str, put_varint, room_for};
use items::{BatchCoder, SampleCoder};

use crate::model::capture::ProcessTrack;
use crate::model::{Capture, CaptureMeta, DeviceFacts, DeviceSeries, Recovery, UnixMs};

/// First bytes of every capture file.
pub const MAGIC: [u8; 8] = *b"VRAMCAP\x1a";
/// The format version this build writes, and the newest it reads.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the fixed part of the header: magic, version, body length, body CRC32.
const FIXED_HEADER_BYTES: usize = 8 + 2 + 4 + 4;
/// Size of a chunk's frame: type, payload length, CRC32.
const CHUNK_FRAME_BYTES: usize = 1 + 4 + 4;
/// Largest header body a reader accepts; real ones are a few hundred bytes per device.
const MAX_HEADER_BYTES: usize = 16 << 20;
/// Largest chunk payload a reader accepts. Writers keep chunks near [`TARGET_CHUNK_BYTES`].
pub const MAX_CHUNK_BYTES: usize = 64 << 20;
/// Size at which writers close a chunk and start the next one.
const TARGET_CHUNK_BYTES: usize = 1 << 20;

/// Chunk type bytes. Readers skip (after checking the CRC) types they do not know.
mod chunk_type {
    /// A run of sample batches, delta-coded against the previous `BATCHES` chunk.
    pub const BATCHES: u8 = 1;
    /// The device index of every series slot; replaces the series the header implied.
    pub const SERIES_LAYOUT: u8 = 2;
    /// Samples appended to one series slot.
    pub const SERIES_SAMPLES: u8 = 3;
    /// Process track pieces.
    pub const PROCESS_TRACKS: u8 = 4;
    /// Times at which processes were polled.
    pub const PROCESS_POLLS: u8 = 5;
    /// Slow-tier health samples.
    pub const HEALTH: u8 = 6;
    /// Events.
    pub const EVENTS: u8 = 7;
    /// Latest field states.
    pub const FIELD_STATUS: u8 = 8;
    /// A saved capture had itself been recovered from a damaged file.
    pub const RECOVERY_NOTE: u8 = 9;
    /// A saved capture's time window is complete: every item before this time has been written.
    pub const WINDOW_END: u8 = 10;
    /// The writer closed the file cleanly. Nothing after it is read.
    pub const END: u8 = 255;
}

/// Why a capture could not be read or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum VramcapError {
    /// The file is something else (empty, an image, a snapshot, random bytes).
    #[error("{file}: not a vramscope capture: {detail}")]
    NotVramcap { file: String, detail: String },
    /// A newer vramscope wrote it with a format this build does not know.
    #[error(
        "{file}: written by a newer vramscope (capture format version {version}; this build reads up to version {}); update vramscope to open it",
        FORMAT_VERSION
    )]
    UnsupportedVersion { file: String, version: u16 },
    /// The header (devices, metadata) is damaged, so nothing can be interpreted.
    #[error("{file}: the capture header is damaged: {problem}")]
    DamagedHeader { file: String, problem: String },
    /// The operating system refused a read or write.
    #[error("{file}: cannot {action}: {source}")]
    Io {
        file: String,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The recorder stopped writing earlier (disk full, file removed, ...).
    #[error("{file}: recording failed: {problem}")]
    Recording { file: String, problem: String },
}

/// Encodes a whole capture (header, columns, end marker).
pub fn write_bytes(capture: &Capture) -> Vec<u8> {
    let mut out = header_bytes(&capture.meta, &capture.devices);
    ColumnWriter::new(&mut out).write(capture);
    put_chunk(&mut out, chunk_type::END, &[]);
    out
}

/// Decodes a capture. `file_name` labels errors; damage after the header is not an error but a
/// [`Recovery`] in the returned capture (shown next to the file name by the UI and `inspect`).
pub fn read_bytes(bytes: &[u8], file_name: &str) -> Result<Capture, VramcapError> {
    let (meta, devices, header_len) = read_header(bytes, file_name)?;
    let mut capture = Capture::new(meta, devices);
    let mut reader = ChunkApplier::default();
    let mut offset = header_len;
    let mut chunks_read: u64 = 0;
    let mut previous_recovery = None;
    // End of the last complete time window of a saved capture.
    let mut complete_before_ms = None;
    let damage = loop {
        if offset == bytes.len() {
            break Some(format!(
                "the recording was not closed (no end marker after {chunks_read} chunks): the recorder was \
                 probably killed or the file was cut short"
            ));
        }
        let frame = match read_chunk_frame(&bytes[offset..]) {
            Ok(frame) => frame,
            Err(problem) => break Some(format!("chunk {chunks_read} at byte {offset}: {problem}")),
        };
        if frame.chunk_type == chunk_type::END {
            break None;
        }
        if frame.chunk_type == chunk_type::WINDOW_END {
            match ByteReader::new(frame.payload).signed() {
                Ok(end_ms) => complete_before_ms = Some(end_ms),
                Err(problem) => {
                    break Some(format!(
                        "chunk {chunks_read} at byte {offset} cannot be decoded: {problem}"
                    ));
                }
            }
        } else if frame.chunk_type == chunk_type::RECOVERY_NOTE {
            match read_recovery_note(frame.payload) {
                Ok(note) => previous_recovery = Some(note),
                Err(problem) => {
                    break Some(format!(
                        "chunk {chunks_read} at byte {offset} cannot be decoded: {problem}"
                    ));
                }
            }
        } else if let Err(problem) = reader.apply(&mut capture, frame.chunk_type, frame.payload) {
            break Some(format!(
                "chunk {chunks_read} at byte {offset} cannot be decoded: {problem}"
            ));
        }
        offset += CHUNK_FRAME_BYTES + frame.payload.len();
        chunks_read += 1;
    };
    capture.reindex();
    let damage = match (damage, complete_before_ms) {
        (Some(problem), Some(end_ms)) => Some(format!(
            "{problem}; {}",
            describe_complete_part(capture.meta.started_ms, end_ms)
        )),
        (damage, _) => damage,
    };
    capture.recovery = match (damage, previous_recovery) {
        (None, previous) => previous,
        (Some(problem), previous) => Some(Recovery {
            problem: match previous {
                Some(earlier) => format!(
                    "{problem}; it had been recovered before: {}",
                    earlier.problem
                ),
                None => problem,
            },
            chunks_recovered: chunks_read,
            bytes_discarded: (bytes.len() - offset) as u64,
        }),
    };
    Ok(capture)
}

/// Says which part of a cut saved capture is whole: its first `h:mm:ss` when the capture's start
/// is known, else the Unix time of the end of the last complete window.
fn describe_complete_part(started_ms: UnixMs, complete_before_ms: UnixMs) -> String {
    match complete_before_ms.checked_sub(started_ms) {
        Some(elapsed_ms) if started_ms > 0 && elapsed_ms >= 0 => {
            let secs = elapsed_ms / 1000;
            format!(
                "every sample, process and event of its first {}:{:02}:{:02} is complete \
                 (before t = {complete_before_ms} ms)",
                secs / 3600,
                secs / 60 % 60,
                secs % 60
            )
        }
        _ => format!(
            "every sample, process and event before t = {complete_before_ms} ms (Unix time) is complete"
        ),
    }
}

/// Reads and decodes a capture file.
#[cfg(feature = "native")]
pub fn read_file(path: &std::path::Path) -> Result<Capture, VramcapError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| VramcapError::Io {
        file: file.clone(),
        action: "read the file",
        source,
    })?;
    read_bytes(&bytes, &file)
}

/// Saves a capture, replacing `path` if it exists. Writes a sibling temporary file first and
/// renames it, so a crash never leaves a half-written file under the chosen name.
#[cfg(feature = "native")]
pub fn write_file(path: &std::path::Path, capture: &Capture) -> Result<(), VramcapError> {
    let file = path.display().to_string();
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".partial");
    let temporary = std::path::PathBuf::from(temporary);
    let io = |action: &'static str| {
        let file = file.clone();
        move |source| VramcapError::Io {
            file,
            action,
            source,
        }
    };
    std::fs::write(&temporary, write_bytes(capture)).map_err(io("write the file"))?;
    std::fs::rename(&temporary, path).map_err(|source| {
        let _ = std::fs::remove_file(&temporary);
        VramcapError::Io {
            file: file.clone(),
            action: "move the written file into place",
            source,
        }
    })
}

/// The header: magic, version, body length, body CRC32, body (metadata and device facts).
fn header_bytes(meta: &CaptureMeta, devices: &[DeviceFacts]) -> Vec<u8> {
    let mut body = Vec::new();
    items::put_meta(&mut body, meta);
    put_varint(&mut body, devices.len() as u64);
    let mut scratch = Vec::new();
    for device in devices {
        items::put_device_facts(&mut body, &mut scratch, device);
    }
    let mut out = Vec::with_capacity(FIXED_HEADER_BYTES + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn read_header(
    bytes: &[u8],
    file: &str,
) -> Result<(CaptureMeta, Vec<DeviceFacts>, usize), VramcapError> {
    let damaged = |problem: String| VramcapError::DamagedHeader {
        file: file.to_owned(),
        problem,
    };
    if bytes.is_empty() {
        return Err(VramcapError::NotVramcap {
            file: file.to_owned(),
            detail: "the file is empty".to_owned(),
        });
    }
    if bytes.len() < MAGIC.len() {
        return if MAGIC.starts_with(bytes) {
            Err(damaged(format!(
                "the file ends after {} bytes, inside the signature",
                bytes.len()
            )))
        } else {
            Err(VramcapError::NotVramcap {
                file: file.to_owned(),
                detail: super::capture::not_a_capture_detail(bytes),
            })
        };
    }
    if bytes[..MAGIC.len()] != MAGIC {
        return Err(VramcapError::NotVramcap {
            file: file.to_owned(),
            detail: super::capture::not_a_capture_detail(bytes),
        });
    }
    if bytes.len() < FIXED_HEADER_BYTES {
        return Err(damaged(format!(
            "the file ends after {} bytes, inside the fixed header",
            bytes.len()
        )));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version > FORMAT_VERSION {
        return Err(VramcapError::UnsupportedVersion {
            file: file.to_owned(),
            version,
        });
    }
    if version == 0 {
        return Err(damaged("format version 0 does not exist".to_owned()));
    }
    let body_len = u32::from_le_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]) as usize;
    let body_crc = u32::from_le_bytes([bytes[14], bytes[15], bytes[16], bytes[17]]);
    if body_len > MAX_HEADER_BYTES {
        return Err(damaged(format!(
            "it claims a length of {body_len} bytes (the limit is {MAX_HEADER_BYTES})"
        )));
    }
    let body = bytes
        .get(FIXED_HEADER_BYTES..FIXED_HEADER_BYTES + body_len)
        .ok_or_else(|| {
            damaged(format!(
                "the file ends inside the header ({} of {body_len} bytes present)",
                bytes.len() - FIXED_HEADER_BYTES
            ))
        })?;
    if crc32fast::hash(body) != body_crc {
        return Err(damaged("checksum mismatch".to_owned()));
    }
    let mut reader = ByteReader::new(body);
    let parse = |reader: &mut ByteReader<'_>| -> DecodeResult<(CaptureMeta, Vec<DeviceFacts>)> {
        let meta = items::read_meta(reader)?;
        let count = reader.count()?;
        let mut devices = room_for(count);
        for _ in 0..count {
            devices.push(items::read_device_facts(reader)?);
        }
        // Bytes after the device list are fields added by newer writers of the same version.
        Ok((meta, devices))
    };
    let (meta, devices) = parse(&mut reader).map_err(|e| damaged(e.to_string()))?;
    Ok((meta, devices, FIXED_HEADER_BYTES + body_len))
}

/// Appends one chunk: type, payload length (u32 LE), CRC32 (LE) of type + length + payload, payload.
fn put_chunk(out: &mut Vec<u8>, chunk_type: u8, payload: &[u8]) {
    let len = (payload.len() as u32).to_le_bytes();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[chunk_type]);
    crc.update(&len);
    crc.update(payload);
    out.push(chunk_type);
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(payload);
}

struct ChunkFrame<'a> {
    chunk_type: u8,
    payload: &'a [u8],
}

/// Reads one chunk frame from the start of `bytes` and checks its length and CRC.
fn read_chunk_frame(bytes: &[u8]) -> Result<ChunkFrame<'_>, String> {
    if bytes.len() < CHUNK_FRAME_BYTES {
        return Err(format!(
            "the file ends inside the chunk's frame ({} of {CHUNK_FRAME_BYTES} bytes)",
            bytes.len()
        ));
    }
    let chunk_type = bytes[0];
    let len_bytes = [bytes[1], bytes[2], bytes[3], bytes[4]];
    let len = u32::from_le_bytes(len_bytes) as usize;
    let stored_crc = u32::from_le_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
    if len > MAX_CHUNK_BYTES {
        return Err(format!(
            "length {len} bytes exceeds the {MAX_CHUNK_BYTES}-byte limit (damaged)"
        ));
    }
    let payload = bytes
        .get(CHUNK_FRAME_BYTES..CHUNK_FRAME_BYTES + len)
        .ok_or_else(|| {
            format!(
                "the file ends inside the chunk ({} of {len} bytes present)",
                bytes.len() - CHUNK_FRAME_BYTES
            )
        })?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[chunk_type]);
    crc.update(&len_bytes);
    crc.update(payload);
    if crc.finalize() != stored_crc {
        return Err("checksum mismatch (the chunk is damaged)".to_owned());
    }
    Ok(ChunkFrame {
        chunk_type,
        payload,
    })
}

fn read_recovery_note(payload: &[u8]) -> DecodeResult<Recovery> {
    let mut reader = ByteReader::new(payload);
    Ok(Recovery {
        problem: reader.str()?,
        chunks_recovered: reader.varint()?,
        bytes_discarded: reader.varint()?,
    })
}

/// Applies chunks to a capture. Each chunk is decoded completely before anything is applied, so
/// a damaged chunk leaves the capture as it was after the previous one.
#[derive(Default)]
struct ChunkApplier {
    /// Delta state of the `BATCHES` stream, which runs across chunks.
    batches: BatchCoder,
}

impl ChunkApplier {
    fn apply(&mut self, capture: &mut Capture, kind: u8, payload: &[u8]) -> DecodeResult<()> {
        let mut reader = ByteReader::new(payload);
        let reader = &mut reader;
        match kind {
            chunk_type::BATCHES => {
                let count = reader.count()?;
                let mut batches = room_for(count);
                for _ in 0..count {
                    batches.push(self.batches.read(reader)?);
                }
                batches.iter().for_each(|batch| capture.ingest(batch));
            }
            chunk_type::SERIES_LAYOUT => {
                let count = reader.count()?;
                let mut series = room_for(count);
                for _ in 0..count {
                    series.push(DeviceSeries::new(reader.u32()?));
                }
                capture.series = series;
            }
            chunk_type::SERIES_SAMPLES => {
                let slot = reader.varint()?;
                let series = usize::try_from(slot)
                    .ok()
                    .and_then(|slot| capture.series.get_mut(slot))
                    .ok_or_else(|| {
                        DecodeError::new(format!("series slot {slot} was not declared"))
                    })?;
                let count = reader.count()?;
                let mut coder = SampleCoder::default();
                // Every sample takes at least one byte of the chunk, so `count` is bounded by the
                // bytes present. A chunk applies whole or not at all, like every other chunk.
                let before = series.len();
                for _ in 0..count {
                    match coder.read(reader) {
                        Ok(sample) => series.push(&sample),
                        Err(problem) => {
                            series.truncate(before);
                            return Err(problem);
                        }
                    }
                }
            }
            chunk_type::PROCESS_TRACKS => {
                let count = reader.count()?;
                let mut pieces = room_for(count);
                for _ in 0..count {
                    pieces.push(read_track_piece(reader)?);
                }
                for (slot, piece) in pieces {
                    apply_track_piece(capture, slot, piece)?;
                }
                capture.reindex();
            }
            chunk_type::PROCESS_POLLS => {
                let count = reader.count()?;
                let mut polls = room_for(count);
                let mut t_ms = capture.process_poll_ms.last().copied().unwrap_or(0);
                for _ in 0..count {
                    t_ms = t_ms.wrapping_add(reader.signed()?);
                    polls.push(t_ms);
                }
                capture.process_poll_ms.append(&mut polls);
            }
            chunk_type::HEALTH => {
                let count = reader.count()?;
                let mut health = room_for(count);
                for _ in 0..count {
                    health.push(items::read_health(reader)?);
                }
                capture.health.append(&mut health);
            }
            chunk_type::EVENTS => {
                let mut events = Vec::new();
                for _ in 0..reader.count()? {
                    events.extend(items::read_event(reader)?);
                }
                capture.events.append(&mut events);
            }
            chunk_type::FIELD_STATUS => {
                let mut states = Vec::new();
                for _ in 0..reader.count()? {
                    states.extend(items::read_field_status(reader)?);
                }
                capture.field_status.append(&mut states);
            }
            // A chunk type from a newer writer: its CRC was fine, so skip it.
            _ => {}
        }
        Ok(())
    }
}

/// A piece of one process track: its slot in `Capture::processes` and a track holding the piece's
/// identity and entries.
fn read_track_piece(reader: &mut ByteReader<'_>) -> DecodeResult<(u64, ProcessTrack)> {
    let slot = reader.varint()?;
    let mut track = ProcessTrack {
        device_index: reader.u32()?,
        pid: reader.u32()?,
        name: reader.str()?,
        kind: items::process_kind_from_code(reader.u8()?)?,
        mig_instance: reader.opt_pair()?,
        ..Default::default()
    };
    let count = reader.count()?;
    track.t_ms = room_for(count);
    track.used_bytes = room_for(count);
    let (mut t_ms, mut used_bytes): (i64, u64) = (0, 0);
    for _ in 0..count {
        t_ms = t_ms.wrapping_add(reader.signed()?);
        track.t_ms.push(t_ms);
        let used = match reader.u8()? {
            0 => None,
            1 => {
                used_bytes = reader.delta(used_bytes)?;
                Some(used_bytes)
            }
            other => return Err(DecodeError::new(format!("invalid presence byte {other}"))),
        };
        track.used_bytes.push(used);
    }
    Ok((slot, track))
}

fn apply_track_piece(
    capture: &mut Capture,
    slot: u64,
    mut piece: ProcessTrack,
) -> DecodeResult<()> {
    let existing = capture.processes.len() as u64;
    if slot == existing {
        capture.processes.push(piece);
    } else if let Some(track) = usize::try_from(slot)
        .ok()
        .and_then(|slot| capture.processes.get_mut(slot))
    {
        track.t_ms.append(&mut piece.t_ms);
        track.used_bytes.append(&mut piece.used_bytes);
    } else {
        return Err(DecodeError::new(format!(
            "process track slot {slot} skips past the {existing} tracks read so far"
        )));
    }
    Ok(())
}

/// Longest time window of a saved capture. A window's chunks hold every column's items of the
/// window, so a file cut after window `k` opens windows `0..=k` whole: a cut loses at most about
/// this much of the end, and the framing costs a few hundred bytes per window.
const WINDOW_MS: UnixMs = 60_000;
/// Most device samples (over all series) in one window, which bounds a window's size at fast
/// sampling rates (8 GPUs at 20 ms give 24,000 samples a minute).
const WINDOW_SAMPLES: usize = 8192;

/// Exclusive end times of every time window but the last (which takes everything left): a window
/// closes at the first sample time [`WINDOW_MS`] after its start or after [`WINDOW_SAMPLES`].
fn window_ends_ms(capture: &Capture) -> Vec<UnixMs> {
    let mut times: Vec<UnixMs> = capture
        .series
        .iter()
        .flat_map(|series| series.times().iter().copied())
        .collect();
    times.sort_unstable();
    let mut ends: Vec<UnixMs> = Vec::new();
    let mut window: Option<(UnixMs, usize)> = None;
    for t_ms in times {
        let (start_ms, samples) = window.get_or_insert((t_ms, 0));
        let full = *samples >= WINDOW_SAMPLES || t_ms >= start_ms.saturating_add(WINDOW_MS);
        // Samples sharing a time stay in one window, so windows end at increasing times.
        if full && t_ms > *start_ms {
            ends.push(t_ms);
            *start_ms = t_ms;
            *samples = 0;
        }
        *samples += 1;
    }
    ends
}

/// End of the run of `items` from `start` whose times are before `end_ms` (all of them for the
/// last window). Columns are cut into consecutive runs, never reordered, so a capture whose
/// columns are not sorted by time still round-trips exactly.
fn run_end<T>(
    items: &[T],
    start: usize,
    end_ms: Option<UnixMs>,
    t_ms: impl Fn(&T) -> UnixMs,
) -> usize {
    match end_ms {
        None => items.len(),
        Some(end_ms) => {
            let mut end = start;
            while end < items.len() && t_ms(&items[end]) < end_ms {
                end += 1;
            }
            end
        }
    }
}

/// How far each column has been written, across time windows.
#[derive(Default)]
struct ColumnCursors {
    series: Vec<usize>,
    tracks: Vec<usize>,
    /// Tracks whose first piece has been written (a new track's slot must equal this count).
    tracks_started: usize,
    polls: usize,
    health: usize,
    events: usize,
}

/// Writes a capture's columns window by window as chunks of about [`TARGET_CHUNK_BYTES`].
struct ColumnWriter<'a> {
    out: &'a mut Vec<u8>,
    payload: Vec<u8>,
    scratch: Vec<u8>,
}

impl<'a> ColumnWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        ColumnWriter {
            out,
            payload: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Writes the payload built so far as one chunk, its body prefixed by `prefix` (slot, count).
    fn emit(&mut self, kind: u8, prefix: &[u8]) {
        let mut chunk = Vec::with_capacity(prefix.len() + self.payload.len());
        chunk.extend_from_slice(prefix);
        chunk.append(&mut self.payload);
        put_chunk(self.out, kind, &chunk);
    }

    /// Writes `items` as chunks of `kind`, each `[prefix] varint(count) items…`.
    fn write_items<T>(
        &mut self,
        kind: u8,
        prefix: &[u8],
        items: &[T],
        mut encode: impl FnMut(&mut Vec<u8>, &mut Vec<u8>, &T),
    ) {
        let mut count: u64 = 0;
        for item in items {
            encode(&mut self.payload, &mut self.scratch, item);
            count += 1;
            if self.payload.len() >= TARGET_CHUNK_BYTES {
                self.emit_counted(kind, prefix, count);
                count = 0;
            }
        }
        if count > 0 {
            self.emit_counted(kind, prefix, count);
        }
    }

    fn emit_counted(&mut self, kind: u8, prefix: &[u8], count: u64) {
        let mut head = prefix.to_vec();
        put_varint(&mut head, count);
        self.emit(kind, &head);
    }

    fn write(&mut self, capture: &Capture) {
        if let Some(recovery) = &capture.recovery {
            put_str(&mut self.payload, &recovery.problem);
            put_varint(&mut self.payload, recovery.chunks_recovered);
            put_varint(&mut self.payload, recovery.bytes_discarded);
            self.emit(chunk_type::RECOVERY_NOTE, &[]);
        }
        let mut layout = Vec::new();
        put_varint(&mut layout, capture.series.len() as u64);
        for series in &capture.series {
            put_varint(&mut layout, u64::from(series.device_index));
        }
        put_chunk(self.out, chunk_type::SERIES_LAYOUT, &layout);
        let poll_deltas = poll_deltas(&capture.process_poll_ms);
        let mut cursors = ColumnCursors {
            series: vec![0; capture.series.len()],
            tracks: vec![0; capture.processes.len()],
            ..Default::default()
        };
        let window_ends = window_ends_ms(capture);
        let windows = window_ends.iter().copied().map(Some).chain([None]);
        for end_ms in windows {
            self.write_window(capture, &poll_deltas, &mut cursors, end_ms);
            if let Some(end_ms) = end_ms {
                let mut payload = Vec::new();
                put_signed(&mut payload, end_ms);
                put_chunk(self.out, chunk_type::WINDOW_END, &payload);
            }
        }
        self.write_items(
            chunk_type::FIELD_STATUS,
            &[],
            &capture.field_status,
            items::put_field_status,
        );
    }

    /// Writes every column's items from the cursors up to `end_ms` (exclusive; `None`: the rest).
    fn write_window(
        &mut self,
        capture: &Capture,
        poll_deltas: &[i64],
        cursors: &mut ColumnCursors,
        end_ms: Option<UnixMs>,
    ) {
        for (slot, series) in capture.series.iter().enumerate() {
            let start = cursors.series[slot];
            let end = run_end(series.times(), start, end_ms, |t| *t);
            cursors.series[slot] = end;
            let mut prefix = Vec::new();
            put_varint(&mut prefix, slot as u64);
            // Each chunk restarts the delta base so that chunks decode independently.
            let mut coder = SampleCoder::default();
            let mut count: u64 = 0;
            for sample in series.iter_from(start).take(end - start) {
                coder.put(&mut self.payload, &sample);
                count += 1;
                if self.payload.len() >= TARGET_CHUNK_BYTES {
                    self.emit_counted(chunk_type::SERIES_SAMPLES, &prefix, count);
                    coder = SampleCoder::default();
                    count = 0;
                }
            }
            if count > 0 {
                self.emit_counted(chunk_type::SERIES_SAMPLES, &prefix, count);
            }
        }
        self.write_tracks(&capture.processes, cursors, end_ms);
        let polls_start = cursors.polls;
        cursors.polls = run_end(&capture.process_poll_ms, polls_start, end_ms, |t| *t);
        self.write_items(
            chunk_type::PROCESS_POLLS,
            &[],
            &poll_deltas[polls_start..cursors.polls],
            |out, _, delta| put_signed(out, *delta),
        );
        let health_start = cursors.health;
        cursors.health = run_end(&capture.health, health_start, end_ms, |h| h.t_ms);
        self.write_items(
            chunk_type::HEALTH,
            &[],
            &capture.health[health_start..cursors.health],
            items::put_health,
        );
        let events_start = cursors.events;
        cursors.events = run_end(&capture.events, events_start, end_ms, |e| e.t_ms);
        self.write_items(
            chunk_type::EVENTS,
            &[],
            &capture.events[events_start..cursors.events],
            items::put_event,
        );
    }

    /// The window's part of every process track, split into pieces of at most `PIECE_ENTRIES`
    /// entries so that no chunk grows past the limit however long a process lived. A track is
    /// started (possibly empty) once a later track has entries in the window, since slots start
    /// in order; the last window starts every track left.
    fn write_tracks(
        &mut self,
        tracks: &[ProcessTrack],
        cursors: &mut ColumnCursors,
        end_ms: Option<UnixMs>,
    ) {
        const PIECE_ENTRIES: usize = 65_536;
        let runs: Vec<(usize, usize)> = tracks
            .iter()
            .enumerate()
            .map(|(slot, track)| {
                let entries = track.t_ms.len().min(track.used_bytes.len());
                let start = cursors.tracks[slot];
                let end = run_end(&track.t_ms[..entries], start, end_ms, |t| *t);
                (start, end)
            })
            .collect();
        let started_by = match end_ms {
            None => tracks.len(),
            Some(_) => runs
                .iter()
                .rposition(|(start, end)| end > start)
                .map_or(0, |last| last + 1),
        };
        let mut count: u64 = 0;
        for (slot, (track, &(run_start, run_end))) in tracks.iter().zip(&runs).enumerate() {
            let must_start = slot >= cursors.tracks_started && slot < started_by;
            if run_end == run_start && !must_start {
                continue;
            }
            let mut start = run_start;
            loop {
                let end = (start + PIECE_ENTRIES).min(run_end);
                put_track_piece(&mut self.payload, slot, track, start..end);
                count += 1;
                if self.payload.len() >= TARGET_CHUNK_BYTES {
                    self.emit_counted(chunk_type::PROCESS_TRACKS, &[], count);
                    count = 0;
                }
                start = end;
                if start >= run_end {
                    break;
                }
            }
            cursors.tracks[slot] = run_end;
        }
        cursors.tracks_started = cursors.tracks_started.max(started_by);
        if count > 0 {
            self.emit_counted(chunk_type::PROCESS_TRACKS, &[], count);
        }
    }
}

/// One piece of a process track: its identity and the entries in `entries`, delta-coded from 0.
fn put_track_piece(
    out: &mut Vec<u8>,
    slot: usize,
    track: &ProcessTrack,
    entries: std::ops::Range<usize>,
) {
    put_varint(out, slot as u64);
    put_varint(out, u64::from(track.device_index));
    put_varint(out, u64::from(track.pid));
    put_str(out, &track.name);
    out.push(items::process_kind_code(track.kind));
    codec::put_opt_pair(out, track.mig_instance);
    put_varint(out, entries.len() as u64);
    let (mut t_base, mut used_base): (i64, u64) = (0, 0);
    for i in entries {
        put_signed(out, track.t_ms[i].wrapping_sub(t_base));
        t_base = track.t_ms[i];
        match track.used_bytes[i] {
            None => out.push(0),
            Some(used) => {
                out.push(1);
                codec::put_delta(out, used, used_base);
                used_base = used;
            }
        }
    }
}

/// Poll times as deltas, each against the previous poll (the first against 0). The reader adds
/// each delta to the last poll time it already holds, so the list may be cut into chunks anywhere.
fn poll_deltas(times: &[i64]) -> Vec<i64> {
    let mut previous = 0i64;
    times
        .iter()
        .map(|&t| {
            let delta = t.wrapping_sub(previous);
            previous = t;
            delta
        })
        .collect()
}
