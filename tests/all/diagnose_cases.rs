//! Corpus of cases: each asserts the primary category and the first recommendation, from logs
//! (verbatim wordings), captures and snapshot facts.

use std::path::PathBuf;

use vramscope_core::diagnose::leak::{SnapshotFacts, SnapshotIdentity};
use vramscope_core::diagnose::log::{analyze_file, analyze_text};
use vramscope_core::diagnose::trace_events::TraceEventSet;
use vramscope_core::diagnose::{
    Category, Diagnosis, DiagnosisInput, NamedCapture, Severity, diagnose,
};
use vramscope_core::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, GIB, HealthSample, MIB,
    MemoryReading, ProcessSample, SampleBatch,
};

fn log_case(name: &str) -> Diagnosis {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(name);
    let log = analyze_file(&path).unwrap_or_else(|e| panic!("{e}"));
    diagnose(&DiagnosisInput {
        logs: vec![log],
        ..Default::default()
    })
}

fn text_case(text: &str) -> Diagnosis {
    diagnose(&DiagnosisInput {
        logs: vec![analyze_text(text, "pasted")],
        ..Default::default()
    })
}

fn primary(d: &Diagnosis) -> (Category, String) {
    let f = d.primary().unwrap_or_else(|| panic!("no findings"));
    (
        f.category,
        f.recommendations
            .first()
            .map(|r| r.id.clone())
            .unwrap_or_default(),
    )
}

fn all_recommendation_ids(d: &Diagnosis) -> Vec<String> {
    d.findings
        .iter()
        .flat_map(|f| f.recommendations.iter().map(|r| r.id.clone()))
        .collect()
}

#[test]
fn batch_too_large_on_h200_is_capacity_and_does_not_echo_the_fragmentation_hint() {
    let d = log_case("pytorch_capacity_h200.log");
    assert_eq!(
        primary(&d),
        (Category::Capacity, "reduce-batch-size".into())
    );
    let f = &d.findings[0];
    assert_eq!(f.severity, Severity::Critical);
    assert!(!all_recommendation_ids(&d).contains(&"expandable-segments".to_string()));
    assert!(f.explanation.contains("not the cause"), "{}", f.explanation);
    // the shortfall (27.86 - 13.93 GiB) is the estimate of the first recommendation
    let saving = f.recommendations[0].estimated_saving_bytes.unwrap_or(0) as f64 / GIB as f64;
    assert!((saving - 13.93).abs() < 0.01, "{saving}");
    let requested = f
        .evidence
        .iter()
        .find(|e| e.label == "requested")
        .unwrap_or_else(|| panic!("no requested evidence"));
    assert_eq!(
        requested.source.describe(),
        format!(
            "{} line 6",
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/logs/pytorch_capacity_h200.log")
                .display()
        )
    );
}

#[test]
fn frag_oom_fixture_is_fragmentation_under_a_cap() {
    let d = log_case("pytorch_frag_under_cap.log");
    assert_eq!(
        primary(&d),
        (Category::Fragmentation, "expandable-segments".into())
    );
    assert_eq!(d.findings[1].category, Category::MemoryCap);
    assert_eq!(d.findings[1].recommendations[0].id, "raise-memory-fraction");
    assert_eq!(
        d.findings[0].recommendations[0].estimated_saving_bytes,
        Some(382 * MIB)
    );
}

#[test]
fn another_process_holding_the_card() {
    let d = log_case("pytorch_other_process.log");
    assert_eq!(
        primary(&d),
        (Category::OtherProcess, "free-other-process".into())
    );
    assert!(
        d.findings[0].title.contains("2417585"),
        "{}",
        d.findings[0].title
    );
    assert!(
        d.findings[0].recommendations[0]
            .action
            .contains("kill 2417585")
    );
}

#[test]
fn cached_but_unusable_memory_is_fragmentation() {
    let d = log_case("pytorch_fragmentation.log");
    assert_eq!(
        primary(&d),
        (Category::Fragmentation, "expandable-segments".into())
    );
    assert!(all_recommendation_ids(&d).contains(&"max-split-size".to_string()));
}

#[test]
fn a_memory_fraction_cap_with_room_on_the_device() {
    let d = text_case(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 120.10 GiB is free. Including non-PyTorch memory, this process has 19.20 GiB memory in use. 20.00 GiB allowed; Of the allocated memory 18.50 GiB is allocated by PyTorch, and 180.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
    );
    assert_eq!(
        primary(&d),
        (Category::MemoryCap, "raise-memory-fraction".into())
    );
    // needs 18.68 + 2 GiB of 139.80 -> 15% + 5% margin
    assert!(
        d.findings[0].recommendations[0]
            .action
            .contains("set_per_process_memory_fraction(0.20)"),
        "{}",
        d.findings[0].recommendations[0].action
    );
    assert!(!all_recommendation_ids(&d).contains(&"expandable-segments".to_string()));
}

#[test]
fn async_backend_oom_is_capacity() {
    let d = log_case("pytorch_async_backend.log");
    assert_eq!(
        primary(&d),
        (Category::Capacity, "reduce-batch-size".into())
    );
}

#[test]
fn jax_oom_is_capacity_with_jax_advice() {
    let d = log_case("jax.log");
    assert_eq!(
        primary(&d),
        (Category::Capacity, "reduce-batch-size".into())
    );
    assert_eq!(d.findings[0].recommendations[1].id, "jax-preallocation");
}

#[test]
fn tensorflow_oom_is_capacity_with_tensorflow_advice() {
    let d = log_case("tensorflow.log");
    assert_eq!(
        primary(&d),
        (Category::Capacity, "reduce-batch-size".into())
    );
    assert_eq!(d.findings[0].recommendations[1].id, "tf-memory-growth");
}

#[test]
fn illegal_address_is_a_cuda_error_to_debug() {
    let d = text_case(
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\nSearch for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n",
    );
    assert_eq!(
        primary(&d),
        (Category::CudaError, "debug-kernel-fault".into())
    );
    assert_eq!(d.findings.len(), 1, "{:#?}", d.findings);
}

#[test]
fn gpu_fallen_off_the_bus_is_critical_xid() {
    let d = log_case("dmesg_xid.log");
    assert_eq!(primary(&d), (Category::Xid, "reset-gpu".into()));
    assert_eq!(d.findings[0].severity, Severity::Critical);
    let categories: Vec<Category> = d.findings.iter().map(|f| f.category).collect();
    assert!(categories.contains(&Category::RowRemap), "{categories:?}");
    assert!(categories.contains(&Category::Ecc), "{categories:?}");
}

#[test]
fn driver_too_old_for_the_framework_build() {
    let d = text_case(
        "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\nPyTorch 2.9.0+cu130\n",
    );
    assert_eq!(
        primary(&d),
        (Category::DriverMismatch, "upgrade-driver".into())
    );
    assert_eq!(d.findings[0].severity, Severity::Critical);
}

// ---------------------------------------------------------------- captures

fn device(total: u64) -> DeviceFacts {
    DeviceFacts {
        index: 0,
        name: "NVIDIA H200".into(),
        memory_total_bytes: total,
        ..Default::default()
    }
}

fn sample(t_ms: i64, used: u64, total: u64) -> DeviceSample {
    DeviceSample {
        t_ms,
        device_index: 0,
        memory: Some(MemoryReading {
            used_bytes: used,
            reserved_bytes: 0,
            free_bytes: total - used,
            total_bytes: total,
        }),
        temperature_c: Some(60),
        throttle_reasons: Some(0),
        ecc_corrected_volatile: Some(0),
        ecc_uncorrected_volatile: Some(0),
        ..Default::default()
    }
}

fn process(t_ms: i64, pid: u32, used: u64) -> ProcessSample {
    ProcessSample {
        t_ms,
        device_index: 0,
        pid,
        name: format!("python{pid}"),
        used_bytes: Some(used),
        ..Default::default()
    }
}

/// A 140 GiB GPU sampled every second for `seconds`, with processes given by `procs(t)`.
fn capture(
    seconds: i64,
    procs: impl Fn(i64) -> Vec<(u32, u64)>,
    events: Vec<Event>,
    health: Vec<HealthSample>,
) -> NamedCapture {
    let total = 140 * GIB;
    let mut c = Capture::new(
        CaptureMeta {
            driver_version: "580.159.04".into(),
            cuda_driver_version: Some(13000),
            ..Default::default()
        },
        vec![device(total)],
    );
    for s in 0..seconds {
        let t = s * 1000;
        let ps = procs(t);
        let used: u64 = ps.iter().map(|p| p.1).sum();
        c.ingest(&SampleBatch {
            devices: vec![sample(t, used, total)],
            processes: Some(ps.iter().map(|&(pid, b)| process(t, pid, b)).collect()),
            ..Default::default()
        });
    }
    c.ingest(&SampleBatch {
        events,
        health,
        ..Default::default()
    });
    NamedCapture {
        name: "run.vramcap".into(),
        capture: c,
    }
}

fn capture_case(c: NamedCapture) -> Diagnosis {
    diagnose(&DiagnosisInput {
        captures: vec![c],
        ..Default::default()
    })
}

#[test]
fn steady_growth_in_a_capture_is_a_leak_with_time_to_full() {
    // 20 GiB + 100 MiB per second for 12 minutes, on a 140 GiB card
    let d = capture_case(capture(
        720,
        |t| vec![(100, 20 * GIB + (t as u64 / 1000) * 100 * MIB)],
        vec![],
        vec![],
    ));
    assert_eq!(primary(&d), (Category::Leak, "fix-leak".into()));
    let f = &d.findings[0];
    let rate = f
        .evidence
        .iter()
        .find(|e| e.label == "growth rate")
        .and_then(|e| e.value)
        .unwrap_or(0.0);
    assert!((rate - 100.0 * MIB as f64).abs() < 1.0, "{rate}");
    let to_full = f
        .evidence
        .iter()
        .find(|e| e.label == "time until the GPU is full")
        .and_then(|e| e.value)
        .unwrap_or(0.0);
    // free at the end: 140 GiB - 20 GiB - 719 * 100 MiB = 50980 MiB at 100 MiB/s = ~510 s
    assert!((to_full - 509.8).abs() < 2.0, "{to_full}");
    assert_eq!(f.severity, Severity::Critical, "full within the hour");
}

#[test]
fn a_flat_capture_is_healthy() {
    // Two minutes: long enough to judge (a 59 s capture is too short, and says so).
    let d = capture_case(capture(
        120,
        |_| vec![(100, 30 * GIB)],
        vec![],
        vec![HealthSample {
            persistence_mode: Some(true),
            ..Default::default()
        }],
    ));
    assert_eq!(primary(&d), (Category::Healthy, String::new()));
    assert_eq!(d.findings.len(), 1);
    assert!(!d.simulated);
}

/// A minute's capture of process 100 (40 GiB) beside process 200 (95 GiB) on a 140 GiB card,
/// and an out-of-memory event of process 100 at its end, asking for `requested_bytes`.
fn oom_beside_another_process(requested_bytes: Option<u64>) -> Diagnosis {
    let oom = Event {
        t_ms: 59_000,
        device_index: Some(0),
        kind: EventKind::OutOfMemory {
            pid: Some(100),
            requested_bytes,
            detail: String::new(),
        },
    };
    capture_case(capture(
        60,
        |_| vec![(100, 40 * GIB), (200, 95 * GIB)],
        vec![oom],
        vec![],
    ))
}

#[test]
fn oom_event_in_a_capture_blames_the_other_process() {
    let d = oom_beside_another_process(Some(10 * GIB));
    assert_eq!(
        primary(&d),
        (Category::OtherProcess, "free-other-process".into())
    );
    assert!(d.findings[0].recommendations[0].action.contains("kill 200"));
}

#[test]
fn an_unsized_oom_in_a_capture_does_not_invent_a_size() {
    // The same failure without a size (a bare `CUDA error: out of memory` the capture marked).
    let d = oom_beside_another_process(None);
    for f in &d.findings {
        assert!(!f.title.contains("an allocation request"), "{}", f.title);
    }
    let f = d.primary().unwrap_or_else(|| panic!("no findings"));
    assert_eq!(
        f.title,
        "Out of memory on GPU 0 outside the framework's allocator (CUDA error: out of memory)"
    );
}

/// Two minutes of a shared two-GPU machine: GPU 0 near full with someone else's job (pid 200),
/// GPU 1 with the run's job (pid 100) at a fifth of its memory.
pub(crate) fn shared_machine() -> NamedCapture {
    let total = 140 * GIB;
    let gpu = |index| DeviceFacts {
        index,
        ..device(total)
    };
    let mut c = Capture::new(CaptureMeta::default(), vec![gpu(0), gpu(1)]);
    for s in 0..120 {
        let t = s * 1000;
        let on = |device_index, mut sample: DeviceSample| {
            sample.device_index = device_index;
            sample
        };
        let job = ProcessSample {
            device_index: 1,
            ..process(t, 100, 30 * GIB)
        };
        c.ingest(&SampleBatch {
            devices: vec![
                on(0, sample(t, 138 * GIB, total)),
                on(1, sample(t, 30 * GIB, total)),
            ],
            processes: Some(vec![process(t, 200, 138 * GIB), job]),
            ..Default::default()
        });
    }
    NamedCapture {
        name: "timeline.vramcap".into(),
        capture: c,
    }
}

#[test]
fn a_runs_diagnosis_judges_only_the_gpus_its_job_used() {
    let titles = |job_pids: Vec<u32>| -> Vec<String> {
        diagnose(&DiagnosisInput {
            captures: vec![shared_machine()],
            job_pids,
            ..Default::default()
        })
        .findings
        .into_iter()
        .map(|f| f.title)
        .collect()
    };
    let near_full = |titles: &[String]| titles.iter().any(|t| t.starts_with("GPU 0 ran near full"));
    // The machine's capture: the full GPU is a finding.
    assert!(near_full(&titles(Vec::new())));
    // The run's: its job used GPU 1 only, so someone else's full GPU 0 is not its evidence.
    let of_the_job = titles(vec![100, 101]);
    assert!(!near_full(&of_the_job), "{of_the_job:?}");
    assert!(
        !of_the_job.iter().any(|t| t.contains("GPU 0")),
        "{of_the_job:?}"
    );
    // A job the timeline never saw (another PID namespace): every GPU is judged, as before.
    assert!(near_full(&titles(vec![999])));
}

#[test]
fn a_runs_out_of_memory_names_its_gpu_as_nvidia_smi_does_too() {
    // The job ran with CUDA_VISIBLE_DEVICES=1: PyTorch calls its GPU "GPU 0".
    let log = analyze_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
         capacity of 139.80 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this \
         process has 138.80 GiB memory in use. Of the allocated memory 137.00 GiB is allocated by \
         PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.\n",
        "output.log",
    );
    let oom_title = |job_pids: Vec<u32>| -> String {
        diagnose(&DiagnosisInput {
            logs: vec![log.clone()],
            captures: vec![shared_machine()],
            job_pids,
            ..Default::default()
        })
        .findings
        .into_iter()
        .map(|f| f.title)
        .find(|t| t.starts_with("Out of memory on"))
        .unwrap_or_default()
    };
    assert!(
        oom_title(vec![100])
            .starts_with("Out of memory on GPU 0 (GPU 1 in nvidia-smi): 2.00 GiB requested"),
        "{}",
        oom_title(vec![100])
    );
    // Without a run's job, nothing says which GPU of the machine it was.
    assert!(
        oom_title(Vec::new()).starts_with("Out of memory on GPU 0: 2.00 GiB requested"),
        "{}",
        oom_title(Vec::new())
    );
}

#[test]
fn uncorrectable_ecc_and_pending_remap_from_health() {
    let health = HealthSample {
        t_ms: 60_000,
        device_index: 0,
        ecc_uncorrected_aggregate: Some(2),
        remapped_rows_uncorrectable: Some(1),
        remapped_rows_pending: Some(true),
        remapped_rows_failure: Some(false),
        ..Default::default()
    };
    let xid = Event {
        t_ms: 30_000,
        device_index: Some(0),
        kind: EventKind::Xid {
            code: 48,
            mig_instance: None,
        },
    };
    let d = capture_case(capture(
        60,
        |_| vec![(100, 30 * GIB)],
        vec![xid],
        vec![health],
    ));
    assert_eq!(primary(&d), (Category::Ecc, "reset-gpu".into()));
    let categories: Vec<Category> = d.findings.iter().map(|f| f.category).collect();
    assert!(categories.contains(&Category::RowRemap), "{categories:?}");
}

#[test]
fn a_short_steep_start_up_in_a_capture_is_not_a_leak() {
    // A model load: 20 GiB + 2 GiB per second for 30 s, then flat. Steep, steady, and no leak.
    let d = capture_case(capture(
        30,
        |t| vec![(100, 20 * GIB + (t as u64 / 1000) * 2 * GIB)],
        vec![],
        vec![],
    ));
    assert!(
        d.findings.iter().all(|f| f.category != Category::Leak),
        "{:?}",
        d.findings
    );
    // 30 s cannot tell a model load from a leak: said so, not "healthy".
    assert_eq!(primary(&d), (Category::Inconclusive, String::new()));
}

/// Identity of a snapshot whose trace recorded `events` as (time µs, address).
fn traced(events: &[(i64, u64)]) -> SnapshotIdentity {
    SnapshotIdentity {
        last_trace_time_us: events.iter().map(|e| e.0).max(),
        trace_events: TraceEventSet::from_events(events),
        ..Default::default()
    }
}

#[test]
fn snapshots_that_keep_growing_are_a_leak_by_call_site() {
    let snap = |name: &str, allocated: u64, site_bytes: u64, events: &[(i64, u64)]| SnapshotFacts {
        name: name.into(),
        device_index: 0,
        reserved_bytes: allocated + GIB,
        allocated_bytes: allocated,
        largest_free_block_bytes: 512 * MIB,
        allocated_by_call_site: vec![
            ("train.py:42 history.append".into(), site_bytes),
            ("model.py:10 forward".into(), 2 * GIB),
        ],
        identity: traced(events),
        ..Default::default()
    };
    // Given latest first, as the GUI may finish loading them; the second trace holds the first.
    let d = diagnose(&DiagnosisInput {
        snapshots: vec![
            snap(
                "step200.pickle",
                6 * GIB,
                3 * GIB,
                &[(1_000, 0x10), (2_000, 0x20)],
            ),
            snap("step100.pickle", 4 * GIB, GIB, &[(1_000, 0x10)]),
        ],
        ..Default::default()
    });
    assert_eq!(primary(&d), (Category::Leak, "fix-leak".into()));
    assert!(
        d.findings[0].title.contains("train.py:42") && d.findings[0].title.contains("2.00 GiB"),
        "{}",
        d.findings[0].title
    );

    // The same numbers from two processes (no shared trace event) are no leak.
    let d = diagnose(&DiagnosisInput {
        snapshots: vec![
            snap("job_a.pickle", 4 * GIB, GIB, &[(1_000, 0x10)]),
            snap("job_b.pickle", 6 * GIB, 3 * GIB, &[(2_000, 0x10)]),
        ],
        ..Default::default()
    });
    assert!(
        d.findings
            .iter()
            .all(|f| f.category != Category::Leak || f.severity == Severity::Info),
        "{:?}",
        d.findings
    );
    assert_eq!(primary(&d), (Category::Healthy, String::new()));
}

#[test]
fn no_evidence_says_so() {
    let d = diagnose(&DiagnosisInput::default());
    assert_eq!(primary(&d), (Category::Healthy, String::new()));
    assert!(d.findings[0].explanation.contains("No evidence"));
}

#[test]
fn memory_nobody_listed_is_another_process() {
    // In a container PyTorch cannot see the other tenant: "this process has 0 bytes".
    let d = text_case(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 0 bytes memory in use. Of the allocated memory 18.00 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.",
    );
    assert_eq!(
        primary(&d),
        (Category::OtherProcess, "free-other-process".into())
    );
    assert!(
        d.findings[0].title.contains("not list"),
        "{}",
        d.findings[0].title
    );
}

#[test]
fn a_refusal_with_room_on_the_device_is_a_cap_even_unprinted() {
    let d = text_case(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 60.00 GiB is free. Including non-PyTorch memory, this process has 19.00 GiB memory in use. Of the allocated memory 18.30 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.",
    );
    assert_eq!(
        primary(&d),
        (Category::MemoryCap, "raise-memory-fraction".into())
    );
}

#[test]
fn a_leak_that_ends_in_an_oom_is_the_primary_cause() {
    let mut text = String::new();
    for step in 0..20 {
        text.push_str(&format!(
            "step {step} loss 0.5 allocated {:.2} GiB\n",
            10.0 + 3.0 * step as f64
        ));
    }
    text.push_str("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB memory in use. Of the allocated memory 77.00 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but unallocated.\n");
    let d = text_case(&text);
    assert_eq!(primary(&d), (Category::Leak, "fix-leak".into()));
    assert_eq!(d.findings[0].severity, Severity::Critical);
    assert_eq!(d.findings[1].category, Category::Capacity);
}

#[test]
fn a_capture_driver_older_than_the_framework_cuda() {
    let mut c = capture(10, |_| vec![(100, 30 * GIB)], vec![], vec![]);
    c.capture.meta.driver_version = "535.104.05".into();
    c.capture.meta.cuda_driver_version = Some(12020);
    let d = diagnose(&DiagnosisInput {
        captures: vec![c],
        framework_cuda: Some((13, 0)),
        ..Default::default()
    });
    assert_eq!(
        primary(&d),
        (Category::DriverMismatch, "upgrade-driver".into())
    );
    assert!(
        d.findings[0].title.contains("supports CUDA 12.2"),
        "{}",
        d.findings[0].title
    );
}

#[test]
fn the_cap_finding_under_fragmentation_does_not_deny_fragmentation() {
    let d = log_case("pytorch_frag_under_cap.log");
    assert_eq!(d.findings[1].category, Category::MemoryCap);
    assert!(
        !d.findings[1].explanation.contains("not the cause"),
        "{}",
        d.findings[1].explanation
    );
}

fn step_log(extra: &str) -> String {
    let mut text: String = (0..40)
        .map(|n| {
            format!(
                "step {n} allocated {:.2} GiB reserved {:.2} GiB\n",
                1.0 + 0.25 * n as f64,
                2.0 + 0.25 * n as f64
            )
        })
        .collect();
    text.push_str(extra);
    text
}

/// The log's per-step leak finding (an out-of-memory error the growth ended in has its own leak
/// finding too, first).
fn leak_finding(d: &Diagnosis) -> vramscope_core::diagnose::Finding {
    d.findings
        .iter()
        .find(|f| f.category == Category::Leak && f.title.contains("per step"))
        .cloned()
        .unwrap_or_else(|| panic!("no leak finding: {:?}", d.findings))
}

#[test]
fn a_per_step_leak_says_how_many_steps_until_the_gpu_is_full() {
    // 256 MiB per step; 11.75 GiB reserved at step 39; the OOM message says the GPU has 20 GiB.
    let d = text_case(&step_log(
        "RuntimeError: CUDA out of memory. Tried to allocate 256.00 MiB (GPU 0; 20.00 GiB total capacity; 10.75 GiB already allocated; 100.00 MiB free; 12.00 GiB reserved in total by PyTorch)\n",
    ));
    let f = leak_finding(&d);
    assert!(f.title.ends_with("; full in about 33 steps"), "{}", f.title);
    let steps = f
        .evidence
        .iter()
        .find(|e| e.label == "steps until the GPU is full")
        .and_then(|e| e.value);
    assert_eq!(steps, Some(33.0));
    assert!(f.explanation.contains("no step times"), "{}", f.explanation);

    // Without a size in the log, a capture's device gives it (140 GiB: (140 - 11.75) / 0.25).
    let d = diagnose(&DiagnosisInput {
        logs: vec![analyze_text(&step_log(""), "train.log")],
        captures: vec![capture(60, |_| vec![(100, 30 * GIB)], vec![], vec![])],
        ..Default::default()
    });
    let f = leak_finding(&d);
    assert!(
        f.title.ends_with("; full in about 513 steps"),
        "{}",
        f.title
    );

    // Nothing says how large the GPU is: the finding says what is missing.
    let f = leak_finding(&text_case(&step_log("")));
    assert!(!f.title.contains("full in"), "{}", f.title);
    assert!(
        f.explanation.contains("does not say how large the GPU is")
            && f.explanation.contains("--capture"),
        "{}",
        f.explanation
    );
}

#[test]
fn an_xid_explanation_ends_with_one_period() {
    let d = text_case(
        "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 00000008, intr 10000000. MMU Fault\n",
    );
    let f = d
        .findings
        .iter()
        .find(|f| f.title.starts_with("Xid 31"))
        .unwrap_or_else(|| panic!("no Xid finding: {:?}", d.findings));
    assert!(f.explanation.ends_with("hardware."), "{}", f.explanation);
    assert!(!f.explanation.contains(".."), "{}", f.explanation);
}

#[test]
fn a_bare_cuda_out_of_memory_says_it_came_from_outside_the_allocator_not_a_size() {
    // torch.cuda.Stream() on a full device: the CUDA runtime's error, with no size and no
    // allocator numbers (seen on an H100 on 2026-12-08, graph_capture_sizes).
    let d = text_case(
        "Traceback (most recent call last):\n  File \"serve.py\", line 96, in <module>\n    side = torch.cuda.Stream()\ntorch.AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n",
    );
    let f = d.primary().unwrap_or_else(|| panic!("no findings"));
    assert_eq!(f.category, Category::Capacity);
    assert_eq!(
        f.title,
        "Out of memory on the GPU outside the framework's allocator (CUDA error: out of memory)"
    );
    assert!(!f.title.contains("an allocation requested"), "{}", f.title);
}

#[test]
fn a_framework_oom_without_a_size_says_so_in_its_title() {
    let d = text_case(
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192,64]\n",
    );
    let titles: Vec<&str> = d.findings.iter().map(|f| f.title.as_str()).collect();
    assert!(
        titles
            .iter()
            .any(|t| t.ends_with("(the message gives no size)")),
        "{titles:?}"
    );
}
