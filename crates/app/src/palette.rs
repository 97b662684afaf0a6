//! The command palette (Ctrl+Shift+P): every [`UiCommand`] by name, filtered as the user types,
//! run with Enter or a click. Commands that cannot run now are listed greyed out with the reason,
//! so the palette also answers "why can't I export?".

use egui::{Key, RichText};

use crate::command::{CommandContext, CommandSender, UiCommand};

/// How well `query` matches `text`, higher is better; `None` when it does not match. Every
/// word of the query must appear in the text, in any order; a match at the start of the text
/// or of one of its words ranks first.
pub fn match_score(query: &str, text: &str) -> Option<u32> {
    let text = text.to_lowercase();
    let mut score = 0;
    for word in query.split_whitespace() {
        let word = word.to_lowercase();
        let at = text.find(&word)?;
        score += if at == 0 {
            3
        } else if text[..at].ends_with([' ', '(', '/']) {
            2
        } else {
            1
        };
    }
    Some(score)
}

/// The commands whose label or tooltip matches `query`, best first (labels count twice as much
/// as tooltips; ties keep the palette's order).
pub fn matching_commands(query: &str) -> Vec<UiCommand> {
    let mut scored: Vec<(u32, usize, UiCommand)> = UiCommand::ALL
        .into_iter()
        .filter(|command| *command != UiCommand::CommandPalette)
        .enumerate()
        .filter_map(|(order, command)| {
            let by_label = match_score(query, command.label()).map(|score| score * 2);
            let by_tooltip = match_score(query, command.tooltip());
            by_label
                .max(by_tooltip)
                .map(|score| (score, order, command))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, _, command)| command).collect()
}

/// The label of the palette's search field.
pub const SEARCH_LABEL: &str = "Run command:";

/// The palette's state: closed, or open with what was typed and the highlighted row.
#[derive(Debug, Default)]
pub struct CommandPalette {
    open: bool,
    query: String,
    selected: usize,
    /// The text field takes the keyboard focus once, when the palette opens.
    focus_pending: bool,
}

impl CommandPalette {
    /// Opens the palette with an empty query.
    pub fn open(&mut self) {
        self.open = true;
        self.query.clear();
        self.selected = 0;
        self.focus_pending = true;
    }

    /// Whether the palette is showing.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Draws the palette when it is open; the command picked is sent through `sender`.
    pub fn ui(&mut self, ctx: &egui::Context, context: &CommandContext, sender: &CommandSender) {
        if !self.open {
            return;
        }
        let commands = matching_commands(&self.query);
        self.selected = self.selected.min(commands.len().saturating_sub(1));
        let (escape, enter, down, up) = ctx.input_mut(|input| {
            (
                input.consume_key(egui::Modifiers::NONE, Key::Escape),
                input.consume_key(egui::Modifiers::NONE, Key::Enter),
                input.consume_key(egui::Modifiers::NONE, Key::ArrowDown),
                input.consume_key(egui::Modifiers::NONE, Key::ArrowUp),
            )
        });
        if down {
            self.selected = (self.selected + 1).min(commands.len().saturating_sub(1));
        }
        if up {
            self.selected = self.selected.saturating_sub(1);
        }
        let mut picked = enter
            .then(|| commands.get(self.selected).copied())
            .flatten();
        egui::Window::new("Command palette")
            .title_bar(false)
            .collapsible(false)
            .resizable(false)
            .anchor(egui::Align2::CENTER_TOP, [0.0, 60.0])
            .fixed_size([460.0, 0.0])
            .show(ctx, |ui| {
                let field = ui
                    .horizontal(|ui| {
                        let label = ui.label(SEARCH_LABEL);
                        ui.add(
                            egui::TextEdit::singleline(&mut self.query)
                                .hint_text("type to filter, Enter runs, Esc closes")
                                .desired_width(f32::INFINITY),
                        )
                        .labelled_by(label.id)
                    })
                    .inner;
                if self.focus_pending {
                    field.request_focus();
                    self.focus_pending = false;
                }
                if field.changed() {
                    self.selected = 0;
                }
                ui.separator();
                if commands.is_empty() {
                    ui.weak("No command matches.");
                }
                for (row, command) in commands.iter().enumerate() {
                    if let Some(clicked) = self.row_ui(ui, *command, row, context) {
                        picked = Some(clicked);
                    }
                }
            });
        if let Some(command) = picked
            && command.availability(context).is_enabled()
        {
            self.open = false;
            sender.send(command);
        }
        if escape {
            self.open = false;
        }
    }

    /// One row: the label, the shortcut at the right, the reason when disabled; returns the
    /// command when the row was clicked.
    fn row_ui(
        &self,
        ui: &mut egui::Ui,
        command: UiCommand,
        row: usize,
        context: &CommandContext,
    ) -> Option<UiCommand> {
        let availability = command.availability(context);
        let shortcut = command.shortcut_text(ui.ctx()).unwrap_or_default();
        let label = RichText::new(command.label());
        let label = if availability.is_enabled() {
            label
        } else {
            label.weak()
        };
        let mut clicked = None;
        ui.horizontal(|ui| {
            let response = ui.selectable_label(row == self.selected, label);
            let response = match availability {
                crate::command::Availability::Disabled(why) => response.on_hover_text(why),
                crate::command::Availability::Enabled => response.on_hover_text(command.tooltip()),
            };
            if response.clicked() {
                clicked = Some(command);
            }
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                ui.weak(shortcut);
            });
        });
        clicked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_must_match_and_word_starts_rank_first() {
        assert_eq!(match_score("exp rep", "Export report…"), Some(3 + 2));
        assert_eq!(match_score("report", "Export report…"), Some(2));
        assert_eq!(match_score("port", "Export report…"), Some(1));
        assert_eq!(match_score("export csv", "Export report…"), None);
        assert_eq!(match_score("", "anything"), Some(0));
    }

    #[test]
    fn the_palette_finds_commands_by_label_and_by_what_they_do() {
        assert_eq!(
            matching_commands("csv").first(),
            Some(&UiCommand::ExportTimelineCsv)
        );
        assert_eq!(
            matching_commands("allocator").first(),
            Some(&UiCommand::ShowAllocator)
        );
        // "perfetto" is in the tooltip of the trace export and in its label.
        assert!(matching_commands("perfetto").contains(&UiCommand::ExportTimelinePerfetto));
        // Everything but the palette itself is listed with an empty query.
        assert_eq!(matching_commands("").len(), UiCommand::ALL.len() - 1);
        assert!(matching_commands("no such command").is_empty());
    }
}
