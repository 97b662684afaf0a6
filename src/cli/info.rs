//! `vramscope info`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct InfoArgs {}

pub fn run(_args: InfoArgs) -> ExitCode {
    super::fail("info: not built yet")
}
