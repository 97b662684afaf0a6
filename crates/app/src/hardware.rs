//! "Hardware checks" panel: runs the CUDA checks (facts, CUDA vs NVML, largest block, memory
//! test) as a job on the UI's [`Runner`] and shows progress, a cancel button and the results.

use crate::runner::{Job, Poll, Progress, Runner, job_progress_ui};
use vramscope_gpu::cuda::{
    CheckOptions, CheckProgress, CheckReport, Comparison, CudaError, MemtestConfig, MemtestReport,
    driver_library_present, format_mib, run_checks,
};

const GIB: f64 = (1u64 << 30) as f64;

/// The panel's state. Create it once and call [`HardwarePanel::ui`] every frame.
pub struct HardwarePanel {
    driver_present: bool,
    device: usize,
    run_memtest: bool,
    memtest_percent: u32,
    runner: CheckRunner,
}

/// One run of [`run_checks`] as a job, with its progress, a cancel flag and the outcome.
/// Shared by this panel and the "Hardware and driver" wizard, so both run the checks the same way.
pub struct CheckRunner {
    state: RunState,
}

enum RunState {
    Idle,
    Running(Job<Result<CheckReport, CudaError>>),
    Finished(Box<Result<CheckReport, CudaError>>),
}

impl Default for CheckRunner {
    fn default() -> Self {
        Self::new()
    }
}

impl CheckRunner {
    /// Nothing run yet.
    pub fn new() -> Self {
        Self {
            state: RunState::Idle,
        }
    }

    /// True while the checks run.
    pub fn is_running(&self) -> bool {
        matches!(self.state, RunState::Running(_))
    }

    /// The last run's outcome, once it has finished (call [`CheckRunner::poll`] first).
    pub fn outcome(&self) -> Option<&Result<CheckReport, CudaError>> {
        match &self.state {
            RunState::Finished(outcome) => Some(outcome.as_ref()),
            _ => None,
        }
    }

    /// Starts the checks; their progress and result wake `ctx`.
    pub fn start(&mut self, options: CheckOptions, ctx: egui::Context) {
        let job = Runner::new(ctx).spawn("GPU checks", move |progress| {
            run_checks(&options, progress.cancel_flag(), &mut |step| {
                report_check_progress(progress, step);
            })
        });
        self.state = RunState::Running(job);
    }

    /// Takes the result in; returns true when the run finished in this call.
    pub fn poll(&mut self) -> bool {
        let RunState::Running(job) = &mut self.state else {
            return false;
        };
        let outcome = match job.poll() {
            Poll::Running => return false,
            Poll::Done(outcome) => outcome,
            Poll::Lost(message) => Err(CudaError::Panicked {
                call: "hardware check thread".into(),
                message,
            }),
        };
        self.state = RunState::Finished(Box::new(outcome));
        true
    }

    /// While running: the stage or memory-test progress and a Cancel button.
    pub fn progress_ui(&self, ui: &mut egui::Ui) {
        if let RunState::Running(job) = &self.state {
            job_progress_ui(ui, "GPU checks", job.progress());
        }
    }

    /// The finished run: the report, "Cancelled." or the error.
    pub fn outcome_ui(&self, ui: &mut egui::Ui) {
        match self.outcome() {
            Some(Ok(report)) => report_ui(ui, report),
            Some(Err(CudaError::Cancelled)) => {
                ui.label("Cancelled.");
            }
            Some(Err(error)) => {
                ui.colored_label(ui.visuals().error_fg_color, error.to_string());
            }
            None => {}
        }
    }
}

/// A step of the checks as the job's progress: the stage's name, or the memory test's position
/// and error count with how far the whole test got.
fn report_check_progress(progress: &Progress, step: CheckProgress) {
    match step {
        CheckProgress::Stage(stage) => progress.set_stage(stage),
        CheckProgress::Memtest(memtest) => {
            progress.set_stage(format!(
                "Testing memory: {} ({} of {}), {} error(s) so far",
                memtest.test.label(),
                memtest.test_index + 1,
                memtest.test_count,
                memtest.errors_so_far
            ));
            progress.set_fraction(memtest.fraction_done as f32);
        }
    }
}

impl Default for HardwarePanel {
    fn default() -> Self {
        Self::new()
    }
}

impl HardwarePanel {
    /// A panel that has not run anything yet. Looks for the driver library (a `dlopen`, no
    /// CUDA call) so that a machine without one is told so before anything is clicked.
    pub fn new() -> Self {
        Self {
            driver_present: driver_library_present(),
            device: 0,
            run_memtest: false,
            memtest_percent: 50,
            runner: CheckRunner::new(),
        }
    }

    /// True while a check runs.
    pub fn is_running(&self) -> bool {
        self.runner.is_running()
    }

    /// Draws the panel and collects the checks' result when they finish.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        self.runner.poll();
        ui.heading("Hardware checks");
        if !self.driver_present {
            ui.colored_label(
                ui.visuals().warn_fg_color,
                "No NVIDIA driver found on this machine: the CUDA driver library (libcuda.so.1) \
                 cannot be loaded, so there is no GPU to check. Captures and snapshots can still \
                 be viewed.",
            );
            if ui.button("Look for the driver again").clicked() {
                self.driver_present = driver_library_present();
            }
        }
        self.options_ui(ui);
        ui.separator();
        if self.runner.is_running() {
            self.runner.progress_ui(ui);
        } else if self.runner.outcome().is_some() {
            egui::ScrollArea::vertical()
                .auto_shrink([false, true])
                .show(ui, |ui| self.runner.outcome_ui(ui));
        } else {
            ui.label("Reads driver and device facts, compares them with NVML, finds the largest block the driver will allocate and, if chosen, tests GPU memory.");
        }
    }

    fn options_ui(&mut self, ui: &mut egui::Ui) {
        let running = self.is_running();
        ui.add_enabled_ui(!running, |ui| {
            ui.horizontal(|ui| {
                ui.label("Device");
                ui.add(egui::DragValue::new(&mut self.device).range(0..=63))
                    .on_hover_text("CUDA ordinal of the device to probe and test");
                ui.checkbox(&mut self.run_memtest, "Test memory");
                ui.add_enabled(
                    self.run_memtest,
                    egui::Slider::new(&mut self.memtest_percent, 1..=100).text("% of free memory"),
                );
            });
            if ui.button("Run checks").clicked() {
                let options = CheckOptions {
                    device: self.device,
                    memtest: self.run_memtest.then(|| MemtestConfig {
                        share_of_free_percent: self.memtest_percent,
                        ..MemtestConfig::default()
                    }),
                    ..CheckOptions::default()
                };
                self.runner.start(options, ui.ctx().clone());
            }
        });
    }
}

fn report_ui(ui: &mut egui::Ui, report: &CheckReport) {
    if report.all_good() {
        ui.label(egui::RichText::new("No problem found.").strong());
    } else {
        ui.colored_label(ui.visuals().error_fg_color, "Problems found: see below.");
    }
    ui.label(format!(
        "CUDA driver supports CUDA {}; NVML driver {}",
        report.cuda_driver_version,
        report
            .nvml
            .driver_version
            .as_deref()
            .or(report.nvml.error.as_deref())
            .unwrap_or("unknown")
    ));
    comparisons_ui(ui, "driver", &report.driver_comparisons);
    for device in &report.devices {
        let cuda = &device.cuda;
        egui::CollapsingHeader::new(format!("Device {}: {}", cuda.ordinal, cuda.name))
            .default_open(true)
            .show(ui, |ui| {
                egui::Grid::new(("device facts", cuda.ordinal))
                    .num_columns(2)
                    .show(ui, |ui| {
                        let mut row = |name: &str, value: String| {
                            ui.label(name);
                            ui.label(value);
                            ui.end_row();
                        };
                        row("UUID", cuda.uuid.clone());
                        row("PCI", cuda.pci_bus_id.clone());
                        row(
                            "Compute capability",
                            format!(
                                "{}.{}",
                                cuda.compute_capability_major, cuda.compute_capability_minor
                            ),
                        );
                        row(
                            "ECC",
                            if cuda.ecc_enabled {
                                "enabled"
                            } else {
                                "disabled"
                            }
                            .into(),
                        );
                        row("Total memory (CUDA)", format_mib(cuda.total_bytes));
                        row("Free memory (CUDA)", format_mib(cuda.free_bytes));
                        row("Memory bus", format!("{} bits", cuda.memory_bus_width_bits));
                        row("Multiprocessors", cuda.multiprocessor_count.to_string());
                    });
                if let Some(error) = &device.nvml_error {
                    ui.label(format!("NVML: {error}"));
                }
                comparisons_ui(ui, &format!("device {}", cuda.ordinal), &device.comparisons);
            });
    }
    let block = &report.largest_block;
    ui.separator();
    ui.label(
        egui::RichText::new(format!(
            "Largest allocatable block: {:.3} GiB of {:.3} GiB free ({:.2} %)",
            block.largest_bytes as f64 / GIB,
            block.free_bytes as f64 / GIB,
            block.ratio_of_free * 100.0
        ))
        .strong(),
    );
    ui.label(&block.explanation);
    if let Some(memtest) = &report.memtest {
        ui.separator();
        memtest_ui(ui, memtest);
    }
}

fn comparisons_ui(ui: &mut egui::Ui, id: &str, comparisons: &[Comparison]) {
    if comparisons.is_empty() {
        return;
    }
    egui::Grid::new(("comparisons", id))
        .num_columns(4)
        .striped(true)
        .show(ui, |ui| {
            ui.strong("");
            ui.strong("CUDA");
            ui.strong("NVML");
            ui.strong("");
            ui.end_row();
            for comparison in comparisons {
                ui.label(&comparison.field);
                ui.label(&comparison.cuda);
                ui.label(&comparison.nvml);
                if comparison.agrees {
                    ui.label("agree");
                } else {
                    ui.colored_label(ui.visuals().error_fg_color, "DISAGREE")
                        .on_hover_text(&comparison.note);
                }
                ui.end_row();
            }
        });
}

fn memtest_ui(ui: &mut egui::Ui, memtest: &MemtestReport) {
    ui.label(
        egui::RichText::new(format!(
            "Memory test: {:.2} GiB in {} chunk(s), {} mismatch(es){}",
            memtest.tested_bytes as f64 / GIB,
            memtest.chunk_count,
            memtest.total_errors,
            if memtest.cancelled { ", cancelled" } else { "" }
        ))
        .strong(),
    );
    egui::Grid::new("memtest results")
        .num_columns(4)
        .striped(true)
        .show(ui, |ui| {
            for test in &memtest.tests {
                ui.label(&test.label);
                ui.label(format!("{} error(s)", test.error_count));
                ui.label(format!("{}/{} passes", test.phases_done, test.phases_total));
                ui.label(format!("{:.0} GB/s", test.throughput_gb_per_s));
                ui.end_row();
            }
        });
    let (listed, not_listed) = vramscope_core::diagnose::gpu_checks::listed_mismatches(memtest);
    for mismatch in listed {
        ui.monospace(format!("{}: {}", mismatch.place, mismatch.reading));
    }
    if not_listed > 0 {
        ui.label(format!("… and {not_listed} more mismatch(es)"));
    }
    for change in &memtest.health_changes {
        ui.colored_label(
            ui.visuals().error_fg_color,
            format!("NVML counter changed: {change}"),
        );
    }
    if let Some(error) = &memtest.stopped_by {
        ui.colored_label(ui.visuals().error_fg_color, format!("Stopped by: {error}"));
    }
    if let Some(copy) = memtest.copy_bandwidth_gb_per_s {
        ui.label(format!(
            "Test throughput {:.0} GB/s; device-to-device copy {:.0} GB/s",
            memtest.throughput_gb_per_s, copy
        ));
    }
}
