//! The log analyzer: finds every line of a training log, `dmesg` or journal that says something
//! about GPU memory or GPU health, explains it, and turns the numbers in it into evidence.
//!
//! Recognised: PyTorch OOMs in every wording since 1.4 (and the `cudaMallocAsync` backend's),
//! TensorFlow and JAX/XLA OOMs, CUDA errors by name, code or message, `NVRM: Xid` lines, GPUs that
//! fell off the bus, ECC errors, cuDNN and cuBLAS failures. Patterns follow the verbatim messages
//! in `tests/fixtures/logs/` and the code that prints them (`docs/sources.md` § "Framework
//! messages the log analyzer reads").
//!
//! Input is read line by line with a bounded line length and a bounded number of kept matches, so
//! a multi-gigabyte or binary file costs time but not unbounded memory.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::cuda_errors;
use super::finding::{Category, Wizard};
use super::size::parse_size;
use crate::formats::sniff::{FileKind, SNIFF_BYTES, sniff};
use crate::model::format_bytes;

/// Longest line kept; the rest of a longer line is skipped (a real OOM message is < 1 KiB).
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most matches kept per log; further matches are counted in [`LogAnalysis::dropped_matches`].
pub const MAX_MATCHES: usize = 10_000;
/// Longest excerpt of a line kept in a match.
const MAX_EXCERPT_CHARS: usize = 600;

/// Which framework printed an OOM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Framework {
    PyTorch,
    TensorFlow,
    Jax,
    /// A bare CUDA out-of-memory error (cuBLAS/cuDNN workspace, context creation, NCCL, ...).
    Cuda,
}

/// The numbers an out-of-memory message carries. Every field is optional because each wording
/// carries a different subset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomNumbers {
    pub device_index: Option<u32>,
    /// The (rounded) size that could not be allocated.
    pub requested_bytes: Option<u64>,
    /// Device capacity as the framework saw it (`cudaMemGetInfo` total).
    pub total_bytes: Option<u64>,
    /// Free on the device after the allocator's retry.
    pub free_bytes: Option<u64>,
    /// "Including non-PyTorch memory, this process has X memory in use".
    pub this_process_bytes: Option<u64>,
    /// "Process P has X memory in use", one per other process.
    pub other_processes: Vec<OtherProcess>,
    /// "X allowed;" — the per-process memory fraction cap.
    pub allowed_bytes: Option<u64>,
    /// Allocated by the framework (PyTorch: including private pools).
    pub allocated_bytes: Option<u64>,
    /// Allocated in private pools (CUDA graphs).
    pub private_pool_bytes: Option<u64>,
    /// Reserved (cached) by the allocator but not allocated.
    pub reserved_unallocated_bytes: Option<u64>,
    /// Reserved by the allocator in total (allocated + cached).
    pub reserved_bytes: Option<u64>,
}

/// Another process on the same GPU, as listed in a PyTorch OOM message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherProcess {
    pub pid: u32,
    pub used_bytes: u64,
}

/// What kind of line was recognised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum LineKind {
    /// An out-of-memory error or warning from a framework or CUDA.
    OutOfMemory {
        framework: Framework,
        numbers: OomNumbers,
        /// True for allocator warnings that say they are not a failure.
        non_fatal: bool,
        /// True when it is host (CPU) memory that ran out.
        host_memory: bool,
    },
    /// A CUDA error other than out-of-memory.
    CudaError { code: Option<u32>, name: String },
    /// An `NVRM: Xid` line.
    Xid {
        code: u32,
        pci: String,
        pid: Option<u32>,
        process: Option<String>,
        message: String,
    },
    /// `NVRM: GPU at ... has fallen off the bus.`
    FallenOffBus,
    /// An ECC error mentioned in the text, or a non-zero uncorrectable count in `nvidia-smi -q`.
    Ecc,
    /// Row remapping pending or failed, as `nvidia-smi -q` reports it.
    RowRemap { failed: bool },
    /// A cuDNN failure (`CUDNN_STATUS_*`).
    Cudnn { status: String },
    /// A cuBLAS failure (`CUBLAS_STATUS_*`).
    Cublas { status: String },
}

/// One recognised line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineMatch {
    /// 1-based line number in the log.
    pub line: usize,
    pub kind: LineKind,
    /// The line (trimmed, at most 600 characters).
    pub text: String,
    /// What the line means, with its numbers.
    pub meaning: String,
    pub category: Category,
    /// The wizard to continue in.
    pub wizard: Wizard,
}

/// Versions mentioned in a log, with the line they were found on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogVersions {
    /// NVIDIA driver version (from `nvidia-smi` output or the `NVRM: loaded` line).
    pub driver_version: Option<(String, usize)>,
    /// CUDA version a framework was built for (e.g. from `torch 2.4.0+cu121` → `12.1`), as
    /// `(major, minor)`.
    pub framework_cuda: Option<((u32, u32), usize)>,
    /// Highest CUDA version the driver supports (nvidia-smi's "CUDA Version"), as `(major, minor)`.
    pub driver_cuda: Option<((u32, u32), usize)>,
}

/// A memory figure printed at each training step (e.g. `step 12 allocated 4.06 GiB`), for the
/// per-step leak rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSeries {
    /// What the figure is called in the log (`allocated`, `reserved`, `memory`, ...).
    pub label: String,
    pub points: Vec<StepPoint>,
}

/// One step's figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepPoint {
    pub step: u64,
    pub bytes: u64,
    /// 1-based line number.
    pub line: usize,
}

/// Most step figures kept per log (over all series); longer logs are sampled evenly.
pub const MAX_STEP_POINTS: usize = 200_000;

/// Everything the analyzer found in one log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogAnalysis {
    /// File name (or `pasted text`).
    pub name: String,
    pub lines_read: usize,
    pub matches: Vec<LineMatch>,
    /// Matches beyond [`MAX_MATCHES`] that were counted but not kept.
    pub dropped_matches: usize,
    /// Lines longer than [`MAX_LINE_BYTES`] (only their beginning was examined).
    pub long_lines: usize,
    pub versions: LogVersions,
    /// Memory figures printed per training step, one series per label.
    pub step_series: Vec<StepSeries>,
    /// Lines with a per-step memory figure that are not also in `matches` (they drive the
    /// per-step leak rule, so they count as recognised).
    pub step_memory_lines: usize,
}

impl LogAnalysis {
    /// Every line the analyzer recognised: kept and dropped matches, and per-step memory lines.
    pub fn recognised_lines(&self) -> usize {
        self.matches.len() + self.dropped_matches + self.step_memory_lines
    }

    /// "3 recognised lines of 1200" / "1 recognised line of 8", for notices and summaries.
    pub fn recognised_summary(&self) -> String {
        let recognised = self.recognised_lines();
        format!(
            "{recognised} recognised {} of {}",
            if recognised == 1 { "line" } else { "lines" },
            self.lines_read
        )
    }

    /// The out-of-memory matches, in log order.
    pub fn ooms(&self) -> impl Iterator<Item = (&LineMatch, &OomNumbers, Framework)> {
        self.matches.iter().filter_map(|m| match &m.kind {
            LineKind::OutOfMemory {
                framework,
                numbers,
                non_fatal: false,
                host_memory: false,
            } => Some((m, numbers, *framework)),
            _ => None,
        })
    }

    /// The OOM with the most numbers (the most informative), preferring the last among equals.
    pub fn best_oom(&self) -> Option<(&LineMatch, &OomNumbers, Framework)> {
        self.ooms()
            .max_by_key(|(m, n, _)| (oom_richness(n), m.line))
    }
}

fn oom_richness(n: &OomNumbers) -> usize {
    [
        n.requested_bytes,
        n.total_bytes,
        n.free_bytes,
        n.this_process_bytes,
        n.allowed_bytes,
        n.allocated_bytes,
        n.reserved_unallocated_bytes,
        n.reserved_bytes,
    ]
    .iter()
    .filter(|v| v.is_some())
    .count()
        + n.other_processes.len()
}

/// Errors from reading a log file.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot read log {file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is binary: reading it as text would find nothing and call it healthy.
    #[error("{file} is not a text log: it is {}; {}", .kind.describe(), not_a_log_hint(*.kind))]
    NotText { file: String, kind: FileKind },
}

/// What to do with a file given as a log that is not one, for the command line.
pub fn not_a_log_hint(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Pickle | FileKind::Snapshot => "give it with --snapshot",
        FileKind::Vramcap | FileKind::NvidiaSmiCsv(_) => "give it with --capture",
        FileKind::Gzip => "decompress it first (zcat FILE > FILE.log) and give the text",
        FileKind::Zip => "extract the log from it first",
        FileKind::Utf16 => "convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8 FILE > FILE.log)",
        _ => {
            "give a text log (training output, dmesg, journalctl -k), --snapshot for a PyTorch snapshot or --capture for a .vramcap or nvidia-smi CSV log"
        }
    }
}

/// What a file given as a log is instead, from its first bytes ([`crate::formats::sniff`]);
/// `None` for text, which is analysed. A text that merely starts like a JSON snapshot is still
/// read as a log (torchrun's "[rank0]: … blocks …" lines look like one).
pub fn sniff_not_text(head: &[u8]) -> Option<FileKind> {
    match sniff(head) {
        FileKind::Text | FileKind::Empty => None,
        FileKind::Snapshot if !matches!(head.first(), Some(0x80)) => None,
        kind => Some(kind),
    }
}

/// Reads and analyses a log file. A binary file is refused ([`LogError::NotText`]).
pub fn analyze_file(path: &Path) -> Result<LogAnalysis, LogError> {
    analyze_path(path, &path.display().to_string())
}

/// [`analyze_file`] with the log named `name` in the analysis and in errors.
pub fn analyze_path(path: &Path, name: &str) -> Result<LogAnalysis, LogError> {
    let file = std::fs::File::open(path).map_err(|source| LogError::Io {
        file: name.to_owned(),
        source,
    })?;
    analyze_reader(BufReader::new(file), name).map_err(|source| match not_text_kind(&source) {
        Some(kind) => LogError::NotText {
            file: name.to_owned(),
            kind,
        },
        None => LogError::Io {
            file: name.to_owned(),
            source,
        },
    })
}

/// Analyses a file's bytes (a file dropped on the window). A binary file is refused
/// ([`LogError::NotText`]).
pub fn analyze_bytes(bytes: &[u8], name: &str) -> Result<LogAnalysis, LogError> {
    if let Some(kind) = sniff_not_text(bytes) {
        return Err(LogError::NotText {
            file: name.to_owned(),
            kind,
        });
    }
    analyze_reader(bytes, name).map_err(|source| LogError::Io {
        file: name.to_owned(),
        source,
    })
}

/// Analyses pasted text. Text with NUL characters is not refused here (it was typed or pasted)
/// but only its lines are analysed, as for any text.
pub fn analyze_text(text: &str, name: &str) -> LogAnalysis {
    let mut reader = BufReader::new(text.as_bytes());
    // Reading from a slice cannot fail.
    scan(&mut reader, name).unwrap_or_else(|_| LogAnalysis {
        name: name.to_owned(),
        ..Default::default()
    })
}

/// The kind of binary file an error from [`analyze_reader`] reports, if that is what it reports.
fn not_text_kind(error: &std::io::Error) -> Option<FileKind> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<NotTextError>())
        .map(|e| e.0)
}

/// The error [`analyze_reader`] returns for a binary file (kind `InvalidData`).
#[derive(Debug, thiserror::Error)]
#[error("not a text log: it is {}", .0.describe())]
struct NotTextError(FileKind);

/// Analyses a log from any reader, line by line, with bounded memory. A binary input (see
/// [`sniff_not_text`]) is refused with an `InvalidData` error saying what it is, so a snapshot or
/// an image is never reported as a healthy log.
pub fn analyze_reader(reader: impl Read, name: &str) -> std::io::Result<LogAnalysis> {
    let mut reader = BufReader::with_capacity(SNIFF_BYTES.max(8 * 1024), reader);
    let head = loop {
        match reader.fill_buf() {
            Ok(head) => break head,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    if let Some(kind) = sniff_not_text(head) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            NotTextError(kind),
        ));
    }
    scan(&mut reader, name)
}

/// Scans every line of `reader`.
fn scan(reader: &mut impl BufRead, name: &str) -> std::io::Result<LogAnalysis> {
    let mut analysis = LogAnalysis {
        name: name.to_owned(),
        ..Default::default()
    };
    let mut state = ScanState::default();
    let mut buffer = Vec::with_capacity(4096);
    loop {
        buffer.clear();
        let (read_any, too_long) = read_bounded_line(reader, &mut buffer)?;
        if !read_any {
            break;
        }
        analysis.lines_read += 1;
        if too_long {
            analysis.long_lines += 1;
        }
        let line = String::from_utf8_lossy(&buffer);
        let line = strip_ansi(&line);
        let line_number = analysis.lines_read;
        scan_line(
            &mut analysis,
            &mut state,
            line_number,
            line.trim_end_matches(['\r', '\n']),
        );
    }
    Ok(analysis)
}

/// Reads one line into `buffer`, keeping at most [`MAX_LINE_BYTES`]. Returns (anything read,
/// line was cut).
fn read_bounded_line(
    reader: &mut impl BufRead,
    buffer: &mut Vec<u8>,
) -> std::io::Result<(bool, bool)> {
    let mut read_any = false;
    let mut too_long = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok((read_any, too_long));
        }
        read_any = true;
        let (chunk, found_newline) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], true),
            None => (available, false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(buffer.len());
        if chunk.len() > room {
            too_long = true;
        }
        buffer.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let consumed = chunk.len() + usize::from(found_newline);
        reader.consume(consumed);
        if found_newline {
            return Ok((true, too_long));
        }
    }
}

/// Removes terminal colour codes (`ESC [ ... m`) that coloured training logs carry.
fn strip_ansi(line: &str) -> std::borrow::Cow<'_, str> {
    if line.contains('\u{1b}') {
        ANSI.replace_all(line, "")
    } else {
        std::borrow::Cow::Borrowed(line)
    }
}

/// Context carried from one line to the next (multi-line messages).
struct ScanState {
    /// Index into `matches` of a `cudaMallocAsync` OOM whose detail lines follow, and how many
    /// more lines may belong to it.
    async_oom: Option<(usize, usize)>,
    /// The previous line was "PyTorch limit (set by user-supplied memory fraction)".
    expect_async_limit: bool,
    /// Index of a `CUDA error: …` match on the previous line, waiting for its "Search for" line.
    cuda_error_on_previous_line: Option<usize>,
    /// The current top-level section of `nvidia-smi -q` output (e.g. "Remapped Rows").
    smi_section: String,
    /// Lines with a step number seen so far, and every how many of them a point is kept.
    step_lines: u64,
    step_stride: u64,
}

impl Default for ScanState {
    fn default() -> Self {
        ScanState {
            async_oom: None,
            expect_async_limit: false,
            cuda_error_on_previous_line: None,
            smi_section: String::new(),
            step_lines: 0,
            step_stride: 1,
        }
    }
}

macro_rules! re {
    ($name:ident, $pattern:expr) => {
        static $name: LazyLock<Regex> = LazyLock::new(|| {
            // The patterns are constants checked by the tests below.
            Regex::new($pattern)
                .unwrap_or_else(|e| panic!("bad built-in pattern {}: {e}", stringify!($name)))
        });
    };
}

const SIZE: &str = r"[\d.]+ ?(?:bytes|[KMGTPE]i?B|[KMGTPE]\b)";

re!(
    PT_OOM_NEW,
    &format!(
        r"CUDA out of memory\. Tried to allocate (?P<req>{SIZE})\. GPU (?P<gpu>\d+) has a total capac(?:i)?ty of (?P<total>{SIZE}) of which (?P<free>{SIZE}) is free\.(?P<procs>(?: (?:Including non-PyTorch memory, this process|Process \d+) has {SIZE} memory in use\.)*)(?: (?P<allowed>{SIZE}) allowed;)? Of the allocated memory (?P<alloc>{SIZE}) is allocated by PyTorch, (?:with (?P<priv>{SIZE}) allocated in private pools \(e\.g\., CUDA Graphs\), )?and (?P<unalloc>{SIZE}) is reserved by PyTorch but unallocated\."
    )
);
re!(
    PT_PROC,
    &format!(
        r"(?:Including non-PyTorch memory, this process|Process (?P<pid>\d+)) has (?P<used>{SIZE}) memory in use"
    )
);
re!(
    PT_OOM_OLD,
    &format!(
        r"CUDA out of memory\. Tried to allocate (?P<req>{SIZE}) \(GPU (?P<gpu>\d+); (?P<total>{SIZE}) total capacity; (?P<alloc>{SIZE}) already allocated; (?P<free>{SIZE}) free; (?:(?P<allowed>{SIZE}) allowed; )?(?P<reserved>{SIZE}) (?:reserved in total by PyTorch|cached)\)"
    )
);
re!(
    PT_OOM_ANY,
    &format!(r"CUDA out of memory\.(?: Tried to allocate (?P<req>{SIZE}|more than 1EB memory))?")
);
re!(
    PT_OOM_ASYNC,
    r"Allocation on device (?P<gpu>\d+) would exceed allowed memory\. \(out of memory\)"
);
re!(
    PT_ASYNC_FIELD,
    &format!(
        r"^\s*(?P<key>Currently allocated|Requested|Device limit|Free \(according to CUDA\))\s*:\s*(?P<size>{SIZE})"
    )
);
re!(
    PT_ASYNC_LIMIT_KEY,
    r"^\s*PyTorch limit \(set by user-supplied memory fraction\)\s*$"
);
re!(PT_ASYNC_LIMIT_VALUE, &format!(r"^\s*:\s*(?P<size>{SIZE})"));
re!(
    TF_OOM,
    r"OOM when allocating tensor with shape\s*\[?(?P<shape>[^\]\s]*)\]?(?: and type (?P<dtype>\w+) on (?P<dev>\S+) by allocator (?P<alloc>\w+))?"
);
re!(
    BFC_OOM,
    r"Allocator \((?P<alloc>\w+)\) ran out of memory trying to allocate (?P<size>[\d.]+\s?\w+)(?: \(rounded to (?P<rounded>\d+)\))?"
);
re!(
    BFC_OLD_OOM,
    r"Ran out of memory trying to allocate (?P<size>[\d.]+\s?\w+)\.(?P<nonfatal> The caller indicates that this is not a failure)?"
);
re!(
    TF_DRV_OOM,
    r"failed to allocate (?P<h>[\d.]+\w) \((?P<bytes>\d+) bytes\) from device: CUDA_ERROR_OUT_OF_MEMORY"
);
re!(
    XLA_OOM,
    r"(?:(?:RESOURCE_EXHAUSTED|Resource exhausted): )?Out of (?P<host>host )?memory (?:while trying to allocate|allocating) (?P<size>\d+ bytes|[\d.]+\w+?B)(?: with allocator (?P<alloc>\w+) on device (?P<dev>\d+))?"
);
re!(
    XLA_OOM_BARE,
    r"Out of memory allocating (?P<size>\d+) bytes"
);
re!(
    XID,
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): (?P<xid>\d+),(?: pid=(?P<pid>[^,]*), name=(?P<pname>[^,]*),)? ?(?P<msg>.*)"
);
re!(
    STEP,
    r"(?i)\b(?:global[_ ])?(?:step|iter|iteration)\b[\s:=#]*(?P<step>\d+)"
);
re!(
    STEP_MEMORY,
    r"(?i)\b(?P<label>max[_ ]allocated|max[_ ]reserved|allocated|reserved|gpu[_ ]mem(?:ory)?|mem(?:ory)?(?:[_ ]used)?)\b[\s:=]*(?P<size>\d+(?:\.\d+)?\s?(?:[KMGT]i?B|bytes)\b)"
);
// Words every recognised line contains at least one of: lines without them skip the patterns.
re!(
    MAY_MATTER,
    r"(?i)memory|cuda|oom|xid|nvrm|fallen off|ecc|cudnn|cublas|exhausted|assert|illegal|launch|misaligned|kernel image|device|driver|dbe|error|failure|ptx|stub library|mps|nvlink|contained|program counter|address space|not permitted|not supported|not yet initialized|initialization|shutting down|resources requested|cooperative|compatib|configuration"
);
re!(ANSI, r"\x1b\[[0-9;?]*[A-Za-z]");
re!(FELL_OFF_BUS, r"(?i)has fallen off the bus");
re!(PT_CUDA_ERR, r"CUDA error: (?P<msg>[^\n]+)");
re!(SEARCH_FOR, r"Search for `(?P<name>cuda\w+)'");
re!(
    CUDA_CODE,
    r"\bCUDA (?:error|Error|ERROR)[ :#]*(?:code[ :=]*)?(?P<code>\d{1,3})\b"
);
re!(
    CUDA_NAMED,
    r"\b(?P<name>CUDA_ERROR_[A-Z_]+|cudaError[A-Za-z]+)\b"
);
re!(
    CUDNN,
    r"\bCUDNN_STATUS_[A-Z_]+\b|(?i:cuDNN error)|Unable to find a valid cuDNN algorithm"
);
re!(CUDNN_STATUS, r"\bCUDNN_STATUS_[A-Z_]+\b");
re!(CUBLAS, r"\bCUBLAS_STATUS_[A-Z_]+\b|(?i:cuBLAS error)");
re!(CUBLAS_STATUS, r"\bCUBLAS_STATUS_[A-Z_]+\b");
re!(
    ECC,
    r"(?i)\b(?:uncorrectable ECC error|double[- ]bit (?:ECC )?error|ECC errors? (?:detected|encountered|occurred|reported)|DBE error|(?:single|double)[- ]bit ECC errors? (?:has|have) been)"
);
// `nvidia-smi -q` key/value lines ("        DRAM Uncorrectable        : 3").
re!(
    SMI_KEY_VALUE,
    r"^\s+(?P<key>[A-Za-z][A-Za-z0-9 .()/-]*?)\s*:\s*(?P<value>\S.*?)\s*$"
);
// `nvidia-smi -q` section headers ("    Remapped Rows").
re!(SMI_SECTION, r"^ {4}(?P<name>[A-Z][A-Za-z ]+?)\s*$");
re!(
    DRIVER_VERSION,
    r"Driver Version\s*:\s*(?P<v>\d+\.\d+(?:\.\d+)?)|NVRM: loaded the NVIDIA .*Kernel Module\s+(?P<v2>\d+\.\d+(?:\.\d+)?)"
);
// nvidia-smi: the highest CUDA version the driver supports.
re!(
    DRIVER_CUDA,
    r"CUDA Version\s*:\s*(?P<major>\d+)\.(?P<minor>\d+)"
);
re!(
    FRAMEWORK_CUDA,
    r"\+cu(?P<v>\d{2,3})\b|(?i:cuda runtime version|cuda used to build pytorch|built with cuda|torch\.version\.cuda)[:= ]+'?(?P<mm>\d{1,2}\.\d)\b"
);

/// CUDA error messages long enough to be recognised without a name or prefix.
static CUDA_MESSAGES: LazyLock<Regex> = LazyLock::new(|| {
    let alternation = cuda_errors::CUDA_ERRORS
        .iter()
        .filter(|e| e.message.len() >= 24)
        .map(|e| regex::escape(e.message))
        .collect::<Vec<_>>()
        .join("|");
    Regex::new(&format!("(?i)(?:{alternation})"))
        .unwrap_or_else(|e| panic!("bad CUDA message pattern: {e}"))
});

fn size(caps: &regex::Captures, name: &str) -> Option<u64> {
    caps.name(name).and_then(|m| parse_size(m.as_str()))
}

fn number<T: std::str::FromStr>(caps: &regex::Captures, name: &str) -> Option<T> {
    caps.name(name).and_then(|m| m.as_str().trim().parse().ok())
}

fn excerpt(line: &str) -> String {
    let trimmed = line.trim();
    if trimmed.chars().count() <= MAX_EXCERPT_CHARS {
        trimmed.to_owned()
    } else {
        let mut s: String = trimmed.chars().take(MAX_EXCERPT_CHARS).collect();
        s.push('…');
        s
    }
}

fn push(analysis: &mut LogAnalysis, m: LineMatch) -> Option<usize> {
    if analysis.matches.len() >= MAX_MATCHES {
        analysis.dropped_matches += 1;
        None
    } else {
        analysis.matches.push(m);
        Some(analysis.matches.len() - 1)
    }
}

fn scan_line(analysis: &mut LogAnalysis, state: &mut ScanState, line_number: usize, line: &str) {
    scan_versions(analysis, line_number, line);
    let has_step_memory = scan_step_memory(analysis, state, line_number, line);
    let matched_before = analysis.matches.len() + analysis.dropped_matches;
    classify_line(analysis, state, line_number, line);
    if has_step_memory && analysis.matches.len() + analysis.dropped_matches == matched_before {
        analysis.step_memory_lines += 1;
    }
}

/// Recognises what the line says (errors, OOMs, Xids, ...), folding multi-line messages.
fn classify_line(
    analysis: &mut LogAnalysis,
    state: &mut ScanState,
    line_number: usize,
    line: &str,
) {
    if continue_async_oom(analysis, state, line) {
        return;
    }
    if let Some(previous) = state.cuda_error_on_previous_line.take()
        && let Some(caps) = SEARCH_FOR.captures(line)
    {
        attach_cuda_name(analysis, previous, &caps["name"]);
        return;
    }
    let classified = if line.starts_with("    ") {
        classify_smi(state, line)
    } else {
        None
    }
    .or_else(|| {
        if MAY_MATTER.is_match(line) {
            classify(line)
        } else {
            None
        }
    });
    let Some((kind, meaning, category, wizard)) = classified else {
        return;
    };
    let is_async = matches!(
        &kind,
        LineKind::OutOfMemory {
            framework: Framework::PyTorch,
            ..
        }
    ) && PT_OOM_ASYNC.is_match(line);
    let is_pt_cuda_error = matches!(kind, LineKind::CudaError { .. }) && PT_CUDA_ERR.is_match(line);
    let index = push(
        analysis,
        LineMatch {
            line: line_number,
            kind,
            text: excerpt(line),
            meaning,
            category,
            wizard,
        },
    );
    if let Some(index) = index {
        if is_async {
            state.async_oom = Some((index, 8));
        }
        if is_pt_cuda_error {
            state.cuda_error_on_previous_line = Some(index);
        }
    }
}

/// Records `step N ... allocated X GiB`-style figures. Returns true when the line has one (kept
/// or skipped by the sampling).
fn scan_step_memory(
    analysis: &mut LogAnalysis,
    state: &mut ScanState,
    line_number: usize,
    line: &str,
) -> bool {
    if !(line.contains("step")
        || line.contains("Step")
        || line.contains("STEP")
        || line.contains("iter")
        || line.contains("Iter"))
    {
        return false;
    }
    let Some(step) = STEP
        .captures(line)
        .and_then(|c| c["step"].parse::<u64>().ok())
    else {
        return false;
    };
    state.step_lines += 1;
    if !state.step_lines.is_multiple_of(state.step_stride) {
        return STEP_MEMORY
            .captures_iter(line)
            .any(|caps| parse_size(&caps["size"]).is_some());
    }
    let mut found = false;
    for caps in STEP_MEMORY.captures_iter(line) {
        let Some(bytes) = parse_size(&caps["size"]) else {
            continue;
        };
        found = true;
        let label = caps["label"].to_ascii_lowercase().replace(' ', "_");
        let point = StepPoint {
            step,
            bytes,
            line: line_number,
        };
        match analysis.step_series.iter_mut().find(|s| s.label == label) {
            Some(series) => series.points.push(point),
            None => analysis.step_series.push(StepSeries {
                label,
                points: vec![point],
            }),
        }
    }
    // Bounded memory over any length of log: when full, keep every other point and sample
    // half as often from now on.
    let total: usize = analysis.step_series.iter().map(|s| s.points.len()).sum();
    if total >= MAX_STEP_POINTS {
        for series in &mut analysis.step_series {
            let kept: Vec<StepPoint> = series.points.iter().copied().step_by(2).collect();
            series.points = kept;
        }
        state.step_stride = state.step_stride.saturating_mul(2);
    }
    found
}

fn scan_versions(analysis: &mut LogAnalysis, line_number: usize, line: &str) {
    let versions = &analysis.versions;
    if (versions.driver_version.is_some()
        && versions.driver_cuda.is_some()
        && versions.framework_cuda.is_some())
        || !(line.contains("ersion") || line.contains("+cu") || line.contains("NVRM"))
    {
        return;
    }
    if analysis.versions.driver_version.is_none()
        && let Some(caps) = DRIVER_VERSION.captures(line)
        && let Some(v) = caps.name("v").or_else(|| caps.name("v2"))
    {
        analysis.versions.driver_version = Some((v.as_str().to_owned(), line_number));
    }
    if analysis.versions.driver_cuda.is_none()
        && let Some(caps) = DRIVER_CUDA.captures(line)
        && let (Ok(major), Ok(minor)) = (caps["major"].parse(), caps["minor"].parse())
    {
        analysis.versions.driver_cuda = Some(((major, minor), line_number));
    }
    // nvidia-smi's header shows the driver's CUDA version, not a framework's.
    if analysis.versions.framework_cuda.is_none()
        && !line.contains("Driver Version")
        && let Some(caps) = FRAMEWORK_CUDA.captures(line)
    {
        let version = if let Some(v) = caps.name("v") {
            // cu121 -> 12.1, cu118 -> 11.8, cu92 -> 9.2
            let digits = v.as_str();
            let (major, minor) = digits.split_at(digits.len() - 1);
            major.parse().ok().zip(minor.parse().ok())
        } else {
            caps.name("mm").and_then(|mm| {
                let (major, minor) = mm.as_str().split_once('.')?;
                major.parse().ok().zip(minor.parse().ok())
            })
        };
        if let Some(version) = version {
            analysis.versions.framework_cuda = Some((version, line_number));
        }
    }
}

/// Folds the detail lines of a `cudaMallocAsync` OOM into its match. Returns true when the line
/// was one of them.
fn continue_async_oom(analysis: &mut LogAnalysis, state: &mut ScanState, line: &str) -> bool {
    let Some((index, remaining)) = state.async_oom else {
        return false;
    };
    if remaining == 0 {
        state.async_oom = None;
        return false;
    }
    state.async_oom = Some((index, remaining - 1));
    let Some(LineMatch {
        kind: LineKind::OutOfMemory { numbers, .. },
        meaning,
        ..
    }) = analysis.matches.get_mut(index)
    else {
        state.async_oom = None;
        return false;
    };
    if state.expect_async_limit {
        state.expect_async_limit = false;
        if let Some(caps) = PT_ASYNC_LIMIT_VALUE.captures(line) {
            // An unset fraction prints an absurd limit (17179869184.00 GiB); only a limit below
            // the device is a cap.
            let limit = size(&caps, "size");
            if limit.is_some() && limit < numbers.total_bytes.or(Some(u64::MAX)) {
                numbers.allowed_bytes = limit;
            }
            *meaning = pytorch_oom_meaning(numbers);
            return true;
        }
    }
    if PT_ASYNC_LIMIT_KEY.is_match(line) {
        state.expect_async_limit = true;
        return true;
    }
    let Some(caps) = PT_ASYNC_FIELD.captures(line) else {
        state.async_oom = None;
        return false;
    };
    let value = size(&caps, "size");
    match &caps["key"] {
        "Currently allocated" => numbers.allocated_bytes = value,
        "Requested" => numbers.requested_bytes = value,
        "Device limit" => numbers.total_bytes = value,
        _ => numbers.free_bytes = value,
    }
    *meaning = pytorch_oom_meaning(numbers);
    true
}

fn attach_cuda_name(analysis: &mut LogAnalysis, index: usize, name: &str) {
    let Some(m) = analysis.matches.get_mut(index) else {
        return;
    };
    if let LineKind::CudaError {
        code,
        name: existing,
    } = &mut m.kind
        && existing.is_empty()
    {
        *existing = name.to_owned();
        if code.is_none() {
            *code = cuda_errors::lookup(name).map(|e| e.code);
        }
    }
}

type Classified = (LineKind, String, Category, Wizard);

fn oom(framework: Framework, numbers: OomNumbers, meaning: String) -> Classified {
    (
        LineKind::OutOfMemory {
            framework,
            numbers,
            non_fatal: false,
            host_memory: false,
        },
        meaning,
        Category::Capacity,
        Wizard::OutOfMemory,
    )
}

/// Recognises one line; the first pattern that matches wins, most specific first: PyTorch's and
/// TensorFlow's out-of-memory messages, the other allocators' ([`classify_allocator_oom`]), Xid
/// errors and a GPU fallen off the bus, cuDNN's and cuBLAS's statuses
/// ([`classify_library_status`]), CUDA errors ([`classify_cuda_line`]), ECC errors.
fn classify(line: &str) -> Option<Classified> {
    if (line.contains("out of memory") || line.contains("Out of memory"))
        && let Some(c) = classify_pytorch_oom(line)
    {
        return Some(c);
    }
    if line.contains("OOM when allocating") {
        return classify_tf_oom(line);
    }
    if let Some(c) = classify_allocator_oom(line) {
        return Some(c);
    }
    if line.contains("Xid")
        && let Some(caps) = XID.captures(line)
    {
        return classify_xid(&caps);
    }
    if FELL_OFF_BUS.is_match(line) {
        return Some((
            LineKind::FallenOffBus,
            "The GPU stopped answering on PCIe (goes with Xid 79): a hardware, power or thermal problem. Reboot the node; check PCIe seating, power and temperatures.".to_owned(),
            Category::Xid,
            Wizard::HardwareAndDriver,
        ));
    }
    if let Some(c) = classify_library_status(line, &CUDNN, &CUDNN_STATUS, "cuDNN", |status| {
        LineKind::Cudnn { status }
    }) {
        return Some(c);
    }
    if let Some(c) = classify_library_status(line, &CUBLAS, &CUBLAS_STATUS, "cuBLAS", |status| {
        LineKind::Cublas { status }
    }) {
        return Some(c);
    }
    if let Some(c) = classify_cuda_line(line) {
        return Some(c);
    }
    if ECC.is_match(line) {
        return Some((
            LineKind::Ecc,
            "The GPU reported an ECC memory error. Uncorrectable errors kill the job; check `nvidia-smi -q -d ECC,ROW_REMAPPER` and the kernel log for Xid 48/63/64/94/95.".to_owned(),
            Category::Ecc,
            Wizard::HardwareAndDriver,
        ));
    }
    None
}

/// Out-of-memory messages of the allocators other than PyTorch's, in this order: TensorFlow/XLA's
/// BFC allocator (current and old wordings), TensorFlow's stream executor, JAX/XLA.
fn classify_allocator_oom(line: &str) -> Option<Classified> {
    if let Some(caps) = BFC_OOM.captures(line) {
        let numbers = OomNumbers {
            requested_bytes: number(&caps, "rounded").or_else(|| size(&caps, "size")),
            device_index: gpu_from_allocator(&caps["alloc"]),
            ..Default::default()
        };
        let meaning = format!(
            "TensorFlow/XLA BFC allocator {} could not allocate {}.",
            &caps["alloc"],
            describe_opt(numbers.requested_bytes)
        );
        return Some(oom(Framework::TensorFlow, numbers, meaning));
    }
    if let Some(caps) = BFC_OLD_OOM.captures(line) {
        return Some(classify_bfc_old_oom(&caps));
    }
    if let Some(caps) = TF_DRV_OOM.captures(line) {
        let numbers = OomNumbers {
            requested_bytes: number(&caps, "bytes"),
            ..Default::default()
        };
        let meaning = format!(
            "TensorFlow's stream executor could not get {} from the device (CUDA_ERROR_OUT_OF_MEMORY).",
            describe_opt(numbers.requested_bytes)
        );
        return Some(oom(Framework::TensorFlow, numbers, meaning));
    }
    if let Some(caps) = XLA_OOM
        .captures(line)
        .or_else(|| XLA_OOM_BARE.captures(line))
    {
        return Some(classify_xla_oom(&caps));
    }
    None
}

/// The old BFC allocator's message: a failure, or (when it says so) only a possible slowdown.
fn classify_bfc_old_oom(caps: &regex::Captures) -> Classified {
    let non_fatal = caps.name("nonfatal").is_some();
    let numbers = OomNumbers {
        requested_bytes: size(caps, "size"),
        ..Default::default()
    };
    let meaning = if non_fatal {
        format!(
            "TensorFlow's allocator wanted {} more but says this is not a failure (only a possible slowdown).",
            describe_opt(numbers.requested_bytes)
        )
    } else {
        format!(
            "TensorFlow's BFC allocator ran out of memory allocating {}.",
            describe_opt(numbers.requested_bytes)
        )
    };
    (
        LineKind::OutOfMemory {
            framework: Framework::TensorFlow,
            numbers,
            non_fatal,
            host_memory: false,
        },
        meaning,
        Category::Capacity,
        Wizard::OutOfMemory,
    )
}

/// JAX/XLA out of memory: on a GPU (JAX preallocates most of it), or out of host memory.
fn classify_xla_oom(caps: &regex::Captures) -> Classified {
    let host = caps.name("host").is_some();
    let numbers = OomNumbers {
        requested_bytes: size(caps, "size"),
        device_index: number(caps, "dev"),
        ..Default::default()
    };
    let meaning = if host {
        format!(
            "XLA ran out of host (CPU) memory allocating {}; raise XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB.",
            describe_opt(numbers.requested_bytes)
        )
    } else {
        format!(
            "JAX/XLA could not allocate {}{}. JAX preallocates 75% of the GPU by default.",
            describe_opt(numbers.requested_bytes),
            numbers
                .device_index
                .map(|d| format!(" on GPU {d}"))
                .unwrap_or_default()
        )
    };
    (
        LineKind::OutOfMemory {
            framework: Framework::Jax,
            numbers,
            non_fatal: false,
            host_memory: host,
        },
        meaning,
        Category::Capacity,
        Wizard::OutOfMemory,
    )
}

/// A line of `library` (cuDNN, cuBLAS; recognised by `pattern`) with the status
/// `status_pattern` finds in it, as `kind` of the status: an allocation failure is a capacity
/// problem, any other status the library's.
fn classify_library_status(
    line: &str,
    pattern: &Regex,
    status_pattern: &Regex,
    library: &str,
    kind: impl FnOnce(String) -> LineKind,
) -> Option<Classified> {
    if !pattern.is_match(line) {
        return None;
    }
    let status = status_pattern
        .find(line)
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    let meaning = library_meaning(library, &status);
    let category = if status.contains("ALLOC") {
        Category::Capacity
    } else {
        Category::Library
    };
    Some((kind(status), meaning, category, library_wizard(category)))
}

/// A CUDA error, in this order: PyTorch's `CUDA error: …` message, an error code, an error's
/// name, one of CUDA's error messages.
fn classify_cuda_line(line: &str) -> Option<Classified> {
    if let Some(caps) = PT_CUDA_ERR.captures(line) {
        let message = caps["msg"].trim().trim_end_matches('.');
        return Some(classify_cuda_error(cuda_errors::lookup(message), message));
    }
    if let Some(caps) = CUDA_CODE.captures(line)
        && let Some(code) = number::<u32>(&caps, "code")
    {
        let text = format!("CUDA error {code}");
        return Some(classify_cuda_error(cuda_errors::by_code(code), &text));
    }
    if let Some(caps) = CUDA_NAMED.captures(line) {
        let name = &caps["name"];
        return Some(classify_cuda_error(cuda_errors::lookup(name), name));
    }
    if let Some(m) = CUDA_MESSAGES.find(line) {
        let message = m.as_str();
        return Some(classify_cuda_error(cuda_errors::lookup(message), message));
    }
    None
}

/// Health figures of `nvidia-smi -q` output: non-zero uncorrectable ECC counts, pending or failed
/// row remapping, unrepairable memory.
fn classify_smi(state: &mut ScanState, line: &str) -> Option<Classified> {
    if let Some(caps) = SMI_SECTION.captures(line) {
        state.smi_section = caps["name"].to_owned();
        return None;
    }
    let caps = SMI_KEY_VALUE.captures(line)?;
    let key = caps["key"].trim();
    let value = caps["value"].trim();
    let count: Option<u64> = value.parse().ok();
    let yes = value.eq_ignore_ascii_case("yes");
    match (state.smi_section.as_str(), key) {
        ("ECC Errors", k) if k.contains("Uncorrectable") && count.is_some_and(|c| c > 0) => Some((
            LineKind::Ecc,
            format!("nvidia-smi reports {value} uncorrectable ECC error(s) ({k}); uncorrectable errors kill the process that touches the memory."),
            Category::Ecc,
            Wizard::HardwareAndDriver,
        )),
        ("ECC Errors", "Unrepairable Memory") if yes => Some((
            LineKind::RowRemap { failed: true },
            "nvidia-smi reports unrepairable memory: the GPU needs service.".to_owned(),
            Category::RowRemap,
            Wizard::HardwareAndDriver,
        )),
        ("Remapped Rows", "Pending") if yes => Some((
            LineKind::RowRemap { failed: false },
            "A row remap is pending: it takes effect at the next GPU reset.".to_owned(),
            Category::RowRemap,
            Wizard::HardwareAndDriver,
        )),
        ("Remapped Rows", "Remapping Failure Occurred") if yes => Some((
            LineKind::RowRemap { failed: true },
            "Row remapping failed: the GPU ran out of spare rows or could not remap; it needs service.".to_owned(),
            Category::RowRemap,
            Wizard::HardwareAndDriver,
        )),
        ("Remapped Rows", "Uncorrectable Error") if count.is_some_and(|c| c > 0) => Some((
            LineKind::RowRemap { failed: false },
            format!("{value} row(s) were remapped after uncorrectable errors."),
            Category::RowRemap,
            Wizard::HardwareAndDriver,
        )),
        _ => None,
    }
}

fn library_wizard(category: Category) -> Wizard {
    if category == Category::Capacity {
        Wizard::OutOfMemory
    } else {
        Wizard::HardwareAndDriver
    }
}

fn library_meaning(library: &str, status: &str) -> String {
    match status {
        s if s.ends_with("ALLOC_FAILED") => {
            format!("{library} could not allocate its workspace ({s}): the GPU is out of memory.")
        }
        "CUDNN_STATUS_NOT_INITIALIZED" | "CUBLAS_STATUS_NOT_INITIALIZED" => format!(
            "{library} failed to initialise ({status}); this often means the GPU had no memory left for its handle and workspace, or a CUDA/{library} version mismatch."
        ),
        s if s.ends_with("EXECUTION_FAILED") => format!(
            "A {library} kernel failed ({s}); often the symptom of an earlier illegal address or of out-of-range inputs. Rerun with CUDA_LAUNCH_BLOCKING=1."
        ),
        s if s.ends_with("ARCH_MISMATCH") => {
            format!("The installed {library} does not support this GPU's architecture ({s}).")
        }
        "" => format!(
            "{library} failed; if it could not find an algorithm, the usual cause is too little free memory for its workspace."
        ),
        s => format!("{library} returned {s}."),
    }
}

fn classify_cuda_error(
    info: Option<&'static cuda_errors::CudaErrorInfo>,
    text: &str,
) -> Classified {
    match info {
        Some(info) if info.code == 2 => oom(
            Framework::Cuda,
            OomNumbers::default(),
            "A CUDA allocation outside the framework's caching allocator failed (cuBLAS/cuDNN workspace, context creation, NCCL buffers): the device was full.".to_owned(),
        ),
        Some(info) => (
            LineKind::CudaError {
                code: Some(info.code),
                name: if info.runtime_name.is_empty() { info.driver_name } else { info.runtime_name }.to_owned(),
            },
            format!("CUDA error {} ({}): {}", info.code, info.message, info.meaning),
            info.category,
            info.wizard,
        ),
        None => (
            LineKind::CudaError {
                code: None,
                name: if text.starts_with("CUDA_ERROR_") || text.starts_with("cudaError") { text.to_owned() } else { String::new() },
            },
            format!("CUDA error not in the table: {text}"),
            Category::CudaError,
            Wizard::HardwareAndDriver,
        ),
    }
}

fn classify_xid(caps: &regex::Captures) -> Option<Classified> {
    let code: u32 = number(caps, "xid")?;
    let message = caps
        .name("msg")
        .map(|m| m.as_str().trim().to_owned())
        .unwrap_or_default();
    let pid = caps
        .name("pid")
        .and_then(|p| p.as_str().trim().parse().ok());
    let process = caps
        .name("pname")
        .map(|p| p.as_str().trim().to_owned())
        .filter(|p| !p.is_empty() && p != "<unknown>");
    let category = super::xid_category(code);
    let meaning = super::xid_meaning(code);
    Some((
        LineKind::Xid {
            code,
            pci: caps["pci"].to_owned(),
            pid,
            process,
            message,
        },
        format!("Xid {code}: {meaning}"),
        category,
        Wizard::HardwareAndDriver,
    ))
}

fn gpu_from_allocator(allocator: &str) -> Option<u32> {
    // GPU_0_bfc -> 0
    allocator
        .strip_prefix("GPU_")?
        .split('_')
        .next()?
        .parse()
        .ok()
}

fn classify_tf_oom(line: &str) -> Option<Classified> {
    let caps = TF_OOM.captures(line)?;
    let shape: Vec<u64> = caps["shape"]
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter_map(|d| d.trim().parse().ok())
        .collect();
    let element_bytes = caps.name("dtype").and_then(|d| dtype_bytes(d.as_str()));
    let requested_bytes =
        element_bytes.and_then(|b| shape.iter().try_fold(b, |acc, &d| acc.checked_mul(d)));
    let device_index = caps.name("dev").and_then(|d| {
        d.as_str()
            .rsplit("GPU:")
            .next()
            .and_then(|n| n.parse().ok())
    });
    let numbers = OomNumbers {
        requested_bytes,
        device_index,
        ..Default::default()
    };
    let meaning = format!(
        "TensorFlow could not allocate a tensor of shape [{}]{}{}.",
        &caps["shape"].trim_matches(|c| c == '[' || c == ']'),
        caps.name("dtype")
            .map(|d| format!(" of {}", d.as_str()))
            .unwrap_or_default(),
        requested_bytes
            .map(|b| format!(" ({})", format_bytes(b)))
            .unwrap_or_default()
    );
    Some(oom(Framework::TensorFlow, numbers, meaning))
}

fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "double" | "int64" | "uint64" | "complex64" => 8,
        "float" | "int32" | "uint32" => 4,
        "half" | "bfloat16" | "int16" | "uint16" => 2,
        "int8" | "uint8" | "bool" => 1,
        "complex128" => 16,
        _ => return None,
    })
}

fn classify_pytorch_oom(line: &str) -> Option<Classified> {
    if let Some(caps) = PT_OOM_NEW.captures(line) {
        let procs = caps.name("procs").map(|p| p.as_str()).unwrap_or("");
        let mut numbers = OomNumbers {
            device_index: number(&caps, "gpu"),
            requested_bytes: size(&caps, "req"),
            total_bytes: size(&caps, "total"),
            free_bytes: size(&caps, "free"),
            allowed_bytes: size(&caps, "allowed"),
            allocated_bytes: size(&caps, "alloc"),
            private_pool_bytes: size(&caps, "priv"),
            reserved_unallocated_bytes: size(&caps, "unalloc"),
            ..Default::default()
        };
        numbers.reserved_bytes = numbers
            .allocated_bytes
            .zip(numbers.reserved_unallocated_bytes)
            .map(|(a, u)| a.saturating_add(u));
        for p in PT_PROC.captures_iter(procs) {
            let used = size(&p, "used");
            match (number::<u32>(&p, "pid"), used) {
                (Some(pid), Some(used_bytes)) => numbers
                    .other_processes
                    .push(OtherProcess { pid, used_bytes }),
                (None, Some(used)) => numbers.this_process_bytes = Some(used),
                _ => {}
            }
        }
        let meaning = pytorch_oom_meaning(&numbers);
        return Some(oom(Framework::PyTorch, numbers, meaning));
    }
    if let Some(caps) = PT_OOM_OLD.captures(line) {
        let mut numbers = OomNumbers {
            device_index: number(&caps, "gpu"),
            requested_bytes: size(&caps, "req"),
            total_bytes: size(&caps, "total"),
            free_bytes: size(&caps, "free"),
            allowed_bytes: size(&caps, "allowed"),
            allocated_bytes: size(&caps, "alloc"),
            reserved_bytes: size(&caps, "reserved"),
            ..Default::default()
        };
        numbers.reserved_unallocated_bytes = numbers
            .reserved_bytes
            .zip(numbers.allocated_bytes)
            .map(|(r, a)| r.saturating_sub(a));
        let meaning = pytorch_oom_meaning(&numbers);
        return Some(oom(Framework::PyTorch, numbers, meaning));
    }
    if let Some(caps) = PT_OOM_ASYNC.captures(line) {
        let numbers = OomNumbers {
            device_index: number(&caps, "gpu"),
            ..Default::default()
        };
        let meaning = pytorch_oom_meaning(&numbers);
        return Some(oom(Framework::PyTorch, numbers, meaning));
    }
    if let Some(caps) = PT_OOM_ANY.captures(line) {
        let numbers = OomNumbers {
            requested_bytes: size(&caps, "req"),
            ..Default::default()
        };
        let meaning = pytorch_oom_meaning(&numbers);
        return Some(oom(Framework::PyTorch, numbers, meaning));
    }
    None
}

fn describe_opt(bytes: Option<u64>) -> String {
    bytes
        .map(format_bytes)
        .unwrap_or_else(|| "an unknown amount".to_owned())
}

/// A sentence with the numbers of a PyTorch OOM.
fn pytorch_oom_meaning(n: &OomNumbers) -> String {
    let mut parts = vec![format!(
        "PyTorch could not allocate {}{}",
        describe_opt(n.requested_bytes),
        n.device_index
            .map(|d| format!(" on GPU {d}"))
            .unwrap_or_default()
    )];
    if let (Some(free), Some(total)) = (n.free_bytes, n.total_bytes) {
        parts.push(format!(
            "{} free of {}",
            format_bytes(free),
            format_bytes(total)
        ));
    }
    if let Some(allowed) = n.allowed_bytes {
        parts.push(format!(
            "the process is capped at {}",
            format_bytes(allowed)
        ));
    }
    if let Some(p) = n.this_process_bytes {
        parts.push(format!("this process holds {}", format_bytes(p)));
    }
    for other in &n.other_processes {
        parts.push(format!(
            "process {} holds {}",
            other.pid,
            format_bytes(other.used_bytes)
        ));
    }
    if let Some(a) = n.allocated_bytes {
        parts.push(format!("{} allocated by tensors", format_bytes(a)));
    }
    if let Some(u) = n.reserved_unallocated_bytes {
        parts.push(format!("{} cached but unallocated", format_bytes(u)));
    }
    parts.join("; ") + "."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_patterns_compile() {
        for re in [
            &STEP,
            &STEP_MEMORY,
            &PT_OOM_NEW,
            &PT_PROC,
            &PT_OOM_OLD,
            &PT_OOM_ANY,
            &PT_OOM_ASYNC,
            &PT_ASYNC_FIELD,
            &PT_ASYNC_LIMIT_KEY,
            &PT_ASYNC_LIMIT_VALUE,
            &TF_OOM,
            &BFC_OOM,
            &BFC_OLD_OOM,
            &TF_DRV_OOM,
            &XLA_OOM,
            &XLA_OOM_BARE,
            &XID,
            &FELL_OFF_BUS,
            &PT_CUDA_ERR,
            &SEARCH_FOR,
            &CUDA_CODE,
            &CUDA_NAMED,
            &CUDNN,
            &CUDNN_STATUS,
            &CUBLAS,
            &CUBLAS_STATUS,
            &ECC,
            &SMI_KEY_VALUE,
            &SMI_SECTION,
            &DRIVER_VERSION,
            &DRIVER_CUDA,
            &FRAMEWORK_CUDA,
            &CUDA_MESSAGES,
            &MAY_MATTER,
            &ANSI,
        ] {
            assert!(!re.as_str().is_empty());
            assert!(
                !re.is_match("nothing to see here"),
                "{} matches a plain line",
                re.as_str()
            );
        }
    }

    #[test]
    fn the_prefilter_lets_every_known_cuda_message_through() {
        for e in cuda_errors::CUDA_ERRORS {
            // Shorter messages are only recognised after "CUDA error: ", which passes anyway.
            let message = if e.message.len() >= 24 { e.message } else { "" };
            for text in [message, e.driver_name, e.runtime_name] {
                if !text.is_empty() {
                    assert!(MAY_MATTER.is_match(text), "prefilter drops '{text}'");
                }
            }
        }
    }

    #[test]
    fn overlong_lines_are_cut_not_kept_whole() {
        let mut text = "x".repeat(MAX_LINE_BYTES * 3);
        text.push_str("\nRuntimeError: CUDA error: an illegal memory access was encountered\n");
        let analysis = analyze_text(&text, "long.log");
        assert_eq!(analysis.lines_read, 2);
        assert_eq!(analysis.long_lines, 1);
        assert_eq!(analysis.matches.len(), 1);
        assert_eq!(analysis.matches[0].line, 2);
    }

    #[test]
    fn keeps_at_most_max_matches() {
        let text = "CUDA_ERROR_LAUNCH_FAILED\n".repeat(MAX_MATCHES + 5);
        let analysis = analyze_text(&text, "many.log");
        assert_eq!(analysis.matches.len(), MAX_MATCHES);
        assert_eq!(analysis.dropped_matches, 5);
    }
}
