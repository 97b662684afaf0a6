//! A snapshot's trace events as `(time µs, address)` pairs, sorted and without repeats, for
//! telling whether two snapshots come from one process ([`super::leak::same_process`]).
//!
//! An open snapshot keeps the set for as long as it is open, and a 1 GB snapshot has 13.3 M
//! events: as plain pairs that was 16 bytes an event (213 MB, in a web page limited to 4 GiB).
//! [`TraceEventSet`] stores each pair as its difference to the one before, in LEB128 bytes:
//! about 5–8 bytes an event. [`TraceEventCollector`] builds it from events in trace order
//! without holding them all as pairs when the trace is in time order (as PyTorch writes it).

/// `(time µs, address)` pairs in ascending order, each once, stored as differences to the pair
/// before (see the module comment). Equal sets compare equal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceEventSet {
    bytes: Vec<u8>,
    len: usize,
    last: Option<(i64, u64)>,
}

impl TraceEventSet {
    /// The set of `events`, in any order and with repeats.
    pub fn from_events(events: &[(i64, u64)]) -> Self {
        Self::from_vec(events.to_vec())
    }

    fn from_vec(mut sorted: Vec<(i64, u64)>) -> Self {
        sorted.sort_unstable();
        let mut set = TraceEventSet::default();
        for event in sorted {
            set.push_ascending(event);
        }
        set
    }

    /// Adds `event`, which must not be below the last one added; a repeat of the last is
    /// skipped. False (and nothing added) for an event below the last.
    fn push_ascending(&mut self, event: (i64, u64)) -> bool {
        let (time, address) = event;
        match self.last {
            None => {
                write_varint(&mut self.bytes, zigzag(time));
                write_varint(&mut self.bytes, address);
            }
            Some(last) if event == last => return true,
            Some(last) if event < last => return false,
            Some((last_time, last_address)) => {
                let time_step = time.wrapping_sub(last_time) as u64;
                write_varint(&mut self.bytes, time_step);
                if time_step == 0 {
                    // Same time: addresses ascend.
                    write_varint(&mut self.bytes, address - last_address);
                } else {
                    write_varint(
                        &mut self.bytes,
                        zigzag(address.wrapping_sub(last_address) as i64),
                    );
                }
            }
        }
        self.len += 1;
        self.last = Some(event);
        true
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the set holds no pair.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The greatest pair (the latest time), if any.
    pub fn last(&self) -> Option<(i64, u64)> {
        self.last
    }

    /// The pairs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        let mut at = 0;
        let mut previous: Option<(i64, u64)> = None;
        std::iter::from_fn(move || {
            let first = read_varint(&self.bytes, &mut at)?;
            let second = read_varint(&self.bytes, &mut at)?;
            let event = match previous {
                None => (unzigzag(first), second),
                Some((time, address)) => {
                    let time = time.wrapping_add(first as i64);
                    if first == 0 {
                        (time, address.wrapping_add(second))
                    } else {
                        (time, address.wrapping_add(unzigzag(second) as u64))
                    }
                }
            };
            previous = Some(event);
            Some(event)
        })
    }
}

/// Builds a [`TraceEventSet`] from a trace's events in trace order. While the times ascend, only
/// the events of the latest time are held as pairs (to be sorted by address); at the first time
/// that goes back, every pair is held and sorted at the end.
#[derive(Debug, Default)]
pub struct TraceEventCollector {
    set: TraceEventSet,
    /// The events of the latest time, while the times ascend.
    same_time: Vec<(i64, u64)>,
    /// Every event, once the times went back.
    unordered: Option<Vec<(i64, u64)>>,
}

impl TraceEventCollector {
    /// Takes the next event of the trace.
    pub fn add(&mut self, event: (i64, u64)) {
        if let Some(all) = &mut self.unordered {
            all.push(event);
            return;
        }
        match self.same_time.first() {
            Some(&(time, _)) if event.0 < time => {
                let mut all: Vec<(i64, u64)> = self.set.iter().collect();
                all.append(&mut self.same_time);
                all.push(event);
                self.set = TraceEventSet::default();
                self.unordered = Some(all);
            }
            Some(&(time, _)) if event.0 > time => {
                self.flush_same_time();
                self.same_time.push(event);
            }
            _ => self.same_time.push(event),
        }
    }

    fn flush_same_time(&mut self) {
        self.same_time.sort_unstable();
        for &event in &self.same_time {
            // Ascending: every earlier pair has an earlier time.
            self.set.push_ascending(event);
        }
        self.same_time.clear();
    }

    /// The set of every event taken.
    pub fn finish(mut self) -> TraceEventSet {
        match self.unordered.take() {
            Some(all) => TraceEventSet::from_vec(all),
            None => {
                self.flush_same_time();
                self.set
            }
        }
    }
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_unique(events: &[(i64, u64)]) -> Vec<(i64, u64)> {
        let mut expected = events.to_vec();
        expected.sort_unstable();
        expected.dedup();
        expected
    }

    /// Extremes of both numbers, equal times, repeats and steps back in time and address all
    /// come back as the sorted pairs without repeats.
    #[test]
    fn a_set_gives_back_its_pairs_sorted_and_once() {
        let events = vec![
            (5, 0x50),
            (1, 0x300),
            (2, 0x200),
            (1, 0x100),
            (2, 0x200),
            (i64::MIN, u64::MAX),
            (i64::MAX, 0),
            (i64::MAX, u64::MAX),
            (-7, 0x7f12_3456_0000),
            (-7, 3),
            (0, 0),
        ];
        let set = TraceEventSet::from_events(&events);
        let expected = sorted_unique(&events);
        assert_eq!(set.iter().collect::<Vec<_>>(), expected);
        assert_eq!(set.len(), expected.len());
        assert_eq!(set.last(), expected.last().copied());
        assert!(TraceEventSet::default().is_empty());
        assert_eq!(TraceEventSet::default().iter().count(), 0);
    }

    /// Collected in trace order, in time order or not, the set is the one of all the events;
    /// in time order it stays far smaller than the pairs.
    #[test]
    fn collected_events_make_the_set_of_all_of_them() {
        let in_time_order: Vec<(i64, u64)> = (0..10_000i64)
            .map(|i| {
                (
                    1_700_000_000_000_000 + i / 3 * 17,
                    0x7f00_0000_0000 + (i as u64 * 7919) % 4096 * 512,
                )
            })
            .collect();
        let mut went_back = in_time_order.clone();
        went_back.swap(100, 9000);
        for events in [in_time_order, went_back] {
            let mut collector = TraceEventCollector::default();
            for &event in &events {
                collector.add(event);
            }
            let set = collector.finish();
            assert_eq!(set.iter().collect::<Vec<_>>(), sorted_unique(&events));
            assert_eq!(set, TraceEventSet::from_events(&events));
            assert!(set.bytes.len() < set.len() * 8, "{} bytes", set.bytes.len());
        }
    }
}
