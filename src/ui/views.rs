//! The views the central area switches between: the memory timeline, the allocator view of a
//! PyTorch snapshot, the diagnosis wizards and the hardware checks. Shown as tabs under the top
//! bar, each with a Ctrl+number shortcut (`Command::ShowView`).

use super::command::{Command, CommandSender};

/// `frame` without its fill in the web viewer, where the canvas is cleared to the panels'
/// colour instead (`VramscopeApp::clear_color`): where WebGL runs on the CPU (SwiftShader) every
/// filled screenful costs tens of milliseconds of each frame, a clear next to nothing
/// (docs/benchmarks.md, issue 14). The desktop fills its panels as egui does.
pub fn web_unfilled(frame: egui::Frame) -> egui::Frame {
    #[cfg(target_arch = "wasm32")]
    let frame = frame.fill(egui::Color32::TRANSPARENT);
    frame
}

/// The central panel each view draws in, unfilled in the web viewer ([`web_unfilled`]).
pub fn central_panel(ui: &egui::Ui) -> egui::CentralPanel {
    egui::CentralPanel::default().frame(web_unfilled(egui::Frame::central_panel(ui.style())))
}

/// A panel along the top of the window, unfilled in the web viewer ([`web_unfilled`]).
pub fn top_panel(ui: &egui::Ui, id: &str) -> egui::Panel {
    egui::Panel::top(id).frame(web_unfilled(egui::Frame::side_top_panel(ui.style())))
}

/// One of the app's main views.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum View {
    /// Memory over time of a capture or the live machine.
    #[default]
    Timeline,
    /// Block map, fragmentation and time travel of a PyTorch allocator snapshot.
    Allocator,
    /// The guided diagnosis wizards over every opened file.
    Diagnose,
    /// CUDA facts, CUDA vs NVML, largest block and the memory test (desktop only).
    HardwareChecks,
}

impl View {
    /// Every view, in tab order.
    pub const ALL: [View; 4] = [
        View::Timeline,
        View::Allocator,
        View::Diagnose,
        View::HardwareChecks,
    ];

    /// The tab's text.
    pub fn label(self) -> &'static str {
        match self {
            View::Timeline => "Timeline",
            View::Allocator => "Allocator",
            View::Diagnose => "Diagnose",
            View::HardwareChecks => "Hardware checks",
        }
    }

    /// What the tab's tooltip says the view is for.
    pub fn description(self) -> &'static str {
        match self {
            View::Timeline => "Memory over time: the live machine or an opened capture",
            View::Allocator => {
                "Inside the PyTorch caching allocator: open a snapshot (.pickle) to see its blocks"
            }
            View::Diagnose => {
                "Guided diagnosis of out-of-memory errors, fragmentation, leaks \
                               and hardware problems from every opened file"
            }
            View::HardwareChecks => "Checks of this machine's GPUs and driver",
        }
    }
}

/// The tab bar; a click sends [`Command::ShowView`].
pub fn view_tabs_ui(ui: &mut egui::Ui, current: View, commands: &CommandSender) {
    ui.horizontal(|ui| {
        for view in View::ALL {
            let command = Command::ShowView(view);
            let tab = ui
                .selectable_label(current == view, view.label())
                .on_hover_text(command.tooltip_with_shortcut(ui.ctx()));
            if tab.clicked() {
                commands.send(command);
            }
        }
    });
}
