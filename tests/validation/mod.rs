//! Validation of diagnoses against real cases whose fixes were tried for real (issue 10,
//! "Proven on real cases"): load a case's evidence the way a user hands it to `vramscope
//! diagnose` (its log, its snapshots oldest first, its capture), diagnose it, map the first
//! recommendation onto the re-runs ([`mapping`]) and judge it ([`truth::judge`]). The table of
//! every case is `docs/diagnosis-validation.md`.

pub mod mapping;
pub mod truth;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vramscope_core::diagnose::leak::SnapshotFacts;
use vramscope_core::diagnose::log::analyze_file;
use vramscope_core::diagnose::{DiagnosisInput, NamedCapture, diagnose};

use mapping::recommended_change;
use truth::{Truth, Verdict};

/// Reads every `*.truth.json` in `dir`, sorted by case name.
pub fn load_truths(dir: &Path) -> Result<Vec<Truth>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".truth.json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            Truth::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
        })
        .collect()
}

fn snapshot_facts(path: &Path) -> Result<Vec<SnapshotFacts>, String> {
    let snapshot = vramscope_core::formats::pytorch::read_file(path, &|_| true)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(vramscope_core::diagnose::snapshot::facts(&Arc::new(
        snapshot,
    )))
}

/// Which recording of a live case stands for the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recording {
    /// `vramscope record`'s `.vramcap` (and every OOM case, which has none).
    Vramscope,
    /// nvidia-smi's own CSV logs of the same run, GPU and process logs joined as `vramscope
    /// diagnose --capture GPU.csv --capture APPS.csv` joins them.
    NvidiaSmi,
}

/// The evidence of a case as a user would give it: logs, snapshots oldest first, captures.
pub fn evidence(dir: &Path, truth: &Truth) -> Result<DiagnosisInput, String> {
    evidence_with(dir, truth, Recording::Vramscope)
}

/// [`evidence`] with the capture taken from `recording`.
pub fn evidence_with(
    dir: &Path,
    truth: &Truth,
    recording: Recording,
) -> Result<DiagnosisInput, String> {
    let mut input = DiagnosisInput::default();
    let mut logs: Vec<&str> = truth.artifacts.log.iter().map(String::as_str).collect();
    logs.extend(truth.jobs.iter().map(|j| j.log.as_str()));
    for log in logs {
        let path = dir.join(log);
        input
            .logs
            .push(analyze_file(&path).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    let mut snapshots: Vec<(f64, &str)> = truth
        .artifacts
        .extra_snapshots
        .iter()
        .chain(truth.jobs.iter().flat_map(|j| j.snapshots.iter()))
        .map(|s| (s.t_s, s.file.as_str()))
        .collect();
    snapshots.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut files: Vec<&str> = snapshots.into_iter().map(|(_, f)| f).collect();
    if let Some(main) = &truth.artifacts.snapshot {
        files.retain(|f| *f != main.as_str());
        files.push(main);
    }
    for file in files {
        input.snapshots.extend(snapshot_facts(&dir.join(file))?);
    }
    match recording {
        Recording::Vramscope => {
            if let Some(capture) = &truth.artifacts.capture {
                let path = dir.join(capture);
                let read = vramscope_core::formats::vramcap::read_file(&path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                input.captures.push(NamedCapture {
                    name: capture.clone(),
                    capture: read,
                });
            }
        }
        Recording::NvidiaSmi => {
            let paths: Vec<PathBuf> = [&truth.artifacts.smi_gpu_csv, &truth.artifacts.smi_apps_csv]
                .into_iter()
                .flatten()
                .map(|f| dir.join(f))
                .collect();
            let captures = vramscope_core::formats::capture::read_files(&paths)
                .map_err(|e| format!("{}: {e}", truth.case))?;
            for (name, capture) in captures {
                input.captures.push(NamedCapture { name, capture });
            }
        }
    }
    Ok(input)
}

/// One case judged.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub case: String,
    pub kind: String,
    pub expected: String,
    pub diagnosed: String,
    /// The first recommendation's id, or `-`.
    pub first_recommendation: String,
    /// What it changes, or why it maps onto no re-run.
    pub change: Result<String, String>,
    /// For OOM cases: the verdict on the first recommendation.
    pub verdict: Option<Verdict>,
    /// Live cases: the primary finding's severity and the processes found leaking, with what
    /// the truth file expects (`None` where it expects nothing).
    pub severity: String,
    pub expected_severity: Option<String>,
    pub leaking_pids: Vec<u32>,
    pub expected_leaking_pids: Option<Vec<u32>>,
}

impl CaseResult {
    /// The primary category is right (and, for live cases, the severity and the leaking
    /// processes).
    pub fn category_right(&self) -> bool {
        self.expected == self.diagnosed
            && self
                .expected_severity
                .as_ref()
                .is_none_or(|s| *s == self.severity)
            && self
                .expected_leaking_pids
                .as_ref()
                .is_none_or(|p| *p == self.leaking_pids)
    }

    /// An OOM case whose first recommendation removed the failure for real.
    pub fn first_recommendation_works(&self) -> bool {
        matches!(self.verdict, Some(Verdict::Proven(_)))
    }
}

/// Diagnoses one case and judges its first recommendation.
pub fn evaluate(dir: &Path, truth: &Truth) -> Result<CaseResult, String> {
    evaluate_with(dir, truth, Recording::Vramscope)
}

/// [`evaluate`] with the capture taken from `recording`; the case is named after it.
pub fn evaluate_with(
    dir: &Path,
    truth: &Truth,
    recording: Recording,
) -> Result<CaseResult, String> {
    let input = evidence_with(dir, truth, recording)?;
    let diagnosis = diagnose(&input);
    let mut leaking_pids: Vec<u32> = input
        .captures
        .iter()
        .flat_map(|c| vramscope_core::diagnose::leak::leaking_processes(&c.capture))
        .map(|(_, pid)| pid)
        .collect();
    leaking_pids.sort_unstable();
    leaking_pids.dedup();
    let primary = diagnosis.primary();
    let first = primary.and_then(|f| f.recommendations.first());
    let change = match first {
        Some(rec) => recommended_change(rec, truth.device.as_ref().map(|d| d.total_bytes)),
        None => Err("no recommendation".to_owned()),
    };
    let verdict = (truth.kind == "oom").then(|| match &change {
        Ok(c) => truth::judge(c, truth),
        Err(why) => Verdict::Untried(why.clone()),
    });
    let live = truth.kind == "live";
    Ok(CaseResult {
        case: match recording {
            Recording::Vramscope => truth.case.clone(),
            Recording::NvidiaSmi => format!("{} (nvidia-smi CSV)", truth.case),
        },
        severity: primary.map_or("-", |f| f.severity.as_str()).to_owned(),
        expected_severity: truth.expected.severity.clone().filter(|_| live),
        leaking_pids,
        expected_leaking_pids: truth.expected.leaking_pids.clone().filter(|_| live),
        kind: truth.kind.clone(),
        expected: truth.expected.primary_category.clone(),
        diagnosed: primary.map_or("none", |f| f.category.as_str()).to_owned(),
        first_recommendation: first.map_or("-".to_owned(), |r| r.id.clone()),
        change: change.map(|c| c.describe()),
        verdict,
    })
}

/// The validation table (Markdown) with its totals.
pub fn render_table(results: &[CaseResult]) -> String {
    let mut out = String::from(
        "| case | kind | expected | diagnosed | first recommendation | what it changes | tried for real |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in results {
        let mark = if r.category_right() { "" } else { " ✗" };
        let change = match &r.change {
            Ok(c) => c.clone(),
            Err(why) => format!("({why})"),
        };
        let verdict = r.verdict.as_ref().map_or("-".to_owned(), Verdict::describe);
        let (expected, diagnosed) = match &r.expected_severity {
            Some(severity) => (
                format!(
                    "{} ({severity}; leaking: {})",
                    r.expected,
                    pids(r.expected_leaking_pids.as_deref().unwrap_or_default())
                ),
                format!(
                    "{} ({}; leaking: {})",
                    r.diagnosed,
                    r.severity,
                    pids(&r.leaking_pids)
                ),
            ),
            None => (r.expected.clone(), r.diagnosed.clone()),
        };
        out.push_str(&format!(
            "| {} | {} | {expected} | {diagnosed}{mark} | {} | {} | {} |\n",
            r.case, r.kind, r.first_recommendation, change, verdict
        ));
    }
    let right = results.iter().filter(|r| r.category_right()).count();
    let ooms: Vec<&CaseResult> = results.iter().filter(|r| r.verdict.is_some()).collect();
    let works = ooms
        .iter()
        .filter(|r| r.first_recommendation_works())
        .count();
    out.push_str(&format!(
        "\nPrimary category right: {right} of {} cases. First recommendation removed the failure \
         when re-run: {works} of {} OOM cases.\n",
        results.len(),
        ooms.len()
    ));
    out
}

fn pids(pids: &[u32]) -> String {
    if pids.is_empty() {
        "none".to_owned()
    } else {
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}
