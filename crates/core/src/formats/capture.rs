//! Opens a capture in any format vramscope reads as one (`.vramcap`, nvidia-smi CSV logs), by
//! content: the GUI, `inspect`, `diagnose --capture` and `export` all open captures here.

use super::nvidia_smi::{self, SmiError, SmiReadOptions};
use super::sniff::{FileKind, SNIFF_BYTES, sniff};
use super::vramcap::{self, VramcapError};
use crate::model::Capture;

/// Why a file could not be opened as a capture. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CaptureFileError {
    #[error(transparent)]
    Vramcap(#[from] VramcapError),
    #[error(transparent)]
    NvidiaSmi(#[from] SmiError),
    /// The file is something else; the message says what, and what to do with it.
    #[error("{file}: not a vramscope capture (nor an nvidia-smi CSV log): it is {}{}", .kind.describe(), hint(*.kind))]
    NotACapture { file: String, kind: FileKind },
    #[error("{file}: cannot read the file: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
}

/// What a file that is not a capture is, and what to do with it, for the capture readers'
/// errors.
pub(super) fn not_a_capture_detail(bytes: &[u8]) -> String {
    let kind = sniff(&bytes[..bytes.len().min(SNIFF_BYTES)]);
    format!("it is {}{}", kind.describe(), hint(kind))
}

/// What to do with a file that is not a capture.
fn hint(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Snapshot | FileKind::Pickle => {
            " (an allocator snapshot? run `vramscope analyze` on it, or open it in the app)"
        }
        FileKind::Gzip => " (decompress it first)",
        FileKind::Binary => " (it does not start with the vramcap signature)",
        FileKind::Text => {
            " (a log? give it to `vramscope diagnose --log`; nvidia-smi logs open when written \
             with --query-gpu=… --format=csv)"
        }
        _ => "",
    }
}

/// Decodes a capture from a file's bytes: a `.vramcap`, or an nvidia-smi CSV log (its local
/// times read with `options`). `file` names the file in errors.
pub fn read_bytes(
    bytes: &[u8],
    file: &str,
    options: SmiReadOptions,
) -> Result<Capture, CaptureFileError> {
    match sniff(&bytes[..bytes.len().min(SNIFF_BYTES)]) {
        FileKind::NvidiaSmiCsv(_) => {
            let text = std::str::from_utf8(bytes).map_err(|err| SmiError::BadLine {
                file: file.to_owned(),
                line: 1 + bytes[..err.valid_up_to()]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count(),
                problem: "the line is not UTF-8 text".to_owned(),
            })?;
            Ok(nvidia_smi::read_str(text, file, options)?)
        }
        FileKind::Vramcap => Ok(vramcap::read_bytes(bytes, file)?),
        // A damaged or cut signature is the capture reader's to describe.
        _ if bytes.len() < vramcap::MAGIC.len() && vramcap::MAGIC.starts_with(bytes) => {
            Ok(vramcap::read_bytes(bytes, file)?)
        }
        kind => Err(CaptureFileError::NotACapture {
            file: file.to_owned(),
            kind,
        }),
    }
}

/// How to read nvidia-smi times of bytes that come without a file (dropped on the window or the
/// web page): this machine's time zone now (UTC in the web viewer); a log without times ends now.
pub fn read_options_now() -> SmiReadOptions {
    let now_ms = crate::model::now_unix_ms();
    SmiReadOptions {
        #[cfg(feature = "native")]
        utc_offset_minutes: local_utc_offset_minutes(now_ms),
        #[cfg(not(feature = "native"))]
        utc_offset_minutes: 0,
        untimed_end_ms: now_ms,
    }
}

/// Reads a capture file of any supported format. nvidia-smi's local times are read in this
/// machine's time zone at the file's modification time; a log without times ends then.
#[cfg(feature = "native")]
pub fn read_file(path: &std::path::Path) -> Result<Capture, CaptureFileError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| CaptureFileError::Io {
        file: file.clone(),
        source,
    })?;
    let modified_ms = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64);
    let options = SmiReadOptions {
        utc_offset_minutes: local_utc_offset_minutes(modified_ms),
        untimed_end_ms: modified_ms,
    };
    read_bytes(&bytes, &file, options)
}

/// Reads several capture files and joins nvidia-smi process logs to the GPU log of the same run
/// (`nvidia-smi --query-gpu` and `--query-compute-apps` write two files): when exactly one of the
/// files has GPU readings, every process-only log is merged into it. Returns (name, capture)
/// pairs, merged names joined with ` + `.
#[cfg(feature = "native")]
pub fn read_files(
    paths: &[std::path::PathBuf],
) -> Result<Vec<(String, Capture)>, CaptureFileError> {
    let mut opened = Vec::with_capacity(paths.len());
    for path in paths {
        opened.push((path.display().to_string(), read_file(path)?));
    }
    Ok(join_process_logs(opened))
}

/// Reads the files of one capture (a `.vramcap`, or the nvidia-smi logs of one run, joined):
/// the commands that describe or export one capture use it. The error says what went wrong.
#[cfg(feature = "native")]
pub fn read_one(paths: &[std::path::PathBuf]) -> Result<(String, Capture), String> {
    let mut captures = read_files(paths).map_err(|err| err.to_string())?;
    if captures.len() == 1 {
        Ok(captures.remove(0))
    } else {
        Err(format!(
            "{} files make {} captures: give one file, or an nvidia-smi --query-gpu log with the \
             --query-compute-apps logs of the same run",
            paths.len(),
            captures.len()
        ))
    }
}

/// See [`read_files`]: merges process-only nvidia-smi logs into the one capture with GPU
/// readings, when there is exactly one.
pub fn join_process_logs(opened: Vec<(String, Capture)>) -> Vec<(String, Capture)> {
    let with_gpus = opened
        .iter()
        .filter(|(_, c)| !nvidia_smi::is_process_log(c))
        .count();
    let process_logs = opened.len() - with_gpus;
    if with_gpus != 1 || process_logs == 0 {
        return opened;
    }
    let (apps, mut rest): (Vec<_>, Vec<_>) = opened
        .into_iter()
        .partition(|(_, c)| nvidia_smi::is_process_log(c));
    let Some((mut name, mut capture)) = rest.pop() else {
        return apps;
    };
    for (apps_name, apps_capture) in &apps {
        capture = nvidia_smi::combine(capture, apps_capture);
        name = format!("{name} + {apps_name}");
    }
    vec![(name, capture)]
}

/// This machine's offset from UTC in minutes at `at_ms` (Unix ms), from the C library's time
/// zone rules; 0 where they cannot be read.
#[cfg(feature = "native")]
fn local_utc_offset_minutes(at_ms: crate::model::UnixMs) -> i32 {
    #[cfg(unix)]
    {
        let seconds = (at_ms / 1000) as libc::time_t;
        // SAFETY: `tm` is plain data that `localtime_r` fills; both pointers are valid for the
        // call, and `localtime_r` is the thread-safe variant.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        let filled = unsafe { libc::localtime_r(&seconds, &mut tm) };
        if filled.is_null() {
            0
        } else {
            (tm.tm_gmtoff / 60) as i32
        }
    }
    #[cfg(not(unix))]
    {
        let _ = at_ms;
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_file_is_named_for_what_it_is() {
        let err = read_bytes(
            b"\x89PNG\r\n\x1a\n\0\0",
            "holiday.png",
            SmiReadOptions::default(),
        )
        .expect_err("not a capture");
        assert_eq!(
            err.to_string(),
            "holiday.png: not a vramscope capture (nor an nvidia-smi CSV log): it is a PNG image"
        );
        let err = read_bytes(
            b"\x80\x04\x95\x10\0\0",
            "snap.pickle",
            SmiReadOptions::default(),
        )
        .expect_err("not a capture");
        assert!(err.to_string().contains("vramscope analyze"), "{err}");
        let err = read_bytes(b"VRAM", "cut.vramcap", SmiReadOptions::default())
            .expect_err("cut in the signature");
        assert!(err.to_string().contains("inside the signature"), "{err}");
    }

    #[test]
    fn an_nvidia_smi_log_opens_as_a_capture() {
        let capture = read_bytes(
            b"timestamp, memory.used [MiB], memory.total [MiB]\n2026/12/01 13:59:16.991, 612 MiB, 143771 MiB\n",
            "gpu.csv",
            SmiReadOptions::default(),
        )
        .expect("reads");
        assert_eq!(capture.sample_count(), 1);
    }
}
