//! Messages for the user (errors opening files, recovered captures, recording results), shown in a
//! strip under the top bar until dismissed. They stay put instead of fading out, so that an error
//! is never missed and nothing needs a timer (which would keep the app repainting).

use egui::{Color32, RichText, Ui};

/// How serious a notice is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeLevel {
    Info,
    Warning,
    Error,
}

/// One message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub level: NoticeLevel,
    pub text: String,
}

/// The messages currently shown, oldest first.
#[derive(Debug, Default)]
pub struct Notices {
    items: Vec<Notice>,
}

/// Older notices beyond this many are dropped, so a flood of errors cannot grow without bound.
const MAX_NOTICES: usize = 6;

impl Notices {
    /// Adds a message; the oldest goes when there are too many. An information (a file saved,
    /// exported, read) replaces the previous information, so confirmations do not pile up and push
    /// the view down; warnings and errors stay until dismissed.
    pub fn push(&mut self, level: NoticeLevel, text: impl Into<String>) {
        let text = text.into();
        match level {
            NoticeLevel::Error => log::error!("{text}"),
            NoticeLevel::Warning => log::warn!("{text}"),
            NoticeLevel::Info => log::info!("{text}"),
        }
        if level == NoticeLevel::Info {
            self.items.retain(|item| item.level != NoticeLevel::Info);
        }
        self.items.push(Notice { level, text });
        if self.items.len() > MAX_NOTICES {
            self.items.remove(0);
        }
    }

    /// The current messages.
    pub fn items(&self) -> &[Notice] {
        &self.items
    }

    /// Whether there is nothing to show.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Draws every message with a dismiss button.
    pub fn ui(&mut self, ui: &mut Ui) {
        let mut dismissed = None;
        for (i, notice) in self.items.iter().enumerate() {
            let (kind, color) = match notice.level {
                NoticeLevel::Info => ("Info", Color32::from_rgb(0x40, 0x90, 0xd0)),
                NoticeLevel::Warning => ("Warning", Color32::from_rgb(0xd0, 0x90, 0x20)),
                NoticeLevel::Error => ("Error", Color32::from_rgb(0xe0, 0x50, 0x50)),
            };
            egui::Frame::new()
                .stroke(egui::Stroke::new(1.0, color))
                .corner_radius(4.0)
                .inner_margin(egui::Margin::symmetric(8, 4))
                .show(ui, |ui| {
                    ui.horizontal(|ui| {
                        if ui.small_button("Dismiss").clicked() {
                            dismissed = Some(i);
                        }
                        ui.label(RichText::new(kind).strong().color(color));
                        ui.add(egui::Label::new(RichText::new(&notice.text).color(color)).wrap());
                    });
                });
        }
        if let Some(i) = dismissed {
            self.items.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_newest_notices() {
        let mut notices = Notices::default();
        for i in 0..10 {
            notices.push(NoticeLevel::Error, format!("problem {i}"));
        }
        assert_eq!(notices.items().len(), MAX_NOTICES);
        assert_eq!(notices.items()[0].text, "problem 4");
        assert_eq!(notices.items()[MAX_NOTICES - 1].text, "problem 9");
    }

    #[test]
    fn a_new_information_replaces_the_last_but_problems_stay() {
        let mut notices = Notices::default();
        notices.push(NoticeLevel::Error, "could not open a.pickle");
        notices.push(NoticeLevel::Info, "Saved a.vramcap");
        notices.push(NoticeLevel::Info, "Exported a.png");
        let texts: Vec<&str> = notices.items().iter().map(|n| n.text.as_str()).collect();
        assert_eq!(texts, ["could not open a.pickle", "Exported a.png"]);
    }
}
