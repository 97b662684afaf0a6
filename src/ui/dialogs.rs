//! File dialogs behind a trait, so that tests (and a headless CI with no desktop portal) can
//! answer "which file?" without a window.

use std::path::PathBuf;

/// Asks the user for files. The app calls these from the UI thread in response to a menu item or
/// a shortcut; implementations may block while a native dialog is open (as native dialogs do).
pub trait FileDialogs {
    /// A capture (or other supported file) to open; `None` if the user cancelled.
    fn pick_file_to_open(&mut self) -> Option<PathBuf>;
    /// Where to save the current recording; `None` if the user cancelled.
    fn pick_save_path(&mut self, suggested_name: &str) -> Option<PathBuf>;
}

/// Native dialogs through `rfd` (xdg-desktop-portal on Linux, falling back to zenity).
#[cfg(feature = "native")]
#[derive(Debug, Default)]
pub struct NativeDialogs;

#[cfg(feature = "native")]
impl FileDialogs for NativeDialogs {
    fn pick_file_to_open(&mut self) -> Option<PathBuf> {
        rfd::FileDialog::new()
            .set_title("Open a capture")
            .add_filter("vramscope capture", &["vramcap"])
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
