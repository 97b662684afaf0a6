//! What an Xid code means: the memory- and health-related Xid errors a GPU-memory doctor meets,
//! with NVIDIA's mnemonic, the catalog's description, the likely causes and what to do.
//!
//! Sources: mnemonics from `src/common/sdk/nvidia/inc/nverror.h` in NVIDIA/open-gpu-kernel-modules,
//! descriptions and the immediate/investigatory resolution buckets from NVIDIA's Xid catalog
//! (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), likely causes from NVIDIA's
//! older Xid table, and DCGM's health-watch severity from `modules/health/DcgmHealthWatch.cpp` in
//! NVIDIA/DCGM (`docs/sources.md` § "NVIDIA: Xid errors, health limits, driver compatibility"). Codes outside this table are still shown (with their
//! number and a pointer to the catalog); the table only adds explanation.

use std::fmt;

/// One origin NVIDIA's older Xid table lists for an Xid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XidCause {
    /// A hardware error on the GPU.
    Hardware,
    /// A driver error.
    Driver,
    /// The user's application (illegal address, bad kernel, ...).
    Application,
    /// System memory corruption on the host.
    SystemMemoryCorruption,
    /// A PCIe/NVLink bus error.
    Bus,
    /// A thermal problem.
    Thermal,
    /// Frame-buffer (device memory) corruption.
    FramebufferCorruption,
}

impl XidCause {
    /// Words for the cause, as shown in the wizard and in reports.
    pub fn label(self) -> &'static str {
        match self {
            XidCause::Hardware => "hardware error",
            XidCause::Driver => "driver error",
            XidCause::Application => "application bug",
            XidCause::SystemMemoryCorruption => "system memory corruption",
            XidCause::Bus => "bus (PCIe/NVLink) error",
            XidCause::Thermal => "thermal issue",
            XidCause::FramebufferCorruption => "GPU memory corruption",
        }
    }
}

/// How DCGM's health watches grade an Xid: a wizard uses it to decide whether to tell the user
/// to drain the node or just to look at their code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XidSeverity {
    /// DCGM has no opinion (usually an application problem or an informational Xid).
    Unrated,
    /// DCGM raises a warning.
    Warning,
    /// DCGM marks the GPU as failed.
    Failure,
}

/// Knowledge about one Xid code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XidInfo {
    pub code: u64,
    /// NVIDIA's name for it in `nverror.h`, e.g. `ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT`.
    pub mnemonic: &'static str,
    /// The catalog's one-line description.
    pub description: &'static str,
    /// The catalog's resolution buckets, "immediate / investigatory" (e.g. `RESTART_APP /
    /// WORKFLOW_XID_31`); empty when the catalog gives none.
    pub catalog_resolution: &'static str,
    /// Origins listed by NVIDIA's older Xid table, most common first as listed there.
    pub likely_causes: &'static [XidCause],
    pub severity: XidSeverity,
    /// What the user should do, in plain words.
    pub what_to_do: &'static str,
}

use XidCause::{
    Application as App, Bus, Driver as Drv, FramebufferCorruption as Fb, Hardware as Hw,
    SystemMemoryCorruption as Smc, Thermal as Th,
};
use XidSeverity::{Failure, Unrated, Warning};

/// Every Xid vramscope can explain, in ascending code order.
pub const XID_TABLE: &[XidInfo] = &[
    XidInfo {
        code: 13,
        mnemonic: "ROBUST_CHANNEL_GR_EXCEPTION",
        description: "Graphics Engine Exception",
        catalog_resolution: "RESTART_APP / WORKFLOW_XID_13",
        likely_causes: &[Hw, Drv, App, Smc, Bus, Th, Fb],
        severity: Unrated,
        what_to_do: "Usually a bug in the application (illegal instruction or out-of-range access): \
                     restart it and rerun it under compute-sanitizer to find the faulting kernel.",
    },
    XidInfo {
        code: 31,
        mnemonic: "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        description: "GPU memory page fault",
        catalog_resolution: "RESTART_APP / WORKFLOW_XID_31",
        likely_causes: &[Hw, Drv, App],
        severity: Warning,
        what_to_do: "An illegal memory access: restart the application and check it with \
                     compute-sanitizer. If the same GPU faults across different jobs, suspect the \
                     hardware.",
    },
    XidInfo {
        code: 32,
        mnemonic: "ROBUST_CHANNEL_PBDMA_ERROR",
        description: "Invalid or corrupted push buffer stream",
        catalog_resolution: "RESTART_APP / CHECK_APP/CUDA",
        likely_causes: &[Drv, Smc, Bus, Th, Fb],
        severity: Warning,
        what_to_do: "Restart the application; if it repeats, check PCIe link health (replay \
                     counter), host memory and cooling.",
    },
    XidInfo {
        code: 43,
        mnemonic: "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        description: "GPU stopped processing",
        catalog_resolution: "IGNORE / CONTACT_SUPPORT",
        likely_causes: &[Drv, App],
        severity: Warning,
        what_to_do: "The application hit a software-induced fault; the GPU itself stays usable. \
                     Fix or restart the application.",
    },
    XidInfo {
        code: 45,
        mnemonic: "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        description: "Preemptive cleanup, due to previous errors",
        catalog_resolution: "WORKFLOW_XID_45 / IGNORE (follow the other Xid)",
        likely_causes: &[Drv, App],
        severity: Unrated,
        what_to_do: "A consequence, not a cause: look at the Xid logged just before it. Alone \
                     (no other Xid) on an NVSwitch system, restart the fabric manager.",
    },
    XidInfo {
        code: 48,
        mnemonic: "ROBUST_CHANNEL_GPU_ECC_DBE",
        description: "Double Bit ECC Error",
        catalog_resolution: "WORKFLOW_XID_48 / WORKFLOW_XID_48",
        likely_causes: &[Drv, Hw],
        severity: Failure,
        what_to_do: "An uncorrectable ECC error: stop the jobs on this GPU and reset it (or \
                     reboot). Xid 171 (DRAM) or 172 (SRAM) may follow with detail. Repeated \
                     occurrences make the GPU an RMA candidate.",
    },
    XidInfo {
        code: 62,
        mnemonic: "PMU_HALT_ERROR",
        description: "Internal micro-controller halt",
        catalog_resolution: "RESET_GPU / CONTACT_SUPPORT",
        likely_causes: &[Hw, Drv, Th],
        severity: Unrated,
        what_to_do: "Reset the GPU; if it repeats, check cooling and contact the vendor.",
    },
    XidInfo {
        code: 63,
        mnemonic: "INFOROM_DRAM_RETIREMENT_EVENT",
        description: "GPU memory remapping event",
        catalog_resolution: "IGNORE / IGNORE",
        likely_causes: &[Hw, Drv, Fb],
        severity: Warning,
        what_to_do: "A row remap (Ampere and newer) or page retirement (older GPUs) was recorded. \
                     Jobs may continue; reset the GPU when convenient so that the remap takes \
                     effect (pending remaps show in the health panel).",
    },
    XidInfo {
        code: 64,
        mnemonic: "INFOROM_DRAM_RETIREMENT_FAILURE",
        description: "GPU memory remapping failure",
        catalog_resolution: "RESET_GPU / CONTACT_SUPPORT",
        likely_causes: &[Hw, Drv],
        severity: Failure,
        what_to_do: "Recording a row remap or page retirement failed: reset the GPU. If it \
                     recurs, the GPU is an RMA candidate; contact the vendor.",
    },
    XidInfo {
        code: 74,
        mnemonic: "NVLINK_ERROR",
        description: "NVLINK Error",
        catalog_resolution: "WORKFLOW_NVLINK_ERR / CONTACT_SUPPORT",
        likely_causes: &[Hw, Drv, Bus],
        severity: Failure,
        what_to_do: "Check NVLink health on this GPU and its peers (the peer may be the cause); \
                     reset the GPUs involved and contact the vendor if it repeats.",
    },
    XidInfo {
        code: 79,
        mnemonic: "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        description: "GPU has fallen off the bus",
        catalog_resolution: "RESTART_BM / CONTACT_SUPPORT",
        likely_causes: &[Hw, Drv, Smc, Bus, Th],
        severity: Failure,
        what_to_do: "The GPU is unreachable (NVML answers GPU_IS_LOST): reboot the node, then \
                     check PCIe seating, power cables and cooling.",
    },
    XidInfo {
        code: 92,
        mnemonic: "EXCESSIVE_SBE_INTERRUPTS",
        description: "High single-bit ECC error rate",
        catalog_resolution: "IGNORE / CONTACT_SUPPORT",
        likely_causes: &[Hw, Drv],
        severity: Unrated,
        what_to_do: "An early warning: watch the corrected (single-bit) ECC counters' trend and \
                     contact the vendor if they keep climbing.",
    },
    XidInfo {
        code: 93,
        mnemonic: "INFOROM_ERASE_LIMIT_EXCEEDED",
        description: "Non-fatal violation of provisioned InfoROM wear limit",
        catalog_resolution: "IGNORE / CONTACT_SUPPORT",
        likely_causes: &[Drv, App],
        severity: Unrated,
        what_to_do: "Not urgent: jobs can continue. Report it to the vendor.",
    },
    XidInfo {
        code: 94,
        mnemonic: "ROBUST_CHANNEL_CONTAINED_ERROR",
        description: "Contained memory error",
        catalog_resolution: "RESTART_APP / IGNORE",
        likely_causes: &[Hw, Drv, Fb],
        severity: Warning,
        what_to_do: "An uncorrectable memory error was contained to one application: restart \
                     only that application, and reset the GPU when convenient.",
    },
    XidInfo {
        code: 95,
        mnemonic: "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        description: "Uncontained memory error",
        catalog_resolution: "RESET_GPU / IGNORE",
        likely_causes: &[Hw, Drv, Fb],
        severity: Failure,
        what_to_do: "An uncorrectable memory error affected several applications: stop all jobs \
                     on this GPU and reset it (with MIG on, drain the other instances first; \
                     with MIG off, reboot).",
    },
    XidInfo {
        code: 119,
        mnemonic: "GSP_RPC_TIMEOUT",
        description: "GSP RPC Timeout",
        catalog_resolution: "RESET_GPU / INVESTIGATE_SW",
        likely_causes: &[Hw, Drv, Smc, Bus, Th, Fb],
        severity: Failure,
        what_to_do: "The GPU's firmware stopped answering: reset the GPU, and update the driver \
                     if it repeats (collect nvidia-bug-report.sh for a report).",
    },
    XidInfo {
        code: 120,
        mnemonic: "GSP_ERROR",
        description: "GSP Error",
        catalog_resolution: "RESET_GPU / INVESTIGATE_SW",
        likely_causes: &[Hw, Drv, Smc, Bus, Th, Fb],
        severity: Failure,
        what_to_do: "A firmware error: reset the GPU, and update the driver if it repeats \
                     (collect nvidia-bug-report.sh for a report).",
    },
    XidInfo {
        code: 140,
        mnemonic: "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        description: "ECC Unrecovered Error",
        catalog_resolution: "RESET_GPU / CONTACT_SUPPORT",
        likely_causes: &[Hw, Drv, Fb],
        severity: Failure,
        what_to_do: "Memory errors escaped page offlining and row remapping: reset the GPU and \
                     contact the vendor.",
    },
    XidInfo {
        code: 154,
        mnemonic: "GPU_RECOVERY_ACTION_CHANGED",
        description: "GPU Recovery Action Changed",
        catalog_resolution: "XID_154 / informational",
        likely_causes: &[],
        severity: Unrated,
        what_to_do: "Summarises what another Xid requires (none, drain peer-to-peer, drain and \
                     reset, GPU reset, node reboot): follow that action.",
    },
    XidInfo {
        code: 160,
        mnemonic: "CHANNEL_RETIREMENT_EVENT",
        description: "Channel Retirement Event (NVIDIA's memory-error page instead says GPU \
                      memory was successfully marked for repair; sources disagree)",
        catalog_resolution: "IGNORE / INVESTIGATE_SW",
        likely_causes: &[],
        severity: Unrated,
        what_to_do: "Read the full kernel log line (dmesg, `NVRM: Xid`) for the driver's own text.",
    },
    XidInfo {
        code: 168,
        mnemonic: "REDUCED_GPU_MEMORY_CAPACITY",
        description: "Errors found in WPR (write protected region)",
        catalog_resolution: "",
        likely_causes: &[Hw],
        severity: Unrated,
        what_to_do: "Usable memory capacity is reduced: enable ECC if it is off, or reboot; \
                     contact the vendor if it persists.",
    },
    XidInfo {
        code: 171,
        mnemonic: "UNCORRECTABLE_DRAM_ERROR",
        description: "Uncorrectable DRAM error (detail for Xid 48)",
        catalog_resolution: "",
        likely_causes: &[Hw],
        severity: Unrated,
        what_to_do: "Treat as Xid 48 in device memory (DRAM): reset the GPU; repeated errors \
                     make it an RMA candidate.",
    },
    XidInfo {
        code: 172,
        mnemonic: "UNCORRECTABLE_SRAM_ERROR",
        description: "Uncorrectable SRAM error (detail for Xid 48)",
        catalog_resolution: "",
        likely_causes: &[Hw],
        severity: Unrated,
        what_to_do: "Treat as Xid 48 in on-chip memory (SRAM): reset the GPU; repeated errors \
                     make it an RMA candidate.",
    },
    XidInfo {
        code: 999,
        mnemonic: "UNKNOWN_XID",
        description: "NVML reports 999 for an Xid it could not identify",
        catalog_resolution: "",
        likely_causes: &[],
        severity: Unrated,
        what_to_do: "Read the kernel log (`dmesg | grep 'NVRM: Xid'`) for the real code and text.",
    },
];

/// The table entry for `code`, if vramscope knows it.
pub fn lookup(code: u64) -> Option<&'static XidInfo> {
    XID_TABLE
        .binary_search_by_key(&code, |info| info.code)
        .ok()
        .map(|i| &XID_TABLE[i])
}

/// One line naming an Xid for logs and lists: `Xid 31 (ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT):
/// GPU memory page fault`, or a pointer to NVIDIA's catalog for a code not in the table.
pub fn describe(code: u64) -> String {
    match lookup(code) {
        Some(info) => info.to_string(),
        None => format!(
            "Xid {code}: not in vramscope's table; see NVIDIA's Xid catalog \
             (docs.nvidia.com/deploy/xid-errors)"
        ),
    }
}

impl fmt::Display for XidInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Xid {} ({}): {}",
            self.code, self.mnemonic, self.description
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique_so_binary_search_finds_every_row() {
        for pair in XID_TABLE.windows(2) {
            assert!(
                pair[0].code < pair[1].code,
                "{} before {}",
                pair[0].code,
                pair[1].code
            );
        }
        for info in XID_TABLE {
            assert_eq!(lookup(info.code).map(|i| i.mnemonic), Some(info.mnemonic));
            assert!(
                !info.what_to_do.is_empty(),
                "Xid {} has no advice",
                info.code
            );
        }
    }

    #[test]
    fn known_codes_carry_reference_facts() {
        let page_fault = lookup(31).expect("Xid 31 is in the table");
        assert_eq!(page_fault.mnemonic, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT");
        assert_eq!(page_fault.description, "GPU memory page fault");
        assert_eq!(
            page_fault.likely_causes,
            &[XidCause::Hardware, XidCause::Driver, XidCause::Application]
        );
        assert_eq!(lookup(48).map(|i| i.severity), Some(XidSeverity::Failure));
        // DCGM's "devastating" Xids plus row-remap failure: all rated failures in the one table.
        for code in [48, 64, 74, 79, 95, 119, 120, 140] {
            assert_eq!(
                lookup(code).map(|i| i.severity),
                Some(XidSeverity::Failure),
                "Xid {code}"
            );
        }
        assert_eq!(lookup(94).map(|i| i.severity), Some(XidSeverity::Warning));
        assert_eq!(
            lookup(79).map(|i| i.description),
            Some("GPU has fallen off the bus")
        );
    }

    #[test]
    fn describe_names_known_codes_and_points_unknown_ones_to_the_catalog() {
        assert_eq!(
            describe(79),
            "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS): GPU has fallen off the bus"
        );
        assert!(lookup(5).is_none());
        let unknown = describe(5);
        assert!(
            unknown.starts_with("Xid 5: not in vramscope's table"),
            "{unknown}"
        );
    }
}
