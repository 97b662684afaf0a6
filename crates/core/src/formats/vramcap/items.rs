//! Encoders and decoders for the model's values: capture metadata, device facts, device samples
//! (delta-coded against the previous sample of the same device), process samples (interned and
//! delta-coded), health samples, events and field states, and whole [`SampleBatch`]es.
//!
//! Rare values (events, health, field changes) are written as length-prefixed items so that a
//! reader skips kinds it does not know and ignores fields a newer writer appended.

use std::collections::HashMap;

use super::codec::*;
use crate::model::{
    CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, FieldState, FieldStatus,
    HealthSample, MemoryReading, ProcessKind, ProcessSample, SampleBatch, SourceKind,
};

pub(super) fn put_meta(out: &mut Vec<u8>, meta: &CaptureMeta) {
    out.push(match meta.source {
        SourceKind::Live => 0,
        SourceKind::Demo => 1,
        SourceKind::Prometheus => 2,
    });
    put_str(out, &meta.host);
    put_str(out, &meta.driver_version);
    put_opt_u32(out, meta.cuda_driver_version);
    put_signed(out, meta.started_ms);
    put_varint(out, u64::from(meta.interval_ms));
    put_str(out, &meta.writer);
}

pub(super) fn read_meta(reader: &mut ByteReader<'_>) -> DecodeResult<CaptureMeta> {
    let source = match reader.u8()? {
        0 => SourceKind::Live,
        1 => SourceKind::Demo,
        2 => SourceKind::Prometheus,
        other => return Err(DecodeError::new(format!("unknown source kind {other}"))),
    };
    Ok(CaptureMeta {
        source,
        host: reader.str()?,
        driver_version: reader.str()?,
        cuda_driver_version: reader.opt_u32()?,
        started_ms: reader.signed()?,
        interval_ms: reader.u32()?,
        writer: reader.str()?,
    })
}

pub(super) fn put_device_facts(out: &mut Vec<u8>, scratch: &mut Vec<u8>, device: &DeviceFacts) {
    put_item(out, scratch, |item| {
        put_varint(item, u64::from(device.index));
        put_str(item, &device.name);
        put_str(item, &device.uuid);
        put_str(item, &device.pci_bus_id);
        put_varint(item, device.memory_total_bytes);
        put_opt_u64(item, device.bar1_total_bytes);
        put_opt_bool(item, device.persistence_mode);
        put_opt_bool(item, device.ecc_enabled);
        put_opt_pair(item, device.compute_capability);
        put_bool(item, device.simulated);
        // Appended within version 1: older readers skip them (items are length-prefixed).
        put_str(item, &device.host);
        put_varint(item, device.labels.len() as u64);
        for (key, value) in &device.labels {
            put_str(item, key);
            put_str(item, value);
        }
    });
}

pub(super) fn read_device_facts(reader: &mut ByteReader<'_>) -> DecodeResult<DeviceFacts> {
    let mut item = reader.item()?;
    let mut facts = DeviceFacts {
        index: item.u32()?,
        name: item.str()?,
        uuid: item.str()?,
        pci_bus_id: item.str()?,
        memory_total_bytes: item.varint()?,
        bar1_total_bytes: item.opt_u64()?,
        persistence_mode: item.opt_bool()?,
        ecc_enabled: item.opt_bool()?,
        compute_capability: item.opt_pair()?,
        simulated: item.bool()?,
        ..Default::default()
    };
    // Host and labels (fleet captures); absent in files written before they existed.
    if item.remaining() > 0 {
        facts.host = item.str()?;
        let label_count = item.count()?;
        for _ in 0..label_count {
            let key = item.str()?;
            let value = item.str()?;
            facts.labels.insert(key, value);
        }
    }
    Ok(facts)
}

/// Number of numeric slots a device sample is spread over (memory takes four).
const SAMPLE_SLOTS: usize = 13;
/// Presence bits of a device sample, one per optional field (memory is one bit for four slots).
const SAMPLE_FIELD_BITS: u32 = 10;

/// The previous sample of one device, which the next one is coded against.
#[derive(Clone, Copy, Default)]
struct DeviceDeltaBase {
    t_ms: i64,
    presence: u64,
    slots: [u64; SAMPLE_SLOTS],
}

/// Splits a sample into a presence mask and numeric slots in a fixed order.
fn sample_slots(sample: &DeviceSample) -> (u64, [u64; SAMPLE_SLOTS]) {
    let mut presence = 0u64;
    let mut slots = [0u64; SAMPLE_SLOTS];
    if let Some(m) = sample.memory {
        presence |= 1;
        slots[..4].copy_from_slice(&[m.used_bytes, m.reserved_bytes, m.free_bytes, m.total_bytes]);
    }
    let optional = [
        sample.gpu_util_pct.map(u64::from),
        sample.mem_util_pct.map(u64::from),
        sample.temperature_c.map(u64::from),
        sample.power_mw.map(u64::from),
        sample.sm_clock_mhz.map(u64::from),
        sample.mem_clock_mhz.map(u64::from),
        sample.throttle_reasons,
        sample.ecc_corrected_volatile,
        sample.ecc_uncorrected_volatile,
    ];
    for (i, value) in optional.into_iter().enumerate() {
        if let Some(v) = value {
            presence |= 1 << (i + 1);
            slots[4 + i] = v;
        }
    }
    (presence, slots)
}

/// Delta coder for device samples. One instance per stream of samples: the writer and the reader
/// must feed it the same samples in the same order.
#[derive(Default)]
pub(super) struct SampleCoder {
    bases: HashMap<u32, DeviceDeltaBase>,
}

impl SampleCoder {
    /// Layout: `varint(device_index * 2 + presence_changed)`, `[varint presence]`,
    /// `signed(t_ms - previous t_ms)`, then for each present slot `signed(value - previous)`.
    /// Absent fields keep their previous value as the base for the next present one.
    pub(super) fn put(&mut self, out: &mut Vec<u8>, sample: &DeviceSample) {
        let base = self.bases.entry(sample.device_index).or_default();
        let (presence, slots) = sample_slots(sample);
        let presence_changed = presence != base.presence;
        put_varint(
            out,
            u64::from(sample.device_index) * 2 + u64::from(presence_changed),
        );
        if presence_changed {
            put_varint(out, presence);
        }
        put_signed(out, sample.t_ms.wrapping_sub(base.t_ms));
        for_each_present_slot(presence, |slot| {
            let reference = if slot == FREE_SLOT {
                predicted_free(&slots)
            } else {
                base.slots[slot]
            };
            put_delta(out, slots[slot], reference);
        });
        base.t_ms = sample.t_ms;
        base.presence = presence;
        for_each_present_slot(presence, |slot| base.slots[slot] = slots[slot]);
    }

    pub(super) fn read(&mut self, reader: &mut ByteReader<'_>) -> DecodeResult<DeviceSample> {
        let head = reader.varint()?;
        let device_index = u32::try_from(head / 2).map_err(|_| {
            DecodeError::new(format!("device index {} does not fit in 32 bits", head / 2))
        })?;
        let base = self.bases.entry(device_index).or_default();
        if head & 1 == 1 {
            let presence = reader.varint()?;
            if presence >> SAMPLE_FIELD_BITS != 0 {
                return Err(DecodeError::new(format!(
                    "unknown sample fields in presence mask {presence:#x}"
                )));
            }
            base.presence = presence;
        }
        base.t_ms = base.t_ms.wrapping_add(reader.signed()?);
        let mut result = Ok(());
        for_each_present_slot(base.presence, |slot| {
            if result.is_ok() {
                // Used, reserved and total of this sample are already decoded when free comes.
                let reference = if slot == FREE_SLOT {
                    predicted_free(&base.slots)
                } else {
                    base.slots[slot]
                };
                match reader.delta(reference) {
                    Ok(v) => base.slots[slot] = v,
                    Err(e) => result = Err(e),
                }
            }
        });
        result?;
        let base = *base;
        let field =
            |bit: u32, slot: usize| (base.presence & (1 << bit) != 0).then_some(base.slots[slot]);
        let field_u32 = |bit: u32, slot: usize| -> DecodeResult<Option<u32>> {
            field(bit, slot)
                .map(|v| {
                    u32::try_from(v).map_err(|_| {
                        DecodeError::new(format!("sample value {v} does not fit in 32 bits"))
                    })
                })
                .transpose()
        };
        Ok(DeviceSample {
            t_ms: base.t_ms,
            device_index,
            memory: (base.presence & 1 != 0).then(|| MemoryReading {
                used_bytes: base.slots[0],
                reserved_bytes: base.slots[1],
                free_bytes: base.slots[2],
                total_bytes: base.slots[3],
            }),
            gpu_util_pct: field_u32(1, 4)?,
            mem_util_pct: field_u32(2, 5)?,
            temperature_c: field_u32(3, 6)?,
            power_mw: field_u32(4, 7)?,
            sm_clock_mhz: field_u32(5, 8)?,
            mem_clock_mhz: field_u32(6, 9)?,
            throttle_reasons: field(7, 10),
            ecc_corrected_volatile: field(8, 11),
            ecc_uncorrected_volatile: field(9, 12),
        })
    }
}

/// Slot of `free_bytes`: coded last among the memory slots, against `total - reserved - used`
/// rather than its previous value, because NVML v2 readings satisfy `used + reserved + free ==
/// total` and the delta is then 0 (one byte instead of four).
const FREE_SLOT: usize = 2;

fn predicted_free(slots: &[u64; SAMPLE_SLOTS]) -> u64 {
    slots[3].wrapping_sub(slots[1]).wrapping_sub(slots[0])
}

/// Visits present slots in coding order: used, reserved, total, free, then the other fields.
fn for_each_present_slot(presence: u64, mut f: impl FnMut(usize)) {
    if presence & 1 != 0 {
        [0, 1, 3, FREE_SLOT].into_iter().for_each(&mut f);
    }
    for bit in 1..SAMPLE_FIELD_BITS {
        if presence & (1 << bit) != 0 {
            f(3 + bit as usize);
        }
    }
}

pub(super) fn process_kind_code(kind: ProcessKind) -> u8 {
    match kind {
        ProcessKind::Compute => 0,
        ProcessKind::Graphics => 1,
        ProcessKind::ComputeAndGraphics => 2,
    }
}

pub(super) fn process_kind_from_code(code: u8) -> DecodeResult<ProcessKind> {
    match code {
        0 => Ok(ProcessKind::Compute),
        1 => Ok(ProcessKind::Graphics),
        2 => Ok(ProcessKind::ComputeAndGraphics),
        other => Err(DecodeError::new(format!("unknown process kind {other}"))),
    }
}

/// Everything about a process sample except its time and memory: interned once per stream.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ProcessIdentity {
    device_index: u32,
    pid: u32,
    name: String,
    kind: ProcessKind,
    mig_instance: Option<(u32, u32)>,
}

/// Interning delta coder for process samples.
#[derive(Default)]
pub(super) struct ProcessCoder {
    identities: Vec<ProcessIdentity>,
    /// Writer side only: identity to id.
    #[cfg(feature = "native")]
    ids: HashMap<ProcessIdentity, usize>,
    last_used_bytes: Vec<u64>,
    last_t_ms: i64,
}

impl ProcessCoder {
    /// Layout: `varint(reference * 2 + has_used)` where reference 0 defines a new identity
    /// (`varint device`, `varint pid`, `str name`, `u8 kind`, `opt_pair mig`) and reference r > 0
    /// names identity r - 1; then `signed(t_ms - previous process t_ms)`; then, when used is
    /// present, `signed(used - previous used of this identity)`.
    #[cfg(feature = "native")]
    pub(super) fn put(&mut self, out: &mut Vec<u8>, process: &ProcessSample) {
        let identity = ProcessIdentity {
            device_index: process.device_index,
            pid: process.pid,
            name: process.name.clone(),
            kind: process.kind,
            mig_instance: process.mig_instance,
        };
        let has_used = u64::from(process.used_bytes.is_some());
        let id = match self.ids.get(&identity) {
            Some(&id) => {
                put_varint(out, (id as u64 + 1) * 2 + has_used);
                id
            }
            None => {
                put_varint(out, has_used);
                put_varint(out, u64::from(identity.device_index));
                put_varint(out, u64::from(identity.pid));
                put_str(out, &identity.name);
                out.push(process_kind_code(identity.kind));
                put_opt_pair(out, identity.mig_instance);
                let id = self.identities.len();
                self.ids.insert(identity.clone(), id);
                self.identities.push(identity);
                self.last_used_bytes.push(0);
                id
            }
        };
        put_signed(out, process.t_ms.wrapping_sub(self.last_t_ms));
        self.last_t_ms = process.t_ms;
        if let Some(used) = process.used_bytes {
            put_delta(out, used, self.last_used_bytes[id]);
            self.last_used_bytes[id] = used;
        }
    }

    pub(super) fn read(&mut self, reader: &mut ByteReader<'_>) -> DecodeResult<ProcessSample> {
        let head = reader.varint()?;
        let has_used = head & 1 == 1;
        let reference = head / 2;
        let id = if reference == 0 {
            let identity = ProcessIdentity {
                device_index: reader.u32()?,
                pid: reader.u32()?,
                name: reader.str()?,
                kind: process_kind_from_code(reader.u8()?)?,
                mig_instance: reader.opt_pair()?,
            };
            self.identities.push(identity);
            self.last_used_bytes.push(0);
            self.identities.len() - 1
        } else {
            let id = reference - 1;
            match usize::try_from(id) {
                Ok(id) if id < self.identities.len() => id,
                _ => {
                    return Err(DecodeError::new(format!(
                        "process reference {id} points past the {} processes defined so far",
                        self.identities.len()
                    )));
                }
            }
        };
        self.last_t_ms = self.last_t_ms.wrapping_add(reader.signed()?);
        let used_bytes = if has_used {
            let used = reader.delta(self.last_used_bytes[id])?;
            self.last_used_bytes[id] = used;
            Some(used)
        } else {
            None
        };
        let identity = &self.identities[id];
        Ok(ProcessSample {
            t_ms: self.last_t_ms,
            device_index: identity.device_index,
            pid: identity.pid,
            name: identity.name.clone(),
            used_bytes,
            kind: identity.kind,
            mig_instance: identity.mig_instance,
        })
    }
}

/// Health samples are rare (slow tier): written whole, as items.
pub(super) fn put_health(out: &mut Vec<u8>, scratch: &mut Vec<u8>, health: &HealthSample) {
    put_item(out, scratch, |item| {
        put_signed(item, health.t_ms);
        put_varint(item, u64::from(health.device_index));
        put_opt_u64(item, health.ecc_corrected_aggregate);
        put_opt_u64(item, health.ecc_uncorrected_aggregate);
        put_opt_u64(item, health.retired_pages_sbe);
        put_opt_u64(item, health.retired_pages_dbe);
        put_opt_bool(item, health.retired_pages_pending);
        put_opt_u64(item, health.remapped_rows_correctable);
        put_opt_u64(item, health.remapped_rows_uncorrectable);
        put_opt_bool(item, health.remapped_rows_pending);
        put_opt_bool(item, health.remapped_rows_failure);
        put_opt_u64(item, health.bar1_used_bytes);
        put_opt_u64(item, health.bar1_total_bytes);
        put_opt_u64(item, health.pcie_replay_count);
        put_opt_bool(item, health.persistence_mode);
    });
}

pub(super) fn read_health(reader: &mut ByteReader<'_>) -> DecodeResult<HealthSample> {
    let mut item = reader.item()?;
    Ok(HealthSample {
        t_ms: item.signed()?,
        device_index: item.u32()?,
        ecc_corrected_aggregate: item.opt_u64()?,
        ecc_uncorrected_aggregate: item.opt_u64()?,
        retired_pages_sbe: item.opt_u64()?,
        retired_pages_dbe: item.opt_u64()?,
        retired_pages_pending: item.opt_bool()?,
        remapped_rows_correctable: item.opt_u64()?,
        remapped_rows_uncorrectable: item.opt_u64()?,
        remapped_rows_pending: item.opt_bool()?,
        remapped_rows_failure: item.opt_bool()?,
        bar1_used_bytes: item.opt_u64()?,
        bar1_total_bytes: item.opt_u64()?,
        pcie_replay_count: item.opt_u64()?,
        persistence_mode: item.opt_bool()?,
    })
}

/// Event kind tags. New kinds get new tags; readers skip tags they do not know.
mod event_tag {
    pub const XID: u8 = 1;
    pub const CRITICAL: u8 = 2;
    pub const OUT_OF_MEMORY: u8 = 3;
    pub const ECC_INCREASE: u8 = 4;
    pub const DEVICE_LOST: u8 = 5;
    pub const ANNOTATION: u8 = 6;
    /// Readers before it skip the event (unknown tags are skipped).
    pub const DEVICE_RETURNED: u8 = 7;
}

pub(super) fn put_event(out: &mut Vec<u8>, scratch: &mut Vec<u8>, event: &Event) {
    put_item(out, scratch, |item| {
        put_signed(item, event.t_ms);
        put_opt_u32(item, event.device_index);
        match &event.kind {
            EventKind::Xid { code, mig_instance } => {
                item.push(event_tag::XID);
                put_varint(item, *code);
                put_opt_pair(item, *mig_instance);
            }
            EventKind::Critical { name, data } => {
                item.push(event_tag::CRITICAL);
                put_str(item, name);
                put_varint(item, *data);
            }
            EventKind::OutOfMemory {
                pid,
                requested_bytes,
                detail,
            } => {
                item.push(event_tag::OUT_OF_MEMORY);
                put_opt_u32(item, *pid);
                put_opt_u64(item, *requested_bytes);
                put_str(item, detail);
            }
            EventKind::EccIncrease {
                corrected_delta,
                uncorrected_delta,
            } => {
                item.push(event_tag::ECC_INCREASE);
                put_varint(item, *corrected_delta);
                put_varint(item, *uncorrected_delta);
            }
            EventKind::DeviceLost { detail } => {
                item.push(event_tag::DEVICE_LOST);
                put_str(item, detail);
            }
            EventKind::Annotation { text } => {
                item.push(event_tag::ANNOTATION);
                put_str(item, text);
            }
            EventKind::DeviceReturned => item.push(event_tag::DEVICE_RETURNED),
        }
    });
}

/// Reads one event; `None` for an event kind this version does not know (skipped).
pub(super) fn read_event(reader: &mut ByteReader<'_>) -> DecodeResult<Option<Event>> {
    let mut item = reader.item()?;
    let t_ms = item.signed()?;
    let device_index = item.opt_u32()?;
    let kind = match item.u8()? {
        event_tag::XID => EventKind::Xid {
            code: item.varint()?,
            mig_instance: item.opt_pair()?,
        },
        event_tag::CRITICAL => EventKind::Critical {
            name: item.str()?,
            data: item.varint()?,
        },
        event_tag::OUT_OF_MEMORY => EventKind::OutOfMemory {
            pid: item.opt_u32()?,
            requested_bytes: item.opt_u64()?,
            detail: item.str()?,
        },
        event_tag::ECC_INCREASE => EventKind::EccIncrease {
            corrected_delta: item.varint()?,
            uncorrected_delta: item.varint()?,
        },
        event_tag::DEVICE_LOST => EventKind::DeviceLost {
            detail: item.str()?,
        },
        event_tag::ANNOTATION => EventKind::Annotation { text: item.str()? },
        event_tag::DEVICE_RETURNED => EventKind::DeviceReturned,
        _ => return Ok(None),
    };
    Ok(Some(Event {
        t_ms,
        device_index,
        kind,
    }))
}

pub(super) fn put_field_status(out: &mut Vec<u8>, scratch: &mut Vec<u8>, status: &FieldStatus) {
    put_item(out, scratch, |item| {
        put_varint(item, u64::from(status.device_index));
        put_str(item, &status.field);
        match &status.state {
            FieldState::Ok => item.push(0),
            FieldState::NotSupported => item.push(1),
            FieldState::Failed(message) => {
                item.push(2);
                put_str(item, message);
            }
        }
    });
}

/// Reads one field state; `None` for a state kind this version does not know (skipped).
pub(super) fn read_field_status(reader: &mut ByteReader<'_>) -> DecodeResult<Option<FieldStatus>> {
    let mut item = reader.item()?;
    let device_index = item.u32()?;
    let field = item.str()?;
    let state = match item.u8()? {
        0 => FieldState::Ok,
        1 => FieldState::NotSupported,
        2 => FieldState::Failed(item.str()?),
        _ => return Ok(None),
    };
    Ok(Some(FieldStatus {
        device_index,
        field,
        state,
    }))
}

/// Flag bits of an encoded batch: which optional parts follow the device samples.
mod batch_flag {
    pub const PROCESSES: u8 = 1;
    pub const HEALTH: u8 = 2;
    pub const EVENTS: u8 = 4;
    pub const FIELD_CHANGES: u8 = 8;
    pub const KNOWN: u8 = PROCESSES | HEALTH | EVENTS | FIELD_CHANGES;
}

/// Delta coder for a stream of [`SampleBatch`]es: the unit the recorder writes.
#[derive(Default)]
pub(super) struct BatchCoder {
    samples: SampleCoder,
    processes: ProcessCoder,
    /// Writer side only: buffer for length-prefixed items.
    #[cfg(feature = "native")]
    scratch: Vec<u8>,
}

impl BatchCoder {
    /// Layout: `u8 flags`, `count` device samples, then (by flag) `count` processes, `count`
    /// health items, `count` event items, `count` field-change items.
    /// Only the recorder writes batches, and it is native-only.
    #[cfg(feature = "native")]
    pub(super) fn put(&mut self, out: &mut Vec<u8>, batch: &SampleBatch) {
        let mut flags = 0;
        if batch.processes.is_some() {
            flags |= batch_flag::PROCESSES;
        }
        if !batch.health.is_empty() {
            flags |= batch_flag::HEALTH;
        }
        if !batch.events.is_empty() {
            flags |= batch_flag::EVENTS;
        }
        if !batch.field_changes.is_empty() {
            flags |= batch_flag::FIELD_CHANGES;
        }
        out.push(flags);
        put_varint(out, batch.devices.len() as u64);
        for sample in &batch.devices {
            self.samples.put(out, sample);
        }
        if let Some(processes) = &batch.processes {
            put_varint(out, processes.len() as u64);
            for process in processes {
                self.processes.put(out, process);
            }
        }
        if !batch.health.is_empty() {
            put_varint(out, batch.health.len() as u64);
            for health in &batch.health {
                put_health(out, &mut self.scratch, health);
            }
        }
        if !batch.events.is_empty() {
            put_varint(out, batch.events.len() as u64);
            for event in &batch.events {
                put_event(out, &mut self.scratch, event);
            }
        }
        if !batch.field_changes.is_empty() {
            put_varint(out, batch.field_changes.len() as u64);
            for change in &batch.field_changes {
                put_field_status(out, &mut self.scratch, change);
            }
        }
    }

    pub(super) fn read(&mut self, reader: &mut ByteReader<'_>) -> DecodeResult<SampleBatch> {
        let flags = reader.u8()?;
        if flags & !batch_flag::KNOWN != 0 {
            return Err(DecodeError::new(format!(
                "unknown batch flags {flags:#04x}"
            )));
        }
        let mut batch = SampleBatch::default();
        let device_count = reader.count()?;
        batch.devices = room_for(device_count);
        for _ in 0..device_count {
            batch.devices.push(self.samples.read(reader)?);
        }
        if flags & batch_flag::PROCESSES != 0 {
            let count = reader.count()?;
            let mut processes = room_for(count);
            for _ in 0..count {
                processes.push(self.processes.read(reader)?);
            }
            batch.processes = Some(processes);
        }
        if flags & batch_flag::HEALTH != 0 {
            for _ in 0..reader.count()? {
                batch.health.push(read_health(reader)?);
            }
        }
        if flags & batch_flag::EVENTS != 0 {
            for _ in 0..reader.count()? {
                batch.events.extend(read_event(reader)?);
            }
        }
        if flags & batch_flag::FIELD_CHANGES != 0 {
            for _ in 0..reader.count()? {
                batch.field_changes.extend(read_field_status(reader)?);
            }
        }
        Ok(batch)
    }
}
