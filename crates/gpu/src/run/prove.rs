//! `vramscope run --prove`: after a job ran out of memory, re-run it under candidate changes
//! and keep what works. Candidates are the allocator settings the what-if replay of the OOM
//! snapshot did not refute (ordered most headroom first, refuted ones dropped), the changes the
//! user declares (`--vary ENV=V1,V2`, `--vary-arg FLAG=V1,V2`); each re-run is a fresh process
//! tree in a folder of its own, stopped as soon as it is past the original failure by a clear
//! margin (more allocations than the original made and one more completed optimizer step:
//! [`PastFailure`]; a job without optimizer steps runs to its end), when it runs out, or at the
//! budget.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use vramscope_core::analysis::replay::conf::AllocConf;
use vramscope_core::diagnose::finding::Diagnosis;
use vramscope_core::diagnose::oom::refused_by_memory_cap;
use vramscope_core::diagnose::proof::from_what_if;
use vramscope_core::evidence::Evidence;
use vramscope_core::model::format_bytes;
use vramscope_core::model::run::{MEMORY_FRACTION_VARIABLE, ProofRun, SpeedBasis};

use super::{Forwarder, RunOptions, RunOutcome, run_until};

/// A re-run is past the original failure when it made this many more allocations than the
/// original had when it failed (a share of them, at least [`MIN_MARGIN_ALLOCATIONS`]) and
/// completed more optimizer steps than the original did ([`PastFailure`]).
pub const MARGIN_FRACTION: f64 = 0.2;
/// The least margin, in allocations: a few iterations of a small model.
pub const MIN_MARGIN_ALLOCATIONS: u64 = 500;

/// The two names PyTorch reads allocator settings from (the newer first).
const ALLOC_CONF_NAMES: [&str; 2] = ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"];

/// One change to try.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// As the user would write it.
    pub change: String,
    /// Environment to set for the re-run.
    pub env: Vec<(String, String)>,
    /// The command with an argument's value substituted, for `--vary-arg`.
    pub command: Option<Vec<String>>,
    /// What the replay of the original snapshot predicted, when it tried this change.
    pub prediction: Option<String>,
}

/// The hook's progress record (`progress/<name>.json`), the fields the orchestrator reads.
#[derive(Clone, Debug, Default, Deserialize)]
struct Progress {
    #[serde(default)]
    num_allocs: u64,
    #[serde(default)]
    reserved_bytes_peak: u64,
    #[serde(default)]
    time_unix_ms: i64,
    /// `Optimizer.step` calls seen by the hook's global step post-hook, and the times of the
    /// first and the last (Unix milliseconds); absent when the job made none.
    #[serde(default)]
    optimizer_steps: u64,
    #[serde(default)]
    first_optimizer_step_unix_ms: f64,
    #[serde(default)]
    last_optimizer_step_unix_ms: f64,
    /// The per-process memory fraction the program set, when it set one.
    #[serde(default)]
    memory_fraction: Option<f64>,
}

impl Progress {
    /// Seconds per optimizer step between the first step's end and the last's: the first
    /// step's warm-up (kernel selection, lazy state) is left out. `None` below two steps.
    fn seconds_per_step(&self) -> Option<f64> {
        let span_ms = self.last_optimizer_step_unix_ms - self.first_optimizer_step_unix_ms;
        (self.optimizer_steps >= 2 && span_ms > 0.0)
            .then(|| span_ms / 1000.0 / (self.optimizer_steps - 1) as f64)
    }
}

/// The hook's OOM record (`progress/<name>.oom.json`).
#[derive(Clone, Debug, Default, Deserialize)]
struct OomRecord {
    #[serde(default)]
    num_allocs: u64,
    #[serde(default)]
    alloc_bytes: u64,
    #[serde(default)]
    device_free: u64,
}

/// What the hook's records of a run folder say: allocations made, the highest peak reserved,
/// the allocations at the first OOM, the last record's time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HookRecords {
    pub allocations: u64,
    pub peak_reserved_bytes: u64,
    pub oom_at_allocation: Option<u64>,
    /// At the first OOM: the failed request minus what the device had free.
    pub oom_missing_bytes: Option<u64>,
    pub last_ms: i64,
    /// Seconds per training iteration (optimizer step), of the slowest process that made at
    /// least two: a job goes at the pace of its slowest rank.
    pub seconds_per_iteration: Option<f64>,
    /// The smallest per-process memory fraction a process of the job set, when one did.
    pub memory_fraction: Option<f64>,
    /// At the first OOM the device had room for the request: a cap refused it, not the card.
    pub cap_refused: bool,
    /// Optimizer steps of the stepping process that made the fewest (every rank must be past a
    /// step for the job to be; a process that never steps, such as a launcher's GPU check, is
    /// left out); `None` while no process made one.
    pub optimizer_steps: Option<u64>,
    /// Processes that made at least one optimizer step.
    pub stepping_processes: usize,
}

/// Where a re-run is past the original failure by a clear margin: the allocations and the
/// completed optimizer steps it needs. Allocations alone are no margin: a job whose live set
/// grows without steps (generation growing a cache, a leak) can pass the original failure by
/// any number of allocations and run out a little later (a real run did: issue 32). A job that
/// never makes an optimizer step is therefore never stopped early; it runs to its end or to the
/// budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PastFailure {
    pub allocations: u64,
    pub optimizer_steps: u64,
    pub stepping_processes: usize,
}

impl PastFailure {
    /// From the original run's records: its allocations (all processes', as a re-run's are
    /// counted) plus the margin, one optimizer step more than its slowest stepping process
    /// completed, in at least as many processes (at least one).
    pub fn of_original(original: &HookRecords) -> Self {
        let failed_at = original
            .allocations
            .max(original.oom_at_allocation.unwrap_or(0));
        let margin = ((failed_at as f64 * MARGIN_FRACTION) as u64).max(MIN_MARGIN_ALLOCATIONS);
        PastFailure {
            allocations: failed_at + margin,
            optimizer_steps: original.optimizer_steps.unwrap_or(0) + 1,
            stepping_processes: original.stepping_processes.max(1),
        }
    }

    /// The re-run whose records are `records` is there.
    pub fn reached(&self, records: &HookRecords) -> bool {
        records.allocations >= self.allocations
            && records.stepping_processes >= self.stepping_processes
            && records
                .optimizer_steps
                .is_some_and(|steps| steps >= self.optimizer_steps)
    }
}

/// Reads the hook's records of `folder` (summed over the job's processes).
pub fn hook_records(folder: &Path) -> HookRecords {
    let mut records = HookRecords::default();
    let Ok(entries) = std::fs::read_dir(folder.join("progress")) else {
        return records;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        if name.ends_with(".oom.json") {
            if let Ok(oom) = serde_json::from_str::<OomRecord>(&text) {
                if records.oom_at_allocation.is_none_or(|n| oom.num_allocs < n) {
                    // Under a per-process cap the device has room; what the cap lacked is
                    // not in the record, so nothing is claimed then.
                    records.oom_missing_bytes = (oom.alloc_bytes > oom.device_free)
                        .then(|| oom.alloc_bytes - oom.device_free);
                    records.cap_refused =
                        refused_by_memory_cap(Some(oom.device_free), oom.alloc_bytes);
                }
                records.oom_at_allocation = Some(
                    records
                        .oom_at_allocation
                        .map_or(oom.num_allocs, |n| n.min(oom.num_allocs)),
                );
            }
        } else if name.ends_with(".json")
            && let Ok(progress) = serde_json::from_str::<Progress>(&text)
        {
            records.allocations += progress.num_allocs;
            if progress.optimizer_steps > 0 {
                records.stepping_processes += 1;
                records.optimizer_steps = Some(
                    records
                        .optimizer_steps
                        .map_or(progress.optimizer_steps, |s| {
                            s.min(progress.optimizer_steps)
                        }),
                );
            }
            if let Some(fraction) = progress.memory_fraction.filter(|f| *f > 0.0) {
                records.memory_fraction = Some(
                    records
                        .memory_fraction
                        .map_or(fraction, |f| f.min(fraction)),
                );
            }
            if let Some(seconds) = progress.seconds_per_step() {
                records.seconds_per_iteration = Some(
                    records
                        .seconds_per_iteration
                        .map_or(seconds, |s| s.max(seconds)),
                );
            }
            records.peak_reserved_bytes = records
                .peak_reserved_bytes
                .max(progress.reserved_bytes_peak);
            records.last_ms = records.last_ms.max(progress.time_unix_ms);
        }
    }
    records
}

/// The name the job reads allocator settings from (the one its environment sets, else the
/// long-standing one), and the settings it already has.
fn alloc_conf_variable() -> (String, String) {
    for name in ALLOC_CONF_NAMES {
        if let Ok(value) = std::env::var(name)
            && !value.trim().is_empty()
        {
            return (name.to_owned(), value);
        }
    }
    ("PYTORCH_CUDA_ALLOC_CONF".to_owned(), String::new())
}

/// The allocator settings the replay of `evidence`'s OOM snapshots did not refute, ordered
/// most headroom first (settings the replay could not settle after those), each merged into
/// the settings the job already has.
fn replay_candidates(evidence: &Evidence) -> Vec<Candidate> {
    let (variable, existing) = alloc_conf_variable();
    let base = AllocConf::parse(&existing).unwrap_or_else(|_| AllocConf::default_conf());
    let mut scored: Vec<(u8, u64, Candidate)> = Vec::new();
    for facts in evidence.input.snapshots.iter().filter(|f| f.oom.is_some()) {
        let Some(what_if) = &facts.what_if else {
            continue;
        };
        let replay = from_what_if(&what_if.report);
        let limit = replay.limit_bytes;
        for setting in replay.settings.iter().skip(1) {
            let refuted =
                setting.oom.is_some() && setting.incomplete.is_none() && !setting.uncertain;
            if refuted {
                continue;
            }
            let Ok(merged) = base.with_change(&setting.conf) else {
                continue;
            };
            let settled = setting.incomplete.is_none() && !setting.uncertain;
            let headroom = limit.map_or(0, |l| l.saturating_sub(setting.peak_reserved_bytes));
            let prediction = if settled {
                format!(
                    "replay: runs, peak reserved {}{}",
                    format_bytes(setting.peak_reserved_bytes),
                    limit.map_or(String::new(), |_| format!(
                        " ({} spare)",
                        format_bytes(headroom)
                    ))
                )
            } else {
                "replay: could not settle it".to_owned()
            };
            let change = format!("{variable}={}", merged.text);
            if scored.iter().any(|(_, _, c)| c.change == change) {
                continue;
            }
            scored.push((
                u8::from(!settled),
                u64::MAX - headroom,
                Candidate {
                    change,
                    env: vec![(variable.clone(), merged.text.clone())],
                    command: None,
                    prediction: Some(prediction),
                },
            ));
        }
    }
    scored.sort_by_key(|(unsettled, headroom_rank, _)| (*unsettled, *headroom_rank));
    scored.into_iter().map(|(_, _, c)| c).collect()
}

/// Raised caps, where a per-process cap refused the request while the device had room: twice
/// the fraction the job set (when that is below the whole card) and no cap (fraction 1).
fn raised_cap_candidates(original: &HookRecords) -> Vec<Candidate> {
    let Some(fraction) = original.memory_fraction.filter(|f| *f < 1.0) else {
        return Vec::new();
    };
    if !original.cap_refused {
        return Vec::new();
    }
    let mut fractions = Vec::new();
    if fraction * 2.0 < 1.0 {
        fractions.push((fraction * 2.0 * 1000.0).round() / 1000.0);
    }
    fractions.push(1.0);
    fractions
        .into_iter()
        .map(|raised| {
            let value = format!("{raised}");
            Candidate {
                change: format!("{MEMORY_FRACTION_VARIABLE}={value}"),
                env: vec![(MEMORY_FRACTION_VARIABLE.to_owned(), value)],
                command: None,
                prediction: Some(format!(
                    "a cap refused while the device had room: the job's per-process memory \
                     fraction {fraction} raised to {raised}"
                )),
            }
        })
        .collect()
}

/// `NAME=V1,V2` of `--vary` and `--vary-arg`.
pub fn parse_vary(text: &str) -> Result<(String, Vec<String>), String> {
    let (name, values) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}' is not NAME=V1,V2,…"))?;
    let values: Vec<String> = values
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect();
    if name.trim().is_empty() || values.is_empty() {
        return Err(format!("'{text}' is not NAME=V1,V2,…"));
    }
    Ok((name.trim().to_owned(), values))
}

/// How `--vary-arg FLAG=VALUE` puts its value into the command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgChange {
    /// The command passed `FLAG` (`--batch-size 32` or `--batch-size=32`): its value is replaced.
    Substituted(Vec<String>),
    /// The command did not pass `FLAG`: `FLAG VALUE` is appended at its end, which
    /// argparse-style programs accept (a declared knob is tried rather than silently dropped).
    Appended(Vec<String>),
}

/// `command` with `flag`'s value set to `value`: replaced where the command passes it
/// (`--batch-size 32`, `--batch-size=32`, or a bare `--batch-size` at the end, which gets the
/// value after it), else `FLAG VALUE` appended.
pub fn substitute_arg(command: &[String], flag: &str, value: &str) -> ArgChange {
    let mut out = command.to_vec();
    let prefix = format!("{flag}=");
    for i in 0..out.len() {
        if out[i] == flag {
            match out.get_mut(i + 1) {
                Some(next) => *next = value.to_owned(),
                None => out.push(value.to_owned()),
            }
            return ArgChange::Substituted(out);
        }
        if out[i].starts_with(&prefix) {
            out[i] = format!("{prefix}{value}");
            return ArgChange::Substituted(out);
        }
    }
    out.extend([flag.to_owned(), value.to_owned()]);
    ArgChange::Appended(out)
}

/// The flags of `vary_args` that `command` does not pass, whose values are therefore appended
/// (each named once, so that the run can say so in one line).
pub fn appended_flags<'a>(
    command: &[String],
    vary_args: &'a [(String, Vec<String>)],
) -> Vec<&'a str> {
    let mut flags: Vec<&str> = Vec::new();
    for (flag, values) in vary_args {
        let appended = values.first().is_some_and(|value| {
            matches!(substitute_arg(command, flag, value), ArgChange::Appended(_))
        });
        if appended && !flags.contains(&flag.as_str()) {
            flags.push(flag);
        }
    }
    flags
}

/// The allocator settings the diagnosis recommends (`export PYTORCH_CUDA_ALLOC_CONF=…` in a
/// recommendation's action) that the replay did not already give, merged into the job's own.
fn recommended_candidates(diagnosis: &Diagnosis, known: &[Candidate]) -> Vec<Candidate> {
    let (variable, existing) = alloc_conf_variable();
    let base = AllocConf::parse(&existing).unwrap_or_else(|_| AllocConf::default_conf());
    let mut out: Vec<Candidate> = Vec::new();
    for recommendation in diagnosis.findings.iter().flat_map(|f| &f.recommendations) {
        for line in recommendation.action.lines() {
            let Some(conf) = line.trim().strip_prefix("export PYTORCH_CUDA_ALLOC_CONF=") else {
                continue;
            };
            let Ok(merged) = base.with_change(conf.trim()) else {
                continue;
            };
            let change = format!("{variable}={}", merged.text);
            if known.iter().chain(&out).any(|c| c.change == change) {
                continue;
            }
            out.push(Candidate {
                change,
                env: vec![(variable.clone(), merged.text.clone())],
                command: None,
                prediction: Some(format!(
                    "recommended by the diagnosis ({}), not tried by a replay",
                    recommendation.id
                )),
            });
        }
    }
    out
}

/// Every candidate: the replay's, the diagnosis's other allocator settings, raised caps where a
/// cap refused (`original`: the hook's records of the failed run), then the user's environment
/// variables, then the user's argument values.
pub fn candidates(
    evidence: &Evidence,
    diagnosis: &Diagnosis,
    original: &HookRecords,
    command: &[String],
    vary_env: &[(String, Vec<String>)],
    vary_args: &[(String, Vec<String>)],
) -> Vec<Candidate> {
    let mut out = replay_candidates(evidence);
    let recommended = recommended_candidates(diagnosis, &out);
    out.extend(recommended);
    out.extend(raised_cap_candidates(original));
    for (name, values) in vary_env {
        for value in values {
            out.push(Candidate {
                change: format!("{name}={value}"),
                env: vec![(name.clone(), value.clone())],
                command: None,
                prediction: None,
            });
        }
    }
    for (flag, values) in vary_args {
        for value in values {
            let (changed, prediction) = match substitute_arg(command, flag, value) {
                ArgChange::Substituted(changed) => (changed, None),
                ArgChange::Appended(changed) => (
                    changed,
                    Some(format!("appended: the command did not pass {flag}")),
                ),
            };
            out.push(Candidate {
                change: format!("{flag} {value}"),
                env: Vec::new(),
                command: Some(changed),
                prediction,
            });
        }
    }
    out
}

/// Allocations per second of a run: the hook's count over the run's time.
fn allocation_rate(records: &HookRecords, seconds: f64) -> Option<f64> {
    (records.allocations > 0 && seconds > 0.0).then(|| records.allocations as f64 / seconds)
}

/// How fast the original run went, to compare re-runs with.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OriginalPace {
    pub seconds_per_iteration: Option<f64>,
    pub allocations_per_second: Option<f64>,
}

/// A re-run's speed relative to the original (1 = as fast, lower is slower) and what it was
/// measured by: time per iteration where both runs made at least two optimizer steps (what a
/// user means by "slower"), else allocations per second (the only pace a run that failed in its
/// first step has; start-up counts in it).
pub fn relative_speed(
    original: &OriginalPace,
    rerun: &HookRecords,
    rerun_seconds: f64,
) -> Option<(f64, SpeedBasis)> {
    if let (Some(original), Some(rerun)) =
        (original.seconds_per_iteration, rerun.seconds_per_iteration)
    {
        return Some((original / rerun, SpeedBasis::TimePerIteration));
    }
    allocation_rate(rerun, rerun_seconds)
        .zip(original.allocations_per_second)
        .map(|(rate, original)| (rate / original, SpeedBasis::AllocationsPerSecond))
}

/// Re-runs the job of `original` (whose hook records are `original_records`) under each
/// candidate (in order), stopping at the first that removes the failure unless `try_all`;
/// `on_result` hears of each re-run as it ends.
pub fn prove(
    original: &RunOutcome,
    original_records: &HookRecords,
    candidates: &[Candidate],
    base: &RunOptions,
    forwarder: &Forwarder,
    try_all: bool,
    on_result: &mut dyn FnMut(&ProofRun),
) -> Vec<ProofRun> {
    let original_seconds =
        (original.manifest.ended_ms - original.manifest.started_ms).max(1) as f64 / 1000.0;
    let past = PastFailure::of_original(original_records);
    let original_pace = OriginalPace {
        seconds_per_iteration: original_records.seconds_per_iteration,
        allocations_per_second: allocation_rate(original_records, original_seconds),
    };
    let budget = base
        .budget
        .unwrap_or_else(|| Duration::from_secs_f64((2.0 * original_seconds).max(30.0)));
    let proof_dir = original.folder.join("proof");
    let mut results = Vec::new();
    for (i, candidate) in candidates.iter().enumerate() {
        if forwarder.interrupted() {
            break;
        }
        let options = RunOptions {
            command: candidate
                .command
                .clone()
                .unwrap_or_else(|| base.command.clone()),
            runs_dir: proof_dir.clone(),
            name: Some(format!("{}-{}", i + 1, slug(&candidate.change))),
            // The job's own settings (`NAME=value COMMAND` in the app), then the candidate's.
            extra_env: base
                .extra_env
                .iter()
                .chain(&candidate.env)
                .cloned()
                .collect(),
            echo: false,
            // Summarised by `on_result`, as a terminal shows them.
            output: None,
            budget: Some(budget),
            ..base.clone()
        };
        let started = std::time::Instant::now();
        let ran = run_until(&options, forwarder, &|folder| {
            let records = hook_records(folder);
            records.oom_at_allocation.is_some() || past.reached(&records)
        });
        let seconds = started.elapsed().as_secs_f64();
        let result = match ran {
            Ok((outcome, stopped_early)) => judge_rerun(
                candidate,
                &outcome,
                stopped_early,
                past,
                seconds,
                &original_pace,
                &original.folder,
            ),
            Err(e) => ProofRun {
                change: candidate.change.clone(),
                outcome: format!("failed: {e}"),
                seconds,
                replay_prediction: candidate.prediction.clone(),
                ..ProofRun::default()
            },
        };
        on_result(&result);
        let removed = result.outcome == "removed";
        results.push(result);
        if removed && !try_all {
            break;
        }
    }
    results
}

/// What a re-run showed.
fn judge_rerun(
    candidate: &Candidate,
    outcome: &RunOutcome,
    stopped_early: bool,
    past: PastFailure,
    seconds: f64,
    original_pace: &OriginalPace,
    original_folder: &Path,
) -> ProofRun {
    let records = hook_records(&outcome.folder);
    let speed = relative_speed(original_pace, &records, seconds);
    let log = std::fs::read_to_string(outcome.folder.join(super::LOG_FILE)).unwrap_or_default();
    let log_says_out_of_memory = log.contains("CUDA out of memory")
        || log.contains("OutOfMemoryError")
        || log.contains("CUDA error: out of memory");
    let verdict = if records.oom_at_allocation.is_some()
        || (log_says_out_of_memory && !outcome.manifest.exit.succeeded())
    {
        "ran_out"
    } else if (stopped_early && past.reached(&records)) || outcome.manifest.exit.succeeded() {
        "removed"
    } else if outcome
        .manifest
        .not_recorded
        .iter()
        .any(|n| n.starts_with("stopped at the budget"))
    {
        "undecided"
    } else {
        "failed"
    };
    ProofRun {
        change: candidate.change.clone(),
        outcome: verdict.to_owned(),
        ran_out_at_allocation: records.oom_at_allocation,
        missing_bytes: records.oom_missing_bytes,
        peak_reserved_bytes: (records.peak_reserved_bytes > 0)
            .then_some(records.peak_reserved_bytes),
        relative_speed: speed.map(|(s, _)| s),
        speed_basis: speed.map(|(_, basis)| basis),
        seconds_per_iteration: records.seconds_per_iteration,
        seconds,
        folder: relative(&outcome.folder, original_folder),
        replay_prediction: candidate.prediction.clone(),
        ended_by: (verdict == "failed")
            .then(|| last_error_line(&log))
            .flatten(),
    }
}

/// A line without torchrun's `[rankN]:` prefix.
fn without_rank_prefix(line: &str) -> &str {
    line.strip_prefix("[rank")
        .and_then(|rest| rest.split_once("]:"))
        .filter(|(rank, _)| rank.chars().all(|c| c.is_ascii_digit()))
        .map_or(line, |(_, rest)| rest.trim_start())
}

/// The most this many characters of an error line are kept.
const ERROR_LINE_CHARS: usize = 160;

/// The last line of a job's output that names an error (`RuntimeError: …`, `SystemError: …`,
/// `Segmentation fault`), else its last non-empty line; shortened.
fn last_error_line(log: &str) -> Option<String> {
    let lines = || log.lines().map(str::trim).filter(|l| !l.is_empty());
    let is_error = |line: &&str| {
        line.split_once(':').is_some_and(|(head, _)| {
            !head.contains(' ') && (head.ends_with("Error") || head.ends_with("Exception"))
        }) || line.contains("Segmentation fault")
            || line.contains("core dumped")
    };
    // torchrun prefixes each rank's lines (`[rank1]: RuntimeError: …`) and ends with its own
    // `ChildFailedError`, which says only that a rank failed.
    let line = lines()
        .map(without_rank_prefix)
        .filter(|line| !line.contains("ChildFailedError"))
        .rfind(is_error)
        .or_else(|| lines().next_back())?;
    Some(match line.char_indices().nth(ERROR_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    })
}

fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| PathBuf::from(path))
        .display()
        .to_string()
}

/// A change as a folder-name part.
fn slug(change: &str) -> String {
    let slug: String = change
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    slug.chars().take(48).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vary_values_and_argument_substitution() {
        assert_eq!(
            parse_vary("BATCH=8,16"),
            Ok(("BATCH".to_owned(), vec!["8".to_owned(), "16".to_owned()]))
        );
        assert!(parse_vary("BATCH").is_err());
        assert!(parse_vary("=1").is_err());
        let command: Vec<String> = ["python", "train.py", "--batch-size", "64", "--lr=1"]
            .map(str::to_owned)
            .to_vec();
        let line = |change: ArgChange| match change {
            ArgChange::Substituted(c) => ("substituted", c.join(" ")),
            ArgChange::Appended(c) => ("appended", c.join(" ")),
        };
        assert_eq!(
            line(substitute_arg(&command, "--batch-size", "32")),
            (
                "substituted",
                "python train.py --batch-size 32 --lr=1".to_owned()
            )
        );
        assert_eq!(
            line(substitute_arg(&command, "--lr", "0.5")),
            (
                "substituted",
                "python train.py --batch-size 64 --lr=0.5".to_owned()
            )
        );
        // Not passed: appended, as argparse-style programs accept it.
        assert_eq!(
            line(substitute_arg(&command, "--epochs", "3")),
            (
                "appended",
                "python train.py --batch-size 64 --lr=1 --epochs 3".to_owned()
            )
        );
        // A bare flag at the end gets its value after it.
        let bare: Vec<String> = ["python", "train.py", "--batch-size"]
            .map(str::to_owned)
            .to_vec();
        assert_eq!(
            line(substitute_arg(&bare, "--batch-size", "8")),
            ("substituted", "python train.py --batch-size 8".to_owned())
        );
    }

    #[test]
    fn a_flag_the_command_does_not_pass_is_appended_and_said() {
        let command: Vec<String> = ["python", "train.py", "--batch-size", "64"]
            .map(str::to_owned)
            .to_vec();
        let vary_args = vec![
            (
                "--optimizer".to_owned(),
                vec!["sgd".to_owned(), "adafactor".to_owned()],
            ),
            ("--batch-size".to_owned(), vec!["16".to_owned()]),
            ("--optimizer".to_owned(), vec!["lion".to_owned()]),
        ];
        assert_eq!(appended_flags(&command, &vary_args), ["--optimizer"]);
        let candidates = candidates(
            &Evidence::default(),
            &Diagnosis::default(),
            &HookRecords::default(),
            &command,
            &[],
            &vary_args,
        );
        let rows: Vec<(String, String, Option<String>)> = candidates
            .iter()
            .map(|c| {
                (
                    c.change.clone(),
                    c.command.clone().unwrap_or_default().join(" "),
                    c.prediction.clone(),
                )
            })
            .collect();
        let appended = Some("appended: the command did not pass --optimizer".to_owned());
        assert_eq!(
            rows,
            [
                (
                    "--optimizer sgd".to_owned(),
                    "python train.py --batch-size 64 --optimizer sgd".to_owned(),
                    appended.clone()
                ),
                (
                    "--optimizer adafactor".to_owned(),
                    "python train.py --batch-size 64 --optimizer adafactor".to_owned(),
                    appended.clone()
                ),
                (
                    "--batch-size 16".to_owned(),
                    "python train.py --batch-size 16".to_owned(),
                    None
                ),
                (
                    "--optimizer lion".to_owned(),
                    "python train.py --batch-size 64 --optimizer lion".to_owned(),
                    appended
                ),
            ]
        );
    }

    /// A run folder whose `progress/` holds `records` (file name, text), as the hook leaves it.
    fn run_folder_with(records: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let progress = dir.path().join("progress");
        std::fs::create_dir_all(&progress).expect("folder");
        for (name, text) in records {
            std::fs::write(progress.join(name), text).expect("written");
        }
        dir
    }

    /// Past the original failure means more allocations and one more completed optimizer step
    /// in every process that steps: a generation job (no steps) that passed the original's allocations is
    /// not past it (a real one ran out later), and a training job is once its slowest rank
    /// completed the step the original failed in.
    #[test]
    fn a_rerun_is_past_the_failure_after_its_allocations_and_one_more_step() {
        // Two ranks: rank 0 made 2 steps, rank 1 ran out in its first (2000 + 1000 allocations).
        let original = run_folder_with(&[
            (
                "rank0-pid1.json",
                r#"{"num_allocs": 2000, "optimizer_steps": 2}"#,
            ),
            ("rank1-pid2.json", r#"{"num_allocs": 1000}"#),
            (
                "rank1-pid2.oom.json",
                r#"{"num_allocs": 1000, "alloc_bytes": 10, "device_free": 0}"#,
            ),
        ]);
        let past = PastFailure::of_original(&hook_records(original.path()));
        assert_eq!(
            past,
            PastFailure {
                allocations: 3600,
                optimizer_steps: 3,
                stepping_processes: 1
            }
        );
        let reached =
            |records: &[(&str, &str)]| past.reached(&hook_records(run_folder_with(records).path()));
        // Far more allocations, no optimizer step: a job that grows without steps.
        assert!(!reached(&[("rank0-pid1.json", r#"{"num_allocs": 90000}"#)]));
        // One rank is past the steps, the other still in its second step.
        assert!(!reached(&[
            (
                "rank0-pid1.json",
                r#"{"num_allocs": 4000, "optimizer_steps": 3}"#
            ),
            (
                "rank1-pid2.json",
                r#"{"num_allocs": 4000, "optimizer_steps": 2}"#
            ),
        ]));
        // Both ranks past; a process that never steps (a GPU check) does not hold it back.
        assert!(reached(&[
            (
                "rank0-pid1.json",
                r#"{"num_allocs": 1800, "optimizer_steps": 3}"#
            ),
            (
                "rank1-pid2.json",
                r#"{"num_allocs": 1800, "optimizer_steps": 4}"#
            ),
            ("check-pid3.json", r#"{"num_allocs": 1}"#),
        ]));
        // The steps, but not yet the allocations.
        assert!(!reached(&[(
            "rank0-pid1.json",
            r#"{"num_allocs": 3500, "optimizer_steps": 9}"#
        )]));
    }

    /// Why a re-run failed is its output's last error line: the two real re-runs that ended so
    /// on an H100 (a cuDNN attention kernel short of workspace; an error lost in a checkpointed
    /// recomputation), a crash, and a log with no error line.
    #[test]
    fn a_failed_rerun_is_said_ended_by_its_last_error_line() {
        let cudnn = "token 512 cache length 1025\nTraceback (most recent call last):\n  File \"kv.py\", line 60, in generate\n    attn = f(q)\nRuntimeError: Expected mha_graph.execute(handle, variant_pack, workspace_ptr.get()).is_good() to be true, but got false.\n\n";
        assert_eq!(
            last_error_line(cudnn).as_deref(),
            Some(
                "RuntimeError: Expected mha_graph.execute(handle, variant_pack, workspace_ptr.get()).is_good() to be true, but got false."
            )
        );
        let lost = "  File \"vocab_loss.py\", line 36, in slice_loss\n    return f(x)\nSystemError: <built-in function cross_entropy_loss> returned NULL without setting an exception\n";
        assert_eq!(
            last_error_line(lost).as_deref(),
            Some(
                "SystemError: <built-in function cross_entropy_loss> returned NULL without setting an exception"
            )
        );
        assert_eq!(
            last_error_line("step 3\nSegmentation fault (core dumped)\n").as_deref(),
            Some("Segmentation fault (core dumped)")
        );
        assert_eq!(
            last_error_line("step 1\nstep 2\n").as_deref(),
            Some("step 2")
        );
        // Under torchrun: the rank's own error, not the launcher's.
        let torchrun = "[rank1]: Traceback (most recent call last):\n[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \ntrain.py FAILED\n";
        assert_eq!(
            last_error_line(torchrun).as_deref(),
            Some("RuntimeError: CUDA error: an illegal memory access was encountered")
        );
        assert_eq!(last_error_line(""), None);
        let long = format!("ValueError: {}", "x".repeat(400));
        assert_eq!(
            last_error_line(&long).map(|l| l.chars().count()),
            Some(ERROR_LINE_CHARS + 1)
        );
    }

    #[test]
    fn speed_is_time_per_iteration_where_both_runs_made_two_steps() {
        // Rank 0: 5 steps over 400 ms (0.1 s each); rank 1: 3 steps over 500 ms (0.25 s each,
        // the slower: the job's pace); rank 2: one step, no interval.
        let dir = run_folder_with(&[
            (
                "rank0-pid1.json",
                r#"{"num_allocs": 1000, "optimizer_steps": 5, "first_optimizer_step_unix_ms": 1000.0, "last_optimizer_step_unix_ms": 1400.0}"#,
            ),
            (
                "rank1-pid2.json",
                r#"{"num_allocs": 1000, "optimizer_steps": 3, "first_optimizer_step_unix_ms": 1000.5, "last_optimizer_step_unix_ms": 1500.5}"#,
            ),
            (
                "rank2-pid3.json",
                r#"{"num_allocs": 1000, "optimizer_steps": 1, "first_optimizer_step_unix_ms": 1000.0, "last_optimizer_step_unix_ms": 1000.0}"#,
            ),
        ]);
        let rerun = hook_records(dir.path());
        let per_iteration = rerun
            .seconds_per_iteration
            .expect("two ranks made two steps");
        assert!((per_iteration - 0.25).abs() < 1e-9, "{per_iteration}");

        // The original made steps at 0.2 s: the re-run is slower, ×0.8, by iteration, even
        // though its allocation rate is far higher.
        let original = OriginalPace {
            seconds_per_iteration: Some(0.2),
            allocations_per_second: Some(10.0),
        };
        let (speed, basis) = relative_speed(&original, &rerun, 10.0).expect("a speed");
        assert_eq!(basis, SpeedBasis::TimePerIteration);
        assert!((speed - 0.8).abs() < 1e-9, "{speed}");

        // An original that failed in its first step has no iteration time: allocations/s.
        let first_step_failure = OriginalPace {
            seconds_per_iteration: None,
            allocations_per_second: Some(100.0),
        };
        let (speed, basis) = relative_speed(&first_step_failure, &rerun, 10.0).expect("a speed");
        assert_eq!(basis, SpeedBasis::AllocationsPerSecond);
        assert!((speed - 3.0).abs() < 1e-9, "{speed}"); // 3000 allocations in 10 s vs 100/s
        assert_eq!(relative_speed(&OriginalPace::default(), &rerun, 10.0), None);
    }

    #[test]
    fn a_cap_that_refused_while_the_device_had_room_gets_raised_cap_candidates() {
        let dir = run_folder_with(&[
            (
                "rank0-pid1.json",
                r#"{"num_allocs": 10, "memory_fraction": 0.3}"#,
            ),
            (
                "rank1-pid2.json",
                r#"{"num_allocs": 10, "memory_fraction": 0.2}"#,
            ),
            // The device had 900 MiB free for a 300 MiB request: the cap refused it.
            (
                "rank1-pid2.oom.json",
                r#"{"num_allocs": 8, "alloc_bytes": 314572800, "device_free": 943718400}"#,
            ),
        ]);
        let records = hook_records(dir.path());
        assert_eq!(records.memory_fraction, Some(0.2));
        assert!(records.cap_refused);
        assert_eq!(records.oom_missing_bytes, None);
        let rows: Vec<(String, Vec<(String, String)>)> = raised_cap_candidates(&records)
            .into_iter()
            .map(|c| (c.change, c.env))
            .collect();
        let env = |v: &str| vec![(MEMORY_FRACTION_VARIABLE.to_owned(), v.to_owned())];
        assert_eq!(
            rows,
            [
                (format!("{MEMORY_FRACTION_VARIABLE}=0.4"), env("0.4")),
                (format!("{MEMORY_FRACTION_VARIABLE}=1"), env("1")),
            ]
        );
        // The card itself was full: no raised cap would help, none is tried.
        let full = HookRecords {
            cap_refused: false,
            ..records
        };
        assert!(raised_cap_candidates(&full).is_empty());
        // No cap set: nothing to raise.
        let uncapped = HookRecords {
            memory_fraction: None,
            ..records
        };
        assert!(raised_cap_candidates(&uncapped).is_empty());
        // A cap above half the card: only "no cap".
        let high = HookRecords {
            memory_fraction: Some(0.6),
            ..records
        };
        assert_eq!(raised_cap_candidates(&high).len(), 1);
    }

    #[test]
    fn hook_records_sum_processes_and_take_the_first_oom() {
        let dir = run_folder_with(&[
            (
                "rank0-pid1.json",
                r#"{"num_allocs": 100, "reserved_bytes_peak": 10, "time_unix_ms": 5}"#,
            ),
            (
                "rank1-pid2.json",
                r#"{"num_allocs": 50, "reserved_bytes_peak": 30, "time_unix_ms": 7}"#,
            ),
            (
                "rank1-pid2.oom.json",
                r#"{"num_allocs": 40, "alloc_bytes": 300, "device_free": 100}"#,
            ),
            (".rank0-pid1.json.tmp", "half a file"),
        ]);
        let records = hook_records(dir.path());
        assert_eq!(
            records,
            HookRecords {
                allocations: 150,
                peak_reserved_bytes: 30,
                oom_at_allocation: Some(40),
                oom_missing_bytes: Some(200),
                last_ms: 7,
                seconds_per_iteration: None,
                memory_fraction: None,
                cap_refused: false,
                optimizer_steps: None,
                stepping_processes: 0,
            }
        );
        assert_eq!(
            hook_records(&dir.path().join("missing")),
            HookRecords::default()
        );
    }
}
