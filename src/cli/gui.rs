//! Starting the GUI from the command line.

use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(_files: Vec<PathBuf>, _demo: bool) -> ExitCode {
    super::fail("the GUI is not built yet")
}
