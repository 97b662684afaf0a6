//! The views the central area switches between: the memory timeline, the allocator view of a
//! PyTorch snapshot, the diagnosis wizards and the hardware checks. Shown as tabs under the top
//! bar, each with a Ctrl+number shortcut (`UiCommand::ShowTimeline` and its siblings).

use crate::command::{CommandSender, UiCommand};
pub use crate::nav::View;

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

/// The tab bar; a click sends the view's [`UiCommand`].
pub fn view_tabs_ui(ui: &mut egui::Ui, current: View, commands: &CommandSender) {
    ui.horizontal(|ui| {
        for view in View::ALL {
            let command = UiCommand::show(view);
            let tab = ui
                .selectable_label(current == view, view.label())
                .on_hover_text(command.tooltip_with_shortcut(ui.ctx()));
            if tab.clicked() {
                commands.send(command);
            }
        }
    });
}
