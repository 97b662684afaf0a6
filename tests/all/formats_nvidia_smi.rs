//! nvidia-smi CSV logs as captures, on real logs from H200 runs (`docs/gpu-verification/`,
//! `tests/fixtures/cases/`): the GPU log of run 1 agrees with vramscope's own NVML recording of the
//! same run, process logs become per-process tracks (joined to the GPU log when both are given),
//! the same data without header or units reads the same, and the command line opens them where a
//! capture is accepted (and the log analyzer refuses them, saying to use --capture).

use std::path::{Path, PathBuf};

use crate::support::cli::vramscope;
use vramscope_core::formats::capture::{join_process_logs, read_bytes};
use vramscope_core::formats::nvidia_smi::SmiReadOptions;
use vramscope_core::model::{Capture, MIB};

/// Run 1's machine ran in UTC (`run.log`: `utc_offset +0000`).
const UTC: SmiReadOptions = SmiReadOptions {
    utc_offset_minutes: 0,
    untimed_end_ms: 0,
};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> Capture {
    let bytes = std::fs::read(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    read_bytes(&bytes, path, UTC).unwrap_or_else(|e| panic!("{e}"))
}

const RUN1_GPU_LOG: &str = "docs/gpu-verification/h200-run1/smi-memory.csv";
const RUN1_APPS_LOG: &str = "docs/gpu-verification/h200-run1/smi-apps.csv";

#[test]
fn h200_gpu_log_agrees_with_vramscopes_recording_of_the_same_run() {
    let capture = read(RUN1_GPU_LOG);
    assert_eq!(capture.devices.len(), 1);
    assert_eq!(capture.devices[0].memory_total_bytes, 143_771 * MIB);
    let samples: Vec<_> = capture.series[0].iter().collect();
    assert_eq!(samples.len(), 161, "every row of the log");
    assert_eq!(capture.meta.interval_ms, 250, "-lms 250");
    let first = samples[0].memory.expect("memory");
    assert_eq!(
        (first.used_bytes, first.reserved_bytes),
        (0, 616 * MIB),
        "0 MiB used, 616 MiB reserved"
    );

    // vramscope's NVML recording of the same run: t_ms,device,used_bytes,reserved_bytes,...
    let recording = std::fs::read_to_string(repo(
        "docs/gpu-verification/h200-run1/rec/vramscope-memory.csv",
    ))
    .expect("the recording");
    let recorded: Vec<(i64, u64)> = recording
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            Some((fields.first()?.parse().ok()?, fields.get(2)?.parse().ok()?))
        })
        .collect();
    assert!(recorded.len() > 100);
    let mut pairs = 0;
    for sample in &samples {
        let nearest = recorded
            .iter()
            .min_by_key(|(t, _)| (t - sample.t_ms).abs())
            .expect("recorded samples");
        if (nearest.0 - sample.t_ms).abs() > 125 {
            continue;
        }
        pairs += 1;
        let used = sample.memory.expect("memory").used_bytes;
        assert!(
            used.abs_diff(nearest.1) <= MIB,
            "at {}: nvidia-smi {used} vs vramscope {}",
            sample.t_ms,
            nearest.1
        );
    }
    // The log starts a few seconds before the recording; every sample inside it pairs.
    assert!(pairs >= 130, "only {pairs} samples paired in time");
}

#[test]
fn the_same_log_without_header_or_units_reads_the_same() {
    let text = std::fs::read_to_string(repo(RUN1_GPU_LOG)).expect("log");
    let headerless: String = text
        .lines()
        .skip(1)
        .map(|line| format!("{}\n", line.replace(" MiB", "")))
        .collect();
    let with_header = read(RUN1_GPU_LOG);
    let without = read_bytes(headerless.as_bytes(), "noheader.csv", UTC).expect("reads");
    assert_eq!(without.series, with_header.series);
    assert!(
        without.meta.writer.contains("memory.reserved"),
        "the assumption is stated: {}",
        without.meta.writer
    );
}

#[test]
fn process_logs_become_tracks_and_join_the_gpu_log() {
    let apps = read(RUN1_APPS_LOG);
    assert_eq!(apps.processes.len(), 1);
    let python = &apps.processes[0];
    assert_eq!((python.pid, python.name.as_str()), (511, "python3"));
    assert_eq!(python.peak_used_bytes(), Some(16_996 * MIB));
    assert_eq!(apps.sample_count(), 0);

    let joined = join_process_logs(vec![
        ("smi-apps.csv".to_owned(), apps),
        ("smi-memory.csv".to_owned(), read(RUN1_GPU_LOG)),
    ]);
    assert_eq!(joined.len(), 1);
    let (name, capture) = &joined[0];
    assert_eq!(name, "smi-memory.csv + smi-apps.csv");
    assert_eq!(capture.sample_count(), 161);
    assert_eq!(capture.processes.len(), 1);
    assert_eq!(capture.processes[0].device_index, 0);

    // Two GPUs, a process on each, told apart by UUID.
    let two = read("docs/gpu-verification/h200x2-run2/smi-apps.csv");
    assert_eq!(two.devices.len(), 2);
    let mut pids: Vec<(u32, u32)> = two
        .processes
        .iter()
        .map(|p| (p.device_index, p.pid))
        .collect();
    pids.sort_unstable();
    assert_eq!(pids, [(0, 586), (1, 587)]);
    assert!(two.devices.iter().all(|d| d.uuid.starts_with("GPU-")));
}

#[test]
fn process_lists_of_the_real_cases_open() {
    let other = read("tests/fixtures/cases/other_process.smi.csv");
    let peaks: Vec<(u32, Option<u64>)> = other
        .processes
        .iter()
        .map(|p| (p.pid, p.peak_used_bytes()))
        .collect();
    assert_eq!(
        peaks,
        [(734, Some(12_908 * MIB)), (758, Some(128_518 * MIB))]
    );
    for case in [
        "batch_too_large",
        "fragmentation",
        "healthy",
        "leak",
        "memory_cap",
    ] {
        let capture = read(&format!("tests/fixtures/cases/{case}.smi.csv"));
        assert_eq!(capture.processes.len(), 1, "{case}");
    }
}

#[test]
fn the_command_line_opens_them_where_a_capture_is_accepted() {
    let gpu = repo(RUN1_GPU_LOG).display().to_string();
    let apps = repo(RUN1_APPS_LOG).display().to_string();
    let out = vramscope(&["inspect", "--json", &gpu, &apps]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["devices"][0]["sample_count"], 161);
    assert_eq!(doc["devices"][0]["memory_total_bytes"], 143_771 * MIB);
    assert_eq!(doc["processes"][0]["pid"], 511);
    assert!(
        doc["writer"]
            .as_str()
            .is_some_and(|w| w.contains("nvidia-smi")),
        "{doc:#}"
    );

    // diagnose --capture reads the samples (it used to see a log with 0 recognised lines).
    let out = vramscope(&["diagnose", "--capture", &gpu, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let input = &doc["inputs"][0];
    assert_eq!(input["kind"], "capture", "{doc:#}");
    assert!(
        input["summary"].as_str().is_some_and(|s| s.contains("161")),
        "{input:#}"
    );

    // Given as a log, it is refused, saying what to do.
    let out = vramscope(&["diagnose", "--log", &gpu]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nvidia-smi") && stderr.contains("--capture"),
        "{stderr}"
    );
}
