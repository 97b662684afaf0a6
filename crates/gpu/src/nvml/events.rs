//! Xid and other critical NVML events, waited on in their own thread.
//!
//! `nvmlEventSetWait` blocks, so it cannot run on the sampling thread. A watcher thread waits
//! with a short timeout (so that it can be stopped), turns each event into a model [`Event`] and
//! queues it in a bounded channel; the source drains the queue on its next poll. A device that
//! cannot deliver events is noted (field `events`) and the others keep going.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::thread::JoinHandle;

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use super::fields::{field_state_for, name};
use super::raw::{self, RawDevice};
use vramscope_core::diagnose::xid;
use vramscope_core::model::now_unix_ms;
use vramscope_core::model::{Event, EventKind, FieldState, FieldStatus, UnixMs};

/// NVML event-type bits (`nvmlEventType*` in nvml.h). nvml-wrapper's `EventTypes` names only the
/// older ones, so the newer bits are spelled out here.
pub mod bits {
    pub const SINGLE_BIT_ECC_ERROR: u64 = 0x1;
    pub const DOUBLE_BIT_ECC_ERROR: u64 = 0x2;
    pub const XID_CRITICAL_ERROR: u64 = 0x8;
    pub const SINGLE_BIT_ECC_ERROR_STORM: u64 = 0x200;
    pub const DRAM_RETIREMENT_EVENT: u64 = 0x400;
    pub const DRAM_RETIREMENT_FAILURE: u64 = 0x800;
    pub const NON_FATAL_POISON_ERROR: u64 = 0x1000;
    pub const FATAL_POISON_ERROR: u64 = 0x2000;
    pub const GPU_UNAVAILABLE_ERROR: u64 = 0x4000;
    pub const GPU_RECOVERY_ACTION: u64 = 0x8000;
}

/// The events vramscope listens for. Single-bit ECC events are left out on purpose: every
/// corrected error would wake the thread, and the volatile ECC counters read each tick already
/// turn them into `EccIncrease` events; an SBE *storm* is registered instead.
pub const WANTED_EVENTS: u64 = bits::XID_CRITICAL_ERROR
    | bits::DOUBLE_BIT_ECC_ERROR
    | bits::SINGLE_BIT_ECC_ERROR_STORM
    | bits::DRAM_RETIREMENT_EVENT
    | bits::DRAM_RETIREMENT_FAILURE
    | bits::NON_FATAL_POISON_ERROR
    | bits::FATAL_POISON_ERROR
    | bits::GPU_UNAVAILABLE_ERROR
    | bits::GPU_RECOVERY_ACTION;

/// How long one wait may block; also the longest a stop request waits for the thread.
const WAIT_TIMEOUT_MS: u32 = 500;
/// Events queued between two polls before new ones are dropped (and counted).
const QUEUE_CAPACITY: usize = 4096;
/// NVML's "not attributable to a MIG instance" id.
const NO_MIG_INSTANCE: u32 = 0xFFFF_FFFF;

/// Human name of a non-Xid event type, as shown on timeline markers.
pub fn critical_event_name(event_type: u64) -> String {
    match event_type {
        bits::SINGLE_BIT_ECC_ERROR => "single-bit ECC error".to_owned(),
        bits::DOUBLE_BIT_ECC_ERROR => "double-bit ECC error".to_owned(),
        bits::SINGLE_BIT_ECC_ERROR_STORM => "single-bit ECC error storm".to_owned(),
        bits::DRAM_RETIREMENT_EVENT => "DRAM retirement event".to_owned(),
        bits::DRAM_RETIREMENT_FAILURE => "DRAM retirement failure".to_owned(),
        bits::NON_FATAL_POISON_ERROR => "non-fatal poison error".to_owned(),
        bits::FATAL_POISON_ERROR => "fatal poison error".to_owned(),
        bits::GPU_UNAVAILABLE_ERROR => "GPU unavailable".to_owned(),
        bits::GPU_RECOVERY_ACTION => "GPU recovery action changed".to_owned(),
        other => format!("NVML event 0x{other:x}"),
    }
}

/// The model event for one NVML event.
pub fn event_kind(
    event_type: u64,
    event_data: u64,
    gpu_instance: u32,
    compute_instance: u32,
) -> EventKind {
    if event_type == bits::XID_CRITICAL_ERROR {
        let mig_instance = (gpu_instance != NO_MIG_INSTANCE && compute_instance != NO_MIG_INSTANCE)
            .then_some((gpu_instance, compute_instance));
        EventKind::Xid {
            code: event_data,
            mig_instance,
        }
    } else {
        EventKind::Critical {
            name: critical_event_name(event_type),
            data: event_data,
        }
    }
}

/// What the watcher thread hands to the source.
#[derive(Debug)]
enum Message {
    Event(Event),
    Field(FieldStatus),
}

/// The running watcher thread. Dropping it stops the thread (within one wait timeout).
pub struct EventWatcher {
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    receiver: Receiver<Message>,
    thread: Option<JoinHandle<()>>,
}

impl EventWatcher {
    /// Starts watching `devices` (index, handle) of `nvml`. Failing to start the thread is not
    /// fatal: it is reported as the `events` field of every device.
    pub fn start(nvml: Arc<Nvml>, devices: Vec<(u32, RawDevice)>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let (sender, receiver) = sync_channel(QUEUE_CAPACITY);
        let indices: Vec<u32> = devices.iter().map(|(i, _)| *i).collect();
        let thread = {
            let (stop, dropped, sender) = (Arc::clone(&stop), Arc::clone(&dropped), sender.clone());
            std::thread::Builder::new()
                .name("vramscope-nvml-events".to_owned())
                .spawn(move || watch(&nvml, &devices, &sender, &stop, &dropped))
        };
        let thread = match thread {
            Ok(handle) => Some(handle),
            Err(err) => {
                for device_index in indices {
                    let status = FieldStatus {
                        device_index,
                        field: name::EVENTS.to_owned(),
                        state: FieldState::Failed(format!(
                            "could not start the event thread: {err}"
                        )),
                    };
                    // The receiver is alive (we hold it) and the queue is empty: this cannot fail
                    // for lack of room at this size; if it does, the status is simply not shown.
                    let _ = sender.try_send(Message::Field(status));
                }
                None
            }
        };
        EventWatcher {
            stop,
            dropped,
            receiver,
            thread,
        }
    }

    /// Everything that arrived since the last call: events, and `events` field states.
    pub fn drain(&self) -> (Vec<Event>, Vec<FieldStatus>) {
        let mut events = Vec::new();
        let mut fields = Vec::new();
        loop {
            match self.receiver.try_recv() {
                Ok(Message::Event(event)) => events.push(event),
                Ok(Message::Field(status)) => fields.push(status),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            log::warn!("{dropped} NVML events were dropped: the event queue was full");
            events.push(Event {
                t_ms: now_unix_ms(),
                device_index: None,
                kind: EventKind::Critical {
                    name: "events dropped (queue full)".to_owned(),
                    data: dropped,
                },
            });
        }
        (events, fields)
    }
}

impl Drop for EventWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            log::error!("the NVML event thread panicked");
        }
    }
}

fn send(sender: &SyncSender<Message>, dropped: &AtomicU64, message: Message) {
    match sender.try_send(message) {
        Ok(()) | Err(TrySendError::Disconnected(_)) => {}
        Err(TrySendError::Full(_)) => {
            dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn note_field(
    sender: &SyncSender<Message>,
    dropped: &AtomicU64,
    device_index: u32,
    state: FieldState,
) {
    let field = name::EVENTS.to_owned();
    send(
        sender,
        dropped,
        Message::Field(FieldStatus {
            device_index,
            field,
            state,
        }),
    );
}

/// The thread body: register what each device supports, then wait until told to stop.
fn watch(
    nvml: &Nvml,
    devices: &[(u32, RawDevice)],
    sender: &SyncSender<Message>,
    stop: &AtomicBool,
    dropped: &AtomicU64,
) {
    let set = match nvml.create_event_set() {
        Ok(set) => set,
        Err(err) => {
            log::warn!("NVML events unavailable: could not create an event set: {err}");
            for &(index, _) in devices {
                note_field(sender, dropped, index, field_state_for(&err));
            }
            return;
        }
    };
    let mut registered = 0;
    for &(index, device) in devices {
        let outcome = raw::supported_event_types(nvml, device)
            .map(|supported| supported & WANTED_EVENTS)
            .and_then(|mask| {
                if mask == 0 {
                    Err(NvmlError::NotSupported)
                } else {
                    raw::register_events(nvml, device, mask, &set).map(|()| mask)
                }
            });
        match outcome {
            Ok(mask) => {
                log::debug!("GPU {index}: listening for NVML events 0x{mask:x}");
                registered += 1;
            }
            Err(err) => {
                log::info!(
                    "GPU {index}: NVML events not available ({err}); Xids will not be seen live"
                );
                note_field(sender, dropped, index, field_state_for(&err));
            }
        }
    }
    if registered == 0 {
        return;
    }
    let mut last_error: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        match raw::wait_event(nvml, &set, WAIT_TIMEOUT_MS) {
            Ok(raw_event) => {
                last_error = None;
                let event = to_event(now_unix_ms(), devices, raw_event);
                if let EventKind::Xid { code, .. } = event.kind {
                    log::warn!("GPU {:?}: {}", event.device_index, xid::describe(code));
                } else {
                    log::warn!("GPU {:?}: {}", event.device_index, event.kind.short_label());
                }
                send(sender, dropped, Message::Event(event));
            }
            Err(NvmlError::Timeout) => {}
            Err(err) => {
                // A failing wait returns at once: sleep so that a broken set cannot spin a core,
                // and log the failure once rather than five times a second.
                let message = err.to_string();
                if last_error.as_deref() != Some(message.as_str()) {
                    log::warn!("waiting for NVML events failed: {message}");
                    last_error = Some(message);
                }
                std::thread::sleep(std::time::Duration::from_millis(WAIT_TIMEOUT_MS.into()));
            }
        }
    }
}

fn to_event(t_ms: UnixMs, devices: &[(u32, RawDevice)], raw: raw::RawEvent) -> Event {
    Event {
        t_ms,
        device_index: devices
            .iter()
            .find(|(_, d)| *d == raw.device)
            .map(|(i, _)| *i),
        kind: event_kind(
            raw.event_type,
            raw.event_data,
            raw.gpu_instance_id,
            raw.compute_instance_id,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_events_carry_the_code_and_mig_instance_when_attributed() {
        assert_eq!(
            event_kind(
                bits::XID_CRITICAL_ERROR,
                31,
                NO_MIG_INSTANCE,
                NO_MIG_INSTANCE
            ),
            EventKind::Xid {
                code: 31,
                mig_instance: None
            }
        );
        assert_eq!(
            event_kind(bits::XID_CRITICAL_ERROR, 94, 3, 0),
            EventKind::Xid {
                code: 94,
                mig_instance: Some((3, 0))
            }
        );
    }

    #[test]
    fn other_events_are_named_critical_events() {
        assert_eq!(
            event_kind(
                bits::GPU_RECOVERY_ACTION,
                2,
                NO_MIG_INSTANCE,
                NO_MIG_INSTANCE
            ),
            EventKind::Critical {
                name: "GPU recovery action changed".into(),
                data: 2
            }
        );
        assert_eq!(
            critical_event_name(bits::DOUBLE_BIT_ECC_ERROR),
            "double-bit ECC error"
        );
        assert_eq!(critical_event_name(0x10_0000), "NVML event 0x100000");
    }

    #[test]
    fn wanted_events_match_the_h200_mask_without_single_bit_errors() {
        // The H200 reports 0xFF9F as supported (`docs/sources.md` § "Measured").
        let h200_supported = 0xFF9F;
        assert_eq!(h200_supported & WANTED_EVENTS, WANTED_EVENTS);
        assert_eq!(WANTED_EVENTS & bits::SINGLE_BIT_ECC_ERROR, 0);
        assert_eq!(WANTED_EVENTS, 0xFE0A);
    }

    #[test]
    fn a_full_queue_counts_dropped_events_instead_of_growing() {
        let (sender, receiver) = sync_channel(1);
        let dropped = AtomicU64::new(0);
        for _ in 0..3 {
            note_field(&sender, &dropped, 0, FieldState::NotSupported);
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 2);
        assert!(matches!(receiver.try_recv(), Ok(Message::Field(_))));
    }
}
