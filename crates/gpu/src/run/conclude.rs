//! A whole `vramscope run`, as the command line and the app's File › Run a command… both do it:
//! the job; then, for a job that failed (and was not stopped by the user), the diagnosis of its
//! run folder, the proof of a fix when asked and the job ran out of memory, and the reports in
//! the folder. What happens is told to [`RunEvents`] as it happens (the terminal prints it, the
//! app's run panel shows it), so that the two front ends share one sequence and cannot drift.

use std::path::Path;
use std::time::Duration;

use vramscope_core::diagnose::finding::Diagnosis;
use vramscope_core::evidence::{self, Evidence, Unwatched};
use vramscope_core::model::run::ProofRun;
use vramscope_core::report::{self, Report};

use super::prove::{self, Candidate, HookRecords};
use super::{Forwarder, RunError, RunOptions, RunOutcome, write_manifest};

/// What `--prove` asks for (the app's "prove a fix" checkbox and its fields).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProveOptions {
    /// Re-run a job that ran out of memory under the candidate fixes.
    pub enabled: bool,
    /// Try every candidate instead of stopping at the first that works.
    pub try_all: bool,
    /// Environment variables' values to try (`--vary NAME=V1,V2`).
    pub vary: Vec<(String, Vec<String>)>,
    /// Command-line values to try (`--vary-arg FLAG=V1,V2`).
    pub vary_arg: Vec<(String, Vec<String>)>,
    /// The longest a re-run may take; twice the failed run's time when `None`.
    pub budget: Option<Duration>,
}

/// Hears what a run does, in order, from the thread that runs it.
pub trait RunEvents {
    /// The job ended (before any diagnosis or proof): its folder and exit are known.
    fn job_ended(&mut self, outcome: &RunOutcome);
    /// A sentence for the user: the run folder, what was not recorded, why there is no proof.
    fn note(&mut self, text: &str);
    /// The re-runs of the proof are about to start, one per candidate, in this order.
    fn proving(&mut self, candidates: &[Candidate]);
    /// One re-run ended.
    fn proof_result(&mut self, run: &ProofRun);
    /// The diagnosis of the failed run, with the proof's finding first when there is one.
    fn diagnosed(&mut self, diagnosis: &Diagnosis);
}

/// Runs `options.command` to its end ([`super::run`]); when it failed and `forwarder` was not
/// interrupted, diagnoses its folder, proves a fix as `prove` asks, and writes `report.html`,
/// `report.json` and the updated manifest. The outcome's manifest holds the proof.
pub fn run_and_conclude(
    options: &RunOptions,
    prove: &ProveOptions,
    forwarder: &Forwarder,
    events: &mut dyn RunEvents,
) -> Result<RunOutcome, RunError> {
    let mut outcome = super::run(options, forwarder)?;
    events.job_ended(&outcome);
    events.note(&format!("run folder: {}", outcome.folder.display()));
    if let Some(why) = &outcome.manifest_error {
        events.note(&format!("warning: {why}"));
    }
    for why in &outcome.manifest.not_recorded {
        events.note(&format!("not recorded: {why}"));
    }
    if !outcome.manifest.exit.succeeded() && !forwarder.interrupted() {
        conclude_failure(options, prove, &mut outcome, forwarder, events);
    }
    Ok(outcome)
}

/// The evidence of a run folder, read through the evidence pipeline (its files and its
/// manifest's proof); what could not be read is told to `events`.
fn run_evidence(folder: &Path, events: &mut dyn RunEvents) -> Evidence {
    let mut evidence = Evidence::default();
    let run = evidence::run_folder_contents(folder);
    if let Some(why) = &run.problem {
        events.note(&format!("warning: {why}"));
    }
    evidence.add_run(&run);
    for (path, kind) in run.files {
        let name = path
            .strip_prefix(folder)
            .unwrap_or(&path)
            .display()
            .to_string();
        let opened = match kind {
            Some(kind) => evidence::open_path_as(&path, &name, kind, &Unwatched),
            None => evidence::open_path(&path, &name, &Unwatched),
        };
        match opened {
            Ok(opened) => evidence.add(&opened),
            Err(e) => events.note(&format!("warning: {e}")),
        }
    }
    evidence
}

/// A failed job: diagnose it, prove a fix when asked, write the reports.
fn conclude_failure(
    options: &RunOptions,
    prove: &ProveOptions,
    outcome: &mut RunOutcome,
    forwarder: &Forwarder,
    events: &mut dyn RunEvents,
) {
    let mut evidence = run_evidence(&outcome.folder, events);
    if evidence.is_empty() && evidence.input.proof.is_empty() {
        // Nothing to judge is no reason to call a failed job healthy.
        events.note(
            "nothing the run recorded could be read back (see what was not recorded), so it is \
             not diagnosed",
        );
        return;
    }
    let mut report = evidence.report("vramscope run", vramscope_core::model::now_unix_ms());
    let original_records = prove::hook_records(&outcome.folder);
    let ran_out = original_records.oom_at_allocation.is_some()
        || report
            .diagnosis
            .findings
            .iter()
            .any(|f| f.category.is_out_of_memory_cause());
    if prove.enabled && ran_out {
        let candidates = prove::candidates(
            &evidence,
            &report.diagnosis,
            &original_records,
            &options.command,
            &prove.vary,
            &prove.vary_arg,
        );
        for flag in prove::appended_flags(&options.command, &prove.vary_arg) {
            events.note(&format!(
                "--vary-arg {flag}: the command does not pass {flag}, so `{flag} VALUE` is \
                 appended at its end"
            ));
        }
        let proof = prove_fix(
            options,
            prove,
            outcome,
            &original_records,
            forwarder,
            &candidates,
            events,
        );
        // Diagnosed again with the proof, as the folder diagnoses whenever it is opened.
        evidence.add_proof(&proof);
        report = evidence.report("vramscope run", vramscope_core::model::now_unix_ms());
        outcome.manifest.proof = proof;
    } else if prove.enabled {
        events.note("the job did not run out of memory, so there is no fix to prove");
    }
    events.diagnosed(&report.diagnosis);
    write_reports(&report, outcome, events);
}

/// Re-runs the job under `candidates`, telling `events` of each re-run as it ends.
fn prove_fix(
    options: &RunOptions,
    prove: &ProveOptions,
    outcome: &RunOutcome,
    original_records: &HookRecords,
    forwarder: &Forwarder,
    candidates: &[Candidate],
    events: &mut dyn RunEvents,
) -> Vec<ProofRun> {
    if candidates.is_empty() {
        events.note(
            "no candidate fix to try (no allocator setting the replay did not refute; declare \
             changes to try with --vary NAME=V1,V2 or --vary-arg FLAG=V1,V2)",
        );
        return Vec::new();
    }
    events.proving(candidates);
    let base = RunOptions {
        budget: prove.budget,
        ..options.clone()
    };
    prove::prove(
        outcome,
        original_records,
        candidates,
        &base,
        forwarder,
        prove.try_all,
        &mut |run| events.proof_result(run),
    )
}

/// `report.html` and `report.json` in the run folder, and the manifest updated with them.
fn write_reports(report: &Report, outcome: &mut RunOutcome, events: &mut dyn RunEvents) {
    for name in ["report.html", "report.json"] {
        let path = outcome.folder.join(name);
        match report::write(report, &path) {
            Ok(()) => outcome.manifest.files.push(name.to_owned()),
            Err(e) => outcome
                .manifest
                .not_recorded
                .push(format!("{name} could not be written ({e})")),
        }
    }
    outcome.manifest.files.sort();
    outcome.manifest.files.dedup();
    outcome.manifest_error = write_manifest(&outcome.folder, &outcome.manifest).err();
    if let Some(why) = &outcome.manifest_error {
        events.note(&format!("warning: {why}"));
    }
    events.note(&format!(
        "report: {}",
        outcome.folder.join("report.html").display()
    ));
}
