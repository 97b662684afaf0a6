//! Running the `vramscope` binary the way a user does, for the tests of its commands.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `vramscope ARGS` to the end (stdin closed) and returns its exit status and output.
pub fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run vramscope: {error}"))
}

/// Runs `vramscope COMMAND ARGS` (paths as given) and returns its exit code (-1 when a signal
/// ended it), stdout and stderr as text.
pub fn run_command(command: &str, args: &[&OsStr]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .arg(command)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run vramscope: {error}"));
    (
        output.status.code().unwrap_or(-1),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// A command's output as text (invalid UTF-8 shown as U+FFFD).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A file of the real case corpus (`tests/fixtures/cases/NAME`).
pub fn case(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cases")
        .join(name)
}
