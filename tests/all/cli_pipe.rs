//! Report commands piped into a reader that stops early (`| head`) end quietly instead of
//! panicking with "failed printing to stdout: Broken pipe".

use std::io::Read;
use std::process::{Command, Stdio};

#[test]
fn analyze_into_a_closed_pipe_ends_without_a_panic() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cases/fragmentation.pickle"
    );
    // 40 copies print about 230 KB, more than a pipe holds (64 KiB), so the writer must meet
    // the closed pipe
    let mut args = vec!["analyze", "--json"];
    args.extend(std::iter::repeat_n(fixture, 40));
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vramscope starts");
    // read one byte, then close our end of the pipe, as `head -c 1` does
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    let output = child.wait_with_output().expect("vramscope ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}
