//! Big allocator snapshots for benchmarks, built once under `target/bench/` by
//! `scripts/make_big_snapshot.py` (the real H200 `train.pickle` trace repeated with shifted
//! times, frame lists memo-shared as in PyTorch's own dumps).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/bench/NAME`, built to at least `min_mb` megabytes if it is not there yet.
pub fn big_snapshot(name: &str, min_mb: u32) -> Result<PathBuf, String> {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = manifest_dir.join("target/bench").join(name);
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
    println!("building {} ...", path.display());
    let status = Command::new("python3")
        .arg(manifest_dir.join("scripts/make_big_snapshot.py"))
        .arg(manifest_dir.join("tests/fixtures/pytorch/train.pickle"))
        .arg(&path)
        .arg(min_mb.to_string())
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !status.success() {
        return Err("make_big_snapshot.py failed".to_owned());
    }
    Ok(path)
}
