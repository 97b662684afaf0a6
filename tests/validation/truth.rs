//! The `<case>.truth.json` files of `tests/fixtures/cases2/` (schema `vramscope.case-truth/2`,
//! written by `scripts/cases2/`) and the judgement of a [`Change`] against the re-runs they
//! record: was it tried for real, and did it remove the failure?

use std::collections::BTreeMap;

use serde::Deserialize;

use super::mapping::{Change, Knob};

/// One case's truth file (only the fields the validation reads; see the fixtures' README).
#[derive(Clone, Debug, Deserialize)]
pub struct Truth {
    pub schema: String,
    pub case: String,
    #[serde(default)]
    pub smoke: bool,
    /// `oom`, `no-oom` or `live`.
    pub kind: String,
    pub expected: Expected,
    #[serde(default)]
    pub device: Option<Device>,
    #[serde(default)]
    pub baseline: Option<Baseline>,
    #[serde(default)]
    pub original: Option<Run>,
    #[serde(default)]
    pub artifacts: Artifacts,
    #[serde(default)]
    pub reruns: Vec<Run>,
    #[serde(default)]
    pub jobs: Vec<LiveJob>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Expected {
    pub primary_category: String,
    #[serde(default)]
    pub original_outcome: Option<String>,
    /// Live cases: the primary finding's severity.
    #[serde(default)]
    pub severity: Option<String>,
    /// Live cases: the processes that leak (the Leak wizard and the timeline highlight them).
    #[serde(default)]
    pub leaking_pids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Device {
    pub total_bytes: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Baseline {
    #[serde(default)]
    pub alloc_conf: String,
}

/// What a re-run changed, as the runner recorded it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RunChange {
    AllocConf {
        settings: BTreeMap<String, String>,
    },
    Cap {
        #[serde(default)]
        cap_bytes: Option<u64>,
    },
    Scale {
        knob: String,
        factor: f64,
    },
    OtherProcessGone,
    CodeFix {
        fix: String,
    },
}

/// The original run or one re-run.
#[derive(Clone, Debug, Deserialize)]
pub struct Run {
    pub id: String,
    /// `completed`, `oom`, `not-run`, `timeout`, `crash` or `error`.
    pub outcome: String,
    #[serde(default)]
    pub change: Option<RunChange>,
    #[serde(default)]
    pub peak_reserved_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Artifacts {
    #[serde(default)]
    pub log: Option<String>,
    #[serde(default)]
    pub snapshot: Option<String>,
    #[serde(default)]
    pub extra_snapshots: Vec<SnapshotFile>,
    #[serde(default)]
    pub capture: Option<String>,
    /// nvidia-smi's own CSV logs of the run (`--query-gpu`, `--query-compute-apps`).
    #[serde(default)]
    pub smi_gpu_csv: Option<String>,
    #[serde(default)]
    pub smi_apps_csv: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct SnapshotFile {
    pub file: String,
    #[serde(default)]
    pub t_s: f64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LiveJob {
    pub log: String,
    #[serde(default)]
    pub snapshots: Vec<SnapshotFile>,
}

impl Truth {
    pub fn parse(text: &str) -> Result<Truth, String> {
        let truth: Truth = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if truth.schema != "vramscope.case-truth/2" {
            return Err(format!("unknown schema {:?}", truth.schema));
        }
        Ok(truth)
    }

    /// The allocator settings of the failing run.
    fn baseline_settings(&self) -> BTreeMap<String, String> {
        conf_settings(self.baseline.as_ref().map_or("", |b| b.alloc_conf.as_str()))
    }
}

fn conf_settings(conf: &str) -> BTreeMap<String, String> {
    conf.split(',')
        .filter_map(|kv| kv.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), normalize(v)))
        .collect()
}

/// PyTorch reads booleans case-insensitively (`True`, `true`).
fn normalize(value: &str) -> String {
    let v = value.trim();
    if v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false") {
        v.to_ascii_lowercase()
    } else {
        v.to_owned()
    }
}

/// Whether a change removed the failure for real, and which runs say so.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Runs that completed with this change (or one that proves it by monotonicity).
    Proven(Vec<String>),
    /// Runs that still ran out of memory with this change (or one that implies it).
    Refuted(Vec<String>),
    /// Nothing that was run says either way.
    Untried(String),
}

impl Verdict {
    pub fn describe(&self) -> String {
        match self {
            Verdict::Proven(ids) => format!("removed the failure ({})", ids.join(", ")),
            Verdict::Refuted(ids) => format!("still out of memory ({})", ids.join(", ")),
            Verdict::Untried(why) => format!("not tried: {why}"),
        }
    }
}

fn ran(run: &Run) -> bool {
    run.outcome == "completed" || run.outcome == "oom"
}

/// Judges `change` against the re-runs of `truth`. Rules (the README says why they hold):
/// allocator settings need the exact settings to have run (no monotonicity: a larger
/// `max_split_size_mb` can be worse or better); a cap is proven by a completed run under a cap
/// no larger, or by a completed uncapped run whose peak reserved memory fits under it, and
/// refuted by a failed run under a cap no smaller; a smaller batch (or sequence) is proven by a
/// completed run at a factor no smaller, refuted by a failed run at a factor no larger. Runs
/// that did not run (implied by bisection, time budget) count for nothing.
pub fn judge(change: &Change, truth: &Truth) -> Verdict {
    let runs: Vec<&Run> = truth.reruns.iter().filter(|r| ran(r)).collect();
    let ids = |pred: &dyn Fn(&Run) -> bool| -> Vec<String> {
        runs.iter()
            .filter(|r| pred(r))
            .map(|r| r.id.clone())
            .collect()
    };
    let decide = |proven: Vec<String>, refuted: Vec<String>, untried: String| {
        if !proven.is_empty() {
            Verdict::Proven(proven)
        } else if !refuted.is_empty() {
            Verdict::Refuted(refuted)
        } else {
            Verdict::Untried(untried)
        }
    };
    match change {
        Change::AllocConf(wanted) => {
            let wanted: BTreeMap<String, String> = wanted
                .iter()
                .map(|(k, v)| (k.clone(), normalize(v)))
                .collect();
            let baseline = truth.baseline_settings();
            if wanted.iter().all(|(k, v)| baseline.get(k) == Some(v)) {
                // Already on in the failing run: the original itself refutes it.
                return match &truth.original {
                    Some(o) if o.outcome == "oom" => Verdict::Refuted(vec!["original".into()]),
                    _ => Verdict::Untried("the setting was already on".into()),
                };
            }
            let same = |r: &Run| match &r.change {
                Some(RunChange::AllocConf { settings }) => {
                    let s: BTreeMap<String, String> = settings
                        .iter()
                        .map(|(k, v)| (k.clone(), normalize(v)))
                        .collect();
                    s == wanted
                }
                _ => false,
            };
            decide(
                ids(&|r| same(r) && r.outcome == "completed"),
                ids(&|r| same(r) && r.outcome == "oom"),
                "these exact allocator settings were not re-run".into(),
            )
        }
        Change::Cap(wanted) => {
            // The cap a cap re-run ran under: Some(None) for the uncapped run.
            let cap_of = |r: &Run| match r.change {
                Some(RunChange::Cap { cap_bytes }) => Some(cap_bytes),
                _ => None,
            };
            let uncapped = |r: &Run| cap_of(r) == Some(None);
            match wanted {
                None => decide(
                    ids(&|r| uncapped(r) && r.outcome == "completed"),
                    ids(&|r| uncapped(r) && r.outcome == "oom"),
                    "no run without the cap".into(),
                ),
                Some(cap) => decide(
                    ids(&|r| {
                        r.outcome == "completed"
                            && match cap_of(r) {
                                Some(Some(c)) => c <= *cap,
                                Some(None) => r.peak_reserved_bytes.is_some_and(|p| p <= *cap),
                                None => false,
                            }
                    }),
                    ids(&|r| r.outcome == "oom" && cap_of(r).flatten().is_some_and(|c| c >= *cap)),
                    "no cap run decides this cap".into(),
                ),
            }
        }
        Change::Scale { knob, factor } => {
            let same_knob = |r: &Run| match &r.change {
                Some(RunChange::Scale { knob: k, .. }) => Knob::from_truth(k) == Some(*knob),
                _ => false,
            };
            let factor_of = |r: &Run| match &r.change {
                Some(RunChange::Scale { factor: f, .. }) => *f,
                _ => f64::NAN,
            };
            decide(
                ids(&|r| same_knob(r) && r.outcome == "completed" && factor_of(r) >= *factor),
                ids(&|r| same_knob(r) && r.outcome == "oom" && factor_of(r) <= *factor),
                "no re-run at this factor or one that decides it".into(),
            )
        }
        Change::OtherProcessGone => {
            let gone = |r: &Run| matches!(r.change, Some(RunChange::OtherProcessGone));
            decide(
                ids(&|r| gone(r) && r.outcome == "completed"),
                ids(&|r| gone(r) && r.outcome == "oom"),
                "no run without the other process".into(),
            )
        }
        Change::CodeFix(fix) => {
            let fixed =
                |r: &Run| matches!(&r.change, Some(RunChange::CodeFix { fix: f }) if f == fix);
            decide(
                ids(&|r| fixed(r) && r.outcome == "completed"),
                ids(&|r| fixed(r) && r.outcome == "oom"),
                format!("the code fix {fix} was not re-run"),
            )
        }
    }
}
