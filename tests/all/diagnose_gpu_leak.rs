//! Leaks judged from GPU-level series (issue 35, section 2): a GPU's used memory, whatever
//! recorded it — nvidia-smi's `--query-gpu` log, a `.vramcap` device track, a Prometheus range
//! series — is judged by the process rule (the floor the readings fall back to, the start-up ramp
//! left out), on the stretch while the job ran; fleet GPUs are named as the fleet view names them.
//!
//! Real data first: the live cases of `tests/fixtures/cases2` (H200, recorded by vramscope and by
//! nvidia-smi beside the same jobs; their truth files say which leak) are judged from the
//! nvidia-smi GPU log alone, from the recording without its process tracks, and from a
//! Prometheus-like range (15 s steps, the peak of each step) built by summing the recording's
//! process tracks; every other real nvidia-smi GPU log stays free of leaks. Synthetic series then
//! pin the rule's edges: the start-up ramp, the end of a job, the 60 s and one-hour lines, and
//! the name of a fleet GPU.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::cli::vramscope;
use crate::validation::load_truths;
use crate::validation::truth::Truth;
use vramscope_core::diagnose::fleet::gpu_verdicts;
use vramscope_core::diagnose::leak::{capture_findings as leak_findings, gpu_growth};
use vramscope_core::diagnose::{
    Category, Diagnosis, DiagnosisInput, Finding, NamedCapture, Severity, diagnose,
};
use vramscope_core::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, GIB, MIB, MemoryReading, ProcessSample,
    SampleBatch,
};
use vramscope_core::report::{self, Report, ReportFormat};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn cases2() -> PathBuf {
    repo("tests/fixtures/cases2")
}

fn live_truths() -> Vec<Truth> {
    let truths: Vec<Truth> = load_truths(&cases2())
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|t| t.kind == "live")
        .collect();
    assert!(truths.len() >= 4, "{} live cases", truths.len());
    truths
}

fn diagnose_one(name: &str, capture: Capture) -> Diagnosis {
    diagnose(&DiagnosisInput {
        captures: vec![NamedCapture {
            name: name.to_owned(),
            capture,
        }],
        ..Default::default()
    })
}

fn leaks(d: &Diagnosis) -> Vec<&Finding> {
    d.findings
        .iter()
        .filter(|f| f.category == Category::Leak)
        .collect()
}

/// The primary finding's category and severity against the truth's.
fn assert_as_in_truth(what: &str, truth: &Truth, d: &Diagnosis) {
    let primary = d.primary().unwrap_or_else(|| panic!("{what}: no finding"));
    assert_eq!(
        primary.category.as_str(),
        truth.expected.primary_category,
        "{what}: {:#?}",
        d.findings
    );
    if let Some(severity) = &truth.expected.severity {
        assert_eq!(
            primary.severity.as_str(),
            severity,
            "{what}: {}",
            primary.title
        );
    }
}

/// The span of a capture's device readings, in ms.
fn span_ms(capture: &Capture) -> i64 {
    let times: Vec<i64> = capture
        .series
        .iter()
        .flat_map(|s| s.times().iter().copied())
        .collect();
    times.iter().max().copied().unwrap_or(0) - times.iter().min().copied().unwrap_or(0)
}

fn read_csv(path: &Path) -> Capture {
    vramscope_core::formats::capture::read_file(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn nvidia_smi_gpu_logs_alone_give_the_verdict_of_the_recording_with_processes() {
    for truth in live_truths() {
        let Some(csv) = &truth.artifacts.smi_gpu_csv else {
            continue;
        };
        let capture = read_csv(&cases2().join(csv));
        assert!(capture.processes.is_empty(), "{csv}: a --query-gpu log");
        let d = diagnose_one(csv, capture);
        assert_as_in_truth(csv, &truth, &d);
        let leaking = !truth
            .expected
            .leaking_pids
            .clone()
            .unwrap_or_default()
            .is_empty();
        assert_eq!(!leaks(&d).is_empty(), leaking, "{csv}: {:#?}", d.findings);
        if leaking {
            let leak = leaks(&d)[0];
            assert!(
                leak.title
                    .starts_with("Used memory of GPU 0 grows steadily"),
                "{}",
                leak.title
            );
            assert!(
                leak.explanation.contains("no per-process readings"),
                "{}",
                leak.explanation
            );
            // Judged while the job ran: the GPU was free again after it, which is not the
            // headroom the growth had.
            assert!(
                leak.evidence
                    .iter()
                    .any(|e| e.label.starts_with("memory fell to")),
                "{:#?}",
                leak.evidence
            );
        }
    }
}

#[test]
fn every_other_real_nvidia_smi_gpu_log_stays_free_of_leaks() {
    // The out-of-memory and healthy cases of the corpus, and the two-stream case's own run:
    // no leak in any, and those too short to judge say so.
    let mut logs: Vec<PathBuf> = std::fs::read_dir(cases2())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".smi-gpu.csv"))
        .filter(|p| !p.to_string_lossy().contains("live_"))
        .collect();
    logs.push(repo(
        "docs/gpu-verification/cases2-run/two_streams.smi-gpu.csv",
    ));
    logs.push(repo("docs/gpu-verification/h200-run1/smi-memory.csv"));
    logs.sort();
    assert!(logs.len() >= 15, "{} logs", logs.len());
    let truths = load_truths(&cases2()).unwrap_or_else(|e| panic!("{e}"));
    for path in &logs {
        let capture = read_csv(path);
        let short = span_ms(&capture) < 60_000;
        let d = diagnose_one(&path.display().to_string(), capture);
        let case = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('.').next())
            .unwrap_or_default();
        let leak_case = truths
            .iter()
            .any(|t| t.case == case && t.expected.primary_category == "leak");
        assert!(
            leaks(&d).is_empty() || (leak_case && !short),
            "{}: {:#?}",
            path.display(),
            d.findings
        );
        if short {
            assert!(
                d.findings
                    .iter()
                    .any(|f| f.category == Category::Inconclusive),
                "{}: too short to judge, and said so: {:#?}",
                path.display(),
                d.findings
            );
        }
    }
}

#[test]
fn recordings_without_their_process_tracks_are_judged_from_the_gpu_alone() {
    for truth in live_truths() {
        let Some(file) = &truth.artifacts.capture else {
            continue;
        };
        let path = cases2().join(file);
        let mut capture = vramscope_core::formats::vramcap::read_file(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // With its processes: the leaking process is named, once; the GPU's growth, which it
        // explains, is not reported again.
        let with_processes = diagnose_one(file, capture.clone());
        assert_as_in_truth(file, &truth, &with_processes);
        for leak in leaks(&with_processes) {
            assert!(leak.title.starts_with("process "), "{}", leak.title);
            assert!(leak.title.contains(" on GPU 0 "), "{}", leak.title);
        }
        capture.processes.clear();
        let gpu_only = diagnose_one(file, capture);
        assert_as_in_truth(&format!("{file} without processes"), &truth, &gpu_only);
        let leaking = !truth
            .expected
            .leaking_pids
            .clone()
            .unwrap_or_default()
            .is_empty();
        assert_eq!(
            leaks(&gpu_only).len(),
            usize::from(leaking),
            "{file}: {:#?}",
            gpu_only.findings
        );
    }
}

/// The used memory of device 0 as the sum of its process tracks at every device sample (a
/// process counts from its first reading to its last), then one reading per 15 s step at the
/// step's end holding the step's peak, as `max_over_time(...[15s])` over a Prometheus range
/// aligned to 15 s does.
fn prometheus_range_from_processes(capture: &Capture) -> Vec<(i64, u64)> {
    let Some(series) = capture.series(0) else {
        return Vec::new();
    };
    let tracks: Vec<Vec<(i64, u64)>> = capture
        .processes
        .iter()
        .filter(|p| p.device_index == 0)
        .map(|p| {
            p.t_ms
                .iter()
                .zip(&p.used_bytes)
                .filter_map(|(&t, b)| b.map(|b| (t, b)))
                .collect()
        })
        .collect();
    let summed = series.times().iter().map(|&t| {
        let used: u64 = tracks
            .iter()
            .filter(|track| track.first().is_some_and(|f| f.0 <= t))
            .filter(|track| track.last().is_some_and(|l| l.0 >= t))
            .filter_map(|track| track.iter().rev().find(|r| r.0 <= t).map(|r| r.1))
            .sum();
        (t, used)
    });
    let step_ms = 15_000;
    let mut steps: BTreeMap<i64, u64> = BTreeMap::new();
    for (t, used) in summed {
        // The step whose range (end - 15 s, end] holds t.
        let end = (t + step_ms - 1).div_euclid(step_ms) * step_ms;
        let peak = steps.entry(end).or_insert(0);
        *peak = (*peak).max(used);
    }
    steps.into_iter().collect()
}

/// A fleet capture of one GPU: `node` GPU `gpu` (its labels as dcgm-exporter gives them), at
/// index 0 of the capture, with `readings` of used memory.
fn fleet_capture(node: &str, gpu: &str, total_bytes: u64, readings: &[(i64, u64)]) -> Capture {
    let labels = [
        ("gpu", gpu),
        ("Hostname", node),
        ("UUID", "GPU-7c890b39"),
        ("modelName", "NVIDIA H200"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut capture = Capture::new(
        CaptureMeta::default(),
        vec![DeviceFacts {
            index: 0,
            name: "NVIDIA H200".into(),
            memory_total_bytes: total_bytes,
            host: node.into(),
            labels,
            ..Default::default()
        }],
    );
    ingest_readings(&mut capture, total_bytes, readings);
    capture
}

fn ingest_readings(capture: &mut Capture, total_bytes: u64, readings: &[(i64, u64)]) {
    for &(t_ms, used) in readings {
        capture.ingest(&SampleBatch {
            devices: vec![DeviceSample {
                t_ms,
                device_index: 0,
                memory: Some(MemoryReading {
                    used_bytes: used,
                    reserved_bytes: 0,
                    free_bytes: total_bytes.saturating_sub(used),
                    total_bytes,
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
    }
}

#[test]
fn a_prometheus_range_of_a_real_job_is_judged_like_its_recording_and_names_the_fleet_gpu() {
    for truth in live_truths() {
        let Some(file) = &truth.artifacts.capture else {
            continue;
        };
        let path = cases2().join(file);
        let recorded = vramscope_core::formats::vramcap::read_file(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let total = recorded.devices[0].memory_total_bytes;
        let range = prometheus_range_from_processes(&recorded);
        assert!(range.len() >= 5, "{file}: {} steps", range.len());
        let fleet = fleet_capture("gpu-host-17", "5", total, &range);
        let name = "Prometheus http://prometheus:9090";
        let d = diagnose_one(name, fleet.clone());
        assert_as_in_truth(&format!("{file} as a 15 s range"), &truth, &d);
        let leaking = !truth
            .expected
            .leaking_pids
            .clone()
            .unwrap_or_default()
            .is_empty();
        assert_eq!(
            leaks(&d).len(),
            usize::from(leaking),
            "{file}: {:#?}",
            d.findings
        );
        for f in &d.findings {
            assert!(
                f.category == Category::Healthy || f.title.contains("gpu-host-17 GPU 5"),
                "{}",
                f.title
            );
            for e in &f.evidence {
                let at = e.source.describe();
                assert!(!at.contains(", GPU 0"), "{at}: the capture's index");
            }
        }
        if !leaking {
            continue;
        }
        let leak = leaks(&d)[0];
        assert!(
            leak.title
                .starts_with("Used memory of gpu-host-17 GPU 5 grows steadily"),
            "{}",
            leak.title
        );
        assert!(
            leak.evidence
                .iter()
                .any(|e| e.source.describe().contains("gpu-host-17 GPU 5")),
            "{:#?}",
            leak.evidence
        );
        // The fleet view shows the same finding, by the same name, and its growth per hour.
        let verdicts = gpu_verdicts(name, &fleet);
        assert_eq!(verdicts.len(), 1);
        assert!(
            verdicts[0].findings.iter().any(|f| f.title == leak.title),
            "{:#?}",
            verdicts[0].findings
        );
        assert!(verdicts[0].growth_bytes_per_hour.is_some_and(|g| g > 0.0));
        // The report names it so too, in every format.
        let report = Report {
            title: "vramscope diagnosis".into(),
            generated_at_ms: 0,
            timeline: report::Timeline::from_capture(name, &fleet),
            diagnosis: d.clone(),
        };
        for format in [
            ReportFormat::Markdown,
            ReportFormat::Html,
            ReportFormat::Json,
        ] {
            let text = report::render(&report, format);
            assert!(text.contains("gpu-host-17 GPU 5"), "{format:?}: {text}");
        }
        let markdown = report::render(&report, ReportFormat::Markdown);
        assert!(!markdown.contains("- GPU 0:"), "{markdown}");
    }
}

#[test]
fn the_command_line_names_a_fleet_gpu_as_the_fleet_view_does() {
    let readings: Vec<(i64, u64)> = (0..=40)
        .map(|i| (i * 15_000, 20 * GIB + (i as u64) * GIB))
        .collect();
    let fleet = fleet_capture("gpu-host-17", "5", 140 * GIB, &readings);
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("fleet.vramcap");
    vramscope_core::formats::vramcap::write_file(&path, &fleet).unwrap_or_else(|e| panic!("{e}"));
    let path = path.display().to_string();
    let out = vramscope(&["diagnose", "--capture", &path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("leak: Used memory of gpu-host-17 GPU 5 grows steadily"),
        "{stdout}"
    );
    assert!(stdout.contains(", gpu-host-17 GPU 5, "), "{stdout}");
    assert!(!stdout.contains(", GPU 0"), "{stdout}");
    let out = vramscope(&["inspect", &path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(gpu-host-17 GPU 5)"), "{stdout}");
}

// ------------------------------------------------------------------------- synthetic edges

const TOTAL: u64 = 140 * GIB;

/// A capture of one H200 on one machine, without readings yet.
fn one_gpu() -> Capture {
    Capture::new(
        CaptureMeta::default(),
        vec![DeviceFacts {
            index: 0,
            name: "NVIDIA H200".into(),
            memory_total_bytes: TOTAL,
            ..Default::default()
        }],
    )
}

/// A GPU read every `step_ms` from 0 to `seconds`, of `used(t_s)`, on one machine.
fn gpu_capture(seconds: i64, step_ms: i64, used: impl Fn(f64) -> u64) -> Capture {
    let readings: Vec<(i64, u64)> = (0..=seconds * 1000 / step_ms)
        .map(|i| (i * step_ms, used((i * step_ms) as f64 / 1000.0)))
        .collect();
    let mut capture = one_gpu();
    ingest_readings(&mut capture, TOTAL, &readings);
    capture
}

fn gpu_leaks(capture: &Capture) -> Vec<Finding> {
    let mut out = Vec::new();
    leak_findings("run", capture, &mut out);
    out.into_iter()
        .filter(|f| f.category == Category::Leak)
        .collect()
}

fn rate_per_s(f: &Finding) -> f64 {
    f.evidence
        .iter()
        .find(|e| e.label == "growth rate")
        .and_then(|e| e.value)
        .unwrap_or(0.0)
}

#[test]
fn a_start_up_ramp_after_an_idle_gpu_is_left_out_and_only_the_floor_counts() {
    // Idle for 5 min, a 40 GiB model load in 30 s, then 20 min of 30 s steps (a 2 GiB tooth
    // each) whose floor rises 200 MiB a minute, then the job exits. The idle GPU and the load
    // are no growth; the teeth are no growth; the floor is.
    let job = |t: f64, per_min: f64| -> u64 {
        let load_end = 330.0;
        if !(300.0..1530.0).contains(&t) {
            0
        } else if t < load_end {
            ((t - 300.0) / 30.0 * 40.0 * GIB as f64) as u64
        } else {
            let floor = 40.0 * GIB as f64 + per_min * (t - load_end) / 60.0 * MIB as f64;
            let tooth = (t % 30.0) / 30.0 * 2.0 * GIB as f64;
            (floor + tooth) as u64
        }
    };
    let leaking = gpu_leaks(&gpu_capture(1800, 1000, |t| job(t, 200.0)));
    assert_eq!(leaking.len(), 1, "{leaking:#?}");
    let per_min = rate_per_s(&leaking[0]) * 60.0 / MIB as f64;
    assert!(
        (per_min - 200.0).abs() < 20.0,
        "{per_min} MiB/min, not the load's rate"
    );
    // Slow: full in about 8 h, so the existing severity holds (a warning over 20 minutes).
    assert_eq!(
        leaking[0].severity,
        Severity::Warning,
        "{}",
        leaking[0].title
    );
    // The same job whose floor stays: nothing.
    assert!(gpu_leaks(&gpu_capture(1800, 1000, |t| job(t, 0.0))).is_empty());
    // A load and a plateau, sampled as Prometheus does: nothing.
    assert!(gpu_leaks(&gpu_capture(1800, 15_000, |t| job(t, 0.0))).is_empty());
}

#[test]
fn the_end_of_a_job_is_no_fall_back_whether_its_processes_exit_or_the_series_ends() {
    // Two processes: one steady at 30 GiB, one from 10 GiB growing 4 GiB a minute for 5 min
    // (after a 20 s start). The grower exits first (down to 30 GiB), the other 30 s later.
    let job = |t: f64| -> u64 {
        let steady = 30 * GIB;
        let grower = (10.0 * GIB as f64 + 4.0 * GIB as f64 * (t - 20.0).max(0.0) / 60.0) as u64;
        if t < 320.0 {
            steady + grower
        } else if t < 350.0 {
            steady
        } else {
            0
        }
    };
    let leaking = gpu_leaks(&gpu_capture(420, 250, job));
    assert_eq!(leaking.len(), 1, "{leaking:#?}");
    let f = &leaking[0];
    // Fast: about 80 GiB free when the grower exited, filled in about 20 min.
    assert_eq!(f.severity, Severity::Critical, "{}", f.title);
    let per_min = rate_per_s(f) * 60.0 / GIB as f64;
    assert!((per_min - 4.0).abs() < 0.2, "{per_min} GiB/min");
    let fell = f
        .evidence
        .iter()
        .find(|e| e.label.starts_with("memory fell to"))
        .and_then(|e| e.value)
        .unwrap_or(-1.0);
    assert_eq!(
        fell,
        (30 * GIB) as f64,
        "the first exit ends the stretch judged"
    );
    assert!(
        f.explanation
            .contains("the job ended or some of its processes exited")
    );
    // The recording stops while the job still runs: the same verdict, nothing fell.
    let cut = gpu_leaks(&gpu_capture(300, 250, job));
    assert_eq!(cut.len(), 1, "{cut:#?}");
    assert_eq!(cut[0].severity, Severity::Critical);
    assert!(
        !cut[0]
            .evidence
            .iter()
            .any(|e| e.label.starts_with("memory fell to"))
    );
    // A flat job that ends is no leak, however its end falls.
    let flat = |t: f64| {
        if t < 320.0 {
            40 * GIB
        } else if t < 350.0 {
            30 * GIB
        } else {
            0
        }
    };
    assert!(gpu_leaks(&gpu_capture(420, 250, flat)).is_empty());
}

/// Used memory of a GPU that climbs from 10 GiB at `mib_per_s` for `climb_s` seconds from
/// t = 0, then is idle until `seconds`.
fn climb(mib_per_s: f64, climb_s: f64) -> impl Fn(f64) -> u64 {
    move |t| {
        if t <= climb_s {
            (10.0 * GIB as f64 + mib_per_s * t * MIB as f64) as u64
        } else {
            0
        }
    }
}

#[test]
fn sixty_seconds_of_a_climb_that_fills_the_gpu_within_the_hour_is_critical_from_any_source() {
    // 40 MiB/s from 10 GiB for 60 s: about 128 GiB free at the end, full in about 54 min.
    for step_ms in [250, 1000, 15_000] {
        let f = gpu_leaks(&gpu_capture(120, step_ms, climb(40.0, 60.0)));
        assert_eq!(f.len(), 1, "every {step_ms} ms: {f:#?}");
        assert_eq!(f[0].severity, Severity::Critical, "every {step_ms} ms");
        // Climbing for less than a minute is not judged, however steep.
        let short = gpu_leaks(&gpu_capture(120, step_ms, climb(400.0, 45.0)));
        assert!(short.is_empty(), "every {step_ms} ms: {short:#?}");
    }
    // Just under the one-hour line (34 MiB/s: full in about 64 min): slower growth keeps the
    // lower severity, which a minute cannot confirm.
    for step_ms in [250, 15_000] {
        let f = gpu_leaks(&gpu_capture(120, step_ms, climb(34.0, 60.0)));
        assert_eq!(f.len(), 1, "every {step_ms} ms: {f:#?}");
        assert_eq!(
            f[0].severity,
            Severity::Info,
            "every {step_ms} ms: {}",
            f[0].title
        );
    }
}

#[test]
fn a_process_that_explains_the_gpu_is_one_finding_and_unlisted_growth_is_the_gpus() {
    // One process grows 1 GiB a minute; the GPU's used memory is that process plus, in the
    // second case, 2 GiB a minute more that no listed process holds.
    let with = |unlisted_gib_per_min: f64| -> Capture {
        let mut capture = one_gpu();
        for i in 0..=900_i64 {
            let t_ms = i * 1000;
            let minutes = i as f64 / 60.0;
            let process = 20 * GIB + (minutes * GIB as f64) as u64;
            let used = process + (minutes * unlisted_gib_per_min * GIB as f64) as u64;
            capture.ingest(&SampleBatch {
                devices: vec![DeviceSample {
                    t_ms,
                    device_index: 0,
                    memory: Some(MemoryReading {
                        used_bytes: used,
                        reserved_bytes: 0,
                        free_bytes: TOTAL - used,
                        total_bytes: TOTAL,
                    }),
                    ..Default::default()
                }],
                processes: Some(vec![ProcessSample {
                    t_ms,
                    device_index: 0,
                    pid: 4242,
                    name: "python3".into(),
                    used_bytes: Some(process),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        capture
    };
    let explained = gpu_leaks(&with(0.0));
    assert_eq!(explained.len(), 1, "{explained:#?}");
    assert!(
        explained[0]
            .title
            .starts_with("process 4242 (python3) on GPU 0 grows steadily"),
        "{}",
        explained[0].title
    );
    let unlisted = gpu_leaks(&with(2.0));
    assert_eq!(unlisted.len(), 2, "{unlisted:#?}");
    let gpu = unlisted
        .iter()
        .find(|f| f.title.starts_with("Used memory of GPU 0"))
        .unwrap_or_else(|| panic!("{unlisted:#?}"));
    assert!(
        gpu.explanation.contains("process 4242 (python3)"),
        "{}",
        gpu.explanation
    );
    // The judgement the fleet view's growth per hour comes from is the same.
    let growth = gpu_growth(&with(2.0), 0).and_then(|g| g.bytes_per_minute());
    assert!(growth.is_some_and(|g| (g - 3.0 * GIB as f64).abs() < 0.1 * GIB as f64));
}
