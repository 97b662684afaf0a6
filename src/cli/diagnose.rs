//! `vramscope diagnose`: runs the diagnosis engine headlessly over logs, captures, snapshots and/or
//! a live reading, prints the findings (text, or JSON with `--json`) and optionally writes a
//! report. Exit code 0 when the diagnosis ran (whatever it found), 1 when an input could not be
//! read or the report could not be written, 2 (a usage error, from clap) when no input was given.

use std::path::PathBuf;
use std::process::ExitCode;

use vramscope_core::diagnose::NamedCapture;
use vramscope_core::diagnose::finding::Diagnosis;
use vramscope_core::evidence::{Evidence, Opened, Unwatched};
use vramscope_core::formats::sniff::Route;
use vramscope_core::model::Capture;
use vramscope_core::report::{self, ReportFormat};
use vramscope_core::source::{self, Source, Tiers};

#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("input")
        .args(["files", "live", "capture", "snapshot", "log", "prometheus"])
        .required(true)
        .multiple(true)
))]
pub struct DiagnoseArgs {
    /// Evidence files of any kind, told apart by their content: captures (.vramcap, nvidia-smi
    /// CSV), PyTorch snapshots, logs; or a run folder of `vramscope run`.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
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
    let evidence = match gather(&args) {
        Ok(evidence) => evidence,
        Err(message) => return super::fail(message),
    };
    let report = evidence.report("vramscope diagnosis", vramscope_core::model::now_unix_ms());
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

/// Reads every input through the evidence pipeline (each file sniffed by its content, named by
/// its path as given); the first unreadable one is an error naming the file.
fn gather(args: &DiagnoseArgs) -> Result<Evidence, String> {
    let mut evidence = Evidence::new(args.cuda);
    let given = |paths: &[PathBuf], kind: Option<Route>| {
        paths
            .iter()
            .map(move |path| (path.clone(), kind))
            .collect::<Vec<_>>()
    };
    // Positional files are told apart by content; a flag says what its files are.
    // A run folder (`vramscope run`) stands for its log, timeline and snapshots, and what its
    // `--prove` re-runs proved.
    let mut positional: Vec<(PathBuf, Option<Route>)> = Vec::new();
    for path in &args.files {
        match vramscope_core::evidence::run_folder(path) {
            Some(run) => {
                if let Some(why) = &run.problem {
                    eprintln!("vramscope: warning: {why}; its proof is left out");
                }
                evidence.add_run(&run);
                positional.extend(run.files);
            }
            None => positional.push((path.clone(), None)),
        }
    }
    let files: Vec<(PathBuf, Option<Route>)> = [
        positional,
        given(&args.log, Some(Route::Log)),
        given(&args.capture, Some(Route::Capture)),
        given(&args.snapshot, Some(Route::Snapshot)),
    ]
    .concat();
    let opened =
        vramscope_core::evidence::open_paths(&files, &Unwatched).map_err(|e| e.to_string())?;
    for file in &opened {
        if let Opened::Capture(named) = file
            && let Some(recovery) = &named.capture.recovery
        {
            eprintln!(
                "vramscope: warning: {} is damaged ({}); diagnosing the {} chunks before the damage",
                named.name, recovery.problem, recovery.chunks_recovered
            );
        }
        evidence.add(file);
    }
    if args.live {
        evidence.add_capture(live_capture(args.demo)?);
    }
    if let Some(url) = &args.prometheus.prometheus {
        let (_, _, capture) = args.prometheus.pull()?;
        evidence.add_capture(NamedCapture {
            name: format!("Prometheus {url}"),
            capture,
        });
    }
    Ok(evidence)
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
