//! The views the central area switches between: the memory timeline, the allocator view of a
//! PyTorch snapshot, the diagnosis wizards and the hardware checks. Shown as tabs under the top
//! bar, each with a Ctrl+number shortcut (`Command::ShowView`).

use super::command::{Command, CommandSender};

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
