//! `vramscope export CAPTURE… --csv [OUT] --perfetto [OUT] --png [OUT]`: the timeline of a
//! capture (`.vramcap` or nvidia-smi CSV logs) as CSV tables, a Chrome/Perfetto trace or the
//! review image. Output names default to the input's (`day1.vramcap` → `day1.trace.json` beside
//! it); an existing file is replaced only after a yes on the terminal, or with `--force`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ArgGroup;

use vramscope_core::report::TimelineOptions;
use vramscope_core::report::export::{ExportKind, default_file_name, export_files};

#[derive(Debug, clap::Args)]
#[command(group(ArgGroup::new("format").required(true).multiple(true).args(["csv", "perfetto", "png"])))]
pub struct ExportArgs {
    /// The capture: a .vramcap, or nvidia-smi CSV logs (a --query-compute-apps log given with the
    /// --query-gpu log of the same run is joined to it).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// CSV tables: OUT gets one row per GPU sample, OUT's sibling `<stem>.processes.csv` one row
    /// per process reading [default: <input>.timeline.csv].
    #[arg(long, value_name = "OUT", num_args = 0..=1)]
    pub csv: Option<Option<PathBuf>>,
    /// A Chrome/Perfetto trace (open it in ui.perfetto.dev) [default: <input>.trace.json].
    #[arg(long, value_name = "OUT", num_args = 0..=1)]
    pub perfetto: Option<Option<PathBuf>>,
    /// The timeline as an image for a review [default: <input>.timeline.png].
    #[arg(long, value_name = "OUT", num_args = 0..=1)]
    pub png: Option<Option<PathBuf>>,
    /// Pixel density of the PNG: 1 for 100 % zoom, 2 for high-density screens.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub scale: u8,
    /// The threshold line of the PNG, in percent of each GPU's capacity.
    #[arg(long, default_value_t = 90.0, value_name = "PERCENT")]
    pub threshold: f64,
    /// Replace existing files without asking.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: ExportArgs) -> ExitCode {
    if !(1.0..=100.0).contains(&args.threshold) {
        return super::fail(format!(
            "--threshold {} is not a percentage between 1 and 100",
            args.threshold
        ));
    }
    let (name, capture) = match vramscope_core::formats::capture::read_one(&args.files) {
        Ok(one) => one,
        Err(err) => return super::fail(err),
    };
    let beside_input = args.files[0]
        .parent()
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let requested = [
        (args.csv.as_ref(), ExportKind::Csv),
        (args.perfetto.as_ref(), ExportKind::Perfetto),
        (
            args.png.as_ref(),
            ExportKind::Png {
                scale: f32::from(args.scale),
            },
        ),
    ];
    let options = TimelineOptions {
        threshold_fraction: args.threshold / 100.0,
        view_ms: None,
    };
    let mut files = Vec::new();
    for (out, kind) in requested {
        let Some(out) = out else { continue };
        let out = out
            .clone()
            .unwrap_or_else(|| beside_input.join(default_file_name(&name, kind)));
        match export_files(
            &capture,
            &name,
            kind,
            &options,
            &out,
            vramscope_core::model::now_unix_ms(),
        ) {
            Ok(made) => files.extend(made),
            Err(problem) => {
                return super::fail(format!(
                    "{}: cannot export {name}: {problem}",
                    out.display()
                ));
            }
        }
    }
    // Ask about every existing file before writing any.
    for (path, _) in &files {
        if path.exists() && !args.force && !confirm_replace(path) {
            return super::fail(format!(
                "{} exists; nothing was written (pass --force to replace it)",
                path.display()
            ));
        }
    }
    for (path, bytes) in &files {
        if let Err(err) = vramscope_core::formats::write_atomically(path, bytes) {
            return super::fail(format!("{}: cannot write the file: {err}", path.display()));
        }
        println!(
            "wrote {} ({})",
            path.display(),
            vramscope_core::model::format_bytes(bytes.len() as u64)
        );
    }
    ExitCode::SUCCESS
}

/// Asks on the terminal whether to replace `path`; false without a terminal (scripts must say
/// `--force`).
fn confirm_replace(path: &Path) -> bool {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return false;
    }
    eprint!("vramscope: {} exists; replace it? [y/N] ", path.display());
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim(), "y" | "Y" | "yes" | "Yes")
}
