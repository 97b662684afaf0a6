//! nvidia-smi CSV logs read as captures: `nvidia-smi --query-gpu=… --format=csv -lms N` (one row
//! per GPU per tick) and `nvidia-smi --query-compute-apps=… --format=csv -lms N` (one row per
//! process per tick), so that the logs users already have open wherever a `.vramcap` does.
//!
//! What nvidia-smi writes (checked on an H200, driver 580): a header such as
//! `timestamp, index, memory.used [MiB], memory.total [MiB]` (dropped by `noheader`), rows such
//! as `2026/12/01 13:59:16.991, 0, 0 MiB, 143771 MiB` (`nounits` drops the units, the header keeps
//! them), `[N/A]` or `[Not Supported]` for values a GPU does not report, and timestamps in the
//! logging machine's local time. Fields come in the order the query named them.
//!
//! Without a header the columns are recognised by their values (timestamps, `GPU-` UUIDs, bus
//! ids, units, names); which numeric column is which is then an assumption, written into the
//! capture's `writer` note so that `inspect` shows it.

use std::collections::BTreeMap;

use crate::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, FieldState, FieldStatus, MIB, MemoryReading,
    ProcessKind, ProcessSample, SampleBatch, SourceKind, UnixMs, UtcDateTime,
};

/// Which nvidia-smi query wrote the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmiLogKind {
    /// `--query-gpu=…`: one row per GPU per tick.
    Gpu,
    /// `--query-compute-apps=…`: one row per process per tick.
    ComputeApps,
}

impl SmiLogKind {
    /// How the log is described in messages and in the capture's `writer` note.
    pub fn describe(self) -> &'static str {
        match self {
            SmiLogKind::Gpu => "nvidia-smi --query-gpu CSV log",
            SmiLogKind::ComputeApps => "nvidia-smi --query-compute-apps CSV log",
        }
    }
}

/// How to read times that the log does not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmiReadOptions {
    /// nvidia-smi writes local time without a zone: the logging machine's offset from UTC in
    /// minutes (UTC+01:00 is 60). Readers of a file use the local offset of the reading machine
    /// (the usual case: the log was written where it is read, or both run in UTC).
    pub utc_offset_minutes: i32,
    /// The time of the last tick of a log without a `timestamp` column (the file's modification
    /// time, when known); earlier ticks are placed one second apart before it.
    pub untimed_end_ms: UnixMs,
}

/// Why an nvidia-smi log could not be read. Names the file and, where there is one, the line.
#[derive(Debug, thiserror::Error)]
pub enum SmiError {
    #[error("{file}: not an nvidia-smi CSV log: {problem}")]
    NotSmiCsv { file: String, problem: String },
    #[error("{file}, line {line}: {problem}")]
    BadLine {
        file: String,
        line: usize,
        problem: String,
    },
}

/// What one column holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Column {
    Timestamp,
    Index,
    Uuid,
    BusId,
    GpuName,
    DriverVersion,
    MemoryTotal,
    MemoryUsed,
    MemoryFree,
    MemoryReserved,
    UtilizationGpu,
    UtilizationMemory,
    Temperature,
    PowerDraw,
    ClockSm,
    ClockMemory,
    EccCorrectedVolatile,
    EccUncorrectedVolatile,
    Pid,
    ProcessName,
    ProcessUsedMemory,
    /// A field vramscope does not use (pstate, fan.speed, ...).
    Other,
}

impl Column {
    /// The column of a header field name (`memory.used`, without the ` [MiB]` unit); `None` for
    /// a name that is not a nvidia-smi field at all.
    fn from_field_name(name: &str) -> Option<Column> {
        let column = match name {
            "timestamp" => Column::Timestamp,
            "index" => Column::Index,
            "uuid" | "gpu_uuid" => Column::Uuid,
            "pci.bus_id" | "gpu_bus_id" => Column::BusId,
            "name" | "gpu_name" => Column::GpuName,
            "driver_version" => Column::DriverVersion,
            "memory.total" => Column::MemoryTotal,
            "memory.used" => Column::MemoryUsed,
            "memory.free" => Column::MemoryFree,
            "memory.reserved" => Column::MemoryReserved,
            "utilization.gpu" => Column::UtilizationGpu,
            "utilization.memory" => Column::UtilizationMemory,
            "temperature.gpu" => Column::Temperature,
            "power.draw" | "power.draw.instant" | "power.draw.average" => Column::PowerDraw,
            "clocks.sm" | "clocks.current.sm" => Column::ClockSm,
            "clocks.mem" | "clocks.current.memory" => Column::ClockMemory,
            "ecc.errors.corrected.volatile.total" => Column::EccCorrectedVolatile,
            "ecc.errors.uncorrected.volatile.total" => Column::EccUncorrectedVolatile,
            "pid" => Column::Pid,
            "process_name" => Column::ProcessName,
            "used_gpu_memory" | "used_memory" => Column::ProcessUsedMemory,
            _ if name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_')
                && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && name.contains(['.', '_']) =>
            {
                Column::Other
            }
            _ => return None,
        };
        Some(column)
    }

    /// The field name used in `FieldStatus` for a value the GPU did not report.
    fn field_name(&self) -> Option<&'static str> {
        Some(match self {
            Column::MemoryTotal | Column::MemoryUsed | Column::MemoryFree => "memory",
            Column::MemoryReserved => "memory_reserved",
            Column::UtilizationGpu | Column::UtilizationMemory => "utilization",
            Column::Temperature => "temperature",
            Column::PowerDraw => "power",
            Column::ClockSm | Column::ClockMemory => "clocks",
            Column::EccCorrectedVolatile | Column::EccUncorrectedVolatile => "ecc",
            Column::ProcessUsedMemory => "process_memory",
            _ => return None,
        })
    }
}

/// A cell's value.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell<'a> {
    /// Nothing usable: `[N/A]`, `[Not Supported]`, an empty field.
    Missing {
        not_supported: bool,
    },
    Number(f64),
    Text(&'a str),
}

/// Splits a CSV line the way nvidia-smi writes it: `, ` between fields, no quoting (names with
/// commas do not occur in its output).
fn fields(line: &str) -> Vec<&str> {
    line.split(',').map(str::trim).collect()
}

/// A field of a header line: `memory.used [MiB]` → (`memory.used`, `Some("MiB")`).
fn header_field(field: &str) -> (&str, Option<&str>) {
    match field.split_once(" [") {
        Some((name, unit)) => (name.trim(), Some(unit.trim_end_matches(']'))),
        None => (field, None),
    }
}

/// The columns of a header line, when every field is a nvidia-smi field name and at least one is
/// a field vramscope reads memory from.
fn parse_header(line: &str) -> Option<Vec<Column>> {
    let columns: Vec<Column> = fields(line)
        .into_iter()
        .map(|field| Column::from_field_name(header_field(field).0))
        .collect::<Option<_>>()?;
    let knows_memory = columns.iter().any(|c| {
        matches!(
            c,
            Column::MemoryUsed
                | Column::MemoryTotal
                | Column::MemoryFree
                | Column::ProcessUsedMemory
                | Column::Pid
        )
    });
    knows_memory.then_some(columns)
}

/// `YYYY/MM/DD HH:MM:SS.mmm` (the milliseconds are optional) as calendar fields.
fn parse_timestamp(text: &str) -> Option<UtcDateTime> {
    let (date, time) = text.trim().split_once(' ')?;
    let mut date_parts = date.split('/');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: u32 = date_parts.next()?.parse().ok()?;
    let day: u32 = date_parts.next()?.parse().ok()?;
    if date_parts.next().is_some() || !(1000..=9999).contains(&year) {
        return None;
    }
    let (hms, fraction) = match time.split_once('.') {
        Some((hms, fraction)) => (hms, fraction),
        None => (time, ""),
    };
    let mut time_parts = hms.split(':');
    let hour: u32 = time_parts.next()?.parse().ok()?;
    let minute: u32 = time_parts.next()?.parse().ok()?;
    let second: u32 = time_parts.next()?.parse().ok()?;
    if time_parts.next().is_some() || !fraction.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let millisecond = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(3)
        .collect::<String>()
        .parse()
        .ok()?;
    Some(UtcDateTime {
        year,
        month,
        day,
        hour,
        minute,
        second,
        millisecond,
    })
}

/// A value cell: a number with or without its unit, or one of nvidia-smi's bracketed words.
fn parse_cell(text: &str) -> Cell<'_> {
    let text = text.trim();
    if text.is_empty() || text.eq_ignore_ascii_case("N/A") {
        return Cell::Missing {
            not_supported: false,
        };
    }
    if text.starts_with('[') {
        return Cell::Missing {
            not_supported: text.eq_ignore_ascii_case("[Not Supported]")
                || text.eq_ignore_ascii_case("[N/A]"),
        };
    }
    let number = text
        .split_once(' ')
        .map_or(text, |(number, _unit)| number)
        .trim_end_matches('%');
    match number.parse::<f64>() {
        Ok(value) if value.is_finite() => Cell::Number(value),
        _ => Cell::Text(text),
    }
}

/// Bytes per unit of a memory column: the header's unit, or the value's own (` MiB`).
fn bytes_per_unit(unit: Option<&str>) -> f64 {
    match unit.map(str::trim) {
        Some("KiB") => 1024.0,
        Some("GiB") => (1u64 << 30) as f64,
        Some("B") => 1.0,
        _ => MIB as f64,
    }
}

/// What a value looks like, for recognising the columns of a log without a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Timestamp,
    Uuid,
    BusId,
    Mebibytes,
    Watts,
    Percent,
    Megahertz,
    Number,
    Text,
    Missing,
}

fn shape(text: &str) -> Shape {
    let text = text.trim();
    if parse_timestamp(text).is_some() {
        return Shape::Timestamp;
    }
    if text.starts_with("GPU-") || text.starts_with("MIG-") {
        return Shape::Uuid;
    }
    let is_bus_id = {
        let parts: Vec<&str> = text.split([':', '.']).collect();
        parts.len() == 4
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_hexdigit()))
            && parts[0].len() >= 4
    };
    if is_bus_id {
        return Shape::BusId;
    }
    match parse_cell(text) {
        Cell::Missing { .. } => Shape::Missing,
        Cell::Text(_) => Shape::Text,
        Cell::Number(_) if text.ends_with(" MiB") => Shape::Mebibytes,
        Cell::Number(_) if text.ends_with(" W") => Shape::Watts,
        Cell::Number(_) if text.ends_with('%') => Shape::Percent,
        Cell::Number(_) if text.ends_with(" MHz") => Shape::Megahertz,
        Cell::Number(_) => Shape::Number,
    }
}

/// The shape of a headerless data line's columns (missing values do not count), when the line
/// could be nvidia-smi output: at least two fields, and a timestamp, a `GPU-` UUID or a value in
/// MiB among them (a bare list of numbers could be any CSV).
fn headerless_shapes(line: &str) -> Option<Vec<Shape>> {
    let shapes: Vec<Shape> = fields(line).into_iter().map(shape).collect();
    let telling = shapes
        .iter()
        .any(|s| matches!(s, Shape::Timestamp | Shape::Uuid | Shape::Mebibytes));
    (shapes.len() >= 2 && telling).then_some(shapes)
}

/// What a text that starts with `head` is, if it is an nvidia-smi CSV log: its first non-empty
/// line is a header of nvidia-smi field names, or a data line shaped like nvidia-smi's.
pub fn sniff(head: &str) -> Option<SmiLogKind> {
    let first = head.lines().map(str::trim).find(|l| !l.is_empty())?;
    if let Some(columns) = parse_header(first) {
        return Some(if columns.contains(&Column::Pid) {
            SmiLogKind::ComputeApps
        } else {
            SmiLogKind::Gpu
        });
    }
    let shapes = headerless_shapes(first)?;
    // Every complete line of the head must be shaped alike (the last may be cut by the window).
    let mut complete = head.lines().map(str::trim).filter(|l| !l.is_empty());
    let line_count = head.lines().filter(|l| !l.trim().is_empty()).count();
    let alike = complete
        .by_ref()
        .take(line_count.saturating_sub(1).clamp(1, 8))
        .all(|line| {
            let other: Vec<Shape> = fields(line).into_iter().map(shape).collect();
            other.len() == shapes.len()
                && other
                    .iter()
                    .zip(&shapes)
                    .all(|(a, b)| a == b || *a == Shape::Missing || *b == Shape::Missing)
        });
    if !alike {
        return None;
    }
    // A process list has a text column (the process name) after a number (the pid).
    let process_name = shapes
        .windows(2)
        .any(|w| w[0] == Shape::Number && w[1] == Shape::Text);
    Some(if process_name {
        SmiLogKind::ComputeApps
    } else {
        SmiLogKind::Gpu
    })
}

/// The columns of a headerless log, recognised from the shapes of its first rows, with the
/// assumption made (for the capture's note): each column by its shape ([`columns_by_shape`]),
/// then, among the numeric ones, a process list's pid and memory ([`place_process_columns`]) or
/// a GPU log's index ([`take_index_column`]), total ([`total_column`]) and other memory columns
/// ([`memory_column_order`]).
fn infer_columns(
    rows: &[Vec<&str>],
    kind: SmiLogKind,
    file: &str,
) -> Result<(Vec<Column>, String), SmiError> {
    let width = rows.first().map_or(0, Vec::len);
    let shapes = column_shapes(rows, width);
    let (mut columns, mut memory) = columns_by_shape(&shapes, kind, width);
    if kind == SmiLogKind::ComputeApps {
        return place_process_columns(columns, &memory, file);
    }
    let mut assumption = Vec::new();
    if take_index_column(rows, &mut columns, &mut memory) {
        assumption.push("index counts the GPUs of each tick");
    }
    let total_at = total_column(rows, &memory);
    let rest: Vec<usize> = memory
        .iter()
        .copied()
        .filter(|&i| Some(i) != total_at)
        .collect();
    if let Some(total) = total_at {
        columns[total] = Column::MemoryTotal;
    }
    let order = memory_column_order(rows, &rest, total_at);
    if order.is_empty() {
        return Err(SmiError::NotSmiCsv {
            file: file.to_owned(),
            problem: "no memory column found in a log without a header; log with the header \
                      (--format=csv) or query memory.used"
                .to_owned(),
        });
    }
    let mut named = Vec::new();
    for (&i, (column, name)) in rest.iter().zip(order) {
        columns[i] = column.clone();
        named.push(*name);
    }
    if total_at.is_some() {
        named.push("memory.total (the largest, constant column)");
    }
    let named = format!("numeric columns read as {}", named.join(", "));
    assumption.push(&named);
    Ok((columns, assumption.join("; ")))
}

/// Each of the `width` columns' shape: the first non-missing one in `rows`.
fn column_shapes(rows: &[Vec<&str>], width: usize) -> Vec<Shape> {
    (0..width)
        .map(|i| {
            rows.iter()
                .filter_map(|row| row.get(i))
                .map(|text| shape(text))
                .find(|s| *s != Shape::Missing)
                .unwrap_or(Shape::Missing)
        })
        .collect()
}

/// The numbers in column `i` of `rows` (missing values and text left out).
fn numbers_of(rows: &[Vec<&str>], i: usize) -> Vec<f64> {
    rows.iter()
        .filter_map(|row| match parse_cell(row.get(i)?) {
            Cell::Number(v) => Some(v),
            _ => None,
        })
        .collect()
}

/// The columns a shape tells by itself (timestamp, UUID, bus id, power; the first percentage
/// is the GPU's utilization, the second the memory's; the first clock the SM's, the second the
/// memory's; text a process or GPU name), and the numeric columns left to tell apart (the
/// memory columns, a pid, an index).
fn columns_by_shape(shapes: &[Shape], kind: SmiLogKind, width: usize) -> (Vec<Column>, Vec<usize>) {
    let mut columns = vec![Column::Other; width];
    let mut memory = Vec::new();
    let (mut percents, mut clocks) = (0, 0);
    for (i, shape) in shapes.iter().enumerate() {
        columns[i] = match shape {
            Shape::Timestamp => Column::Timestamp,
            Shape::Uuid => Column::Uuid,
            Shape::BusId => Column::BusId,
            Shape::Watts => Column::PowerDraw,
            Shape::Percent => {
                percents += 1;
                if percents == 1 {
                    Column::UtilizationGpu
                } else {
                    Column::UtilizationMemory
                }
            }
            Shape::Megahertz => {
                clocks += 1;
                if clocks == 1 {
                    Column::ClockSm
                } else {
                    Column::ClockMemory
                }
            }
            Shape::Text if kind == SmiLogKind::ComputeApps => Column::ProcessName,
            Shape::Text => Column::GpuName,
            Shape::Mebibytes => {
                memory.push(i);
                Column::Other
            }
            Shape::Number => {
                memory.push(i);
                Column::Other
            }
            Shape::Missing => Column::Other,
        };
    }
    (columns, memory)
}

/// A headerless process list's pid and used memory among its numeric columns (`memory`), in
/// nvidia-smi's order: the pid before the process name, its memory after it.
fn place_process_columns(
    mut columns: Vec<Column>,
    memory: &[usize],
    file: &str,
) -> Result<(Vec<Column>, String), SmiError> {
    let name_at = columns.iter().position(|c| *c == Column::ProcessName);
    let pid_at = memory
        .iter()
        .copied()
        .rev()
        .find(|&i| name_at.is_none_or(|n| i < n));
    let used_at = memory
        .iter()
        .copied()
        .find(|&i| Some(i) != pid_at && name_at.is_none_or(|n| i > n));
    match (pid_at, used_at) {
        (Some(pid), Some(used)) => {
            columns[pid] = Column::Pid;
            columns[used] = Column::ProcessUsedMemory;
            let assumption = "pid before the process name, used_memory after it";
            Ok((columns, assumption.to_owned()))
        }
        _ => Err(SmiError::NotSmiCsv {
            file: file.to_owned(),
            problem: "a process list without a header needs a pid and a memory column; \
                      log with the header (--format=csv) to be sure which is which"
                .to_owned(),
        }),
    }
}

/// Finds a headerless GPU log's index column and takes it out of `memory`: ticks are groups of
/// rows with one timestamp; with several GPUs per tick, the index is the numeric column that
/// counts 0, 1, 2, … within each tick. True when found.
fn take_index_column(rows: &[Vec<&str>], columns: &mut [Column], memory: &mut Vec<usize>) -> bool {
    let timestamp_at = columns.iter().position(|c| *c == Column::Timestamp);
    let gpus_per_tick = timestamp_at.map_or(1, |t| {
        rows.iter()
            .take_while(|row| row.get(t) == rows.first().and_then(|r| r.get(t)))
            .count()
    });
    if gpus_per_tick > 1
        && let Some(position) = memory.iter().position(|&i| {
            let values = numbers_of(rows, i);
            values.len() >= gpus_per_tick
                && values
                    .iter()
                    .take(gpus_per_tick)
                    .enumerate()
                    .all(|(n, &v)| v == n as f64)
        })
    {
        columns[memory.remove(position)] = Column::Index;
        return true;
    }
    false
}

/// The total among a GPU log's memory columns: the largest column, the same in every row of a
/// GPU (at least 1 GiB; none with fewer than two memory columns).
fn total_column(rows: &[Vec<&str>], memory: &[usize]) -> Option<usize> {
    memory
        .iter()
        .copied()
        .filter(|_| memory.len() >= 2)
        .filter(|&i| {
            let values = numbers_of(rows, i);
            let others_smaller = rows.iter().all(|row| {
                let Some(Cell::Number(total)) = row.get(i).map(|t| parse_cell(t)) else {
                    return true;
                };
                memory
                    .iter()
                    .all(|&j| match row.get(j).map(|t| parse_cell(t)) {
                        Some(Cell::Number(v)) => v <= total,
                        _ => true,
                    })
            });
            others_smaller && values.iter().all(|&v| v >= 1024.0)
        })
        .max()
}

/// What the memory columns other than the total (`rest`, in order) are, with the names the
/// note gives them: the driver's reserve is the one that never changes, and used and free add
/// up to about the total (used + reserved + free = total on current drivers); otherwise they
/// are taken in the order nvidia-smi documents them. Empty when there are none.
fn memory_column_order(
    rows: &[Vec<&str>],
    rest: &[usize],
    total_at: Option<usize>,
) -> &'static [(Column, &'static str)] {
    let constant = |i: usize| {
        let values = numbers_of(rows, i);
        values.windows(2).all(|w| w[0] == w[1])
    };
    let sums_to_total = |a: usize, b: usize| {
        total_at.is_some_and(|t| {
            rows.iter().all(|row| {
                let value = |i: usize| match row.get(i).map(|x| parse_cell(x)) {
                    Some(Cell::Number(v)) => Some(v),
                    _ => None,
                };
                match (value(a), value(b), value(t)) {
                    (Some(a), Some(b), Some(total)) => a + b >= 0.95 * total,
                    _ => true,
                }
            })
        })
    };
    match rest {
        [] => &[],
        [_] => &[(Column::MemoryUsed, "memory.used")],
        [a, b] if !sums_to_total(*a, *b) && constant(*b) && !constant(*a) => &[
            (Column::MemoryUsed, "memory.used"),
            (Column::MemoryReserved, "memory.reserved (the constant one)"),
        ],
        [a, b] if !sums_to_total(*a, *b) && constant(*a) && !constant(*b) => &[
            (Column::MemoryReserved, "memory.reserved (the constant one)"),
            (Column::MemoryUsed, "memory.used"),
        ],
        [_, _] => &[
            (Column::MemoryUsed, "memory.used"),
            (Column::MemoryFree, "memory.free"),
        ],
        _ => &[
            (Column::MemoryReserved, "memory.reserved"),
            (Column::MemoryUsed, "memory.used"),
            (Column::MemoryFree, "memory.free"),
        ],
    }
}

/// One parsed row, keyed for grouping.
#[derive(Default)]
struct Row<'a> {
    line: usize,
    t_ms: Option<UnixMs>,
    /// The timestamp text, so that rows of one tick group together exactly.
    tick_key: Option<&'a str>,
    index: Option<u32>,
    uuid: Option<&'a str>,
    bus_id: Option<&'a str>,
    name: Option<&'a str>,
    cells: Vec<(Column, Cell<'a>, f64)>,
}

impl Row<'_> {
    fn number(&self, column: &Column) -> Option<f64> {
        self.cells.iter().find_map(|(c, cell, _)| match cell {
            Cell::Number(v) if c == column => Some(*v),
            _ => None,
        })
    }

    fn bytes(&self, column: &Column) -> Option<u64> {
        self.cells
            .iter()
            .find_map(|(c, cell, per_unit)| match cell {
                Cell::Number(v) if c == column && *v >= 0.0 => Some((v * per_unit).round() as u64),
                _ => None,
            })
    }
}

/// Reads an nvidia-smi CSV log (either query kind) into a capture. `file` names the log in
/// errors and in the capture's note.
pub fn read_str(text: &str, file: &str, options: SmiReadOptions) -> Result<Capture, SmiError> {
    let not_smi = |problem: &str| SmiError::NotSmiCsv {
        file: file.to_owned(),
        problem: problem.to_owned(),
    };
    let kind = sniff(text).ok_or_else(|| {
        not_smi("the first line is neither a header of nvidia-smi field names nor a row shaped like nvidia-smi's")
    })?;
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(n, l)| (n + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let first = lines.clone().next();
    let header = first.and_then(|(_, l)| parse_header(l));
    if header.is_some() {
        lines.next();
    }
    let units: Vec<Option<&str>> = match (header.is_some(), first) {
        (true, Some((_, line))) => fields(line)
            .into_iter()
            .map(|f| header_field(f).1)
            .collect(),
        _ => Vec::new(),
    };
    // Data lines: a header repeated (logs appended to) or nvidia-smi's "No running processes
    // found" are skipped, not errors.
    let data: Vec<(usize, Vec<&str>)> = lines
        .filter(|(_, l)| parse_header(l).is_none() && !l.starts_with("No "))
        .map(|(n, l)| (n, fields(l)))
        .collect();
    let (columns, assumption) = match header {
        Some(columns) => (columns, String::new()),
        None => {
            let sample: Vec<Vec<&str>> = data.iter().take(64).map(|(_, f)| f.clone()).collect();
            infer_columns(&sample, kind, file)?
        }
    };
    // A line with another number of fields is not a row of this log (an error nvidia-smi
    // printed, a line cut by a killed logger): it is skipped, and the capture says so.
    let mut rows = Vec::with_capacity(data.len());
    let mut skipped: Vec<(usize, usize)> = Vec::new();
    for (line, values) in data {
        if values.len() != columns.len() {
            skipped.push((line, values.len()));
            continue;
        }
        rows.push(parse_row(&columns, &units, values, line, file, options)?);
    }
    let reference = if units.is_empty() {
        "first row"
    } else {
        "header"
    };
    if rows.is_empty() {
        return Err(match skipped.first() {
            Some(&(line, count)) => SmiError::BadLine {
                file: file.to_owned(),
                line,
                problem: format!(
                    "{count} fields where the {reference} has {}; no line is a row of this log",
                    columns.len()
                ),
            },
            None => not_smi("the log has a header but no rows (did nvidia-smi run?)"),
        });
    }
    let untimed = rows.iter().all(|r| r.t_ms.is_none());
    let skipped_note = skipped.first().map(|&(line, count)| {
        format!(
            "; {} line(s) skipped, the first at line {line} ({count} fields where the {reference} has {})",
            skipped.len(),
            columns.len()
        )
    });
    let mut note = kind.describe().to_owned();
    if !assumption.is_empty() {
        note.push_str(&format!(" without a header ({assumption})"));
    }
    if untimed {
        note.push_str(
            "; no timestamp column: ticks are placed 1 s apart, ending at the file's time",
        );
    } else {
        let offset = options.utc_offset_minutes;
        note.push_str(&format!(
            "; local times read as UTC{}{:02}:{:02}",
            if offset < 0 { '-' } else { '+' },
            offset.unsigned_abs() / 60,
            offset.unsigned_abs() % 60
        ));
    }
    note.push_str(skipped_note.as_deref().unwrap_or_default());
    Ok(build_capture(kind, rows, note, options))
}

fn parse_row<'a>(
    columns: &[Column],
    units: &[Option<&'a str>],
    values: Vec<&'a str>,
    line: usize,
    file: &str,
    options: SmiReadOptions,
) -> Result<Row<'a>, SmiError> {
    let mut row = Row {
        line,
        ..Default::default()
    };
    for (i, (column, text)) in columns.iter().zip(values).enumerate() {
        match column {
            Column::Timestamp => {
                let local = parse_timestamp(text).ok_or_else(|| SmiError::BadLine {
                    file: file.to_owned(),
                    line,
                    problem: format!("`{text}` is not a YYYY/MM/DD HH:MM:SS.mmm timestamp"),
                })?;
                let local_ms = local.to_unix_ms().ok_or_else(|| SmiError::BadLine {
                    file: file.to_owned(),
                    line,
                    problem: format!("`{text}` is not a date that exists"),
                })?;
                row.t_ms = Some(local_ms - i64::from(options.utc_offset_minutes) * 60_000);
                row.tick_key = Some(text);
            }
            Column::Index => {
                row.index = match parse_cell(text) {
                    Cell::Number(v) if v >= 0.0 && v.fract() == 0.0 && v < 65_536.0 => {
                        Some(v as u32)
                    }
                    _ => {
                        return Err(SmiError::BadLine {
                            file: file.to_owned(),
                            line,
                            problem: format!("`{text}` is not a GPU index"),
                        });
                    }
                }
            }
            Column::Uuid => row.uuid = Some(text).filter(|t| !t.starts_with('[')),
            Column::BusId => row.bus_id = Some(text).filter(|t| !t.starts_with('[')),
            Column::GpuName | Column::ProcessName | Column::DriverVersion => {
                if *column == Column::DriverVersion {
                    row.cells.push((column.clone(), Cell::Text(text), 1.0));
                } else {
                    row.name = Some(text).filter(|t| !t.starts_with('['));
                }
            }
            Column::Other => {}
            _ => {
                let unit = units
                    .get(i)
                    .copied()
                    .flatten()
                    .or_else(|| text.split_once(' ').map(|(_, unit)| unit));
                let cell = parse_cell(text);
                if let Cell::Text(bad) = cell {
                    return Err(SmiError::BadLine {
                        file: file.to_owned(),
                        line,
                        problem: format!("`{bad}` is not a number"),
                    });
                }
                row.cells.push((column.clone(), cell, bytes_per_unit(unit)));
            }
        }
    }
    Ok(row)
}

/// Device identity of a row: index, else UUID, else bus id; one GPU when the log names none.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum DeviceKey {
    Index(u32),
    Uuid(String),
    BusId(String),
    Only,
}

fn device_key(row: &Row<'_>) -> DeviceKey {
    match (row.index, row.uuid, row.bus_id) {
        (Some(index), _, _) => DeviceKey::Index(index),
        (None, Some(uuid), _) => DeviceKey::Uuid(uuid.to_owned()),
        (None, None, Some(bus)) => DeviceKey::BusId(bus.to_owned()),
        _ => DeviceKey::Only,
    }
}

/// The capture of a log's `rows`: its ticks ([`assign_ticks`], untimed rows placed one second
/// apart before `options.untimed_end_ms`), its devices ([`device_keys`], [`device_facts`]),
/// then one batch of samples or processes per tick ([`tick_batch`]).
fn build_capture(
    kind: SmiLogKind,
    mut rows: Vec<Row<'_>>,
    note: String,
    options: SmiReadOptions,
) -> Capture {
    let (tick_of_row, tick_count) = assign_ticks(kind, &rows);
    for (row, &tick) in rows.iter_mut().zip(&tick_of_row) {
        if row.t_ms.is_none() {
            row.t_ms = Some(options.untimed_end_ms - (tick_count - 1 - tick) as i64 * 1000);
        }
    }
    let keys = device_keys(&rows);
    let (facts, driver_version) = device_facts(kind, &rows, &keys);
    let times: Vec<UnixMs> = rows.iter().filter_map(|r| r.t_ms).collect();
    let started_ms = times.iter().copied().min().unwrap_or(0);
    let meta = CaptureMeta {
        source: SourceKind::Live,
        host: String::new(),
        driver_version,
        cuda_driver_version: None,
        started_ms,
        interval_ms: tick_interval_ms(&rows, &tick_of_row),
        writer: note,
    };
    let mut capture = Capture::new(meta, facts.into_values().collect());
    let mut reported_missing: Vec<(u32, &'static str)> = Vec::new();
    // nvidia-smi prints `[No data]` for the name of a process that is exiting: it keeps the
    // name it had, so that its track does not split in two.
    let mut process_names: BTreeMap<(u32, u32), String> = BTreeMap::new();
    let mut start = 0;
    while start < rows.len() {
        let tick = tick_of_row[start];
        let end = tick_of_row[start..]
            .iter()
            .position(|&t| t != tick)
            .map_or(rows.len(), |n| start + n);
        let batch = tick_batch(
            kind,
            &rows[start..end],
            (&keys, started_ms),
            &mut reported_missing,
            &mut process_names,
        );
        capture.ingest(&batch);
        start = end;
    }
    capture
}

/// Each row's tick, and how many ticks there are: consecutive rows with one timestamp; without
/// timestamps, a new tick starts when a device (or, for processes, a pid) repeats within the
/// current one.
fn assign_ticks(kind: SmiLogKind, rows: &[Row<'_>]) -> (Vec<usize>, usize) {
    let mut tick_of_row = Vec::with_capacity(rows.len());
    let mut tick = 0usize;
    let mut seen_in_tick: Vec<(DeviceKey, Option<u32>)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let key = (
            device_key(row),
            match kind {
                SmiLogKind::ComputeApps => row.number(&Column::Pid).map(|p| p as u32),
                SmiLogKind::Gpu => None,
            },
        );
        let new_tick = match (i.checked_sub(1).map(|p| &rows[p]), row.tick_key) {
            (None, _) => false,
            (Some(previous), Some(stamp)) => previous.tick_key != Some(stamp),
            (Some(_), None) => seen_in_tick.contains(&key),
        };
        if new_tick {
            tick += 1;
            seen_in_tick.clear();
        }
        seen_in_tick.push(key);
        tick_of_row.push(tick);
    }
    (tick_of_row, tick + 1)
}

/// The log's devices in order of first appearance.
fn device_keys(rows: &[Row<'_>]) -> Vec<DeviceKey> {
    let mut keys: Vec<DeviceKey> = Vec::new();
    for row in rows {
        let key = device_key(row);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// A device's number: its index, else its place among the log's devices (`keys`).
fn device_number(keys: &[DeviceKey], key: &DeviceKey) -> u32 {
    match key {
        DeviceKey::Index(index) => *index,
        other => keys.iter().position(|k| k == other).unwrap_or(0) as u32,
    }
}

/// What the rows say about each device (UUID, bus id, name, the largest total), by number, and
/// the driver's version (the last one given).
fn device_facts(
    kind: SmiLogKind,
    rows: &[Row<'_>],
    keys: &[DeviceKey],
) -> (BTreeMap<u32, DeviceFacts>, String) {
    let mut facts: BTreeMap<u32, DeviceFacts> = BTreeMap::new();
    let mut driver_version = String::new();
    for row in rows {
        let index = device_number(keys, &device_key(row));
        let device = facts.entry(index).or_insert_with(|| DeviceFacts {
            index,
            ..Default::default()
        });
        if let Some(uuid) = row.uuid {
            device.uuid = uuid.to_owned();
        }
        if let Some(bus) = row.bus_id {
            device.pci_bus_id = bus.to_owned();
        }
        if kind == SmiLogKind::Gpu
            && let Some(name) = row.name
        {
            device.name = name.to_owned();
        }
        if let Some(total) = row.bytes(&Column::MemoryTotal) {
            device.memory_total_bytes = device.memory_total_bytes.max(total);
        }
        if let Some((_, Cell::Text(version), _)) = row
            .cells
            .iter()
            .find(|(c, _, _)| *c == Column::DriverVersion)
        {
            driver_version = (*version).to_owned();
        }
    }
    (facts, driver_version)
}

/// The batch of one tick's `rows` (devices numbered among `keys`; a row without a time at
/// `started_ms`): a sample per GPU, or the processes (a row without a pid left out), and each
/// field a device first misses (`reported_missing` remembers them) as not supported or failed.
/// `process_names` keeps each process's last name.
fn tick_batch(
    kind: SmiLogKind,
    rows: &[Row<'_>],
    (keys, started_ms): (&[DeviceKey], UnixMs),
    reported_missing: &mut Vec<(u32, &'static str)>,
    process_names: &mut BTreeMap<(u32, u32), String>,
) -> SampleBatch {
    let mut batch = SampleBatch::default();
    for row in rows {
        let device_index = device_number(keys, &device_key(row));
        let t_ms = row.t_ms.unwrap_or(started_ms);
        for (column, cell, _) in &row.cells {
            if let (Cell::Missing { not_supported }, Some(field)) = (cell, column.field_name())
                && !reported_missing.contains(&(device_index, field))
            {
                reported_missing.push((device_index, field));
                batch.field_changes.push(FieldStatus {
                    device_index,
                    field: field.to_owned(),
                    state: if *not_supported {
                        FieldState::NotSupported
                    } else {
                        FieldState::Failed(format!(
                            "nvidia-smi did not report it (line {})",
                            row.line
                        ))
                    },
                });
            }
        }
        match kind {
            SmiLogKind::Gpu => batch.devices.push(device_sample(row, device_index, t_ms)),
            SmiLogKind::ComputeApps => {
                let Some(pid) = row.number(&Column::Pid) else {
                    continue;
                };
                let pid = pid as u32;
                let name = match row.name {
                    Some(name) => {
                        process_names.insert((device_index, pid), name.to_owned());
                        name.to_owned()
                    }
                    None => process_names
                        .get(&(device_index, pid))
                        .cloned()
                        .unwrap_or_default(),
                };
                batch
                    .processes
                    .get_or_insert_with(Vec::new)
                    .push(ProcessSample {
                        t_ms,
                        device_index,
                        pid,
                        name,
                        used_bytes: row.bytes(&Column::ProcessUsedMemory),
                        kind: ProcessKind::Compute,
                        mig_instance: None,
                    });
            }
        }
    }
    batch
}

fn device_sample(row: &Row<'_>, device_index: u32, t_ms: UnixMs) -> DeviceSample {
    let used = row.bytes(&Column::MemoryUsed);
    let total = row.bytes(&Column::MemoryTotal);
    let free = row.bytes(&Column::MemoryFree);
    let reserved = row.bytes(&Column::MemoryReserved);
    // nvidia-smi's memory.used excludes the driver's reserve on current drivers (used + reserved
    // + free = total), as NVML v2 does; a missing figure follows from the other three.
    let memory = used.map(|used_bytes| {
        let total_bytes = total.unwrap_or(0);
        let reserved_bytes = reserved.unwrap_or_else(|| match free {
            Some(free) => total_bytes.saturating_sub(used_bytes).saturating_sub(free),
            None => 0,
        });
        let free_bytes = free.unwrap_or_else(|| {
            total_bytes
                .saturating_sub(used_bytes)
                .saturating_sub(reserved_bytes)
        });
        MemoryReading {
            used_bytes,
            reserved_bytes,
            free_bytes,
            total_bytes,
        }
    });
    let whole = |column: &Column| row.number(column).map(|v| v.round().max(0.0) as u32);
    DeviceSample {
        t_ms,
        device_index,
        memory,
        gpu_util_pct: whole(&Column::UtilizationGpu),
        mem_util_pct: whole(&Column::UtilizationMemory),
        temperature_c: whole(&Column::Temperature),
        power_mw: row
            .number(&Column::PowerDraw)
            .map(|watts| (watts * 1000.0).round().max(0.0) as u32),
        sm_clock_mhz: whole(&Column::ClockSm),
        mem_clock_mhz: whole(&Column::ClockMemory),
        throttle_reasons: None,
        ecc_corrected_volatile: row
            .number(&Column::EccCorrectedVolatile)
            .map(|v| v.max(0.0) as u64),
        ecc_uncorrected_volatile: row
            .number(&Column::EccUncorrectedVolatile)
            .map(|v| v.max(0.0) as u64),
    }
}

/// The logging interval (`-lms`/`-l`): the median gap between consecutive ticks, 0 with one tick.
fn tick_interval_ms(rows: &[Row<'_>], tick_of_row: &[usize]) -> u32 {
    let mut tick_times: Vec<UnixMs> = Vec::new();
    let mut last_tick = None;
    for (row, &tick) in rows.iter().zip(tick_of_row) {
        if last_tick != Some(tick) {
            tick_times.extend(row.t_ms);
            last_tick = Some(tick);
        }
    }
    let mut gaps: Vec<i64> = tick_times
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&gap| gap > 0)
        .collect();
    if gaps.is_empty() {
        return 0;
    }
    gaps.sort_unstable();
    u32::try_from(gaps[gaps.len() / 2]).unwrap_or(u32::MAX)
}

/// Puts the process tracks of a `--query-compute-apps` log onto the GPUs of a `--query-gpu` log
/// of the same run: processes are matched to GPUs by UUID or bus id (both logs name them when
/// queried), else by index; a process log that names no GPU belongs to a single-GPU log's GPU.
pub fn combine(gpu_log: Capture, apps_log: &Capture) -> Capture {
    let mut combined = gpu_log;
    let target_of = |apps_index: u32| -> u32 {
        let Some(apps_device) = apps_log.devices.iter().find(|d| d.index == apps_index) else {
            return apps_index;
        };
        combined_device(&combined.devices, apps_device).unwrap_or(apps_index)
    };
    let mut ticks: BTreeMap<UnixMs, Vec<ProcessSample>> = BTreeMap::new();
    for &t in &apps_log.process_poll_ms {
        ticks.entry(t).or_default();
    }
    for track in &apps_log.processes {
        let device_index = target_of(track.device_index);
        for (&t_ms, &used_bytes) in track.t_ms.iter().zip(&track.used_bytes) {
            ticks.entry(t_ms).or_default().push(ProcessSample {
                t_ms,
                device_index,
                pid: track.pid,
                name: track.name.clone(),
                used_bytes,
                kind: track.kind,
                mig_instance: track.mig_instance,
            });
        }
    }
    for (_, processes) in ticks {
        combined.ingest(&SampleBatch {
            processes: Some(processes),
            ..Default::default()
        });
    }
    if !apps_log.meta.writer.is_empty() {
        combined.meta.writer = format!("{} + {}", combined.meta.writer, apps_log.meta.writer);
    }
    combined
}

/// The index in `devices` of the GPU `other` describes: same UUID, else same bus id, else the
/// only GPU.
fn combined_device(devices: &[DeviceFacts], other: &DeviceFacts) -> Option<u32> {
    let same = |a: &str, b: &str| !a.is_empty() && a.eq_ignore_ascii_case(b);
    devices
        .iter()
        .find(|d| same(&d.uuid, &other.uuid))
        .or_else(|| {
            devices
                .iter()
                .find(|d| same(&d.pci_bus_id, &other.pci_bus_id))
        })
        .or_else(|| {
            (devices.len() == 1 && other.uuid.is_empty() && other.pci_bus_id.is_empty())
                .then(|| &devices[0])
        })
        .map(|d| d.index)
}

/// Whether the process-only log `apps_log` can belong to the run of `gpu_log` (a capture with GPU
/// readings): the two logs' time spans overlap, give or take one sampling interval (two nvidia-smi
/// commands of one run start and stop a moment apart). The GUI opens files one by one and joins
/// such a pair with [`combine`]; logs of other times stay apart.
pub fn same_run(gpu_log: &Capture, apps_log: &Capture) -> bool {
    let Some((gpu_first_ms, gpu_last_ms)) = gpu_log.time_span_ms() else {
        return false;
    };
    let apps_times = apps_log
        .process_poll_ms
        .iter()
        .chain(apps_log.processes.iter().flat_map(|p| p.t_ms.iter()))
        .copied();
    let (Some(apps_first_ms), Some(apps_last_ms)) = (apps_times.clone().min(), apps_times.max())
    else {
        return false;
    };
    let slack_ms = i64::from(gpu_log.meta.interval_ms.max(apps_log.meta.interval_ms)).max(1_000);
    is_process_log(apps_log)
        && !is_process_log(gpu_log)
        && apps_first_ms <= gpu_last_ms + slack_ms
        && apps_last_ms >= gpu_first_ms - slack_ms
}

/// Whether a capture came from a nvidia-smi process log only (no GPU readings), so that callers
/// can look for the GPU log of the same run to combine with.
pub fn is_process_log(capture: &Capture) -> bool {
    capture.sample_count() == 0 && !capture.processes.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UTC: SmiReadOptions = SmiReadOptions {
        utc_offset_minutes: 0,
        untimed_end_ms: 1_800_000_000_000,
    };

    fn read(text: &str) -> Capture {
        read_str(text, "test.csv", UTC).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn reads_header_with_units_and_several_gpus_interleaved() {
        let capture = read(
            "timestamp, index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], power.draw [W]\n\
             2026/12/01 13:59:16.991, 0, NVIDIA H200, 0 MiB, 143771 MiB, 0 %, 82.60 W\n\
             2026/12/01 13:59:16.991, 1, NVIDIA H200, 4708 MiB, 143771 MiB, 37 %, [N/A]\n\
             2026/12/01 13:59:17.491, 0, NVIDIA H200, 10 MiB, 143771 MiB, 1 %, 90.00 W\n\
             2026/12/01 13:59:17.491, 1, NVIDIA H200, 4710 MiB, 143771 MiB, 40 %, [N/A]\n",
        );
        assert_eq!(capture.devices.len(), 2);
        assert_eq!(capture.devices[1].name, "NVIDIA H200");
        assert_eq!(capture.devices[0].memory_total_bytes, 143_771 * MIB);
        let gpu1 = capture.series(1).expect("GPU 1");
        assert_eq!(gpu1.len(), 2);
        let first = gpu1.get(0).expect("a sample");
        let memory = first.memory.expect("memory");
        assert_eq!(memory.used_bytes, 4708 * MIB);
        assert_eq!(memory.free_bytes, (143_771 - 4708) * MIB);
        assert_eq!(first.gpu_util_pct, Some(37));
        assert_eq!(first.power_mw, None);
        assert_eq!(
            capture
                .series(0)
                .expect("GPU 0")
                .get(0)
                .expect("a sample")
                .power_mw,
            Some(82_600)
        );
        // 2026-12-01 13:59:16.991 UTC.
        assert_eq!(first.t_ms, 1_796_133_556_991);
        assert_eq!(capture.meta.interval_ms, 500);
        assert!(
            capture
                .field_status
                .iter()
                .any(|f| f.device_index == 1 && f.field == "power"),
            "{:?}",
            capture.field_status
        );
    }

    #[test]
    fn local_time_is_shifted_to_utc() {
        let text = "timestamp, memory.used [MiB]\n2026/12/01 14:00:00.000, 5 MiB\n";
        let plus_one = SmiReadOptions {
            utc_offset_minutes: 60,
            ..UTC
        };
        let capture = read_str(text, "x.csv", plus_one).expect("reads");
        assert_eq!(
            capture
                .series(0)
                .expect("GPU 0")
                .get(0)
                .expect("a sample")
                .t_ms,
            read(text)
                .series(0)
                .expect("GPU 0")
                .get(0)
                .expect("a sample")
                .t_ms
                - 3_600_000
        );
        assert!(
            capture.meta.writer.contains("UTC+01:00"),
            "{}",
            capture.meta.writer
        );
    }

    #[test]
    fn nounits_values_take_the_header_unit_in_any_order() {
        let capture = read(
            "memory.total [MiB], memory.free [MiB], memory.used [MiB], timestamp\n\
             81920, 71680, 10000, 2026/01/02 03:04:05.600\n",
        );
        let memory = capture
            .series(0)
            .expect("GPU 0")
            .get(0)
            .expect("a sample")
            .memory
            .expect("memory");
        assert_eq!(memory.used_bytes, 10_000 * MIB);
        assert_eq!(memory.free_bytes, 71_680 * MIB);
        assert_eq!(memory.reserved_bytes, 240 * MIB, "total - used - free");
    }

    #[test]
    fn headerless_logs_are_recognised_by_their_values() {
        // --query-gpu=timestamp,index,memory.used,memory.total --format=csv,noheader,nounits
        let capture = read(
            "2026/12/01 13:59:16.991, 0, 0, 143771\n\
             2026/12/01 13:59:16.991, 1, 300, 143771\n\
             2026/12/01 13:59:17.991, 0, 1024, 143771\n\
             2026/12/01 13:59:17.991, 1, 300, 143771\n",
        );
        assert_eq!(capture.devices.len(), 2);
        let gpu0 = capture.series(0).expect("GPU 0");
        assert_eq!(
            gpu0.iter()
                .map(|s| s.memory.map(|m| (m.used_bytes / MIB, m.total_bytes / MIB)))
                .collect::<Vec<_>>(),
            vec![Some((0, 143_771)), Some((1024, 143_771))]
        );
        assert_eq!(capture.meta.interval_ms, 1000);
        assert!(
            capture.meta.writer.contains("without a header"),
            "{}",
            capture.meta.writer
        );
        // With units and no header: the unit says which columns are memory.
        let with_units = read("2026/12/01 13:59:16.991, 612 MiB, 143771 MiB\n");
        let memory = with_units
            .series(0)
            .expect("GPU 0")
            .get(0)
            .expect("a sample")
            .memory
            .expect("memory");
        assert_eq!(
            (memory.used_bytes, memory.total_bytes),
            (612 * MIB, 143_771 * MIB)
        );
    }

    #[test]
    fn process_logs_become_process_tracks() {
        let capture = read(
            "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n\
             2026/11/30 08:46:26.338, GPU-aaaa, 586, python3, 14 MiB\n\
             2026/11/30 08:46:26.338, GPU-bbbb, 587, python3, 14 MiB\n\
             2026/11/30 08:46:26.590, GPU-aaaa, 586, python3, 612 MiB\n\
             2026/11/30 08:46:26.590, GPU-bbbb, 587, python3, [N/A]\n",
        );
        assert_eq!(capture.sample_count(), 0);
        assert!(is_process_log(&capture));
        assert_eq!(capture.devices.len(), 2);
        assert_eq!(capture.devices[1].uuid, "GPU-bbbb");
        assert_eq!(capture.processes.len(), 2);
        let first = &capture.processes[0];
        assert_eq!((first.device_index, first.pid), (0, 586));
        assert_eq!(first.used_bytes, vec![Some(14 * MIB), Some(612 * MIB)]);
        assert_eq!(capture.processes[1].used_bytes, vec![Some(14 * MIB), None]);
        // An exiting process's name reads `[No data]`: it stays on its track.
        let exiting = read(
            "timestamp, pid, process_name, used_gpu_memory [MiB]\n\
             2026/11/30 08:46:26.338, 586, python3, 14 MiB\n\
             2026/11/30 08:46:26.590, 586, [No data], [No data]\n",
        );
        assert_eq!(exiting.processes.len(), 1);
        assert_eq!(exiting.processes[0].used_bytes, vec![Some(14 * MIB), None]);
        assert_eq!(capture.process_poll_ms.len(), 2);
    }

    #[test]
    fn headerless_process_list_without_times_uses_the_end_time() {
        // --query-compute-apps=pid,name,used_memory --format=csv,noheader
        let capture =
            read("734, /opt/torch/.venv/bin/python3, 12908 MiB\n758, python3, 128518 MiB\n");
        assert_eq!(capture.processes.len(), 2);
        assert_eq!(capture.processes[1].pid, 758);
        assert_eq!(capture.processes[1].peak_used_bytes(), Some(128_518 * MIB));
        assert_eq!(capture.processes[0].t_ms, vec![UTC.untimed_end_ms]);
    }

    #[test]
    fn combines_a_process_log_with_the_gpu_log_by_uuid() {
        let gpus = read(
            "timestamp, index, uuid, memory.used [MiB], memory.total [MiB]\n\
             2026/11/30 08:46:26.300, 0, GPU-aaaa, 20 MiB, 1000 MiB\n\
             2026/11/30 08:46:26.300, 1, GPU-bbbb, 30 MiB, 1000 MiB\n",
        );
        let apps = read(
            "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n\
             2026/11/30 08:46:26.338, GPU-bbbb, 587, python3, 14 MiB\n",
        );
        let combined = combine(gpus, &apps);
        assert_eq!(combined.processes.len(), 1);
        assert_eq!(combined.processes[0].device_index, 1);
        assert_eq!(combined.sample_count(), 2);
        assert!(
            combined.meta.writer.contains("compute-apps"),
            "{}",
            combined.meta.writer
        );
    }

    #[test]
    fn bad_input_is_an_error_naming_the_line() {
        let err = read_str(
            "timestamp, memory.used [MiB]\n2026/12/01 13:59:16.991, 1 MiB\n2026/13/01 00:00:00.000, 1 MiB\n",
            "bad.csv",
            UTC,
        )
        .expect_err("month 13");
        assert!(err.to_string().starts_with("bad.csv, line 3:"), "{err}");
        let err = read_str(
            "timestamp, memory.used [MiB]\n2026/12/01 13:59:16.991, 1 MiB, 4\n",
            "bad.csv",
            UTC,
        )
        .expect_err("no row fits the header");
        assert!(
            err.to_string().contains("3 fields where the header has 2"),
            "{err}"
        );
        // One odd line among good ones is skipped, and the capture says so.
        let capture = read(
            "timestamp, memory.used [MiB]\n2026/12/01 13:59:16.991, 1 MiB\nUnable to determine the device handle for GPU 0000:18:00.0: Unknown Error\n2026/12/01 13:59:17.991, 2 MiB\n",
        );
        assert_eq!(capture.sample_count(), 2);
        assert!(
            capture
                .meta
                .writer
                .contains("1 line(s) skipped, the first at line 3"),
            "{}",
            capture.meta.writer
        );
        assert!(read_str("hello, world\n", "x.csv", UTC).is_err());
        assert!(
            sniff("1, 2, 3\n").is_none(),
            "a bare list of numbers could be any CSV"
        );
        assert!(sniff("step 1 loss 0.3\n").is_none());
    }
}
