//! "Hardware checks" panel: runs the CUDA checks (facts, CUDA vs NVML, largest block, memory
//! test) on a background thread and shows progress, a cancel button and the results.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Instant;

use crate::cuda::{
    CheckOptions, CheckProgress, CheckReport, Comparison, CudaError, MemtestConfig,
    MemtestProgress, MemtestReport, driver_library_present, format_mib, run_checks,
};

const GIB: f64 = (1u64 << 30) as f64;

/// The panel's state. Create it once and call [`HardwarePanel::ui`] every frame.
pub struct HardwarePanel {
    driver_present: bool,
    device: usize,
    run_memtest: bool,
    memtest_percent: u32,
    state: PanelState,
}

enum PanelState {
    Idle,
    Running(RunningCheck),
    Finished(Box<Result<CheckReport, CudaError>>),
}

/// A check in flight on its worker thread.
struct RunningCheck {
    cancel: Arc<AtomicBool>,
    messages: Receiver<WorkerMessage>,
    stage: String,
    memtest: Option<MemtestProgress>,
    started: Instant,
}

enum WorkerMessage {
    Progress(CheckProgress),
    Done(Box<Result<CheckReport, CudaError>>),
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
            state: PanelState::Idle,
        }
    }

    /// True while a check runs on the background thread.
    pub fn is_running(&self) -> bool {
        matches!(self.state, PanelState::Running(_))
    }

    /// Draws the panel and collects what the worker thread sent since the last frame.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        self.receive();
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
        match &self.state {
            PanelState::Idle => {
                ui.label("Reads driver and device facts, compares them with NVML, finds the largest block the driver will allocate and, if chosen, tests GPU memory.");
            }
            PanelState::Running(running) => {
                Self::progress_ui(ui, running);
                if ui.button("Cancel").clicked() {
                    running.cancel.store(true, Ordering::Relaxed);
                }
            }
            PanelState::Finished(outcome) => match outcome.as_ref() {
                Ok(report) => {
                    egui::ScrollArea::vertical()
                        .auto_shrink([false, true])
                        .show(ui, |ui| report_ui(ui, report));
                }
                Err(CudaError::Cancelled) => {
                    ui.label("Cancelled.");
                }
                Err(error) => {
                    ui.colored_label(ui.visuals().error_fg_color, error.to_string());
                }
            },
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
                self.start(ui.ctx().clone());
            }
        });
    }

    fn progress_ui(ui: &mut egui::Ui, running: &RunningCheck) {
        let elapsed = running.started.elapsed().as_secs_f32();
        match &running.memtest {
            Some(progress) => {
                ui.label(format!(
                    "Testing memory: {} ({} of {}), {} error(s) so far",
                    progress.test.label(),
                    progress.test_index + 1,
                    progress.test_count,
                    progress.errors_so_far
                ));
                ui.add(
                    egui::ProgressBar::new(progress.fraction_done as f32)
                        .show_percentage()
                        .text(format!("{elapsed:.0} s")),
                );
            }
            None => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(format!("{} ({elapsed:.0} s)", running.stage));
                });
            }
        }
    }

    /// Starts the checks on a worker thread; results arrive through a channel and wake the UI.
    fn start(&mut self, ctx: egui::Context) {
        let options = CheckOptions {
            device: self.device,
            memtest: self.run_memtest.then(|| MemtestConfig {
                share_of_free_percent: self.memtest_percent,
                ..MemtestConfig::default()
            }),
            ..CheckOptions::default()
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let (sender, messages) = mpsc::channel();
        let worker_cancel = Arc::clone(&cancel);
        let spawned = std::thread::Builder::new()
            .name("vramscope-hardware-check".into())
            .spawn(move || {
                let progress_sender = sender.clone();
                let progress_ctx = ctx.clone();
                let outcome = run_checks(&options, &worker_cancel, &mut |step| {
                    // The panel may be gone; then nobody needs the progress.
                    let _ = progress_sender.send(WorkerMessage::Progress(step));
                    progress_ctx.request_repaint();
                });
                let _ = sender.send(WorkerMessage::Done(Box::new(outcome)));
                ctx.request_repaint();
            });
        self.state = match spawned {
            Ok(_) => PanelState::Running(RunningCheck {
                cancel,
                messages,
                stage: "starting".into(),
                memtest: None,
                started: Instant::now(),
            }),
            Err(error) => PanelState::Finished(Box::new(Err(CudaError::InvalidOption(format!(
                "cannot start the check thread: {error}"
            ))))),
        };
    }

    /// Drains the worker's messages.
    fn receive(&mut self) {
        let PanelState::Running(running) = &mut self.state else {
            return;
        };
        loop {
            match running.messages.try_recv() {
                Ok(WorkerMessage::Progress(CheckProgress::Stage(stage))) => running.stage = stage,
                Ok(WorkerMessage::Progress(CheckProgress::Memtest(progress))) => {
                    running.memtest = Some(progress);
                }
                Ok(WorkerMessage::Done(outcome)) => {
                    self.state = PanelState::Finished(outcome);
                    return;
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.state = PanelState::Finished(Box::new(Err(CudaError::Panicked {
                        call: "hardware check thread".into(),
                        message: "the check thread ended without a result".into(),
                    })));
                    return;
                }
            }
        }
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
    let mismatches = memtest.tests.iter().flat_map(|test| {
        test.errors
            .iter()
            .map(move |mismatch| (test.label.as_str(), mismatch))
    });
    for (label, mismatch) in mismatches.take(32) {
        ui.monospace(format!(
            "{label}: {:#018x} expected {:#018x} read {:#018x} (second read {:#018x})",
            mismatch.address, mismatch.expected, mismatch.actual, mismatch.second_read
        ));
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
