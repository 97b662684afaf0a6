//! The guided wizards: Out of memory, Fragmentation, Leak, Hardware and driver, and the Log
//! analyzer. Each walks Choose → Evidence → Findings → Report with Back/Next; every step shows what
//! was found so far and lets the user add evidence (paste a log; the app adds opened captures,
//! snapshots and logs through [`WizardView::add_log`], [`WizardView::add_capture`] and
//! [`WizardView::add_snapshot_facts`]). Inside the app the wizard asks for things (open a file,
//! show a snapshot in the Allocator tab) by sending commands ([`WizardView::connect`]).
//!
//! The diagnosis is the same engine the CLI runs (`vramscope_core::diagnose`); it is cheap over the facts,
//! so it is recomputed whenever evidence changes. Reading files and computing snapshot facts (which
//! replays the allocator trace) is the app's job, off the UI thread. Writing a report file is a
//! job on the UI's runner ([`crate::runner`]).

mod allocator_figures;
mod findings;

pub use crate::nav::AllocatorTabRequest;

use crate::command::{AppEvent, CommandSender, UiCommand};
use crate::runner::{Job, Poll};
use vramscope_core::diagnose::finding::{
    Category, Diagnosis, Finding, InputSummary, Severity, Wizard,
};
use vramscope_core::diagnose::leak::SnapshotFacts;
use vramscope_core::diagnose::log::{LogAnalysis, analyze_text};
use vramscope_core::diagnose::{
    DiagnosisInput, NamedCapture, OomComposition, diagnose, oom_composition,
};
use vramscope_core::model::run::ProofRun;
use vramscope_core::report::{self, Report, ReportFormat, Timeline};

/// Which wizard is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WizardKind {
    OutOfMemory,
    Fragmentation,
    Leak,
    HardwareAndDriver,
    LogAnalyzer,
}

impl WizardKind {
    pub const ALL: [WizardKind; 5] = [
        WizardKind::OutOfMemory,
        WizardKind::Fragmentation,
        WizardKind::Leak,
        WizardKind::HardwareAndDriver,
        WizardKind::LogAnalyzer,
    ];

    pub fn label(self) -> &'static str {
        match self {
            WizardKind::OutOfMemory => "Out of memory",
            WizardKind::Fragmentation => "Fragmentation",
            WizardKind::Leak => "Leak",
            WizardKind::HardwareAndDriver => "Hardware and driver",
            WizardKind::LogAnalyzer => "Log analyzer",
        }
    }

    fn description(self) -> &'static str {
        match self {
            WizardKind::OutOfMemory => {
                "A job died with CUDA out of memory: find what filled the card and what to change."
            }
            WizardKind::Fragmentation => {
                "Memory is cached but unusable: find whether fragmentation is the cause and which allocator setting helps."
            }
            WizardKind::Leak => {
                "Memory grows over time or per step: measure the slope, the time until the card is full, and what grows."
            }
            WizardKind::HardwareAndDriver => {
                "ECC errors, row remapping, Xid errors, throttling, driver and CUDA versions."
            }
            WizardKind::LogAnalyzer => {
                "Paste any log (training output, dmesg, journal): every recognised line explained."
            }
        }
    }

    /// Categories this wizard is about (shown first).
    fn categories(self) -> &'static [Category] {
        match self {
            WizardKind::OutOfMemory => &[
                Category::OtherProcess,
                Category::MemoryCap,
                Category::Capacity,
                Category::Fragmentation,
                Category::Leak,
            ],
            WizardKind::Fragmentation => &[Category::Fragmentation, Category::MemoryCap],
            WizardKind::Leak => &[Category::Leak],
            WizardKind::HardwareAndDriver => &[
                Category::Ecc,
                Category::RowRemap,
                Category::Xid,
                Category::Thermal,
                Category::DriverMismatch,
                Category::CudaError,
                Category::Library,
            ],
            WizardKind::LogAnalyzer => &[],
        }
    }

    fn from_wizard(w: Wizard) -> Self {
        match w {
            Wizard::OutOfMemory => WizardKind::OutOfMemory,
            Wizard::Fragmentation => WizardKind::Fragmentation,
            Wizard::Leak => WizardKind::Leak,
            Wizard::HardwareAndDriver => WizardKind::HardwareAndDriver,
        }
    }
}

/// The steps every wizard walks through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Choose,
    Evidence,
    Findings,
    Report,
}

impl Step {
    const ALL: [Step; 4] = [Step::Choose, Step::Evidence, Step::Findings, Step::Report];

    fn label(self) -> &'static str {
        match self {
            Step::Choose => "1 Choose",
            Step::Evidence => "2 Evidence",
            Step::Findings => "3 Findings",
            Step::Report => "4 Report",
        }
    }

    fn next(self) -> Option<Step> {
        Step::ALL.iter().copied().find(|s| *s > self)
    }

    fn back(self) -> Option<Step> {
        Step::ALL.iter().copied().rev().find(|s| *s < self)
    }
}

/// Where a report write stands.
enum ReportWrite {
    Idle,
    /// The web viewer writes no files, so it never gets here.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    Running(Job<Result<String, String>>),
    /// The web viewer writes no files, so it never gets here.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    Done(Result<String, String>),
}

/// One piece of evidence, as the evidence step lists it: its kind and its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EvidenceKey {
    pub kind: &'static str,
    pub name: String,
}

/// The wizards as one self-contained view.
pub struct WizardView {
    kind: WizardKind,
    step: Step,
    input: DiagnosisInput,
    diagnosis: Diagnosis,
    composition: Option<OomComposition>,
    pasted_log: String,
    pasted_count: usize,
    cuda_text: String,
    cuda_error: Option<String>,
    report_path: String,
    report_write: ReportWrite,
    /// What the GPU checks found (the "Hardware and driver" wizard runs them), added to every
    /// diagnosis.
    check_evidence: Option<(InputSummary, Vec<Finding>)>,
    /// The Fragmentation wizard's figures of the snapshots' final allocator states, computed
    /// once per state and kept across rediagnoses.
    allocator_figures: allocator_figures::AllocatorFigures,
    /// Where "Open a file…" and "Open in Allocator tab" go, when the wizard runs inside the app
    /// (see [`WizardView::connect`]).
    commands: Option<CommandSender>,
    /// The GPU the user asked about (evidence step), or `None` for every GPU: captures are
    /// restricted to it and other devices' snapshots are left out of the diagnosis.
    device_filter: Option<u32>,
    /// Evidence the user left out of the diagnosis (unticked in the evidence step), by kind and
    /// name: two unrelated snapshots, a log of another run.
    excluded: std::collections::BTreeSet<EvidenceKey>,
    #[cfg(feature = "native")]
    checks: crate::hardware::CheckRunner,
    #[cfg(feature = "native")]
    memtest_in_checks: bool,
}

impl Default for WizardView {
    fn default() -> Self {
        Self::new()
    }
}

impl WizardView {
    /// Starts at the first step, with no evidence.
    pub fn new() -> Self {
        let mut view = WizardView {
            kind: WizardKind::OutOfMemory,
            step: Step::Choose,
            input: DiagnosisInput::default(),
            diagnosis: Diagnosis::default(),
            composition: None,
            pasted_log: String::new(),
            pasted_count: 0,
            cuda_text: String::new(),
            cuda_error: None,
            report_path: crate::dialogs::path_in_home("vramscope-report.html"),
            report_write: ReportWrite::Idle,
            check_evidence: None,
            allocator_figures: allocator_figures::AllocatorFigures::default(),
            commands: None,
            device_filter: None,
            excluded: std::collections::BTreeSet::new(),
            #[cfg(feature = "native")]
            checks: crate::hardware::CheckRunner::new(),
            #[cfg(feature = "native")]
            memtest_in_checks: false,
        };
        view.rediagnose();
        view
    }

    /// Starts a given wizard at its evidence step.
    pub fn with_kind(kind: WizardKind) -> Self {
        let mut view = Self::new();
        view.kind = kind;
        view.step = Step::Evidence;
        view
    }

    pub fn kind(&self) -> WizardKind {
        self.kind
    }

    pub fn step(&self) -> Step {
        self.step
    }

    /// The current diagnosis over all evidence given so far.
    pub fn diagnosis(&self) -> &Diagnosis {
        &self.diagnosis
    }

    /// Adds an analysed log (opened by the app).
    pub fn add_log(&mut self, log: LogAnalysis) {
        self.input.logs.push(log);
        self.rediagnose();
    }

    /// Adds a capture (opened by the app, or the live session's recording).
    pub fn add_capture(&mut self, capture: NamedCapture) {
        self.input.captures.push(capture);
        self.rediagnose();
    }

    /// Adds a capture, or replaces the one of the same name (the live session's capture, offered
    /// again as it grows).
    pub fn set_capture(&mut self, capture: NamedCapture) {
        match self
            .input
            .captures
            .iter_mut()
            .find(|c| c.name == capture.name)
        {
            Some(existing) => *existing = capture,
            None => self.input.captures.push(capture),
        }
        self.rediagnose();
    }

    /// Replaces the capture named `old_name` with `capture` (two nvidia-smi logs of one run
    /// joined into one capture after both opened), or adds it when there is none.
    pub fn replace_capture(&mut self, old_name: &str, capture: NamedCapture) {
        self.input.captures.retain(|c| c.name != old_name);
        self.set_capture(capture);
    }

    /// Runs the wizard inside the app: "Open a capture, snapshot or log…" sends
    /// [`UiCommand::Open`] (what the app opens comes back through the `add_*` methods), and the
    /// Fragmentation wizard offers "Open in Allocator tab" for each snapshot's allocator state
    /// ([`AppEvent::ShowInAllocatorTab`]).
    pub fn connect(&mut self, commands: CommandSender) {
        self.commands = Some(commands);
    }

    /// Starts the wizard `kind` at its evidence step, keeping the evidence given so far.
    pub fn choose(&mut self, kind: WizardKind) {
        self.kind = kind;
        self.step = Step::Evidence;
    }

    /// Starts the GPU checks (facts, CUDA vs NVML, largest block; the memory test if chosen) on
    /// a background thread; their findings join the diagnosis when they finish.
    #[cfg(feature = "native")]
    pub fn run_gpu_checks(&mut self, ctx: egui::Context) {
        let options = vramscope_gpu::cuda::CheckOptions {
            memtest: self
                .memtest_in_checks
                .then(vramscope_gpu::cuda::MemtestConfig::default),
            ..vramscope_gpu::cuda::CheckOptions::default()
        };
        self.checks.start(options, ctx);
    }

    /// True while the GPU checks run.
    pub fn is_checking(&self) -> bool {
        #[cfg(feature = "native")]
        {
            self.checks.is_running()
        }
        #[cfg(not(feature = "native"))]
        {
            false
        }
    }

    /// Collects the GPU checks' result when they finish.
    fn poll_checks(&mut self) {
        #[cfg(feature = "native")]
        if self.checks.poll()
            && let Some(outcome) = self.checks.outcome()
        {
            self.check_evidence = Some(vramscope_core::diagnose::gpu_checks::check_findings(
                outcome,
            ));
            self.rediagnose();
        }
    }

    /// Adds what an opened run folder's manifest tells: its `--prove` re-runs (rows already
    /// there are not added twice), whose proof then comes first, and its job's processes, so
    /// that of its timeline only the GPUs they used are judged. Diagnoses again, once.
    pub fn add_run(&mut self, proof: &[ProofRun], job_pids: &[u32]) {
        self.input.add_run(proof, job_pids);
        self.rediagnose();
    }

    /// Adds snapshot facts (`vramscope_core::diagnose::snapshot::facts`, computed by the app off the UI
    /// thread because it replays the allocator trace).
    pub fn add_snapshot_facts(&mut self, facts: Vec<SnapshotFacts>) {
        self.input.snapshots.extend(facts);
        self.rediagnose();
    }

    /// The report of the current diagnosis, with the timeline of the first capture.
    pub fn report(&self) -> Report {
        Report {
            title: format!("vramscope diagnosis: {}", self.kind.label()),
            generated_at_ms: vramscope_core::model::now_unix_ms(),
            diagnosis: self.diagnosis.clone(),
            timeline: self
                .filtered_input()
                .captures
                .iter()
                .find_map(|c| Timeline::from_capture(&c.name, &c.capture)),
        }
    }

    /// Restricts the diagnosis to one GPU (`None`: all of them) and diagnoses again.
    pub fn set_device_filter(&mut self, device_index: Option<u32>) {
        self.device_filter = device_index;
        self.rediagnose();
    }

    /// The GPU the diagnosis is restricted to, if any.
    pub fn device_filter(&self) -> Option<u32> {
        self.device_filter
    }

    /// The GPUs of the evidence's captures and snapshots, with a name for the picker.
    fn evidence_devices(&self) -> Vec<(u32, String)> {
        let mut devices: Vec<(u32, String)> = Vec::new();
        for capture in &self.input.captures {
            for device in &capture.capture.devices {
                if !devices.iter().any(|(index, _)| *index == device.index) {
                    devices.push((device.index, device.name.clone()));
                }
            }
        }
        for facts in &self.input.snapshots {
            if !devices
                .iter()
                .any(|(index, _)| *index == facts.device_index)
            {
                devices.push((facts.device_index, String::new()));
            }
        }
        devices.sort_by_key(|(index, _)| *index);
        devices
    }

    /// Every piece of evidence given, in the order it is listed.
    pub fn evidence(&self) -> Vec<EvidenceKey> {
        let key = |kind, name: &str| EvidenceKey {
            kind,
            name: name.to_owned(),
        };
        let mut keys: Vec<EvidenceKey> = Vec::new();
        let all = self
            .input
            .logs
            .iter()
            .map(|l| key("log", &l.name))
            .chain(self.input.captures.iter().map(|c| key("capture", &c.name)))
            .chain(
                self.input
                    .snapshots
                    .iter()
                    .map(|s| key("snapshot", &s.name)),
            );
        for k in all {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys
    }

    /// Includes (`true`) or leaves out a piece of evidence, and diagnoses again.
    pub fn set_included(&mut self, evidence: &EvidenceKey, included: bool) {
        if included {
            self.excluded.remove(evidence);
        } else {
            self.excluded.insert(evidence.clone());
        }
        self.rediagnose();
    }

    /// Whether a piece of evidence takes part in the diagnosis.
    pub fn is_included(&self, evidence: &EvidenceKey) -> bool {
        !self.excluded.contains(evidence)
    }

    /// The evidence as the rules should see it: without what the user left out, restricted to
    /// the chosen GPU, if any.
    fn filtered_input(&self) -> std::borrow::Cow<'_, DiagnosisInput> {
        if self.device_filter.is_none() && self.excluded.is_empty() {
            return std::borrow::Cow::Borrowed(&self.input);
        }
        let included = |kind: &'static str, name: &str| {
            self.is_included(&EvidenceKey {
                kind,
                name: name.to_owned(),
            })
        };
        let mut input = self.input.clone();
        input.logs.retain(|l| included("log", &l.name));
        input.captures.retain(|c| included("capture", &c.name));
        input.snapshots.retain(|s| included("snapshot", &s.name));
        if let Some(device) = self.device_filter {
            for capture in &mut input.captures {
                capture.capture = capture.capture.only_device(device);
            }
            input.snapshots.retain(|facts| facts.device_index == device);
        }
        std::borrow::Cow::Owned(input)
    }

    fn rediagnose(&mut self) {
        let input = self.filtered_input();
        let diagnosis = diagnose(&input);
        let composition = oom_composition(&input);
        drop(input);
        self.diagnosis = diagnosis;
        if let Some((summary, findings)) = &self.check_evidence {
            self.diagnosis.inputs.push(summary.clone());
            if findings.iter().any(|f| f.severity != Severity::Info) {
                self.diagnosis
                    .findings
                    .retain(|f| f.category != Category::Healthy);
            }
            self.diagnosis.findings.extend(findings.iter().cloned());
            // Stable: within a severity, the rules' order, then the checks.
            self.diagnosis.findings.sort_by_key(|f| f.severity);
        }
        self.composition = composition;
    }

    fn analyze_pasted(&mut self) {
        if self.pasted_log.trim().is_empty() {
            return;
        }
        self.pasted_count += 1;
        let name = format!("pasted log {}", self.pasted_count);
        let log = analyze_text(&self.pasted_log, &name);
        self.pasted_log.clear();
        self.add_log(log);
    }

    fn apply_cuda_text(&mut self) {
        let text = self.cuda_text.trim();
        if text.is_empty() {
            self.cuda_error = None;
            self.input.framework_cuda = None;
        } else {
            let parsed = text
                .split_once('.')
                .and_then(|(a, b)| a.parse().ok().zip(b.parse().ok()));
            match parsed {
                Some(v) => {
                    self.cuda_error = None;
                    self.input.framework_cuda = Some(v);
                }
                None => self.cuda_error = Some(format!("'{text}' is not a version like 12.4")),
            }
        }
        self.rediagnose();
    }

    /// Draws the wizard.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        self.poll_report_write();
        self.poll_checks();
        ui.horizontal(|ui| {
            ui.heading(format!("Wizard: {}", self.kind.label()));
            if self.diagnosis.simulated {
                ui.colored_label(egui::Color32::from_rgb(200, 130, 0), "SIMULATED data");
            }
        });
        ui.horizontal(|ui| {
            for step in Step::ALL {
                let text = egui::RichText::new(step.label());
                ui.label(if step == self.step {
                    text.strong().underline()
                } else {
                    text.weak()
                });
            }
        });
        ui.separator();
        egui::ScrollArea::vertical()
            .auto_shrink([false, false])
            .max_height((ui.available_height() - 40.0).max(100.0))
            .show(ui, |ui| match self.step {
                Step::Choose => self.choose_ui(ui),
                Step::Evidence => self.evidence_ui(ui),
                Step::Findings => self.findings_ui(ui),
                Step::Report => self.report_ui(ui),
            });
        ui.separator();
        ui.horizontal(|ui| {
            if let Some(back) = self.step.back()
                && ui.button("Back").clicked()
            {
                self.step = back;
            }
            if let Some(next) = self.step.next()
                && ui.button("Next").clicked()
            {
                self.step = next;
            }
            if let Some(primary) = self.diagnosis.primary() {
                ui.label(format!(
                    "So far: {} ({})",
                    primary.title,
                    primary.category.as_str()
                ));
            }
        });
    }

    fn choose_ui(&mut self, ui: &mut egui::Ui) {
        ui.label("What happened?");
        for kind in WizardKind::ALL {
            if ui
                .selectable_label(self.kind == kind, kind.label())
                .clicked()
            {
                self.kind = kind;
            }
            ui.label(egui::RichText::new(kind.description()).weak());
            ui.add_space(4.0);
        }
    }

    fn evidence_ui(&mut self, ui: &mut egui::Ui) {
        ui.label(egui::RichText::new("Evidence so far").strong());
        let evidence = self.evidence();
        if evidence.is_empty() {
            ui.label("None yet. Paste a log below, or open a capture, snapshot or log.");
        } else {
            ui.label(
                egui::RichText::new(
                    "Untick what does not belong to the failure (another run's snapshot or log): \
                     evidence of unrelated jobs must not be diagnosed together.",
                )
                .weak(),
            );
        }
        let mut toggled = None;
        for key in &evidence {
            let summary = self
                .diagnosis
                .inputs
                .iter()
                .filter(|i| i.kind == key.kind && i.name == key.name)
                .map(|i| i.summary.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            let mut included = self.is_included(key);
            let text = if included {
                format!("{} {}: {summary}", key.kind, key.name)
            } else {
                format!("{} {} (left out)", key.kind, key.name)
            };
            if ui.checkbox(&mut included, text).changed() {
                toggled = Some((key.clone(), included));
            }
        }
        if let Some((key, included)) = toggled {
            self.set_included(&key, included);
        }
        // Evidence that is no file to leave out: this machine's checks, a run's re-runs.
        for input in self.diagnosis.inputs.iter().filter(|i| {
            i.kind == "gpu checks" || i.kind == vramscope_core::diagnose::engine::PROOF_INPUT_KIND
        }) {
            ui.label(format!(
                "• {} {}: {}",
                input.kind, input.name, input.summary
            ));
        }
        let devices = self.evidence_devices();
        if devices.len() > 1 {
            let device_label = |index: u32, name: &str| {
                if name.is_empty() {
                    format!("GPU {index}")
                } else {
                    format!("GPU {index} · {name}")
                }
            };
            let mut chosen = self.device_filter;
            ui.horizontal(|ui| {
                let label = ui.label("Which GPU:");
                let selected = match chosen {
                    None => "All GPUs".to_owned(),
                    Some(index) => devices
                        .iter()
                        .find(|(i, _)| *i == index)
                        .map(|(i, name)| device_label(*i, name))
                        .unwrap_or_else(|| format!("GPU {index}")),
                };
                egui::ComboBox::from_id_salt("wizard-device")
                    .selected_text(selected)
                    .show_ui(ui, |ui| {
                        ui.selectable_value(&mut chosen, None, "All GPUs");
                        for (index, name) in &devices {
                            ui.selectable_value(
                                &mut chosen,
                                Some(*index),
                                device_label(*index, name),
                            );
                        }
                    })
                    .response
                    .labelled_by(label.id);
            });
            if chosen != self.device_filter {
                self.set_device_filter(chosen);
            }
        }
        if let Some(commands) = &self.commands
            && ui
                .button("Open a capture, snapshot or log…")
                .on_hover_text(
                    "Files can also be dropped on the window; every opened file is added here",
                )
                .clicked()
        {
            commands.send(UiCommand::Open);
        }
        ui.add_space(8.0);
        let label = ui.label("Paste a log (training output, dmesg, journalctl -k):");
        ui.add(
            egui::TextEdit::multiline(&mut self.pasted_log)
                .desired_rows(6)
                .desired_width(f32::INFINITY)
                .font(egui::TextStyle::Monospace),
        )
        .labelled_by(label.id);
        if ui.button("Analyze pasted log").clicked() {
            self.analyze_pasted();
        }
        if self.kind == WizardKind::HardwareAndDriver {
            ui.add_space(8.0);
            ui.horizontal(|ui| {
                let label = ui.label("CUDA version the framework was built for:");
                let response = ui
                    .add(egui::TextEdit::singleline(&mut self.cuda_text).desired_width(60.0))
                    .labelled_by(label.id);
                if response.lost_focus() || ui.button("Check").clicked() {
                    self.apply_cuda_text();
                }
            });
            if let Some(err) = &self.cuda_error {
                ui.colored_label(egui::Color32::RED, err);
            }
            ui.add_space(8.0);
            self.gpu_checks_ui(ui);
        }
        if let Some(target) = findings::recognised_lines_ui(ui, &self.input.logs, self.kind) {
            self.kind = WizardKind::from_wizard(target);
            self.step = Step::Findings;
        }
    }

    /// The GPU checks of this machine, as evidence for the "Hardware and driver" wizard.
    fn gpu_checks_ui(&mut self, ui: &mut egui::Ui) {
        ui.label(egui::RichText::new("GPU checks on this machine").strong());
        #[cfg(feature = "native")]
        {
            if self.checks.is_running() {
                self.checks.progress_ui(ui);
                return;
            }
            ui.horizontal(|ui| {
                if ui.button("Run GPU checks").clicked() {
                    self.run_gpu_checks(ui.ctx().clone());
                }
                ui.checkbox(&mut self.memtest_in_checks, "Test memory too")
                    .on_hover_text("Writes and reads back patterns over part of the free memory");
            });
            if let Some((summary, _)) = &self.check_evidence {
                ui.label(format!("Last run: {}", summary.summary));
            }
            egui::CollapsingHeader::new("Check details")
                .default_open(false)
                .show(ui, |ui| self.checks.outcome_ui(ui));
        }
        #[cfg(not(feature = "native"))]
        ui.label("Running GPU checks needs the desktop app (vramscope check).");
    }

    fn findings_ui(&mut self, ui: &mut egui::Ui) {
        if self.kind == WizardKind::OutOfMemory
            && let Some(c) = &self.composition
        {
            findings::composition_ui(ui, c);
        }
        if self.kind == WizardKind::Fragmentation {
            // The figures of the snapshots taking part (not those the user left out, nor other
            // GPUs' when one is chosen).
            let excluded = &self.excluded;
            let device = self.device_filter;
            self.allocator_figures
                .sync(self.input.snapshots.iter().filter(|s| {
                    !excluded.contains(&EvidenceKey {
                        kind: "snapshot",
                        name: s.name.clone(),
                    }) && device.is_none_or(|d| d == s.device_index)
                }));
            if let Some(request) = self.allocator_figures.ui(ui, self.commands.is_some())
                && let Some(commands) = &self.commands
            {
                commands.send_event(AppEvent::ShowInAllocatorTab(request));
            }
        }
        if self.kind == WizardKind::HardwareAndDriver {
            findings::health_checks_ui(ui, &self.diagnosis, !self.input.captures.is_empty());
        }
        if self.kind == WizardKind::Leak {
            findings::growing_processes_ui(ui, &self.filtered_input().captures);
        }
        if self.kind == WizardKind::LogAnalyzer
            && let Some(target) = findings::recognised_lines_ui(ui, &self.input.logs, self.kind)
        {
            self.kind = WizardKind::from_wizard(target);
        }
        findings::findings_ui(ui, &self.diagnosis, self.kind.categories());
    }

    fn report_ui(&mut self, ui: &mut egui::Ui) {
        ui.label("Export the findings for a bug report or a review.");
        ui.horizontal(|ui| {
            if ui.button("Copy Markdown").clicked() {
                ui.ctx()
                    .copy_text(report::render(&self.report(), ReportFormat::Markdown));
            }
            if ui.button("Copy JSON").clicked() {
                ui.ctx()
                    .copy_text(report::render(&self.report(), ReportFormat::Json));
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("Report file (.html, .md or .json):");
            ui.add(egui::TextEdit::singleline(&mut self.report_path).desired_width(320.0))
                .labelled_by(label.id);
            #[cfg(not(target_arch = "wasm32"))]
            if ui
                .add_enabled(!self.is_writing_report(), egui::Button::new("Write report"))
                .clicked()
            {
                self.start_report_write(ui.ctx().clone());
            }
        });
        match &self.report_write {
            ReportWrite::Idle => {}
            ReportWrite::Running(_) => {
                ui.label("Writing…");
            }
            ReportWrite::Done(Ok(path)) => {
                ui.label(format!("Report written to {path}"));
            }
            ReportWrite::Done(Err(e)) => {
                ui.colored_label(egui::Color32::RED, e);
            }
        }
    }

    /// Writes the report to the typed path as a job on the runner.
    #[cfg(not(target_arch = "wasm32"))]
    fn start_report_write(&mut self, ctx: egui::Context) {
        let path = crate::dialogs::expand_home(self.report_path.trim());
        let report = self.report();
        let job = crate::runner::Runner::new(ctx).spawn(
            &format!("writing {}", path.display()),
            move |_| {
                report::write(&report, &path)
                    .map(|()| path.display().to_string())
                    .map_err(|e| e.to_string())
            },
        );
        self.report_write = ReportWrite::Running(job);
    }

    /// True while a report file is being written (tests wait on it).
    pub fn is_writing_report(&self) -> bool {
        matches!(self.report_write, ReportWrite::Running(_))
    }

    fn poll_report_write(&mut self) {
        if let ReportWrite::Running(job) = &mut self.report_write {
            match job.poll() {
                Poll::Running => {}
                Poll::Done(result) => self.report_write = ReportWrite::Done(result),
                Poll::Lost(message) => self.report_write = ReportWrite::Done(Err(message)),
            }
        }
    }
}
