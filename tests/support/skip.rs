//! Tests and bench smoke tests that cannot do their work on this machine (no NVIDIA driver)
//! report themselves as skipped instead of passing quietly: a line on stderr, and a line in the
//! file named by `VRAMSCOPE_SKIP_LOG`, which `scripts/test` sets, counts and prints after the run
//! (CI's output shows "SKIPPED n tests" with each test and why).

use std::io::Write as _;

/// The environment variable naming the file skipped tests append to.
pub const SKIP_LOG_ENV: &str = "VRAMSCOPE_SKIP_LOG";

/// Records that `test` did not do its work here, because of `reason`.
pub fn skipped(test: &str, reason: &str) {
    let log = std::env::var_os(SKIP_LOG_ENV).map(std::path::PathBuf::from);
    record_skip(log.as_deref(), test, reason);
}

/// [`skipped`] with the log file given (`None`: stderr only).
pub fn record_skip(log: Option<&std::path::Path>, test: &str, reason: &str) {
    let line = format!("{test}: {reason}");
    eprintln!("SKIPPED {line}");
    if let Some(path) = log
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        // One write per line: appends from the test threads do not interleave.
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}
