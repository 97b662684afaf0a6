//! `vramscope export`: CSV tables, a Chrome/Perfetto trace checked against the Trace Event
//! Format's rules, and the review PNG, from a real nvidia-smi log of an H200 run and from a demo
//! capture; names taken from the input; existing files replaced only with --force.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::cli::vramscope;
use serde_json::Value;
use vramscope_core::model::MIB;

fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A copy of run 1's nvidia-smi logs in `dir` (exports are written beside the input).
fn run1_logs(dir: &Path) -> (PathBuf, PathBuf) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/gpu-verification/h200-run1");
    let gpu = dir.join("smi-memory.csv");
    let apps = dir.join("smi-apps.csv");
    std::fs::copy(source.join("smi-memory.csv"), &gpu).expect("copy");
    std::fs::copy(source.join("smi-apps.csv"), &apps).expect("copy");
    (gpu, apps)
}

/// Checks a trace against the JSON Trace Event Format as Perfetto's importer reads it: an object
/// with a `traceEvents` array; every event has a known phase, an integer pid and tid; counters
/// ("C") have a name, a finite timestamp in microseconds and numeric args, and come in time order
/// per track; metadata ("M") names processes; instants ("i") have a valid scope. Returns the
/// counter tracks as (process name, "<event name> <arg>") → values in time order.
fn check_trace(doc: &Value) -> BTreeMap<(String, String), Vec<(f64, f64)>> {
    let events = doc["traceEvents"].as_array().expect("traceEvents array");
    assert!(!events.is_empty());
    let mut process_names: BTreeMap<u64, String> = BTreeMap::new();
    let mut tracks: BTreeMap<(u64, String), Vec<(f64, f64)>> = BTreeMap::new();
    for event in events {
        let ph = event["ph"].as_str().expect("ph is a string");
        let pid = event["pid"]
            .as_u64()
            .expect("pid is a non-negative integer");
        assert!(event["tid"].is_u64(), "tid is an integer: {event}");
        let name = event["name"].as_str().expect("name is a string");
        match ph {
            "M" => {
                assert!(
                    ["process_name", "process_sort_index"].contains(&name),
                    "{event}"
                );
                if name == "process_name" {
                    let label = event["args"]["name"].as_str().expect("args.name");
                    assert!(
                        process_names.insert(pid, label.to_owned()).is_none(),
                        "named twice"
                    );
                } else {
                    assert!(event["args"]["sort_index"].is_i64(), "{event}");
                }
            }
            "C" => {
                let ts = event["ts"].as_f64().expect("ts is a number");
                assert!(ts.is_finite() && ts > 1e15, "ts in Unix microseconds: {ts}");
                let args = event["args"].as_object().expect("args object");
                assert!(!args.is_empty(), "{event}");
                for (key, value) in args {
                    let value = value.as_f64().expect("counter values are numbers");
                    assert!(value.is_finite() && value >= 0.0);
                    tracks
                        .entry((pid, format!("{name} {key}")))
                        .or_default()
                        .push((ts, value));
                }
            }
            "i" => {
                assert!(["g", "p", "t"].contains(&event["s"].as_str().unwrap_or("t")));
                assert!(event["ts"].is_number());
            }
            other => panic!("unexpected phase {other}: {event}"),
        }
    }
    tracks
        .into_iter()
        .map(|((pid, track), values)| {
            assert!(
                values.windows(2).all(|w| w[0].0 <= w[1].0),
                "{track}: counter samples out of time order"
            );
            let process = process_names
                .get(&pid)
                .unwrap_or_else(|| panic!("pid {pid} has counters but no process_name"))
                .clone();
            ((process, track), values)
        })
        .collect()
}

#[test]
fn exports_a_real_nvidia_smi_run_as_csv_trace_and_image() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (gpu, apps) = run1_logs(dir.path());
    let out = vramscope(&[
        "export",
        &gpu.display().to_string(),
        &apps.display().to_string(),
        "--csv",
        "--perfetto",
        "--png",
    ]);
    succeeded(&out);
    let printed = String::from_utf8_lossy(&out.stdout);
    for name in [
        "smi-memory.timeline.csv",
        "smi-memory.timeline.processes.csv",
        "smi-memory.trace.json",
        "smi-memory.timeline.png",
    ] {
        assert!(
            dir.path().join(name).is_file(),
            "{name} missing; printed:\n{printed}"
        );
        assert!(printed.contains(name), "{printed}");
    }

    let gpus = std::fs::read_to_string(dir.path().join("smi-memory.timeline.csv")).expect("csv");
    let rows: Vec<&str> = gpus.lines().collect();
    assert_eq!(rows.len(), 1 + 161);
    assert_eq!(
        rows[1],
        format!(
            "2026-11-30T08:43:28.733Z,1796028208733,0,0,{},{},{},,,,,,",
            616 * MIB,
            (143_771 - 616) * MIB,
            143_771 * MIB
        )
    );
    let processes =
        std::fs::read_to_string(dir.path().join("smi-memory.timeline.processes.csv")).expect("csv");
    assert!(
        processes
            .lines()
            .nth(1)
            .is_some_and(|l| l.ends_with(&format!(",0,511,python3,{}", 612 * MIB))),
        "{processes}"
    );

    let trace: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("smi-memory.trace.json")).expect("trace"),
    )
    .expect("valid JSON");
    let tracks = check_trace(&trace);
    let names: BTreeSet<&str> = tracks.keys().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "memory free (MiB)",
            "memory reserved (MiB)",
            "memory total (MiB)",
            "memory used (MiB)",
            "pid 511 python3 memory (MiB)",
        ])
    );
    let used = &tracks[&("GPU 0".to_owned(), "memory used (MiB)".to_owned())];
    assert_eq!(used.first(), Some(&(1_796_028_208_733_000.0, 0.0)));
    let peak = used.iter().map(|v| v.1).fold(0.0, f64::max);
    assert_eq!(peak, 17_005.0, "nvidia-smi's peak of this run");

    let png = image::open(dir.path().join("smi-memory.timeline.png")).expect("a PNG");
    assert_eq!(png.width(), 1200);

    // Again: every file exists now; without a terminal to ask, nothing is replaced.
    let before = std::fs::metadata(dir.path().join("smi-memory.trace.json"))
        .and_then(|m| m.modified())
        .expect("mtime");
    let again = vramscope(&["export", &gpu.display().to_string(), "--perfetto", "--png"]);
    assert_eq!(again.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("exists") && stderr.contains("--force"),
        "{stderr}"
    );
    let after = std::fs::metadata(dir.path().join("smi-memory.trace.json"))
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(before, after, "nothing written");
    let forced = vramscope(&[
        "export",
        &gpu.display().to_string(),
        "--png",
        "--scale",
        "2",
        "--force",
    ]);
    succeeded(&forced);
    let png = image::open(dir.path().join("smi-memory.timeline@2x.png")).expect("a 2× PNG");
    assert_eq!(png.width(), 2400);
}

#[test]
fn a_demo_capture_exports_every_gpu_and_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let capture = dir.path().join("demo.vramcap");
    succeeded(&vramscope(&[
        "record",
        "--demo",
        "--duration",
        "3",
        "--interval-ms",
        "250",
        "--out",
        &capture.display().to_string(),
    ]));
    let trace = dir.path().join("t.json");
    succeeded(&vramscope(&[
        "export",
        &capture.display().to_string(),
        "--perfetto",
        &trace.display().to_string(),
    ]));
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).expect("trace")).expect("JSON");
    let tracks = check_trace(&doc);
    let gpus: BTreeSet<&str> = tracks.keys().map(|(p, _)| p.as_str()).collect();
    assert!(gpus.len() >= 2, "{gpus:?}");
    assert!(
        gpus.iter().all(|g| g.contains("SIMULATED")),
        "demo GPUs say so: {gpus:?}"
    );
    assert!(
        tracks.keys().any(|(_, t)| t.starts_with("pid ")),
        "process tracks"
    );
    assert_eq!(doc["otherData"]["simulated"], true);

    // A file that is not a capture: an error naming it and what it is.
    let out = vramscope(&["export", &trace.display().to_string(), "--csv"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("t.json") && stderr.contains("not a vramscope capture"),
        "{stderr}"
    );
    // No format: a usage error.
    let out = vramscope(&["export", &capture.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
}
