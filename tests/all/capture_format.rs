//! `.vramcap` format: exact round trips, recovery from truncation and corruption, foreign files,
//! future versions, forward compatibility and size.

use vramscope_core::formats::vramcap::{self, MAGIC, Recorder, VramcapError};
use vramscope_core::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, FieldState, FieldStatus,
    GIB, HealthSample, MIB, MemoryReading, ProcessKind, ProcessSample, Recovery, SampleBatch,
    SourceKind,
};

fn meta() -> CaptureMeta {
    CaptureMeta {
        source: SourceKind::Demo,
        host: "héberge-計算機".to_owned(),
        driver_version: "580.159.04".to_owned(),
        cuda_driver_version: Some(13000),
        started_ms: 1_764_000_000_000,
        interval_ms: 250,
        writer: "vramscope 0.1.0".to_owned(),
    }
}

fn devices() -> Vec<DeviceFacts> {
    vec![
        DeviceFacts {
            index: 0,
            name: "NVIDIA H200 (simulated) ☃".to_owned(),
            uuid: "GPU-0000".to_owned(),
            pci_bus_id: "00000000:19:00.0".to_owned(),
            memory_total_bytes: 143_771 * MIB,
            bar1_total_bytes: Some(256 * GIB),
            persistence_mode: Some(true),
            ecc_enabled: Some(false),
            compute_capability: Some((9, 0)),
            simulated: true,
            ..Default::default()
        },
        DeviceFacts {
            index: 3,
            name: String::new(),
            memory_total_bytes: 80 * GIB,
            // A fleet GPU: its host and Prometheus labels round-trip too.
            host: "node-b".to_owned(),
            labels: [("gpu", "1"), ("pod", "train-0"), ("namespace", "ml")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ..Default::default()
        },
    ]
}

fn device_sample(t_ms: i64, device_index: u32, tick: u64) -> DeviceSample {
    let used_bytes = 2 * GIB + (tick * 37 * MIB) % (60 * GIB);
    DeviceSample {
        t_ms,
        device_index,
        memory: Some(MemoryReading {
            used_bytes,
            reserved_bytes: 512 * MIB,
            free_bytes: 80 * GIB - used_bytes - 512 * MIB,
            total_bytes: 80 * GIB,
        }),
        gpu_util_pct: Some((tick % 101) as u32),
        mem_util_pct: if tick.is_multiple_of(7) {
            None
        } else {
            Some(40)
        },
        temperature_c: Some(55 + (tick % 5) as u32),
        power_mw: Some(300_000 + (tick % 13) as u32 * 1_000),
        sm_clock_mhz: Some(1980),
        mem_clock_mhz: Some(2619),
        throttle_reasons: if tick.is_multiple_of(11) {
            Some(u64::MAX)
        } else {
            Some(0)
        },
        ecc_corrected_volatile: Some(tick / 50),
        ecc_uncorrected_volatile: None,
    }
}

fn every_event(t_ms: i64) -> Vec<Event> {
    vec![
        Event {
            t_ms,
            device_index: Some(0),
            kind: EventKind::Xid {
                code: 31,
                mig_instance: Some((1, 0)),
            },
        },
        Event {
            t_ms,
            device_index: Some(3),
            kind: EventKind::Xid {
                code: 79,
                mig_instance: None,
            },
        },
        Event {
            t_ms,
            device_index: None,
            kind: EventKind::Critical {
                name: "DoubleBitEcc".to_owned(),
                data: u64::MAX,
            },
        },
        Event {
            t_ms: t_ms + 1,
            device_index: Some(0),
            kind: EventKind::OutOfMemory {
                pid: Some(4242),
                requested_bytes: Some(20 * GIB),
                detail: "CUDA out of memory. Tried to allocate 20.00 GiB — «train.py»".to_owned(),
            },
        },
        Event {
            t_ms: t_ms + 2,
            device_index: None,
            kind: EventKind::OutOfMemory {
                pid: None,
                requested_bytes: None,
                detail: String::new(),
            },
        },
        Event {
            t_ms: -5,
            device_index: Some(3),
            kind: EventKind::EccIncrease {
                corrected_delta: 3,
                uncorrected_delta: 0,
            },
        },
        Event {
            t_ms,
            device_index: Some(3),
            kind: EventKind::DeviceLost {
                detail: "GPU is lost".to_owned(),
            },
        },
        Event {
            t_ms,
            device_index: None,
            kind: EventKind::Annotation {
                text: "lr ↓ 1e-4 — エポック 3 🚀".to_owned(),
            },
        },
    ]
}

/// Batches of a small but complete recording: two devices (one unknown to the capture), processes
/// with MIG ids and missing memory, a process that leaves and comes back, empty process polls,
/// health samples, every event kind and field-state changes.
fn batches(ticks: u64) -> Vec<SampleBatch> {
    let start = meta().started_ms;
    (0..ticks)
        .map(|tick| {
            let t_ms = start + tick as i64 * 250;
            let mut batch = SampleBatch {
                devices: vec![
                    device_sample(t_ms, 0, tick),
                    device_sample(t_ms, 3, tick * 3),
                ],
                ..Default::default()
            };
            if tick == 5 {
                batch.devices.push(device_sample(t_ms, 9, tick)); // a device the capture does not know
                batch.devices[1].memory = None;
            }
            batch.processes = match tick % 4 {
                0 => Some(Vec::new()),
                1 => None,
                _ => Some(vec![
                    ProcessSample {
                        t_ms,
                        device_index: 0,
                        pid: 4242,
                        name: "python3 — train ✓".to_owned(),
                        used_bytes: Some(10 * GIB + tick * MIB),
                        kind: ProcessKind::Compute,
                        mig_instance: Some((1, 0)),
                    },
                    ProcessSample {
                        t_ms,
                        device_index: 3,
                        pid: 7,
                        name: String::new(),
                        used_bytes: if tick.is_multiple_of(3) {
                            None
                        } else {
                            Some(u64::MAX - tick)
                        },
                        kind: if tick > 20 {
                            ProcessKind::ComputeAndGraphics
                        } else {
                            ProcessKind::Graphics
                        },
                        mig_instance: None,
                    },
                ]),
            };
            if tick.is_multiple_of(20) {
                batch.health = vec![HealthSample {
                    t_ms,
                    device_index: 0,
                    ecc_corrected_aggregate: Some(tick),
                    remapped_rows_pending: Some(tick == 20),
                    remapped_rows_failure: Some(false),
                    bar1_used_bytes: Some(12 * MIB),
                    pcie_replay_count: Some(0),
                    persistence_mode: Some(true),
                    ..Default::default()
                }];
            }
            if tick == 10 {
                batch.events = every_event(t_ms);
            }
            if tick == 0 || tick == 30 {
                batch.field_changes = vec![
                    FieldStatus {
                        device_index: 0,
                        field: "remapped_rows".to_owned(),
                        state: FieldState::NotSupported,
                    },
                    FieldStatus {
                        device_index: 3,
                        field: "power".to_owned(),
                        state: if tick == 0 {
                            FieldState::Failed("permission denied ✗".to_owned())
                        } else {
                            FieldState::Ok
                        },
                    },
                ];
            }
            batch
        })
        .collect()
}

fn live_capture(ticks: u64) -> Capture {
    let mut capture = Capture::new(meta(), devices());
    for batch in batches(ticks) {
        capture.ingest(&batch);
    }
    capture
}

/// Offsets at which each chunk starts, and the end of the file, walking the documented framing.
fn chunk_boundaries(bytes: &[u8]) -> Vec<usize> {
    let header_body = u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
    let mut offset = 18 + header_body;
    let mut boundaries = vec![offset];
    while offset < bytes.len() {
        let len = u32::from_le_bytes(bytes[offset + 1..offset + 5].try_into().unwrap()) as usize;
        offset += 9 + len;
        boundaries.push(offset);
    }
    assert_eq!(offset, bytes.len(), "chunks tile the file");
    boundaries
}

fn assert_is_prefix(recovered: &Capture, full: &Capture) {
    assert_eq!(recovered.meta, full.meta);
    assert_eq!(recovered.devices, full.devices);
    for (part, whole) in recovered.series.iter().zip(&full.series) {
        let whole: Vec<_> = whole.iter().collect();
        let part: Vec<_> = part.iter().collect();
        assert!(whole.starts_with(&part), "recovered samples are a prefix");
    }
    assert!(full.events.starts_with(&recovered.events));
    assert!(full.process_poll_ms.starts_with(&recovered.process_poll_ms));
}

#[test]
fn saved_capture_round_trips_exactly() {
    let capture = live_capture(64);
    assert_eq!(capture.events.len(), 8);
    assert!(capture.processes.iter().any(|p| p.mig_instance.is_some()));
    let bytes = vramcap::write_bytes(&capture);
    let read = vramcap::read_bytes(&bytes, "saved.vramcap").expect("reads back");
    assert_eq!(read, capture);
    assert_eq!(read.recovery, None);
}

#[test]
fn hand_built_capture_round_trips_exactly() {
    // Built field by field rather than by ingest: odd series order, a series for an unknown device,
    // a track whose kind changed, a recovery note from an earlier damaged file.
    let mut capture = live_capture(8);
    capture.series.reverse();
    // Free memory that does not add up (older drivers, odd devices) must survive as well.
    let mut odd = device_sample(-1, 77, 1);
    odd.memory = Some(MemoryReading {
        used_bytes: 5,
        reserved_bytes: u64::MAX,
        free_bytes: 3,
        total_bytes: 1,
    });
    let mut series = vramscope_core::model::DeviceSeries::new(77);
    series.push(&odd);
    capture.series.push(series);
    capture
        .processes
        .push(vramscope_core::model::capture::ProcessTrack {
            device_index: 3,
            pid: u32::MAX,
            name: "zombie 🧟".to_owned(),
            kind: ProcessKind::Graphics,
            mig_instance: Some((u32::MAX, 0)),
            t_ms: vec![i64::MIN, 0, i64::MAX],
            used_bytes: vec![None, Some(0), Some(u64::MAX)],
        });
    capture.recovery = Some(Recovery {
        problem: "file ends inside chunk 3".to_owned(),
        chunks_recovered: 3,
        bytes_discarded: 17,
    });
    capture.reindex();
    let read =
        vramcap::read_bytes(&vramcap::write_bytes(&capture), "hand.vramcap").expect("reads back");
    assert_eq!(read, capture);
}

#[test]
fn large_columns_split_into_chunks_and_round_trip() {
    // Enough samples and one long-lived process to need several chunks of every column.
    let mut capture = Capture::new(meta(), devices());
    for tick in 0..150_000u64 {
        let t_ms = tick as i64 * 20;
        capture.ingest(&SampleBatch {
            devices: vec![device_sample(t_ms, 0, tick)],
            processes: Some(vec![ProcessSample {
                t_ms,
                device_index: 0,
                pid: 1,
                name: "long".to_owned(),
                used_bytes: Some(tick * 4099),
                ..Default::default()
            }]),
            ..Default::default()
        });
    }
    let bytes = vramcap::write_bytes(&capture);
    assert!(
        chunk_boundaries(&bytes).len() > 6,
        "split into several chunks"
    );
    assert_eq!(
        vramcap::read_bytes(&bytes, "big.vramcap").expect("reads"),
        capture
    );
}

#[test]
fn recorder_file_replays_to_the_live_capture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.vramcap");
    let recorder = Recorder::create(&path, &meta(), &devices()).expect("creates");
    for batch in batches(200) {
        recorder.push(&batch);
    }
    let status = recorder.finish().expect("finishes");
    assert_eq!(status.batches_written, 200);
    assert_eq!(status.batches_dropped, 0);
    assert_eq!(status.last_error, None);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(status.bytes_written, bytes.len() as u64);
    let read = vramcap::read_file(&path).expect("reads");
    assert_eq!(read, live_capture(200));
}

#[test]
fn recorder_writes_to_the_os_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.vramcap");
    let recorder = Recorder::create(&path, &meta(), &devices()).expect("creates");
    for batch in batches(3) {
        recorder.push(&batch);
    }
    std::thread::sleep(std::time::Duration::from_millis(1600));
    // The recorder is still running: the file has no end marker yet, but holds every batch.
    let in_flight = vramcap::read_file(&path).expect("opens while recording");
    let recovery = in_flight.recovery.clone().expect("not closed yet");
    assert!(
        recovery.problem.contains("not closed"),
        "{}",
        recovery.problem
    );
    assert_eq!(recovery.bytes_discarded, 0);
    let mut expected = live_capture(3);
    expected.recovery = in_flight.recovery.clone();
    assert_eq!(in_flight, expected);
    assert_eq!(recorder.status().batches_written, 3);
    recorder.finish().expect("finishes");
    assert_eq!(vramcap::read_file(&path).expect("reads").recovery, None);
}

#[test]
fn recorder_reports_files_it_cannot_create() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing-dir").join("x.vramcap");
    let err = Recorder::create(&path, &meta(), &devices()).expect_err("fails");
    let message = err.to_string();
    assert!(
        message.contains("x.vramcap") && message.contains("cannot create"),
        "{message}"
    );
}

/// Records `ticks` batches; with `ticks_per_chunk`, waits for the recorder's once-a-second flush
/// after every group so that each group lands in a chunk of its own.
fn recorded_bytes(ticks: u64, ticks_per_chunk: Option<usize>) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.vramcap");
    let recorder = Recorder::create(&path, &meta(), &devices()).expect("creates");
    for (i, batch) in batches(ticks).iter().enumerate() {
        recorder.push(batch);
        if ticks_per_chunk.is_some_and(|group| i % group == group - 1) {
            while recorder.status().batches_written < i as u64 + 1 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
    recorder.finish().expect("finishes");
    std::fs::read(&path).unwrap()
}

#[test]
fn truncation_anywhere_opens_what_came_before() {
    let recorded = recorded_bytes(30, Some(10));
    let saved = vramcap::write_bytes(&live_capture(30));
    for (name, bytes) in [("recorded", &recorded), ("saved", &saved)] {
        let full = vramcap::read_bytes(bytes, name).expect("full file reads");
        assert_eq!(full.recovery, None);
        let boundaries = chunk_boundaries(bytes);
        assert!(
            boundaries.len() >= 4,
            "{name}: several chunks ({boundaries:?})"
        );
        let header_len = boundaries[0];
        for len in 0..bytes.len() {
            let result = vramcap::read_bytes(&bytes[..len], "cut.vramcap");
            if len < header_len {
                let err = result
                    .err()
                    .unwrap_or_else(|| panic!("{name}: header cut at {len} must fail"));
                assert!(err.to_string().starts_with("cut.vramcap: "), "{err}");
                continue;
            }
            let capture = result.unwrap_or_else(|e| panic!("{name}: cut at {len} must open: {e}"));
            let recovery = capture
                .recovery
                .clone()
                .unwrap_or_else(|| panic!("{name}: cut at {len} needs recovery"));
            let last_boundary = boundaries
                .iter()
                .rev()
                .find(|&&b| b <= len)
                .copied()
                .unwrap();
            assert_eq!(
                recovery.bytes_discarded,
                (len - last_boundary) as u64,
                "{name}: cut at {len}"
            );
            if boundaries.contains(&len) {
                assert!(
                    recovery.problem.contains("not closed"),
                    "{}",
                    recovery.problem
                );
            } else {
                assert!(
                    recovery.problem.contains("ends inside"),
                    "{}",
                    recovery.problem
                );
            }
            if name == "recorded" {
                assert_is_prefix(&capture, &full);
            }
        }
    }
}

/// Chunk type that closes a saved capture's time window; its payload is the window's end time.
const WINDOW_END_CHUNK: u8 = 10;

#[test]
fn saved_capture_cut_after_each_window_keeps_every_earlier_window_exactly() {
    // Long enough for several time windows, with events, health and process entries in each.
    let mut all_batches = batches(2_400);
    for (tick, batch) in all_batches.iter_mut().enumerate() {
        if tick % 150 == 7 {
            batch.events = every_event(batch.devices[0].t_ms);
        }
    }
    let mut full = Capture::new(meta(), devices());
    all_batches.iter().for_each(|batch| full.ingest(batch));
    let bytes = vramcap::write_bytes(&full);
    let boundaries = chunk_boundaries(&bytes);
    let mut windows_checked = 0;
    for pair in boundaries.windows(2) {
        let (chunk_start, chunk_end) = (pair[0], pair[1]);
        if bytes[chunk_start] != WINDOW_END_CHUNK {
            continue;
        }
        // The payload is one zigzag varint: the window's exclusive end time.
        let mut end_ms: u64 = 0;
        for (i, byte) in bytes[chunk_start + 9..chunk_end].iter().enumerate() {
            end_ms |= u64::from(byte & 0x7f) << (7 * i);
        }
        let end_ms = ((end_ms >> 1) as i64) ^ -((end_ms & 1) as i64);
        let mut cut = vramcap::read_bytes(&bytes[..chunk_end], "cut.vramcap").expect("opens");
        let recovery = cut.recovery.take().expect("a cut file has a recovery note");
        assert_eq!(recovery.bytes_discarded, 0);
        let secs = (end_ms - meta().started_ms) / 1000;
        let first = format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
        assert!(
            recovery
                .problem
                .contains(&format!("of its first {first} is complete"))
                && recovery
                    .problem
                    .contains(&format!("before t = {end_ms} ms")),
            "{}",
            recovery.problem
        );
        // The capture a live view had at that time; field states are the file's last chunk.
        let mut expected = Capture::new(meta(), devices());
        all_batches
            .iter()
            .filter(|batch| batch.devices[0].t_ms < end_ms)
            .for_each(|batch| expected.ingest(batch));
        expected.field_status.clear();
        assert_eq!(cut, expected, "cut after the window ending at {end_ms}");
        assert!(cut.events.len() > 8 || windows_checked == 0);
        windows_checked += 1;
    }
    // 600 s of samples in windows of at most a minute.
    assert!(windows_checked >= 9, "{windows_checked} windows");
    // A cut inside a window still opens what came before it.
    let last_window = boundaries
        .windows(2)
        .rfind(|pair| bytes[pair[0]] == WINDOW_END_CHUNK)
        .expect("windows");
    let inside = vramcap::read_bytes(&bytes[..last_window[0] - 3], "cut.vramcap").expect("opens");
    assert_is_prefix(&inside, &full);
}

#[test]
fn fast_sampling_closes_windows_by_sample_count_and_round_trips() {
    // 30,000 samples within 15 s: far over the per-window sample limit, well under a minute.
    let mut capture = Capture::new(meta(), devices());
    for tick in 0..30_000u64 {
        let t_ms = meta().started_ms + tick as i64 / 2;
        capture.ingest(&SampleBatch {
            devices: vec![device_sample(t_ms, 0, tick)],
            ..Default::default()
        });
    }
    let bytes = vramcap::write_bytes(&capture);
    let boundaries = chunk_boundaries(&bytes);
    let window_ends = boundaries[..boundaries.len() - 1]
        .iter()
        .filter(|&&offset| bytes[offset] == WINDOW_END_CHUNK)
        .count();
    assert!(window_ends >= 3, "{window_ends} windows closed");
    assert_eq!(
        vramcap::read_bytes(&bytes, "fast.vramcap").expect("reads"),
        capture
    );
}

#[test]
fn every_flipped_byte_is_an_error_or_a_noted_recovery() {
    let bytes = recorded_bytes(30, Some(10));
    for position in 0..bytes.len() {
        for mask in [0x01u8, 0xff] {
            let mut damaged = bytes.clone();
            damaged[position] ^= mask;
            match vramcap::read_bytes(&damaged, "flip.vramcap") {
                Err(err) => assert!(err.to_string().starts_with("flip.vramcap: "), "{err}"),
                Ok(capture) => {
                    let recovery = capture
                        .recovery
                        .unwrap_or_else(|| panic!("flip at {position} went unnoticed"));
                    assert!(!recovery.problem.is_empty());
                }
            }
        }
    }
}

#[test]
fn damaged_chunk_in_the_middle_keeps_the_chunks_before_it() {
    let bytes = recorded_bytes(30, Some(10));
    let boundaries = chunk_boundaries(&bytes);
    let full = vramcap::read_bytes(&bytes, "ok").unwrap();
    let mut damaged = bytes.clone();
    damaged[boundaries[2] + 12] ^= 0x40;
    let capture = vramcap::read_bytes(&damaged, "mid.vramcap").expect("opens");
    let recovery = capture.recovery.clone().expect("recovered");
    assert_eq!(recovery.chunks_recovered, 2);
    assert!(
        recovery.problem.contains("chunk 2") && recovery.problem.contains("checksum"),
        "{}",
        recovery.problem
    );
    assert_eq!(
        recovery.bytes_discarded,
        (bytes.len() - boundaries[2]) as u64
    );
    assert_eq!(
        capture.sample_count(),
        2 * 20,
        "two chunks of ten ticks of two known devices"
    );
    assert_is_prefix(&capture, &full);
}

#[test]
fn absurd_chunk_length_is_rejected_without_allocating() {
    let mut bytes = vramcap::write_bytes(&live_capture(4));
    let first_chunk = chunk_boundaries(&bytes)[0];
    bytes[first_chunk + 1..first_chunk + 5].copy_from_slice(&u32::MAX.to_le_bytes());
    let capture = vramcap::read_bytes(&bytes, "huge.vramcap").expect("header is fine");
    let problem = capture.recovery.expect("recovered").problem;
    assert!(problem.contains("limit"), "{problem}");
}

#[test]
fn foreign_files_are_named_errors() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    let mut random = Vec::new();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..4096 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        random.push(state as u8);
    }
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("image.png", png, "PNG"),
        ("empty.vramcap", Vec::new(), "empty"),
        ("noise.bin", random, "signature"),
        ("snap.json", b"  {\"segments\": []}".to_vec(), "JSON"),
        ("snap.pickle", vec![0x80, 0x04, 0x95], "pickle"),
    ];
    for (name, bytes, expected) in cases {
        let err = vramcap::read_bytes(&bytes, name)
            .err()
            .unwrap_or_else(|| panic!("{name} must fail"));
        assert!(
            matches!(err, VramcapError::NotVramcap { .. }),
            "{name}: {err:?}"
        );
        let message = err.to_string();
        assert!(
            message.starts_with(name) && message.contains(expected),
            "{message}"
        );
    }
    let err = vramcap::read_bytes(&MAGIC[..5], "short.vramcap").expect_err("fails");
    assert!(matches!(err, VramcapError::DamagedHeader { .. }), "{err:?}");
}

#[test]
fn missing_file_is_a_named_error() {
    let err = vramcap::read_file(std::path::Path::new("/nonexistent/dir/gone.vramcap"))
        .expect_err("fails");
    assert!(err.to_string().contains("gone.vramcap"), "{err}");
}

#[test]
fn future_version_is_refused_clearly() {
    let mut bytes = vramcap::write_bytes(&live_capture(2));
    bytes[8..10].copy_from_slice(&2u16.to_le_bytes());
    let err = vramcap::read_bytes(&bytes, "new.vramcap").expect_err("fails");
    assert!(
        matches!(err, VramcapError::UnsupportedVersion { version: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("newer vramscope"), "{err}");
}

#[test]
fn unknown_chunk_types_are_skipped() {
    let capture = live_capture(12);
    let bytes = vramcap::write_bytes(&capture);
    let insert_at = chunk_boundaries(&bytes)[1];
    let payload = b"from a newer writer";
    let len = (payload.len() as u32).to_le_bytes();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[200]);
    crc.update(&len);
    crc.update(payload);
    let mut chunk = vec![200u8];
    chunk.extend_from_slice(&len);
    chunk.extend_from_slice(&crc.finalize().to_le_bytes());
    chunk.extend_from_slice(payload);
    let mut extended = bytes[..insert_at].to_vec();
    extended.extend_from_slice(&chunk);
    extended.extend_from_slice(&bytes[insert_at..]);
    assert_eq!(
        vramcap::read_bytes(&extended, "ext.vramcap").expect("reads"),
        capture
    );
}

#[test]
fn typical_recording_is_well_under_64_bytes_per_sample() {
    // One tick per 250 ms on two GPUs with a process on each, memory moving every tick.
    let bytes = recorded_bytes(400, None);
    let capture = vramcap::read_bytes(&bytes, "size").unwrap();
    let per_sample = bytes.len() as f64 / capture.sample_count() as f64;
    assert!(per_sample < 32.0, "{per_sample:.1} bytes per device sample");
}
