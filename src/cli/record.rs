//! `vramscope record`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct RecordArgs {}

pub fn run(_args: RecordArgs) -> ExitCode {
    super::fail("record: not built yet")
}
