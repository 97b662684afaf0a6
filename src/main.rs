//! The `vramscope` binary: the command line (GUI or a headless command) on native targets, the
//! web viewer on wasm.

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    vramscope::cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {
    vramscope::web::start();
}
