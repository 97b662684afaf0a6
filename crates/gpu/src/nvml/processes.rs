//! Turning NVML's two process lists (compute and graphics) into one list per device, and naming
//! processes from `/proc`.
//!
//! NVML reports host PIDs and nothing else about a process. Names come from `/proc/<pid>/comm`
//! (or the command line when `comm` is empty); inside a container without the host PID namespace
//! those files do not exist and the name stays empty rather than wrong.
//!
//! Reading the lists is the dearest call of the fast tier, so [`ProcessRefresh`] decides per GPU
//! when they must be read again and when the last lists still hold.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::raw::ProcessList;
use vramscope_core::model::{ProcessKind, UnixMs};

/// How long the process lists of a GPU whose memory did not change are reused at most, unless
/// the source is configured otherwise.
pub const DEFAULT_PROCESS_REFRESH_MAX_MS: u64 = 1_000;

/// Decides, per GPU and per fast tick, whether the process lists must be read again.
///
/// A process's GPU memory can only change when the device's: a process starting creates a
/// context (device `used_bytes` rises), one exiting frees it, allocating or freeing changes
/// `used_bytes`. So the lists are read again when the device's used memory differs from its
/// value at the last read, when `max_age_ms` has passed since that read (a free and an
/// allocation of the same size between two ticks, a pid reused), when the slow tier runs, when
/// used memory could not be read, and after any read that did not return both lists; otherwise
/// the last lists are repeated. `max_age_ms == 0` reads every tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessRefresh {
    max_age_ms: u64,
    /// Device used memory and time of the last read that returned both lists.
    last_complete_read: Option<(u64, UnixMs)>,
}

impl ProcessRefresh {
    pub fn new(max_age_ms: u64) -> Self {
        ProcessRefresh {
            max_age_ms,
            last_complete_read: None,
        }
    }

    /// Whether the lists must be read at `now_ms`, given the device's used memory just read
    /// (`None` when it could not be) and whether the slow tier runs in this poll.
    pub fn must_read(&self, used_bytes: Option<u64>, now_ms: UnixMs, slow_tier: bool) -> bool {
        let (Some(used_bytes), Some((last_used_bytes, last_ms))) =
            (used_bytes, self.last_complete_read)
        else {
            return true;
        };
        // A clock that went backwards counts as expired.
        let age_ms = u64::try_from(now_ms.saturating_sub(last_ms)).unwrap_or(u64::MAX);
        slow_tier || used_bytes != last_used_bytes || now_ms < last_ms || age_ms >= self.max_age_ms
    }

    /// Records a read at `now_ms`. Only a `complete` read (both lists returned) can be reused;
    /// after a failed or unsupported list the next tick reads again rather than repeating it.
    pub fn record_read(&mut self, used_bytes: Option<u64>, now_ms: UnixMs, complete: bool) {
        self.last_complete_read = used_bytes
            .filter(|_| complete)
            .map(|used_bytes| (used_bytes, now_ms));
    }
}

/// One entry of an NVML process list, without NVML types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedProcess {
    pub pid: u32,
    /// `None` when NVML says the value is not available (Windows WDDM, some vGPU setups).
    pub used_bytes: Option<u64>,
    /// (GPU instance id, compute instance id) when MIG is enabled.
    pub mig_instance: Option<(u32, u32)>,
}

impl ListedProcess {
    /// From the fields of an `nvmlProcessInfo_t`, whose sentinels mean "not available"
    /// (`NVML_VALUE_NOT_AVAILABLE` memory) and "no MIG instance" (`0xFFFFFFFF` ids).
    pub fn from_nvml(
        pid: u32,
        used_gpu_memory_bytes: u64,
        gpu_instance_id: u32,
        compute_instance_id: u32,
    ) -> Self {
        const NOT_AVAILABLE: u64 = u64::MAX;
        const NO_INSTANCE: u32 = u32::MAX;
        ListedProcess {
            pid,
            used_bytes: (used_gpu_memory_bytes != NOT_AVAILABLE).then_some(used_gpu_memory_bytes),
            mig_instance: (gpu_instance_id != NO_INSTANCE && compute_instance_id != NO_INSTANCE)
                .then_some((gpu_instance_id, compute_instance_id)),
        }
    }
}

/// One GPU's last compute and graphics process lists, read again only when [`ProcessRefresh`]
/// says they can have changed.
#[derive(Clone, Debug)]
pub struct CachedProcessLists {
    refresh: ProcessRefresh,
    compute: Vec<ListedProcess>,
    graphics: Vec<ListedProcess>,
    /// How many times the lists were read (for the sampler benchmark).
    reads: u64,
}

impl CachedProcessLists {
    pub fn new(max_age_ms: u64) -> Self {
        CachedProcessLists {
            refresh: ProcessRefresh::new(max_age_ms),
            compute: Vec::new(),
            graphics: Vec::new(),
            reads: 0,
        }
    }

    /// Reads both lists through `read` (`None`: that list could not be read; it is then empty)
    /// when they must be read, else keeps the last ones. Returns whether `read` was called.
    pub fn update(
        &mut self,
        used_bytes: Option<u64>,
        now_ms: UnixMs,
        slow_tier: bool,
        mut read: impl FnMut(ProcessList) -> Option<Vec<ListedProcess>>,
    ) -> bool {
        if !self.refresh.must_read(used_bytes, now_ms, slow_tier) {
            return false;
        }
        let compute = read(ProcessList::Compute);
        let graphics = read(ProcessList::Graphics);
        let complete = compute.is_some() && graphics.is_some();
        self.compute = compute.unwrap_or_default();
        self.graphics = graphics.unwrap_or_default();
        self.refresh.record_read(used_bytes, now_ms, complete);
        self.reads += 1;
        true
    }

    /// How many times [`CachedProcessLists::update`] read the lists.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// The current lists merged (see [`merge_process_lists`]).
    pub fn merged(&self) -> Vec<(ListedProcess, ProcessKind)> {
        merge_process_lists(&self.compute, &self.graphics)
    }
}

/// Merges the compute and graphics lists: a process in both (same pid and MIG instance) appears
/// once as [`ProcessKind::ComputeAndGraphics`]. NVML reports the process's whole footprint in
/// each list, so the larger of the two readings is kept rather than their sum. Sorted by pid.
pub fn merge_process_lists(
    compute: &[ListedProcess],
    graphics: &[ListedProcess],
) -> Vec<(ListedProcess, ProcessKind)> {
    // Keyed by (pid, MIG instance): one process can hold contexts on several instances.
    let mut merged = BTreeMap::<(u32, Option<(u32, u32)>), _>::new();
    for p in compute {
        merged.insert((p.pid, p.mig_instance), (*p, ProcessKind::Compute));
    }
    for p in graphics {
        merged
            .entry((p.pid, p.mig_instance))
            .and_modify(|(existing, kind)| {
                *kind = ProcessKind::ComputeAndGraphics;
                existing.used_bytes = existing.used_bytes.max(p.used_bytes);
            })
            .or_insert((*p, ProcessKind::Graphics));
    }
    merged.into_values().collect()
}

/// Reads a process's name under `proc_root` (normally `/proc`): `comm`, else the base name of
/// the first command-line argument, else empty (the process is not visible from here).
pub fn read_process_name(proc_root: &Path, pid: u32) -> String {
    let dir = proc_root.join(pid.to_string());
    if let Ok(comm) = std::fs::read_to_string(dir.join("comm")) {
        let comm = comm.trim_end_matches('\n');
        if !comm.is_empty() {
            return comm.to_owned();
        }
    }
    match std::fs::read(dir.join("cmdline")) {
        Ok(cmdline) => {
            let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
            let argv0 = String::from_utf8_lossy(argv0);
            argv0.rsplit('/').next().unwrap_or_default().to_owned()
        }
        Err(_) => String::new(),
    }
}

/// Process names by pid, read once per process lifetime: names are looked up when a pid first
/// appears and forgotten when it leaves every device's list, so a reused pid is read again.
#[derive(Debug)]
pub struct ProcessNames {
    proc_root: PathBuf,
    by_pid: HashMap<u32, String>,
}

impl ProcessNames {
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        ProcessNames {
            proc_root: proc_root.into(),
            by_pid: HashMap::new(),
        }
    }

    /// The name of `pid`, read from `/proc` the first time it is asked for.
    pub fn name(&mut self, pid: u32) -> &str {
        let root = &self.proc_root;
        self.by_pid
            .entry(pid)
            .or_insert_with(|| read_process_name(root, pid))
    }

    /// Forgets every pid not in `live_pids` (call once per tick with all listed pids).
    pub fn retain_only(&mut self, live_pids: &[u32]) {
        self.by_pid.retain(|pid, _| live_pids.contains(pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(pid: u32, used: u64) -> ListedProcess {
        ListedProcess {
            pid,
            used_bytes: Some(used),
            mig_instance: None,
        }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn first_tick_reads() {
        let refresh = ProcessRefresh::new(DEFAULT_PROCESS_REFRESH_MAX_MS);
        assert!(refresh.must_read(Some(8 * GIB), 1_000, false));
    }

    #[test]
    fn unchanged_memory_reuses_the_lists_until_they_are_too_old() {
        let mut refresh = ProcessRefresh::new(1_000);
        refresh.record_read(Some(8 * GIB), 10_000, true);
        assert!(!refresh.must_read(Some(8 * GIB), 10_100, false));
        assert!(!refresh.must_read(Some(8 * GIB), 10_999, false));
        assert!(refresh.must_read(Some(8 * GIB), 11_000, false), "1 s old");
        assert!(
            refresh.must_read(Some(8 * GIB), 9_900, false),
            "clock went back"
        );
    }

    #[test]
    fn changed_memory_or_the_slow_tier_reads() {
        let mut refresh = ProcessRefresh::new(1_000);
        refresh.record_read(Some(8 * GIB), 10_000, true);
        assert!(refresh.must_read(Some(8 * GIB + 2 * 1024 * 1024), 10_100, false));
        assert!(refresh.must_read(Some(8 * GIB - 1), 10_100, false));
        assert!(refresh.must_read(Some(8 * GIB), 10_100, true), "slow tier");
        assert!(refresh.must_read(None, 10_100, false), "memory unreadable");
        refresh.record_read(Some(9 * GIB), 10_100, true);
        assert!(!refresh.must_read(Some(9 * GIB), 10_200, false));
    }

    #[test]
    fn an_incomplete_read_is_not_reused() {
        let mut refresh = ProcessRefresh::new(1_000);
        refresh.record_read(Some(8 * GIB), 10_000, true);
        refresh.record_read(Some(8 * GIB), 10_100, false);
        assert!(refresh.must_read(Some(8 * GIB), 10_200, false));
        refresh.record_read(None, 10_200, true);
        assert!(refresh.must_read(Some(8 * GIB), 10_300, false));
    }

    #[test]
    fn zero_max_age_reads_every_tick() {
        let mut refresh = ProcessRefresh::new(0);
        refresh.record_read(Some(8 * GIB), 10_000, true);
        assert!(refresh.must_read(Some(8 * GIB), 10_000, false));
    }

    #[test]
    fn cached_lists_are_repeated_until_memory_changes_and_failures_are_not() {
        let mut lists = CachedProcessLists::new(1_000);
        let mut calls = Vec::new();
        let mut read_ok = |list: ProcessList| {
            calls.push(list);
            match list {
                ProcessList::Compute => Some(vec![listed(10, 8 * GIB)]),
                ProcessList::Graphics => Some(vec![]),
            }
        };
        assert!(lists.update(Some(8 * GIB), 0, false, &mut read_ok));
        assert!(!lists.update(Some(8 * GIB), 100, false, &mut read_ok));
        assert_eq!(calls, [ProcessList::Compute, ProcessList::Graphics]);
        assert_eq!(lists.reads(), 1);
        assert_eq!(
            lists.merged(),
            vec![(listed(10, 8 * GIB), ProcessKind::Compute)],
            "repeated"
        );
        let read_failing = |list: ProcessList| match list {
            ProcessList::Compute => None,
            ProcessList::Graphics => Some(vec![listed(20, GIB)]),
        };
        assert!(lists.update(Some(9 * GIB), 200, false, read_failing));
        assert_eq!(
            lists.merged(),
            vec![(listed(20, GIB), ProcessKind::Graphics)],
            "a failed list is empty, not the old one"
        );
        assert!(
            lists.update(Some(9 * GIB), 300, false, read_failing),
            "read again after a failure although memory is unchanged"
        );
    }

    #[test]
    fn merges_compute_and_graphics_lists() {
        let compute = [listed(30, 100), listed(10, 500)];
        let graphics = [listed(10, 600), listed(20, 50)];
        let merged = merge_process_lists(&compute, &graphics);
        assert_eq!(
            merged,
            vec![
                (listed(10, 600), ProcessKind::ComputeAndGraphics),
                (listed(20, 50), ProcessKind::Graphics),
                (listed(30, 100), ProcessKind::Compute),
            ]
        );
    }

    #[test]
    fn same_pid_on_two_mig_instances_stays_two_entries() {
        let a = ListedProcess {
            pid: 7,
            used_bytes: Some(1),
            mig_instance: Some((1, 0)),
        };
        let b = ListedProcess {
            pid: 7,
            used_bytes: None,
            mig_instance: Some((2, 0)),
        };
        let merged = merge_process_lists(&[a, b], &[]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[1].0.used_bytes, None);
    }

    #[test]
    fn converts_nvml_process_info_sentinels() {
        assert_eq!(
            ListedProcess::from_nvml(42, u64::MAX, u32::MAX, u32::MAX),
            ListedProcess {
                pid: 42,
                used_bytes: None,
                mig_instance: None
            }
        );
        assert_eq!(
            ListedProcess::from_nvml(7, 1 << 30, 3, 1),
            ListedProcess {
                pid: 7,
                used_bytes: Some(1 << 30),
                mig_instance: Some((3, 1))
            }
        );
    }

    #[test]
    fn reads_names_from_comm_then_cmdline_else_empty() {
        let root = tempfile::tempdir().expect("temp dir");
        let with_comm = root.path().join("100");
        std::fs::create_dir(&with_comm).expect("mkdir");
        std::fs::write(with_comm.join("comm"), "python3\n").expect("write");
        let only_cmdline = root.path().join("200");
        std::fs::create_dir(&only_cmdline).expect("mkdir");
        std::fs::write(only_cmdline.join("comm"), "").expect("write");
        std::fs::write(
            only_cmdline.join("cmdline"),
            b"/usr/bin/torchrun\0--nproc\08\0",
        )
        .expect("write");
        assert_eq!(read_process_name(root.path(), 100), "python3");
        assert_eq!(read_process_name(root.path(), 200), "torchrun");
        assert_eq!(read_process_name(root.path(), 300), "", "invisible process");
    }

    #[test]
    fn reads_this_process_from_the_real_proc() {
        let name = read_process_name(Path::new("/proc"), std::process::id());
        assert!(
            !name.is_empty(),
            "the test process must see itself in /proc"
        );
    }

    #[test]
    fn name_cache_rereads_a_pid_after_it_left() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("5");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("comm"), "first\n").expect("write");
        let mut names = ProcessNames::new(root.path());
        assert_eq!(names.name(5), "first");
        std::fs::write(dir.join("comm"), "second\n").expect("write");
        assert_eq!(names.name(5), "first", "cached while the pid stays listed");
        names.retain_only(&[5]);
        assert_eq!(names.name(5), "first");
        names.retain_only(&[]);
        assert_eq!(names.name(5), "second", "pid left and was reused");
    }
}
