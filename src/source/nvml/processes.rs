//! Turning NVML's two process lists (compute and graphics) into one list per device, and naming
//! processes from `/proc`.
//!
//! NVML reports host PIDs and nothing else about a process. Names come from `/proc/<pid>/comm`
//! (or the command line when `comm` is empty); inside a container without the host PID namespace
//! those files do not exist and the name stays empty rather than wrong.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::model::ProcessKind;

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
