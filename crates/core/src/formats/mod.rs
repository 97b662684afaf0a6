//! Readers and writers of files: `.vramcap` captures, PyTorch allocator snapshots, nvidia-smi
//! CSV logs, and the exports (CSV tables, Chrome/Perfetto traces). [`sniff`] says what a file is;
//! [`capture`] opens any file that holds a capture.

pub mod capture;
pub mod nvidia_smi;
pub mod perfetto;
pub mod pytorch;
pub mod sniff;
pub mod timeline_csv;
pub mod vramcap;

/// Writes `bytes` to `path` through a sibling temporary file and a rename, so that a failed or
/// interrupted write never leaves a half-written file under the chosen name.
#[cfg(feature = "native")]
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".partial");
    let temporary = std::path::PathBuf::from(temporary);
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&temporary);
        })
}
