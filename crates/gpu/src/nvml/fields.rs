//! Per-field bookkeeping for the NVML source: which fields exist, how an NVML error becomes a
//! [`FieldState`], and which changes are worth reporting and logging.
//!
//! A sampler that logged every failed read would print the same "not supported" line ten times a
//! second for the life of the program; here each (device, field) pair is remembered and only a
//! change of state is reported (and logged), once.

use std::collections::HashMap;

use nvml_wrapper::error::NvmlError;

use vramscope_core::model::{EventKind, FieldState, FieldStatus};

pub use vramscope_core::model::field_name as name;

/// What a failed NVML read means for the field. "Not supported" (by the GPU, or by a driver too
/// old to export the function) is a fact about the hardware, not an error; everything else is a
/// failure with NVML's reason.
pub fn field_state_for(error: &NvmlError) -> FieldState {
    match error {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => FieldState::NotSupported,
        NvmlError::NoPermission => FieldState::Failed(
            "permission denied (NVML needs access to /dev/nvidia*; run as a user allowed to \
             query the GPU)"
                .to_owned(),
        ),
        NvmlError::GpuLost => FieldState::Failed(
            "the GPU has fallen off the bus or is otherwise inaccessible (GPU_IS_LOST)".to_owned(),
        ),
        other => FieldState::Failed(other.to_string()),
    }
}

/// Whether an error says the whole device is gone, not just one field.
pub fn is_device_lost(error: &NvmlError) -> bool {
    matches!(error, NvmlError::GpuLost)
}

/// Remembers the last state of every (device, field) pair and reports changes only.
///
/// A field never seen is assumed readable, so a source that reads everything successfully
/// reports no field changes at all.
#[derive(Debug, Default)]
pub struct FieldTracker {
    last: HashMap<(u32, &'static str), FieldState>,
}

impl FieldTracker {
    /// Records the state of one read and returns the change to report when it differs from the
    /// previous read of the same field on the same device. Every returned change is logged once.
    pub fn observe(
        &mut self,
        device_index: u32,
        field: &'static str,
        state: FieldState,
    ) -> Option<FieldStatus> {
        let previous = self
            .last
            .get(&(device_index, field))
            .unwrap_or(&FieldState::Ok);
        if *previous == state {
            return None;
        }
        log_transition(device_index, field, previous, &state);
        self.last.insert((device_index, field), state.clone());
        Some(FieldStatus {
            device_index,
            field: field.to_owned(),
            state,
        })
    }
}

fn log_transition(device_index: u32, field: &str, previous: &FieldState, state: &FieldState) {
    match state {
        FieldState::Failed(reason) => {
            log::warn!("GPU {device_index}: reading {field} failed: {reason}")
        }
        FieldState::NotSupported => log::info!("GPU {device_index}: {field} is not supported"),
        FieldState::Ok => match previous {
            FieldState::Failed(_) => log::info!("GPU {device_index}: {field} readable again"),
            _ => log::info!("GPU {device_index}: {field} is now supported"),
        },
    }
}

/// The ECC event to raise when volatile counters went up between two ticks. Counters that went
/// down (the driver reloaded and reset them) are not an increase; the first reading (`previous`
/// is `None`) is a baseline, not an event.
pub fn ecc_increase(previous: Option<(u64, u64)>, current: (u64, u64)) -> Option<EventKind> {
    let (previous_corrected, previous_uncorrected) = previous?;
    let corrected_delta = current.0.saturating_sub(previous_corrected);
    let uncorrected_delta = current.1.saturating_sub(previous_uncorrected);
    (corrected_delta > 0 || uncorrected_delta > 0).then_some(EventKind::EccIncrease {
        corrected_delta,
        uncorrected_delta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_not_supported_or_failed_with_a_reason() {
        assert_eq!(
            field_state_for(&NvmlError::NotSupported),
            FieldState::NotSupported
        );
        assert_eq!(
            field_state_for(&NvmlError::FunctionNotFound),
            FieldState::NotSupported
        );
        assert_eq!(
            field_state_for(&NvmlError::FailedToLoadSymbol(
                "nvmlDeviceGetRemappedRows".into()
            )),
            FieldState::NotSupported
        );
        let FieldState::Failed(permission) = field_state_for(&NvmlError::NoPermission) else {
            panic!("NoPermission must be a failure");
        };
        assert!(permission.contains("permission denied"), "{permission}");
        let FieldState::Failed(lost) = field_state_for(&NvmlError::GpuLost) else {
            panic!("GpuLost must be a failure");
        };
        assert!(lost.contains("GPU_IS_LOST"), "{lost}");
        assert_eq!(
            field_state_for(&NvmlError::Timeout),
            FieldState::Failed("the provided timeout was reached".into())
        );
        assert!(is_device_lost(&NvmlError::GpuLost));
        assert!(!is_device_lost(&NvmlError::Unknown));
    }

    #[test]
    fn tracker_reports_each_transition_once() {
        let mut tracker = FieldTracker::default();
        assert_eq!(
            tracker.observe(0, name::MEMORY, FieldState::Ok),
            None,
            "ok is the default"
        );
        let failed = FieldState::Failed("boom".into());
        let first = tracker.observe(0, name::MEMORY, failed.clone());
        assert_eq!(
            first,
            Some(FieldStatus {
                device_index: 0,
                field: "memory".into(),
                state: failed.clone()
            })
        );
        for _ in 0..100 {
            assert_eq!(tracker.observe(0, name::MEMORY, failed.clone()), None);
        }
        // Same field on another device is independent.
        assert!(tracker.observe(1, name::MEMORY, failed.clone()).is_some());
        // A different failure reason is a new state.
        assert!(
            tracker
                .observe(0, name::MEMORY, FieldState::Failed("other".into()))
                .is_some()
        );
        let recovered = tracker.observe(0, name::MEMORY, FieldState::Ok);
        assert_eq!(recovered.map(|c| c.state), Some(FieldState::Ok));
        assert_eq!(tracker.observe(0, name::MEMORY, FieldState::Ok), None);
        assert!(
            tracker
                .observe(0, name::RETIRED_PAGES, FieldState::NotSupported)
                .is_some()
        );
        assert_eq!(
            tracker.observe(0, name::RETIRED_PAGES, FieldState::NotSupported),
            None
        );
        assert_eq!(
            tracker.observe(1, name::MEMORY, failed),
            None,
            "device 1 still failed"
        );
    }

    #[test]
    fn ecc_increase_needs_a_baseline_and_ignores_resets() {
        assert_eq!(
            ecc_increase(None, (5, 1)),
            None,
            "first reading is a baseline"
        );
        assert_eq!(ecc_increase(Some((5, 1)), (5, 1)), None);
        assert_eq!(
            ecc_increase(Some((5, 1)), (7, 1)),
            Some(EventKind::EccIncrease {
                corrected_delta: 2,
                uncorrected_delta: 0
            })
        );
        assert_eq!(
            ecc_increase(Some((5, 1)), (5, 4)),
            Some(EventKind::EccIncrease {
                corrected_delta: 0,
                uncorrected_delta: 3
            })
        );
        assert_eq!(
            ecc_increase(Some((9, 3)), (0, 0)),
            None,
            "driver reload resets counters"
        );
    }

    #[test]
    fn all_field_names_are_unique() {
        let mut names = name::ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), name::ALL.len());
    }
}
