//! What a recommendation asks the user to change, in the terms of the corpus's re-runs
//! (`tests/fixtures/cases2/README.md`, "From a recommendation to a re-run").
//!
//! This is the one place to adapt when the diagnosis's recommendations change shape: today a
//! [`Recommendation`] carries an id and the code to apply as text, so the value (which
//! `max_split_size_mb`, which memory fraction, which batch factor) is read from that text. A
//! structured recommendation (kind + value) would replace the parsing below, nothing else.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use vramscope_core::diagnose::Recommendation;

/// Which size a scale change multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    /// Everything proportional to the batch (`--batch-scale` of the jobs).
    Batch,
    /// The sequence length or the number of generated tokens (`--seq-scale`).
    Sequence,
}

impl Knob {
    /// The name the truth files use (`"batch"`, `"seq"`).
    pub fn from_truth(name: &str) -> Option<Knob> {
        match name {
            "batch" => Some(Knob::Batch),
            "seq" => Some(Knob::Sequence),
            _ => None,
        }
    }
}

/// One change to the failing run, as the re-runs made them.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Settings added to `PYTORCH_CUDA_ALLOC_CONF` (key to value, as written).
    AllocConf(BTreeMap<String, String>),
    /// The per-process cap set to this many bytes; `None` removes the cap.
    Cap(Option<u64>),
    /// A size multiplied by `factor` (below 1: smaller).
    Scale { knob: Knob, factor: f64 },
    /// The other process on the GPU stopped (or the job moved to a free GPU).
    OtherProcessGone,
    /// The code change that removes a built-in bug; the string names it like the truth files
    /// (`fix-leak`, `no-grad-inference`, `same-stream`).
    CodeFix(String),
}

impl Change {
    /// A short human description for the validation table.
    pub fn describe(&self) -> String {
        match self {
            Change::AllocConf(settings) => settings
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(","),
            Change::Cap(Some(bytes)) => {
                format!("cap {}", vramscope_core::model::format_bytes(*bytes))
            }
            Change::Cap(None) => "no cap".to_owned(),
            Change::Scale { knob, factor } => format!(
                "{} x{factor}",
                match knob {
                    Knob::Batch => "batch",
                    Knob::Sequence => "sequence",
                }
            ),
            Change::OtherProcessGone => "other process gone".to_owned(),
            Change::CodeFix(fix) => format!("code fix {fix}"),
        }
    }
}

static ALLOC_CONF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"PYTORCH_CUDA_ALLOC_CONF\s*=\s*["']?([A-Za-z0-9_:.,]+)"#)
        .unwrap_or_else(|e| panic!("{e}"))
});
static MEMORY_FRACTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"set_per_process_memory_fraction\(\s*([0-9]*\.?[0-9]+)")
        .unwrap_or_else(|e| panic!("{e}"))
});
static BATCH_DIVIDED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"batch_size\s*//=\s*([0-9]+)").unwrap_or_else(|e| panic!("{e}")));
static BATCH_MULTIPLIED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"batch_size\s*\*=\s*([0-9]*\.?[0-9]+)").unwrap_or_else(|e| panic!("{e}"))
});

/// The change `rec` asks for, or why it maps onto no re-run. `device_total_bytes` turns a
/// memory fraction into bytes (PyTorch's cap is `fraction x total`).
pub fn recommended_change(
    rec: &Recommendation,
    device_total_bytes: Option<u64>,
) -> Result<Change, String> {
    if let Some(conf) = ALLOC_CONF.captures(&rec.action) {
        let settings: BTreeMap<String, String> = conf[1]
            .split(',')
            .filter_map(|kv| kv.split_once(':'))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        if !settings.is_empty() {
            return Ok(Change::AllocConf(settings));
        }
    }
    match rec.id.as_str() {
        "raise-memory-fraction" => match MEMORY_FRACTION.captures(&rec.action) {
            Some(c) => {
                let fraction: f64 = c[1]
                    .parse()
                    .map_err(|e| format!("memory fraction {:?}: {e}", &c[1]))?;
                if fraction >= 1.0 {
                    return Ok(Change::Cap(None));
                }
                let total = device_total_bytes
                    .ok_or("the truth file has no device total to turn a fraction into bytes")?;
                Ok(Change::Cap(Some((fraction * total as f64) as u64)))
            }
            None => Ok(Change::Cap(None)),
        },
        "reduce-batch-size" => {
            let factor = if let Some(c) = BATCH_DIVIDED.captures(&rec.action) {
                let divisor = c[1].parse::<f64>().map_err(|e| format!("{e}"))?;
                1.0 / divisor
            } else if let Some(c) = BATCH_MULTIPLIED.captures(&rec.action) {
                c[1].parse::<f64>().map_err(|e| format!("{e}"))?
            } else {
                return Err(format!(
                    "reduce-batch-size names no factor in its action: {:?}",
                    rec.action
                ));
            };
            Ok(Change::Scale {
                knob: Knob::Batch,
                factor,
            })
        }
        "free-other-process" => Ok(Change::OtherProcessGone),
        "fix-leak" | "no-grad-inference" => Ok(Change::CodeFix(rec.id.clone())),
        other => Err(format!(
            "`{other}` is not one of the knobs the re-runs tried"
        )),
    }
}
