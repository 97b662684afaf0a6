//! The `vramscope` binary: the command line (GUI or a headless command) on native targets, the
//! web viewer on wasm. Everything it runs lives in the crates under `crates/`.

#[cfg(not(target_arch = "wasm32"))]
mod cli;
#[cfg(target_arch = "wasm32")]
mod web;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {
    web::start();
}
