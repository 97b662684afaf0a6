//! `vramscope diagnose`: runs the diagnosis engine headlessly over logs, captures, snapshots and/or
//! a live reading, prints the findings (text, or JSON with `--json`) and optionally writes a
//! report. Exit code 0 when the diagnosis ran (whatever it found), 1 when an input could not be
//! read or the report could not be written, 2 (a usage error, from clap) when no input was given.

use std::path::PathBuf;
use std::process::ExitCode;

use vramscope_core::diagnose::finding::Diagnosis;
use vramscope_core::diagnose::{DiagnosisInput, NamedCapture, diagnose, log};
use vramscope_core::model::Capture;
use vramscope_core::report::{self, Report, ReportFormat, Timeline};
use vramscope_core::source::{self, Source, Tiers};

#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("input")
        .args(["live", "capture", "snapshot", "log", "prometheus"])
        .required(true)
        .multiple(true)
))]
pub struct DiagnoseArgs {
    /// Read the GPUs now (memory, processes, ECC, remapped rows, throttling) through NVML.
    #[arg(long)]
    pub live: bool,
    /// With --live: use the built-in simulated machine (a recorded simulated day) instead of NVML.
    #[arg(long, requires = "live")]
    pub demo: bool,
    /// A capture: .vramcap or an nvidia-smi CSV log (repeatable; an nvidia-smi
    /// --query-compute-apps log is joined to the --query-gpu log of the same run).
    #[arg(long, value_name = "FILE")]
    pub capture: Vec<PathBuf>,
    /// PyTorch allocator snapshots, oldest first (repeatable; several after one flag).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub snapshot: Vec<PathBuf>,
    /// Logs: training output, dmesg, journalctl -k (repeatable; several after one flag).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub log: Vec<PathBuf>,
    /// The CUDA version your framework was built for, e.g. 12.4 (`python -c "import torch; print(torch.version.cuda)"`).
    #[arg(long, value_name = "MAJOR.MINOR", value_parser = parse_cuda_version)]
    pub cuda: Option<(u32, u32)>,
    /// Print the findings as JSON (schema vramscope.report/1, see docs/report-schema.md).
    #[arg(long)]
    pub json: bool,
    /// Also write a report: OUT.html (self-contained page), OUT.md or OUT.json.
    #[arg(long, value_name = "OUT")]
    pub report: Option<PathBuf>,
    /// Diagnose every GPU of a Prometheus server over --since (near full, growth, Xid, remaps).
    #[command(flatten)]
    pub prometheus: super::prometheus::PrometheusArgs,
}

fn parse_cuda_version(text: &str) -> Result<(u32, u32), String> {
    let (major, minor) = text.trim().split_once('.').unwrap_or((text.trim(), "0"));
    match (major.parse(), minor.parse()) {
        (Ok(major), Ok(minor)) => Ok((major, minor)),
        _ => Err(format!("'{text}' is not a CUDA version like 12.4")),
    }
}

/// Milliseconds of the simulated day `--live --demo` records: the whole day, past its OOM (at
/// 7:59) and long enough for the serving GPU's slow leak to be judged with confidence.
const DEMO_DURATION_MS: u64 = source::demo::scenario::SCENARIO_CYCLE_MS as u64;

pub fn run(args: DiagnoseArgs) -> ExitCode {
    if let Some(path) = &args.report
        && ReportFormat::from_path(path).is_none()
    {
        return super::fail(format!(
            "cannot tell the report format of {}: use a name ending in .html, .md or .json",
            path.display()
        ));
    }
    let input = match gather(&args) {
        Ok(input) => input,
        Err(message) => return super::fail(message),
    };
    let diagnosis = diagnose(&input);
    let timeline = input
        .captures
        .iter()
        .find_map(|c| Timeline::from_capture(&c.name, &c.capture));
    let report = Report {
        title: "vramscope diagnosis".to_owned(),
        generated_at_ms: vramscope_core::model::now_unix_ms(),
        diagnosis,
        timeline,
    };
    if args.json {
        println!("{}", report::json::render(&report));
    } else {
        print!("{}", text(&report.diagnosis));
    }
    if let Some(path) = &args.report {
        if let Err(e) = report::write(&report, path) {
            return super::fail(e);
        }
        eprintln!("vramscope: report written to {}", path.display());
    }
    ExitCode::SUCCESS
}

/// Reads every input; the first unreadable one is an error naming the file.
fn gather(args: &DiagnoseArgs) -> Result<DiagnosisInput, String> {
    let mut input = DiagnosisInput {
        framework_cuda: args.cuda,
        ..Default::default()
    };
    for path in &args.log {
        input
            .logs
            .push(log::analyze_file(path).map_err(|e| e.to_string())?);
    }
    let captures =
        vramscope_core::formats::capture::read_files(&args.capture).map_err(|e| e.to_string())?;
    for (name, capture) in captures {
        if let Some(recovery) = &capture.recovery {
            eprintln!(
                "vramscope: warning: {name} is damaged ({}); diagnosing the {} chunks before the damage",
                recovery.problem, recovery.chunks_recovered
            );
        }
        input.captures.push(NamedCapture { name, capture });
    }
    input.snapshots = snapshots::facts(&args.snapshot)?;
    if args.live {
        input.captures.push(live_capture(args.demo)?);
    }
    if let Some(url) = &args.prometheus.prometheus {
        let (_, _, capture) = args.prometheus.pull()?;
        input.captures.push(NamedCapture {
            name: format!("Prometheus {url}"),
            capture,
        });
    }
    Ok(input)
}

/// One reading of every tier from NVML, or a recorded simulated day with `--demo`.
fn live_capture(demo: bool) -> Result<NamedCapture, String> {
    let start_ms = vramscope_core::model::now_unix_ms();
    if demo {
        let capture = source::demo::generate_capture(
            &source::demo::DemoConfig::default(),
            start_ms,
            DEMO_DURATION_MS,
            1000,
        );
        return Ok(NamedCapture {
            name: "demo (simulated)".to_owned(),
            capture,
        });
    }
    let mut live = vramscope_gpu::nvml::NvmlSource::open().map_err(|err| no_gpu_message(&err))?;
    let description = live.describe();
    let mut capture = Capture::new(description.meta, description.devices);
    capture.ingest(&live.poll(
        vramscope_core::model::now_unix_ms(),
        Tiers {
            fast: true,
            slow: true,
        },
    ));
    Ok(NamedCapture {
        name: "live".to_owned(),
        capture,
    })
}

/// Why `--live` found nothing to read: nothing is shown on the command line, so no word of a
/// simulated machine unless the user asks for it.
fn no_gpu_message(err: &dyn std::fmt::Display) -> String {
    format!(
        "--live: no NVIDIA GPU could be opened ({err}); add --demo to diagnose the simulated machine"
    )
}

/// The findings as plain text for a terminal.
fn text(d: &Diagnosis) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if d.simulated {
        out.push_str(
            "SIMULATED: some evidence comes from the built-in demo machine, not a real GPU.\n\n",
        );
    }
    for (i, f) in d.findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}. [{}] {}: {}",
            i + 1,
            f.severity.as_str().to_uppercase(),
            f.category.as_str(),
            f.title
        );
        let _ = writeln!(out, "   {}", f.explanation);
        for e in &f.evidence {
            let _ = writeln!(
                out,
                "   - {}: {}  ({})",
                e.label,
                e.display,
                e.source.describe()
            );
        }
        for (j, r) in f.recommendations.iter().enumerate() {
            let _ = writeln!(
                out,
                "   {}) {} [{}]{}: {}",
                j + 1,
                r.title,
                r.id,
                r.verification_label()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default(),
                r.expected_effect
            );
            if let Some(detail) = r.unverified_detail() {
                let _ = writeln!(out, "      {detail}");
            }
            for line in r.action.lines() {
                let _ = writeln!(out, "        {line}");
            }
        }
        out.push('\n');
    }
    out
}

mod snapshots {
    use std::path::PathBuf;

    use vramscope_core::diagnose::leak::SnapshotFacts;

    /// Reads each PyTorch snapshot and extracts the facts the rules need, per device.
    pub fn facts(paths: &[PathBuf]) -> Result<Vec<SnapshotFacts>, String> {
        let mut facts = Vec::new();
        for path in paths {
            let snapshot = std::sync::Arc::new(
                vramscope_core::formats::pytorch::read_file(path, &|_| true)
                    .map_err(|e| e.to_string())?,
            );
            // The file time orders snapshots whose trace recorded no times.
            let file_modified_ms = std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_millis()).ok());
            let mut of_file = vramscope_core::diagnose::snapshot::facts(&snapshot);
            for fact in &mut of_file {
                fact.identity.file_modified_ms = file_modified_ms;
            }
            facts.extend(of_file);
        }
        Ok(facts)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_gpu_message_shows_nothing_simulated_and_offers_the_demo() {
        let message = super::no_gpu_message(&"libnvidia-ml.so.1: cannot open shared object file");
        assert_eq!(
            message,
            "--live: no NVIDIA GPU could be opened (libnvidia-ml.so.1: cannot open shared object file); add --demo to diagnose the simulated machine"
        );
    }
}
