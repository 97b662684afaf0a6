//! `vramscope inspect`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {}

pub fn run(_args: InspectArgs) -> ExitCode {
    super::fail("inspect: not built yet")
}
