//! Runs every rule over whatever evidence was given (logs, captures or a live reading, snapshot
//! facts, a CUDA version from the user) and orders the findings: primary cause first.
//!
//! Order: findings are sorted by severity, and within a severity by the order the rules ran —
//! the out-of-memory rule first (it explains the failure the user came with), then the CUDA and
//! hardware lines of logs, the capture's health, leaks, and the driver check. When nothing is
//! wrong, a single `healthy` finding lists what was checked.

use super::finding::{
    Category, Diagnosis, Evidence, EvidenceSource, Finding, InputSummary, NamedAllocatorState,
    NamedBreakdown, Severity, Unit, Wizard,
};
use super::leak::{self, SnapshotFacts};
use super::log::{Framework, LogAnalysis, OomNumbers};
use super::oom::{self, OomCase};
use super::trajectory::{self, IterationSource, Trajectory};
use super::{compat, hardware, headroom, real_runs};
use crate::model::run::ProofRun;
use crate::model::{Capture, EventKind, format_bytes};

/// A capture (from a file, or a live reading) with the name evidence should cite.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedCapture {
    pub name: String,
    pub capture: Capture,
}

/// The [`InputSummary::kind`] of a run folder's `--prove` re-runs (the app lists it with the
/// evidence, though it is no file to leave out).
pub const PROOF_INPUT_KIND: &str = "proof";

/// Everything the doctor can look at. Any part may be empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiagnosisInput {
    pub logs: Vec<LogAnalysis>,
    pub captures: Vec<NamedCapture>,
    pub snapshots: Vec<SnapshotFacts>,
    /// The CUDA version a framework was built for, when the user gives it (e.g. from
    /// `torch.version.cuda`); logs can also show it.
    pub framework_cuda: Option<(u32, u32)>,
    /// The re-runs of `vramscope run --prove` a run folder's manifest records: the job itself
    /// tried under each change, which outweighs anything the files can tell, so their finding
    /// comes first wherever the folder is diagnosed.
    pub proof: Vec<ProofRun>,
    /// The processes of the job a run folder recorded (its manifest's `pids`): on a shared
    /// machine the timeline holds every GPU, and only those the job used are its evidence.
    /// Empty when the evidence is not a run's.
    pub job_pids: Vec<u32>,
}

impl DiagnosisInput {
    /// Adds the `--prove` re-runs of a run folder; rows already there (the folder opened
    /// twice) are not added again.
    pub fn add_proof(&mut self, proof: &[ProofRun]) {
        for run in proof {
            if !self.proof.contains(run) {
                self.proof.push(run.clone());
            }
        }
    }

    /// Adds what a run folder's manifest tells the diagnosis: its `--prove` re-runs
    /// ([`DiagnosisInput::add_proof`]) and its job's processes ([`DiagnosisInput::job_pids`]);
    /// what is already there (the folder opened twice) is not added again.
    pub fn add_run(&mut self, proof: &[ProofRun], job_pids: &[u32]) {
        self.add_proof(proof);
        for pid in job_pids {
            if !self.job_pids.contains(pid) {
                self.job_pids.push(*pid);
            }
        }
    }
}

/// The part of `capture` that is the job's: `job_devices`, the GPUs its processes used, when
/// the evidence is a run's and the timeline saw them; otherwise all of it (a capture of the
/// machine, or a job whose processes NVML could not list, e.g. in another PID namespace).
fn job_view<'a>(capture: &'a Capture, job_devices: &[u32]) -> std::borrow::Cow<'a, Capture> {
    if job_devices.is_empty() || job_devices.len() == capture.devices.len() {
        std::borrow::Cow::Borrowed(capture)
    } else {
        std::borrow::Cow::Owned(capture.only_devices(job_devices))
    }
}

/// The one GPU (NVML index) a run's job used, when the timelines saw its processes on exactly
/// one (`job_devices`: each capture's GPUs of the job).
fn job_gpu(job_devices: &[Vec<u32>]) -> Option<u32> {
    let mut devices: Vec<u32> = job_devices.concat();
    devices.sort_unstable();
    devices.dedup();
    match devices.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// Runs all rules.
pub fn diagnose(input: &DiagnosisInput) -> Diagnosis {
    let mut findings = Vec::new();
    let mut cases = oom_cases(input);
    // The GPUs each capture saw the run's job on (none where the evidence is not a run's).
    let job_devices: Vec<Vec<u32>> = input
        .captures
        .iter()
        .map(|c| c.capture.devices_of_processes(&input.job_pids))
        .collect();
    if let Some(nvml) = job_gpu(&job_devices) {
        for case in &mut cases {
            if case.numbers.device_index != Some(nvml) {
                case.job_gpu_in_nvml = Some(nvml);
            }
        }
    }
    for case in &cases {
        let mut case_findings = oom::findings(case);
        if cases.len() > 1 {
            // Several failures: each finding says which file it explains.
            if let Some(file) = source_file(&case.source) {
                for f in &mut case_findings {
                    f.title.push_str(&format!(" (in {file})"));
                }
            }
        }
        findings.extend(case_findings);
    }
    let capture_capacity = capture_capacity(&input.captures);
    for log in &input.logs {
        hardware::log_findings(log, &mut findings);
        leak::log_findings(log, capture_capacity.as_ref(), &mut findings);
    }
    for (c, devices) in input.captures.iter().zip(&job_devices) {
        findings.extend(capture_findings(&c.name, &job_view(&c.capture, devices)));
    }
    leak::snapshot_findings(&input.snapshots, &mut findings);
    driver_check(input, &mut findings);

    // Within a severity, what could not be judged comes first: it is why there is no verdict.
    findings.sort_by_key(|f| (f.severity, f.category != Category::Inconclusive));
    // Where the primary failure was judged on an allocator trace, the OOM rule already weighed
    // growth against capacity on it (tensors added per iteration, or the same tensors made
    // larger), which a log's per-step figures cannot tell apart: its verdict stands.
    let judged_on_a_trace = cases.first().is_some_and(|c| {
        c.history
            .as_ref()
            .is_some_and(|(t, _)| t.source != IterationSource::LoggedSteps)
    });
    if !judged_on_a_trace {
        promote_leak_behind_capacity_oom(&mut findings);
    }
    let nothing_wrong = !findings.iter().any(|f| f.severity != Severity::Info);
    let undecided = findings
        .iter()
        .any(|f| f.category == Category::Inconclusive);
    if let Some(proven) = proof_finding(&input.proof, &findings) {
        // A job re-run under fixes ran out of memory: never "healthy", whatever the files say.
        findings.insert(0, proven);
    } else if nothing_wrong && !undecided {
        findings.insert(0, healthy(input));
    }
    Diagnosis {
        findings,
        inputs: summarize_inputs(input),
        simulated: input.captures.iter().any(|c| c.capture.is_simulated()),
        allocator_states: input
            .snapshots
            .iter()
            .filter_map(|facts| {
                let state = facts.final_state.clone()?;
                Some(NamedAllocatorState {
                    name: facts.name.clone(),
                    state,
                })
            })
            .collect(),
        what_if: input
            .snapshots
            .iter()
            .filter_map(|facts| facts.what_if.clone())
            .collect(),
        memory_categories: input
            .snapshots
            .iter()
            .filter_map(|facts| {
                Some(NamedBreakdown {
                    name: facts.name.clone(),
                    device_index: facts.device_index,
                    breakdown: facts.breakdown.clone()?,
                })
            })
            .collect(),
    }
}

/// The findings a capture gives by itself, GPU by GPU: Xid, ECC, row remaps, throttling, leaks
/// and near-full memory (OOM events and the driver check need the whole input; see [`diagnose`]).
/// The fleet view judges each GPU of a Prometheus fleet with it.
pub fn capture_findings(name: &str, capture: &Capture) -> Vec<Finding> {
    let mut findings = Vec::new();
    hardware::capture_findings(name, capture, &mut findings);
    leak::capture_findings(name, capture, &mut findings);
    headroom::capture_findings(name, capture, &mut findings);
    findings
}

/// A job that ran out of memory because its live tensors filled the card, while memory grew
/// steadily step after step, died of the leak: the leak becomes the primary finding.
fn promote_leak_behind_capacity_oom(findings: &mut Vec<Finding>) {
    if findings.first().map(|f| f.category) != Some(Category::Capacity) {
        return;
    }
    let oom_device = findings.first().and_then(finding_device);
    let same_device = |f: &Finding| match (oom_device, finding_device(f)) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    let Some(index) = findings.iter().position(|f| {
        f.category == Category::Leak && f.severity != Severity::Info && same_device(f)
    }) else {
        return;
    };
    let mut leak = findings.remove(index);
    leak.severity = Severity::Critical;
    leak.explanation
        .push_str(" The growth ended in the out-of-memory error of the next finding.");
    if let Some(oom) = findings.first_mut() {
        oom.explanation.push_str(" Memory grew steadily before the failure: the leak above is the cause, a smaller batch only delays it.");
    }
    findings.insert(0, leak);
}

/// The finding of the `--prove` re-runs (`None` without any), filed under the cause the other
/// findings give the out-of-memory error (the first that explains one; capacity when none does).
fn proof_finding(proof: &[ProofRun], findings: &[Finding]) -> Option<Finding> {
    let category = findings
        .iter()
        .map(|f| f.category)
        .find(|c| c.is_out_of_memory_cause())
        .unwrap_or(Category::Capacity);
    real_runs::finding(proof, category)
}

/// The GPU size the captures show, when every device in them has the same (so a log's training
/// ran on a GPU of that size, whichever it was).
fn capture_capacity(captures: &[NamedCapture]) -> Option<leak::KnownCapacity> {
    let mut devices = captures
        .iter()
        .flat_map(|c| c.capture.devices.iter().map(move |d| (c, d)));
    let (capture, first) = devices.next()?;
    let total_bytes = first.memory_total_bytes;
    if total_bytes == 0 || devices.any(|(_, d)| d.memory_total_bytes != total_bytes) {
        return None;
    }
    Some(leak::KnownCapacity {
        total_bytes,
        source: EvidenceSource::capture(&capture.name, &capture.capture, None, None),
    })
}

/// The device a finding's evidence names, if any.
pub(crate) fn finding_device(f: &Finding) -> Option<u32> {
    f.evidence.iter().find_map(|e| match &e.source {
        EvidenceSource::Capture { device_index, .. }
        | EvidenceSource::Snapshot { device_index, .. } => *device_index,
        _ => None,
    })
}

fn summarize_inputs(input: &DiagnosisInput) -> Vec<InputSummary> {
    let mut inputs = Vec::new();
    for log in &input.logs {
        inputs.push(InputSummary {
            kind: "log".into(),
            name: log.name.clone(),
            summary: log.recognised_summary(),
        });
    }
    for c in &input.captures {
        let span = c
            .capture
            .time_span_ms()
            .map(|(a, b)| (b - a) as f64 / 1000.0)
            .unwrap_or(0.0);
        inputs.push(InputSummary {
            kind: "capture".into(),
            name: c.name.clone(),
            summary: format!(
                "{} device(s), {} samples over {span:.0} s, {} process track(s), {} event(s){}",
                c.capture.devices.len(),
                c.capture.sample_count(),
                c.capture.processes.len(),
                c.capture.events.len(),
                if c.capture.is_simulated() {
                    ", SIMULATED"
                } else {
                    ""
                }
            ),
        });
    }
    for s in &input.snapshots {
        inputs.push(InputSummary {
            kind: "snapshot".into(),
            name: s.name.clone(),
            summary: format!(
                "GPU {} when the snapshot was taken: {} reserved, {} allocated, largest free block {}",
                s.device_index,
                format_bytes(s.reserved_bytes),
                format_bytes(s.allocated_bytes),
                format_bytes(s.largest_free_block_bytes)
            ),
        });
    }
    if !input.proof.is_empty() {
        let removed = input
            .proof
            .iter()
            .filter(|p| p.outcome == real_runs::REMOVED)
            .count();
        inputs.push(InputSummary {
            kind: PROOF_INPUT_KIND.into(),
            name: "vramscope run --prove".into(),
            summary: format!(
                "{} re-run(s) of the job under candidate fixes, {removed} of them past its \
                 out-of-memory error",
                input.proof.len()
            ),
        });
    }
    inputs
}

/// The file a piece of evidence names, if any.
fn source_file(source: &EvidenceSource) -> Option<&str> {
    match source {
        EvidenceSource::LogLine { file, .. }
        | EvidenceSource::Capture { file, .. }
        | EvidenceSource::Snapshot { file, .. } => Some(file),
        EvidenceSource::User { .. } | EvidenceSource::Derived => None,
    }
}

/// Every out-of-memory failure of the evidence, the primary one first: the most informative OOM
/// of the logs, enriched with the other sources (largest free block and settings from a snapshot
/// of its device, other processes from a capture), else the latest snapshot OOM, else a capture's
/// OOM event. Then every snapshot OOM (in time order) that did not serve the primary one, each on
/// its own numbers: snapshots of several jobs each keep their own cause.
fn oom_cases(input: &DiagnosisInput) -> Vec<OomCase> {
    let occurrences: usize = input.logs.iter().map(|l| l.ooms().count()).sum::<usize>()
        + input
            .captures
            .iter()
            .map(|c| {
                c.capture
                    .events
                    .iter()
                    .filter(|e| matches!(e.kind, EventKind::OutOfMemory { .. }))
                    .count()
            })
            .sum::<usize>();
    let snapshots = leak::in_time_order(&input.snapshots);
    let final_oom = final_ooms(&snapshots);
    let with_oom: Vec<&SnapshotFacts> = final_oom.iter().map(|(s, _)| *s).collect();

    let log_case = input
        .logs
        .iter()
        .filter_map(|log| {
            let (m, numbers, framework) = log.best_oom()?;
            let mut case = OomCase::new(
                framework,
                numbers.clone(),
                EvidenceSource::LogLine {
                    file: log.name.clone(),
                    line: m.line,
                },
            );
            case.history = logged_history(log);
            Some(case)
        })
        .max_by_key(|c| richness(&c.numbers));
    // The snapshot whose numbers the primary case uses; its own OOM is not listed again.
    let (mut primary, used_snapshot) = match log_case {
        Some(mut case) => {
            let device = case.numbers.device_index.unwrap_or(0);
            // A snapshot of another failure (another request size) is another run's evidence:
            // it keeps its own case instead of lending its numbers to this one.
            let of_this_failure: Vec<&SnapshotFacts> = with_oom
                .iter()
                .copied()
                .filter(|s| same_failure(&case, s))
                .collect();
            let without_oom: Vec<&SnapshotFacts> = snapshots
                .iter()
                .copied()
                .filter(|s| s.oom.is_none())
                .collect();
            let used =
                latest_on(&of_this_failure, device).or_else(|| latest_on(&without_oom, device));
            if let Some(s) = used {
                enrich_from_snapshot(&mut case, s, device);
            }
            (Some(case), used)
        }
        None => {
            let used = with_oom.last().copied();
            let case = used
                .and_then(snapshot_oom)
                .or_else(|| capture_oom(&input.captures));
            (case, used)
        }
    };
    let Some(case) = primary.as_mut() else {
        return Vec::new();
    };
    case.occurrences = occurrences.max(1);
    let device = case.numbers.device_index.unwrap_or(0);
    if case.numbers.other_processes.is_empty() {
        case.other_processes_from_capture = capture_others_at_oom(&input.captures, device);
    }
    let is_used = |s: &SnapshotFacts| used_snapshot.is_some_and(|used| std::ptr::eq(s, used));
    if let Some((_, recovered)) = final_oom.iter().find(|(s, _)| is_used(s)) {
        case.recovered_before = *recovered;
    }
    let others = final_oom
        .iter()
        .filter(|(s, _)| !is_used(s))
        .filter_map(|&(s, recovered)| {
            let mut case = snapshot_oom(s)?;
            case.recovered_before = recovered;
            Some(case)
        });
    primary.into_iter().chain(others).collect()
}

/// The OOM snapshots (in time order) that show a failure, each with how many earlier OOM
/// snapshots it stands for: an OOM snapshot followed by a later OOM snapshot of the same process
/// on the same device was caught and the process went on (a library retrying with less memory, a
/// program that halves its batch), so it is not a failure of its own. Its allocator trace lives
/// on in the later snapshot.
fn final_ooms<'a>(snapshots: &[&'a SnapshotFacts]) -> Vec<(&'a SnapshotFacts, usize)> {
    let with_oom: Vec<&SnapshotFacts> = snapshots
        .iter()
        .copied()
        .filter(|s| s.oom.is_some())
        .collect();
    // Each OOM snapshot's last successor of the same process (itself when none follows), from
    // the last one back: a successor always comes later, so its own is already known.
    let mut last_of: Vec<usize> = (0..with_oom.len()).collect();
    for i in (0..with_oom.len()).rev() {
        let successor = (i + 1..with_oom.len()).find(|&j| {
            with_oom[j].device_index == with_oom[i].device_index
                && leak::same_process(with_oom[i], with_oom[j]).is_some()
        });
        if let Some(j) = successor {
            last_of[i] = last_of[j];
        }
    }
    (0..with_oom.len())
        .filter(|&i| last_of[i] == i)
        .map(|i| {
            let stands_for = (0..i).filter(|&k| last_of[k] == i).count();
            (with_oom[i], stands_for)
        })
        .collect()
}

/// Whether a snapshot's OOM is the failure a log reports: the same request, as PyTorch prints it
/// (two decimals of its unit), when the log gives one.
fn same_failure(case: &OomCase, snapshot: &SnapshotFacts) -> bool {
    let (Some(logged), Some(recorded)) = (
        case.numbers.requested_bytes,
        snapshot.oom.as_ref().map(|o| o.requested_bytes),
    ) else {
        return true;
    };
    let tolerance = (logged.max(recorded) / 100).max(crate::model::MIB);
    logged.abs_diff(recorded) <= tolerance
}

/// The latest of the snapshots (in time order) that is of `device`.
fn latest_on<'a>(snapshots: &[&'a SnapshotFacts], device: u32) -> Option<&'a SnapshotFacts> {
    snapshots
        .iter()
        .rev()
        .find(|s| s.device_index == device)
        .copied()
}

/// Fills what a log's OOM message lacks from a snapshot of the same device: the free blocks the
/// request could use, the expandable-segments setting, the allocator's numbers, the live set's
/// history, the what-if replay and where the live memory went.
fn enrich_from_snapshot(case: &mut OomCase, s: &SnapshotFacts, device: u32) {
    let source = EvidenceSource::Snapshot {
        file: s.name.clone(),
        device_index: Some(device),
    };
    if case.largest_free_block.is_none() {
        // At the OOM when the snapshot recorded it, else at the snapshot's end.
        match s.oom.as_ref() {
            Some(o) if o.fitting_blocks == 0 => {
                case.largest_free_block = Some((o.largest_usable_free_bytes, source.clone()));
                case.usable_cached_bytes = Some(o.usable_free_bytes);
            }
            Some(_) => {}
            None => case.largest_free_block = Some((s.largest_free_block_bytes, source.clone())),
        }
    }
    if case.expandable_segments.is_none() {
        case.expandable_segments = s.expandable_segments;
    }
    if case.numbers.reserved_unallocated_bytes.is_none() {
        let (allocated, reserved) = s
            .oom
            .as_ref()
            .map_or((s.allocated_bytes, s.reserved_bytes), |o| {
                (o.allocated_bytes, o.reserved_bytes)
            });
        case.numbers.allocated_bytes = Some(allocated);
        case.numbers.reserved_bytes = Some(reserved);
        case.numbers.reserved_unallocated_bytes = Some(reserved.saturating_sub(allocated));
    }
    // The trace's history is finer than a log's step figures.
    if let Some(t) = &s.trajectory {
        case.history = Some((t.clone(), source));
    }
    case.replay = s.replay.clone();
    case.breakdown = s.breakdown.clone().map(|b| (b, source_of(s, device)));
    // A snapshot without a trace (history not recorded) has nothing to replay.
    if s.trajectory.is_some() || s.oom.is_some() {
        case.history_file = Some(s.name.clone());
    }
}

/// The live set's history a log prints per step: its `allocated` series (live tensors), else its
/// first series.
fn logged_history(log: &LogAnalysis) -> Option<(Trajectory, EvidenceSource)> {
    let series = log
        .step_series
        .iter()
        .find(|s| s.label.contains("allocated"))
        .or_else(|| log.step_series.first())?;
    let trajectory = trajectory::of_logged_steps(series)?;
    let line = series.points.first()?.line;
    Some((
        trajectory,
        EvidenceSource::LogLine {
            file: log.name.clone(),
            line,
        },
    ))
}

fn richness(n: &OomNumbers) -> usize {
    [
        n.requested_bytes,
        n.total_bytes,
        n.free_bytes,
        n.allocated_bytes,
        n.reserved_unallocated_bytes,
        n.allowed_bytes,
        n.this_process_bytes,
    ]
    .iter()
    .filter(|v| v.is_some())
    .count()
}

/// The OOM a snapshot recorded, on the snapshot's own numbers (the same case the Allocator tab's
/// explainer judges), with its history and replay.
fn snapshot_oom(s: &SnapshotFacts) -> Option<OomCase> {
    let oom = s.oom.as_ref()?;
    let mut case = oom::case_from_snapshot(
        oom,
        &s.name,
        s.device_index,
        s.expandable_segments,
        s.trajectory.clone(),
    );
    case.replay = s.replay.clone();
    case.breakdown = s
        .breakdown
        .clone()
        .map(|b| (b, source_of(s, s.device_index)));
    Some(case)
}

/// A snapshot's facts of `device` as an evidence source.
fn source_of(s: &SnapshotFacts, device: u32) -> EvidenceSource {
    EvidenceSource::Snapshot {
        file: s.name.clone(),
        device_index: Some(device),
    }
}

/// An OOM event in a capture, with the device's memory at that moment.
fn capture_oom(captures: &[NamedCapture]) -> Option<OomCase> {
    for c in captures {
        for e in c.capture.events.iter().rev() {
            let EventKind::OutOfMemory {
                pid,
                requested_bytes,
                ..
            } = &e.kind
            else {
                continue;
            };
            let device = e.device_index.unwrap_or(0);
            // The failing peak usually falls between two samples: take the fullest reading of
            // the few seconds before the failure.
            let window_ms = i64::from(c.capture.meta.interval_ms.max(1000)) * 3;
            let reading = c.capture.series(device).and_then(|s| {
                s.iter()
                    .filter(|x| x.t_ms <= e.t_ms && x.t_ms >= e.t_ms - window_ms)
                    .filter_map(|x| x.memory)
                    .min_by_key(|m| m.free_bytes)
            });
            let this_process =
                pid.and_then(|pid| process_bytes_at(&c.capture, device, pid, e.t_ms));
            return Some(OomCase::new(
                Framework::Cuda,
                OomNumbers {
                    device_index: Some(device),
                    requested_bytes: *requested_bytes,
                    total_bytes: reading.map(|m| m.total_bytes),
                    free_bytes: reading.map(|m| m.free_bytes),
                    this_process_bytes: this_process,
                    ..Default::default()
                },
                EvidenceSource::capture(&c.name, &c.capture, Some(device), Some(e.t_ms)),
            ));
        }
    }
    None
}

fn process_bytes_at(capture: &Capture, device: u32, pid: u32, t_ms: i64) -> Option<u64> {
    let track = capture
        .processes
        .iter()
        .find(|p| p.device_index == device && p.pid == pid)?;
    track
        .t_ms
        .iter()
        .zip(&track.used_bytes)
        .rev()
        .find(|(t, _)| **t <= t_ms)
        .and_then(|(_, b)| *b)
}

/// Other processes on the device at the capture's OOM event (excluding the failing pid).
fn capture_others_at_oom(
    captures: &[NamedCapture],
    device: u32,
) -> Vec<(u32, String, u64, EvidenceSource)> {
    for c in captures {
        let Some((t_ms, failing_pid)) = c.capture.events.iter().rev().find_map(|e| match &e.kind {
            EventKind::OutOfMemory { pid, .. } if e.device_index.unwrap_or(0) == device => {
                Some((e.t_ms, *pid))
            }
            _ => None,
        }) else {
            continue;
        };
        return c
            .capture
            .processes
            .iter()
            .filter(|p| p.device_index == device && Some(p.pid) != failing_pid)
            .filter_map(|p| {
                let bytes = process_bytes_at(&c.capture, device, p.pid, t_ms)?;
                // Only processes still listed at the failure.
                let last_seen = p.t_ms.iter().rev().find(|t| **t <= t_ms)?;
                (t_ms - last_seen <= 5_000).then(|| {
                    (
                        p.pid,
                        p.name.clone(),
                        bytes,
                        EvidenceSource::capture(
                            &c.name,
                            &c.capture,
                            Some(device),
                            Some(*last_seen),
                        ),
                    )
                })
            })
            .collect();
    }
    Vec::new()
}

/// Evidence that points at a capture as a whole (no device, no moment).
fn whole_capture(capture: &NamedCapture) -> EvidenceSource {
    EvidenceSource::capture(&capture.name, &capture.capture, None, None)
}

/// The first log that states a value (`value` gives it with its 1-based line), with that line as
/// the evidence.
fn first_in_logs<T>(
    logs: &[LogAnalysis],
    value: impl Fn(&LogAnalysis) -> Option<(T, usize)>,
) -> Option<(T, EvidenceSource)> {
    logs.iter().find_map(|log| {
        let (found, line) = value(log)?;
        Some((
            found,
            EvidenceSource::LogLine {
                file: log.name.clone(),
                line,
            },
        ))
    })
}

fn driver_check(input: &DiagnosisInput, findings: &mut Vec<Finding>) {
    let from_capture = input
        .captures
        .iter()
        .find(|c| !c.capture.meta.driver_version.is_empty() && !c.capture.is_simulated());
    let driver = from_capture
        .map(|c| (c.capture.meta.driver_version.clone(), whole_capture(c)))
        .or_else(|| first_in_logs(&input.logs, |l| l.versions.driver_version.clone()));
    let driver_cuda = input
        .captures
        .iter()
        .filter(|c| !c.capture.is_simulated())
        .find_map(|c| {
            let v = c.capture.meta.cuda_driver_version?;
            Some((compat::cuda_from_api_version(v), whole_capture(c)))
        })
        .or_else(|| first_in_logs(&input.logs, |l| l.versions.driver_cuda));
    let framework_cuda = input
        .framework_cuda
        .map(|v| {
            (
                v,
                EvidenceSource::User {
                    what: "framework CUDA version".into(),
                },
            )
        })
        .or_else(|| {
            input.logs.iter().find_map(|l| {
                let (v, line) = l.versions.framework_cuda?;
                Some((
                    v,
                    EvidenceSource::LogLine {
                        file: l.name.clone(),
                        line,
                    },
                ))
            })
        });
    hardware::driver_findings(driver, framework_cuda, driver_cuda, findings);
}

/// The "nothing wrong" finding, listing what was checked.
fn healthy(input: &DiagnosisInput) -> Finding {
    let mut evidence = Vec::new();
    for log in &input.logs {
        evidence.push(Evidence::number(
            "log lines read, none showing a failure",
            log.lines_read as f64,
            Unit::Count,
            format!("{} lines", log.lines_read),
            EvidenceSource::LogLine {
                file: log.name.clone(),
                line: log.lines_read.max(1),
            },
        ));
    }
    for c in &input.captures {
        for s in &c.capture.series {
            if let Some((t, peak)) = s.peak_used() {
                let total = c
                    .capture
                    .devices
                    .iter()
                    .find(|d| d.index == s.device_index)
                    .map(|d| d.memory_total_bytes)
                    .unwrap_or(0);
                evidence.push(Evidence::bytes(
                    format!(
                        "peak used on {} (of {})",
                        c.capture.gpu_label(s.device_index),
                        format_bytes(total)
                    ),
                    peak,
                    EvidenceSource::capture(&c.name, &c.capture, Some(s.device_index), Some(t)),
                ));
            }
        }
    }
    let checked = if input.logs.is_empty()
        && input.captures.is_empty()
        && input.snapshots.is_empty()
    {
        "No evidence was given: add a log, a capture, a snapshot or a live reading.".to_owned()
    } else {
        "No out-of-memory error, CUDA error, Xid, uncorrectable ECC error, pending or failed row remap, throttling, leak or driver mismatch was found in the evidence.".to_owned()
    };
    Finding {
        category: Category::Healthy,
        severity: Severity::Info,
        title: "No problem found".into(),
        evidence,
        explanation: checked,
        recommendations: Vec::new(),
        wizard: None::<Wizard>,
    }
}

/// How the card was split up at the failure, for the out-of-memory wizard's bar. Every part is
/// optional because each source gives a different subset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OomComposition {
    pub device_index: Option<u32>,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    /// Other processes (listed, seen by a capture, or not accounted for).
    pub other_processes_bytes: u64,
    /// This process beyond what its allocator reserved: CUDA context, libraries.
    pub non_framework_bytes: Option<u64>,
    pub allocated_bytes: Option<u64>,
    pub reserved_unallocated_bytes: Option<u64>,
    /// Per-process cap ("allowed").
    pub cap_bytes: Option<u64>,
    pub requested_bytes: Option<u64>,
}

/// The composition of the card at the most informative OOM of the evidence, if any.
pub fn oom_composition(input: &DiagnosisInput) -> Option<OomComposition> {
    let case = oom_cases(input).into_iter().next()?;
    let n = &case.numbers;
    let others: u64 = oom::other_processes(&case).iter().map(|(_, b)| b).sum();
    Some(OomComposition {
        device_index: n.device_index,
        total_bytes: n.total_bytes,
        free_bytes: n.free_bytes,
        other_processes_bytes: others,
        non_framework_bytes: n
            .this_process_bytes
            .zip(n.reserved_bytes)
            .map(|(p, r)| p.saturating_sub(r)),
        allocated_bytes: n.allocated_bytes,
        reserved_unallocated_bytes: n.reserved_unallocated_bytes,
        cap_bytes: n.allowed_bytes,
        requested_bytes: n.requested_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::leak::{SnapshotIdentity, SnapshotOom};
    use crate::diagnose::trace_events::TraceEventSet;

    /// An OOM snapshot of `device` whose trace holds `events` (time µs, address).
    fn oom_snapshot(name: &str, device: u32, events: &[(i64, u64)]) -> SnapshotFacts {
        SnapshotFacts {
            name: name.into(),
            device_index: device,
            oom: Some(SnapshotOom::default()),
            identity: SnapshotIdentity {
                last_trace_time_us: events.iter().map(|e| e.0).max(),
                trace_events: TraceEventSet::from_events(events),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn an_oom_the_same_process_went_on_from_is_no_failure_of_its_own() {
        // Process A ran out twice (the first caught), process B once, on the same device; a
        // process on another device that shares nothing.
        let a1 = oom_snapshot("a1", 0, &[(1, 0x10), (2, 0x20)]);
        let b = oom_snapshot("b", 0, &[(3, 0x10), (4, 0x50)]);
        let a2 = oom_snapshot("a2", 0, &[(2, 0x20), (5, 0x30), (6, 0x40)]);
        let a3 = oom_snapshot("a3", 0, &[(6, 0x40), (7, 0x60)]);
        let other_device = oom_snapshot("d1", 1, &[(2, 0x20), (8, 0x70)]);
        let all = [a1, b, a2, a3, other_device];
        let ordered = leak::in_time_order(&all);
        let kept: Vec<(&str, usize)> = final_ooms(&ordered)
            .into_iter()
            .map(|(s, recovered)| (s.name.as_str(), recovered))
            .collect();
        assert_eq!(kept, [("b", 0), ("a3", 2), ("d1", 0)]);
    }
}
