//! File dialogs behind a trait, so that tests (and a headless CI with no desktop portal) can
//! answer "which file?" without a window.

use std::path::PathBuf;

/// Asks the user for files. The app calls these from the UI thread in response to a menu item or
/// a shortcut; implementations may block while a native dialog is open (as native dialogs do).
pub trait FileDialogs {
    /// Whether a dialog can appear at all; when not, the app asks for paths itself.
    fn available(&self) -> bool {
        true
    }
    /// Whether a "nothing chosen" that comes back at once means the dialog failed to appear
    /// (true for real dialogs, which a person cannot cancel within a fraction of a second;
    /// scripted test dialogs answer at once on purpose).
    fn instant_none_means_failure(&self) -> bool {
        false
    }
    /// A capture (or other supported file) to open; `None` if the user cancelled.
    fn pick_file_to_open(&mut self) -> Option<PathBuf>;
    /// Where to save the current recording; `None` if the user cancelled.
    fn pick_save_path(&mut self, suggested_name: &str) -> Option<PathBuf>;
    /// A folder to watch for new allocator snapshots; `None` if the user cancelled. Builds with no
    /// folder dialog (the web viewer) keep this default.
    fn pick_folder(&mut self) -> Option<PathBuf> {
        None
    }
    /// Where to write a timeline export (image, CSV or trace); `None` if the user cancelled.
    /// Builds that cannot write files (the web viewer) keep this default. The dialog asks
    /// before replacing an existing file.
    fn pick_export_path(
        &mut self,
        _export: super::export::TimelineExport,
        _suggested_name: &str,
    ) -> Option<PathBuf> {
        None
    }
    /// Where to write the diagnosis report; its extension (.html, .md or .json) picks the format.
    /// `None` if the user cancelled; builds that cannot write files keep this default.
    fn pick_report_path(&mut self, _suggested_name: &str) -> Option<PathBuf> {
        None
    }
}

/// Native dialogs through `rfd` (xdg-desktop-portal on Linux, falling back to zenity).
#[cfg(feature = "native")]
#[derive(Debug, Default)]
pub struct NativeDialogs;

#[cfg(feature = "native")]
impl FileDialogs for NativeDialogs {
    /// On Linux `rfd` needs the desktop portal (over the session D-Bus) or the `zenity`
    /// program; over `ssh -X` or a bare X server there is often neither, and every dialog would
    /// silently return nothing.
    fn available(&self) -> bool {
        if !cfg!(target_os = "linux") {
            return true;
        }
        let session_bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some()
            || std::env::var_os("XDG_RUNTIME_DIR")
                .is_some_and(|dir| std::path::Path::new(&dir).join("bus").exists());
        let zenity = std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| dir.join("zenity").is_file())
        });
        session_bus || zenity
    }

    fn instant_none_means_failure(&self) -> bool {
        true
    }

    fn pick_file_to_open(&mut self) -> Option<PathBuf> {
        rfd::FileDialog::new()
            .set_title("Open a capture, snapshot or log")
            .add_filter(
                "Captures, snapshots and logs",
                &["vramcap", "csv", "pickle", "pkl", "json", "log", "txt"],
            )
            .add_filter("vramscope capture", &["vramcap"])
            .add_filter("nvidia-smi CSV log", &["csv"])
            .add_filter("PyTorch memory snapshot", &["pickle", "pkl", "json"])
            .add_filter("Log", &["log", "txt"])
            .add_filter("All files", &["*"])
            .pick_file()
    }

    fn pick_save_path(&mut self, suggested_name: &str) -> Option<PathBuf> {
        rfd::FileDialog::new()
            .set_title("Save recording as")
            .add_filter("vramscope capture", &["vramcap"])
            .set_file_name(suggested_name)
            .save_file()
    }

    fn pick_folder(&mut self) -> Option<PathBuf> {
        rfd::FileDialog::new()
            .set_title("Watch a folder for new snapshots")
            .pick_folder()
    }

    fn pick_export_path(
        &mut self,
        export: super::export::TimelineExport,
        suggested_name: &str,
    ) -> Option<PathBuf> {
        let (title, file_type, extensions) = export.dialog();
        rfd::FileDialog::new()
            .set_title(title)
            .add_filter(file_type, extensions)
            .set_file_name(suggested_name)
            .save_file()
    }

    fn pick_report_path(&mut self, suggested_name: &str) -> Option<PathBuf> {
        rfd::FileDialog::new()
            .set_title("Export the diagnosis report")
            .add_filter("HTML page", &["html", "htm"])
            .add_filter("Markdown", &["md"])
            .add_filter("JSON", &["json"])
            .set_file_name(suggested_name)
            .save_file()
    }
}

/// No dialogs at all (the web viewer, where files arrive by drag and drop).
#[derive(Debug, Default)]
pub struct NoDialogs;

impl FileDialogs for NoDialogs {
    fn pick_file_to_open(&mut self) -> Option<PathBuf> {
        None
    }
    fn pick_save_path(&mut self, _suggested_name: &str) -> Option<PathBuf> {
        None
    }
}

/// The dialogs this build uses by default.
pub fn default_dialogs() -> Box<dyn FileDialogs> {
    #[cfg(feature = "native")]
    {
        Box::new(NativeDialogs)
    }
    #[cfg(not(feature = "native"))]
    {
        Box::new(NoDialogs)
    }
}

/// `name` in the home folder, as text for a path field (a full path, so the user sees where the
/// file goes); the home folder itself (ending in `/`) when `name` is empty.
pub fn path_in_home(name: &str) -> String {
    match (std::env::var_os("HOME").map(PathBuf::from), name.is_empty()) {
        (Some(home), true) => format!("{}/", home.display()),
        (Some(home), false) => home.join(name).display().to_string(),
        (None, _) => name.to_owned(),
    }
}

/// A typed path with `~/` read as the shell reads it.
pub fn expand_home(text: &str) -> PathBuf {
    match (text.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_paths_start_in_home_and_read_the_tilde() {
        let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
            return;
        };
        assert_eq!(
            path_in_home("r.html"),
            home.join("r.html").display().to_string()
        );
        assert_eq!(path_in_home(""), format!("{}/", home.display()));
        assert_eq!(expand_home("~/x/y.md"), home.join("x/y.md"));
        assert_eq!(expand_home("/abs/y.md"), PathBuf::from("/abs/y.md"));
        assert_eq!(expand_home("rel.md"), PathBuf::from("rel.md"));
    }
}
