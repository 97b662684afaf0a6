//! The Allocator tab's views: one [`AllocatorView`] per opened snapshot, a picker when several
//! are open, "Compare" to see two of them side by side ([`CompareView`]), and a cap on how many
//! stay open (each holds a whole snapshot).

use egui::{RichText, Ui};

use super::AllocatorView;
use super::compare::CompareView;
use crate::nav::AllocatorTabRequest;

/// Allocator views kept open at most (each holds a whole snapshot); the oldest is closed first.
pub const MAX_ALLOCATOR_VIEWS: usize = 8;

/// The opened snapshots' views, oldest first, and the one shown.
pub struct AllocatorTabs {
    views: Vec<AllocatorView>,
    /// Index into `views` of the one shown.
    active: usize,
    /// Whether a newly opened view is first laid out unseen (see
    /// [`AllocatorTabs::set_unseen_first_frame`]).
    unseen_first_frame: bool,
    /// The comparison, while "Compare" is on (two or more snapshots open).
    compare: Option<CompareView>,
}

impl Default for AllocatorTabs {
    /// The web viewer draws a new view unseen first; the desktop shows it at once.
    fn default() -> Self {
        AllocatorTabs {
            views: Vec::new(),
            active: 0,
            unseen_first_frame: cfg!(target_arch = "wasm32"),
            compare: None,
        }
    }
}

impl AllocatorTabs {
    /// Whether a newly opened view's first frames lay it out without painting it, a part per
    /// frame ([`AllocatorView::lay_out_in_parts`]; a "Drawing the view…" line shows instead), and
    /// the next frame shows it. The first frame of a view does most of its work once: laying out
    /// its text, rasterising new glyphs, and in a browser compiling the code it runs for the
    /// first time. Where the browser draws WebGL on the CPU, painting the view costs as much
    /// again, and both in one frame held the page's thread for 120-200 ms; split, each frame is
    /// shorter (docs/benchmarks.md, issue 14). On by default in the web viewer only: a desktop
    /// frame is cheap, and the blank frames would flicker.
    pub fn set_unseen_first_frame(&mut self, unseen: bool) {
        self.unseen_first_frame = unseen;
    }

    /// The views, oldest first.
    pub fn views(&self) -> &[AllocatorView] {
        &self.views
    }

    /// The view shown.
    pub fn active(&self) -> Option<&AllocatorView> {
        self.views.get(self.active)
    }

    /// Shows two of the opened snapshots side by side (or the chosen one alone again); false
    /// when fewer than two are open, which a comparison needs.
    pub fn set_comparing(&mut self, on: bool) -> bool {
        if on && self.views.len() < 2 {
            return false;
        }
        if on != self.compare.is_some() {
            self.compare = on.then(|| CompareView::new(self.views.len()));
        }
        true
    }

    /// Whether the comparison is shown.
    pub fn comparing(&self) -> bool {
        self.compare.is_some()
    }

    /// The comparison, while it is shown.
    pub fn compare(&self) -> Option<&CompareView> {
        self.compare.as_ref()
    }

    /// Adds and shows `view` (of a snapshot just opened); returns the name of the view closed to
    /// stay within [`MAX_ALLOCATOR_VIEWS`], if one was.
    pub fn open(&mut self, view: AllocatorView) -> Option<String> {
        // A watched folder gets a new snapshot every few minutes for as long as a job runs.
        let closed = (self.views.len() >= MAX_ALLOCATOR_VIEWS)
            .then(|| self.views.remove(0).name().to_owned());
        if closed.is_some()
            && let Some(compare) = &mut self.compare
        {
            compare.view_removed(0);
        }
        self.views.push(view);
        self.active = self.views.len() - 1;
        if self.unseen_first_frame
            && let Some(view) = self.views.last_mut()
        {
            view.lay_out_in_parts();
        }
        closed
    }

    /// Shows the newest view of the requested snapshot on the requested device; false when no
    /// view of that snapshot is open any more.
    pub fn show(&mut self, request: &AllocatorTabRequest) -> bool {
        let Some(index) = self
            .views
            .iter()
            .rposition(|v| v.name() == request.snapshot_name)
        else {
            return false;
        };
        self.views[index].select_device(request.device);
        self.active = index;
        true
    }

    /// The Allocator view: the chosen snapshot (a picker when several are open), or how to open
    /// one.
    pub fn ui(&mut self, ui: &mut Ui) {
        if self.views.is_empty() {
            crate::views::central_panel(ui).show(ui, |ui| {
                ui.centered_and_justified(|ui| {
                    ui.label(
                        RichText::new(
                            "Open a PyTorch memory snapshot (.pickle, from \
                             torch.cuda.memory._dump_snapshot) with File › Open… (Ctrl+O) or drop \
                             it here. File › Watch folder… opens new ones as they are written.",
                        )
                        .size(18.0),
                    );
                });
            });
            return;
        }
        if self.views.len() < 2 {
            self.compare = None;
        }
        if self.views.len() > 1 {
            egui::Panel::top("snapshot_picker").show(ui, |ui| {
                ui.horizontal(|ui| {
                    let mut comparing = self.compare.is_some();
                    ui.toggle_value(&mut comparing, "Compare")
                        .on_hover_text(crate::command::UiCommand::CompareSnapshots.tooltip());
                    self.set_comparing(comparing);
                    if comparing {
                        return;
                    }
                    ui.separator();
                    ui.label("Snapshot");
                    let active = self.active.min(self.views.len() - 1);
                    let mut selected = active;
                    egui::ComboBox::from_id_salt("snapshot_picker")
                        .selected_text(self.views[active].name())
                        .show_ui(ui, |ui| {
                            for (i, view) in self.views.iter().enumerate() {
                                ui.selectable_value(&mut selected, i, view.name());
                            }
                        })
                        .response
                        // Named for screen readers: the label beside it says what, not which.
                        .widget_info(|| {
                            egui::WidgetInfo::labeled(egui::Role::ComboBox, true, "Snapshot shown")
                        });
                    self.active = selected;
                });
            });
        }
        if let Some(compare) = &mut self.compare {
            compare.ui(ui, &mut self.views);
            return;
        }
        let unseen = self
            .views
            .get(self.active)
            .is_some_and(|view| view.laying_out(ui.ctx()));
        crate::views::central_panel(ui).show(ui, |ui| {
            if unseen {
                ui.painter().text(
                    ui.max_rect().center(),
                    egui::Align2::CENTER_CENTER,
                    "Drawing the view…",
                    egui::FontId::proportional(18.0),
                    ui.visuals().weak_text_color(),
                );
                // Laid out, its glyphs rasterised, nothing painted; shown once laid out whole.
                ui.set_invisible();
                ui.ctx().request_repaint();
            }
            if let Some(view) = self.views.get_mut(self.active) {
                view.ui(ui);
            }
        });
    }
}
