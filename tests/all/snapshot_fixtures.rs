//! Real PyTorch snapshots (recorded on an H200) read by vramscope must agree with
//! (a) `torch.cuda.memory_stats()` taken at the same moment (`NAME.truth.json`), and
//! (b) what CPython's own unpickler reads from the same file (`NAME.expect.json`, written by
//! `scripts/snapshot_expect.py`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use vramscope_core::analysis::totals::device_totals;
use vramscope_core::formats::pytorch::{looks_like_snapshot, read_file};
use vramscope_core::model::allocator::{
    AllocatorSnapshot, SnapshotContainer, SnapshotVintage, StackId, TraceAction,
};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch")
}

/// Every snapshot fixture (pickle or JSON) with the base name it shares with its side files.
fn snapshots() -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(fixture_dir()).expect("fixture dir") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        for ext in [".pickle", ".snapshot.json"] {
            if let Some(base) = name.strip_suffix(ext) {
                found.push((path.clone(), base.to_owned()));
            }
        }
    }
    found.sort();
    assert!(found.len() >= 2, "fixtures missing: {found:?}");
    found
}

fn read_json(path: &Path) -> Option<Json> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).expect("valid JSON side file"))
}

fn load(path: &Path) -> AllocatorSnapshot {
    read_file(path, &|_| true).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn totals_equal_memory_stats_for_every_fixture() {
    let mut compared_files = 0;
    for (path, base) in snapshots() {
        // Variants (`NAME.v-p0`, `NAME.p2`, …) hold the same allocator state as `NAME`.
        let scenario = base.split('.').next().unwrap_or(&base);
        let Some(truth) = read_json(&fixture_dir().join(format!("{scenario}.truth.json"))) else {
            continue;
        };
        let snapshot = load(&path);
        // A 2019 bare segment list does not record requested sizes at all.
        let knows_requested = snapshot.vintage != Some(SnapshotVintage::BareSegmentList);
        let device = truth["device"].as_u64().unwrap_or(0) as u32;
        let totals = device_totals(&snapshot);
        let device_totals = totals
            .iter()
            .find(|t| t.device == device)
            .unwrap_or_else(|| panic!("{base}: no device {device} in {totals:?}"));
        let stats = truth["memory_stats"].as_object().expect("memory_stats");
        let mut compared = 0;
        let mut mismatches = Vec::new();
        for (key, value) in stats {
            let Some(ours) = device_totals.memory_stat(key) else {
                continue;
            };
            if key.starts_with("requested_bytes") && !knows_requested {
                continue;
            }
            compared += 1;
            let theirs = value.as_u64().expect("stat is a count");
            if ours != theirs {
                mismatches.push(format!("{key}: ours {ours}, PyTorch {theirs}"));
            }
        }
        assert!(mismatches.is_empty(), "{base}: {mismatches:#?}");
        let least = if knows_requested { 29 } else { 26 };
        assert!(compared >= least, "{base}: only {compared} stats compared");
        compared_files += 1;
    }
    assert!(
        compared_files >= 11,
        "only {compared_files} fixtures have a truth"
    );
}

#[test]
fn decoding_agrees_with_cpython_for_every_fixture() {
    for (path, base) in snapshots() {
        let expect = read_json(&fixture_dir().join(format!("{base}.expect.json")))
            .unwrap_or_else(|| panic!("{base}: run scripts/snapshot_expect.py"));
        let snapshot = load(&path);
        assert_eq!(
            snapshot.segments.len() as u64,
            expect["segment_count"],
            "{base}"
        );
        assert_eq!(
            snapshot.blocks.len() as u64,
            expect["block_count"],
            "{base}"
        );
        let block_bytes: u64 = snapshot.blocks.iter().map(|b| b.size_bytes).sum();
        assert_eq!(block_bytes, expect["block_bytes"], "{base}");
        let lengths: Vec<u64> = snapshot.traces.iter().map(|t| t.len() as u64).collect();
        let expected_lengths: Vec<u64> = expect["trace_lengths"]
            .as_array()
            .expect("trace_lengths")
            .iter()
            .filter_map(Json::as_u64)
            .collect();
        assert_eq!(lengths, expected_lengths, "{base}");

        let mut actions: BTreeMap<String, u64> = BTreeMap::new();
        for trace in &snapshot.traces {
            for action in &trace.actions {
                let name = match action {
                    TraceAction::Unknown(id) => snapshot.string(*id).to_owned(),
                    known => known.name().unwrap_or("?").to_owned(),
                };
                *actions.entry(name).or_default() += 1;
            }
        }
        let expected_actions: BTreeMap<String, u64> = expect["actions"]
            .as_object()
            .expect("actions")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
            .collect();
        assert_eq!(actions, expected_actions, "{base}");
        assert_eq!(
            snapshot.frames.stack_count() as u64,
            expect["stack_count"],
            "{base}: distinct stacks"
        );
        assert_eq!(
            snapshot.frames.frame_count() as u64,
            expect["frame_count"],
            "{base}: distinct frames"
        );
        assert_eq!(
            snapshot.annotations.len() as u64,
            expect["annotation_count"],
            "{base}"
        );

        let sizes: u64 = snapshot
            .traces
            .iter()
            .flat_map(|t| t.sizes_bytes.iter())
            .sum();
        if let Some(size_sum) = expect["size_sum"].as_u64() {
            assert_eq!(sizes, size_sum, "{base}: sum of event sizes");
        }
        let events: Vec<(usize, usize)> = snapshot
            .traces
            .iter()
            .enumerate()
            .flat_map(|(t, trace)| (0..trace.len()).map(move |i| (t, i)))
            .collect();
        for (which, (t, i)) in [
            ("first_event", events.first()),
            ("last_event", events.last()),
        ]
        .into_iter()
        .filter_map(|(w, e)| e.map(|e| (w, *e)))
        {
            let trace = &snapshot.traces[t];
            let e = &expect[which];
            assert_eq!(
                trace.actions[i].name(),
                e["action"].as_str(),
                "{base} {which}"
            );
            assert_eq!(
                trace.addresses[i],
                e["addr"].as_u64().unwrap_or(0),
                "{base} {which}"
            );
            assert_eq!(trace.sizes_bytes[i], e["size"], "{base} {which}");
            assert_eq!(trace.streams[i], e["stream"], "{base} {which}");
            assert_eq!(
                trace.time_us(i).map(|t| t as u64),
                e["time_us"].as_u64(),
                "{base}"
            );
        }
        let oom_free: Vec<u64> = snapshot
            .traces
            .iter()
            .flat_map(|t| t.device_free_bytes.iter().map(|&(_, free)| free))
            .collect();
        let expected_free: Vec<u64> = expect["oom_device_free"]
            .as_array()
            .map(|a| a.iter().filter_map(Json::as_u64).collect())
            .unwrap_or_default();
        assert_eq!(oom_free, expected_free, "{base}: device_free of oom events");
    }
}

#[test]
fn fixtures_keep_model_invariants() {
    for (path, base) in snapshots() {
        let snapshot = load(&path);
        assert!(
            snapshot.warnings.is_empty(),
            "{base}: {:?}",
            snapshot.warnings
        );
        for pair in snapshot.segments.windows(2) {
            assert!(
                (pair[0].device, pair[0].address) < (pair[1].device, pair[1].address),
                "{base}: segments sorted"
            );
        }
        for segment in &snapshot.segments {
            let blocks = snapshot.segment_blocks(segment);
            assert_eq!(blocks.len(), segment.block_count as usize);
            let mut address = segment.address;
            for block in blocks {
                assert_eq!(block.address, address, "{base}: contiguous blocks");
                address += block.size_bytes;
            }
            assert_eq!(
                address,
                segment.end_address(),
                "{base}: blocks fill the segment"
            );
        }
        // Frames keep the memo's sharing: far fewer distinct stacks than stacked records.
        let stacked = snapshot
            .traces
            .iter()
            .flat_map(|t| t.stacks.iter())
            .filter(|s| **s != StackId::EMPTY)
            .count();
        assert!(snapshot.frames.stack_count() <= stacked.max(1) + snapshot.blocks.len() + 1);
        let prefix = std::fs::read(&path).expect("fixture");
        assert!(
            looks_like_snapshot(&prefix[..prefix.len().min(256)]),
            "{base}"
        );
    }
}

#[test]
fn variants_report_their_container_and_vintage() {
    let expected = [
        (
            "frag_oom",
            SnapshotContainer::Pickle { protocol: 4 },
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "frag_oom.v-p0",
            SnapshotContainer::Pickle { protocol: 0 },
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "frag_oom.v-p1",
            // Protocol 1 has no PROTO opcode, so it reads as 0.
            SnapshotContainer::Pickle { protocol: 0 },
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "frag_oom.v-p2",
            SnapshotContainer::Pickle { protocol: 2 },
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "frag_oom.v-p3",
            SnapshotContainer::Pickle { protocol: 3 },
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "frag_oom.v-p5",
            SnapshotContainer::Pickle { protocol: 5 },
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "frag_oom.v-torchscript",
            SnapshotContainer::Pickle { protocol: 2 },
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "frag_oom.v-json",
            SnapshotContainer::Json,
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "frag_oom.v-pre21",
            SnapshotContainer::Pickle { protocol: 2 },
            SnapshotVintage::BlockHistory,
        ),
        (
            "frag_oom.v-bare",
            SnapshotContainer::Pickle { protocol: 2 },
            SnapshotVintage::BareSegmentList,
        ),
    ];
    let recorded = [
        // Real file from torch::cuda::_memory_snapshot_pickled (TorchScript's Pickler).
        (
            "cpp",
            SnapshotContainer::Pickle { protocol: 2 },
            SnapshotVintage::AllocatorSettings,
        ),
        // Real torch.cuda.memory_snapshot(): a bare list of modern segments.
        (
            "nohistory_bare",
            SnapshotContainer::Pickle { protocol: 4 },
            SnapshotVintage::BlockFrames,
        ),
        (
            "streams.p5",
            SnapshotContainer::Pickle { protocol: 5 },
            SnapshotVintage::AllocatorSettings,
        ),
        (
            "leak",
            SnapshotContainer::Json,
            SnapshotVintage::AllocatorSettings,
        ),
    ];
    let all = snapshots();
    for (base, container, vintage) in expected.into_iter().chain(recorded) {
        let is_json = container == SnapshotContainer::Json;
        let (path, _) = all
            .iter()
            .find(|(p, b)| b == base && p.to_string_lossy().ends_with(".json") == is_json)
            .unwrap_or_else(|| panic!("fixture {base} missing"));
        let snapshot = load(path);
        assert_eq!(snapshot.container, Some(container), "{base}");
        assert_eq!(snapshot.vintage, Some(vintage), "{base}");
    }
}

#[test]
fn legacy_history_supplies_requested_sizes_and_stacks() {
    let modern = load(&fixture_dir().join("frag_oom.pickle"));
    let legacy = load(&fixture_dir().join("frag_oom.v-pre21.pickle"));
    assert_eq!(modern.blocks.len(), legacy.blocks.len());
    for (m, l) in modern.blocks.iter().zip(&legacy.blocks) {
        assert_eq!(
            m.address, l.address,
            "addresses are computed from the segment"
        );
        if m.state.is_active() {
            assert_eq!(m.requested_bytes, l.requested_bytes);
            assert_eq!(
                modern.frames.stack(m.stack).len(),
                legacy.frames.stack(l.stack).len()
            );
        }
    }
    assert!(legacy.traces.iter().all(|t| t.time_us(0).is_none()));
}

#[test]
fn streamed_file_and_in_memory_reads_agree() {
    // train.pickle is larger than the reader's 1 MiB chunk, so items straddle chunk borders.
    let path = fixture_dir().join("train.pickle");
    let bytes = std::fs::read(&path).expect("fixture");
    let streamed = load(&path);
    let in_memory = vramscope_core::formats::pytorch::read_bytes(&bytes, "train.pickle", &|_| true)
        .expect("read");
    assert_eq!(streamed.segments, in_memory.segments);
    assert_eq!(streamed.blocks, in_memory.blocks);
    assert_eq!(streamed.traces, in_memory.traces);
    assert_eq!(streamed.annotations, in_memory.annotations);
    assert_eq!(
        streamed.frames.stack_count(),
        in_memory.frames.stack_count()
    );
}

#[test]
fn diagnosis_cases_totals_equal_memory_stats() {
    // The diagnosis corpus (tests/fixtures/cases): snapshots with flat memory_stats() beside them.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("cases dir") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("pickle") {
            continue;
        }
        let truth_path = path.with_extension("truth.json");
        let Some(stats) = read_json(&truth_path) else {
            continue;
        };
        let snapshot = load(&path);
        let totals = device_totals(&snapshot);
        let device = totals.first().expect("a device");
        let stats = stats.as_object().expect("flat memory_stats");
        let mut compared = 0;
        for (key, value) in stats {
            if let Some(ours) = device.memory_stat(key) {
                assert_eq!(Some(ours), value.as_u64(), "{}: {key}", path.display());
                compared += 1;
            }
        }
        assert!(compared >= 29, "{}: {compared} keys", path.display());
        checked += 1;
    }
    assert!(checked >= 6, "only {checked} cases");
}
