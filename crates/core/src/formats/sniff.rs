//! The one place that says what a file is, from its first bytes (and, where the bytes cannot
//! tell, its name). The capture reader's "not a capture" message, the log analyzer's "not a log"
//! refusal and the app's routing of opened and dropped files all ask here, so they cannot
//! disagree about a file.

use std::path::Path;

use super::nvidia_smi::{self, SmiLogKind};

/// Bytes looked at to decide what a file holds (a few lines of an nvidia-smi log, the start of
/// a pickle, NUL bytes of a binary file).
pub const SNIFF_BYTES: usize = 4096;

/// What a file holds, judged from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A vramscope capture (`VRAMCAP\x1a`).
    Vramcap,
    /// An nvidia-smi CSV log (`--query-gpu` or `--query-compute-apps`): read as a capture.
    NvidiaSmiCsv(SmiLogKind),
    /// A Python pickle or JSON document that starts like a PyTorch memory snapshot.
    Snapshot,
    /// Any other Python pickle (protocol 2 to 5).
    Pickle,
    Png,
    Gzip,
    Zip,
    /// Text in UTF-16 (PowerShell's `>` writes it); vramscope reads UTF-8.
    Utf16,
    /// Nothing at all.
    Empty,
    /// Any other file with NUL bytes near its start.
    Binary,
    /// UTF-8 text that is none of the above: a training log, `dmesg`, a journal.
    Text,
}

impl FileKind {
    /// What the file is, for messages ("… is not a capture: it is a PNG image").
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Vramcap => "a vramscope capture (.vramcap)",
            FileKind::NvidiaSmiCsv(SmiLogKind::Gpu) => "an nvidia-smi --query-gpu CSV log",
            FileKind::NvidiaSmiCsv(SmiLogKind::ComputeApps) => {
                "an nvidia-smi --query-compute-apps CSV log"
            }
            FileKind::Snapshot => "a PyTorch memory snapshot (pickle or JSON)",
            FileKind::Pickle => "a Python pickle (a PyTorch memory snapshot?)",
            FileKind::Png => "a PNG image",
            FileKind::Gzip => "gzip-compressed data",
            FileKind::Zip => "a zip archive (a PyTorch .pt file?)",
            FileKind::Utf16 => "UTF-16 text",
            FileKind::Empty => "an empty file",
            FileKind::Binary => "binary data of an unknown kind",
            FileKind::Text => "text",
        }
    }

    /// True for the files vramscope opens as a capture.
    pub fn is_capture(self) -> bool {
        matches!(self, FileKind::Vramcap | FileKind::NvidiaSmiCsv(_))
    }
}

/// What `head` (the first [`SNIFF_BYTES`] of a file, or fewer) is.
pub fn sniff(head: &[u8]) -> FileKind {
    let head = &head[..head.len().min(SNIFF_BYTES)];
    match head {
        [] => return FileKind::Empty,
        _ if head.starts_with(&super::vramcap::MAGIC) => return FileKind::Vramcap,
        _ if head.starts_with(b"\x89PNG\r\n\x1a\n") => return FileKind::Png,
        [0x1f, 0x8b, ..] => return FileKind::Gzip,
        [b'P', b'K', 3 | 5, 4 | 6, ..] => return FileKind::Zip,
        [0xff, 0xfe, ..] | [0xfe, 0xff, ..] => return FileKind::Utf16,
        _ => {}
    }
    if super::pytorch::looks_like_snapshot(head) {
        return FileKind::Snapshot;
    }
    if let [0x80, 2..=5, ..] = head {
        return FileKind::Pickle;
    }
    // NUL bytes make a binary file; invalid UTF-8 alone does not (a log in Latin-1 is a log).
    if head.contains(&0) {
        return FileKind::Binary;
    }
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        Err(err) => std::str::from_utf8(&head[..err.valid_up_to()]).unwrap_or_default(),
    };
    match nvidia_smi::sniff(text) {
        Some(kind) => FileKind::NvidiaSmiCsv(kind),
        None => FileKind::Text,
    }
}

/// Which reader the app hands a file to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// A capture: `.vramcap` or an nvidia-smi CSV log.
    Capture,
    /// A PyTorch allocator snapshot (pickle or JSON).
    Snapshot,
    /// Text: training output, `dmesg`, a journal.
    Log,
}

/// Decides which reader opens `name`, from its first bytes (`head`; may be empty when they
/// cannot be looked at in advance, e.g. a pipe): what the bytes say wins over the extension, so
/// a misnamed file still opens, except that a `.log`/`.txt` text stays a log (lines such as
/// "[rank0] … blocks …" can look like the start of a JSON snapshot). Binary files of unknown type
/// go to the capture reader, whose error says what the file is.
pub fn route(name: &str, head: &[u8]) -> Route {
    let extension = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let kind = sniff(head);
    let named_log = matches!(extension.as_deref(), Some("log" | "txt"));
    match kind {
        FileKind::Vramcap | FileKind::NvidiaSmiCsv(_) => Route::Capture,
        // A JSON-looking text named .log is a log; a binary pickle named .log is a snapshot.
        FileKind::Snapshot if named_log && is_text(head) => Route::Log,
        FileKind::Snapshot => Route::Snapshot,
        FileKind::Text if named_log => Route::Log,
        FileKind::Empty => match extension.as_deref() {
            Some("pickle" | "pkl" | "json") => Route::Snapshot,
            Some("log" | "txt") => Route::Log,
            _ => Route::Capture,
        },
        FileKind::Text => match extension.as_deref() {
            Some("vramcap") => Route::Capture,
            Some("pickle" | "pkl" | "json") => Route::Snapshot,
            _ => Route::Log,
        },
        FileKind::Pickle => Route::Snapshot,
        _ => match extension.as_deref() {
            Some("pickle" | "pkl" | "json") => Route::Snapshot,
            _ => Route::Capture,
        },
    }
}

/// UTF-8 without NUL bytes (a character cut at the end of `head` is fine).
fn is_text(head: &[u8]) -> bool {
    !head.contains(&0)
        && match std::str::from_utf8(head) {
            Ok(_) => true,
            Err(err) => err.error_len().is_none(),
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_files_by_their_first_bytes() {
        let cases: [(&[u8], FileKind); 12] = [
            (b"VRAMCAP\x1a\x01\x00", FileKind::Vramcap),
            (b"\x89PNG\r\n\x1a\n\x00", FileKind::Png),
            (b"\x1f\x8b\x08\x00", FileKind::Gzip),
            (b"PK\x03\x04\x14\x00", FileKind::Zip),
            (b"\xff\xfes\x00t\x00", FileKind::Utf16),
            (b"\x80\x04\x95\x10\x00\x00\x00", FileKind::Pickle),
            (b"\x80\x04}q\x00segments", FileKind::Snapshot),
            (br#"{"segments": [], "device_traces": []}"#, FileKind::Snapshot),
            (b"", FileKind::Empty),
            (b"step 1\x00 allocated", FileKind::Binary),
            (b"step 1 loss 0.3\nCUDA out of memory", FileKind::Text),
            (
                b"timestamp, index, memory.used [MiB], memory.total [MiB]\n2026/12/01 13:59:16.991, 0, 0 MiB, 143771 MiB\n",
                FileKind::NvidiaSmiCsv(SmiLogKind::Gpu),
            ),
        ];
        for (head, kind) in cases {
            assert_eq!(sniff(head), kind, "{head:?}");
        }
        assert_eq!(
            sniff(b"pid, process_name, used_gpu_memory [MiB]\n489, python3, 138248 MiB\n"),
            FileKind::NvidiaSmiCsv(SmiLogKind::ComputeApps)
        );
        // A multi-byte character cut by the window is still text.
        assert_eq!(sniff(&"été".as_bytes()[..1]), FileKind::Text);
        assert_eq!(
            sniff(b"caf\xe9 au lait"),
            FileKind::Text,
            "Latin-1 text is text"
        );
    }

    #[test]
    fn routes_by_content_then_name() {
        let capture = crate::formats::vramcap::write_bytes(&crate::model::Capture::new(
            crate::model::CaptureMeta::default(),
            Vec::new(),
        ));
        assert_eq!(route("misnamed.log", &capture), Route::Capture);
        let snapshot_json = br#"{"segments": [], "device_traces": []}"#;
        assert_eq!(route("dump.out", snapshot_json), Route::Snapshot);
        assert_eq!(
            route("train.log", b"[rank0] freed 3 blocks, total_size 2 GiB"),
            Route::Log
        );
        assert_eq!(
            route("dump.log", b"\x80\x04}q\x00segments"),
            Route::Snapshot
        );
        assert_eq!(route("dump.pkl", b""), Route::Snapshot);
        assert_eq!(route("run.VRAMCAP", b""), Route::Capture);
        assert_eq!(
            route("train.out", b"step 1 loss 0.3\nCUDA out of memory"),
            Route::Log
        );
        assert_eq!(route("holiday.png", b"\x89PNG\r\n\x1a\n"), Route::Capture);
        assert_eq!(route("notes", &"été".as_bytes()[..1]), Route::Log);
        assert_eq!(
            route(
                "gpu.log",
                b"timestamp, memory.used [MiB]\n2026/12/01 13:59:16.991, 0 MiB\n"
            ),
            Route::Capture,
            "an nvidia-smi log opens as a capture whatever its name"
        );
    }
}
