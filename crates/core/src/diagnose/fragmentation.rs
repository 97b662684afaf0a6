//! The one sentence that says where a device's reserved-but-unused memory is, shown in the
//! Allocator tab, the Fragmentation wizard and `vramscope analyze`. A description of the
//! allocator's state, judged here with the other judgements: why an allocation failed is
//! [`super::oom`]'s to say (the Allocator tab shows that verdict above this sentence).

use crate::analysis::fragmentation::{FragmentationMetrics, NEGLIGIBLE_UNUSED_FRACTION};
use crate::model::format_bytes;

/// One sentence on where the reserved memory that tensors do not use is.
pub fn summarize(metrics: &FragmentationMetrics) -> String {
    if metrics.reserved_bytes == 0 {
        return "Nothing is reserved: the allocator holds no memory.".to_string();
    }
    let reserved = metrics.reserved_bytes as f64;
    let percent = |bytes: u64| 100.0 * bytes as f64 / reserved;
    let unused = metrics.unused_bytes();
    let head = format!(
        "{} reserved, {:.1}% in use by tensors",
        format_bytes(metrics.reserved_bytes),
        percent(metrics.requested_bytes)
    );
    if (unused as f64) < NEGLIGIBLE_UNUSED_FRACTION * reserved {
        return format!(
            "{head}; only {} ({:.1}%) is not in use by tensors.",
            format_bytes(unused),
            percent(unused)
        );
    }
    let candidates = [
        (metrics.stranded_bytes, Waste::Stranded),
        (metrics.releasable_bytes, Waste::Releasable),
        (metrics.rounding_waste_bytes, Waste::Rounding),
        (metrics.pending_free_bytes, Waste::PendingFree),
    ];
    let (bytes, waste) = candidates
        .iter()
        .copied()
        .max_by_key(|(bytes, _)| *bytes)
        .unwrap_or((0, Waste::Stranded));
    let detail = match waste {
        Waste::Stranded => format!(
            "most unused memory is stranded: {} ({:.1}%) is free in partly used segments, \
             and the largest free block is only {}",
            format_bytes(bytes),
            percent(bytes),
            format_bytes(metrics.largest_free_bytes)
        ),
        Waste::Releasable => format!(
            "most unused memory is in cached free segments: {} ({:.1}%) sits in entirely free \
             segments that empty_cache() would return",
            format_bytes(bytes),
            percent(bytes)
        ),
        Waste::Rounding => format!(
            "most unused memory is rounding: {} ({:.1}%) is lost rounding requests up to block \
             sizes",
            format_bytes(bytes),
            percent(bytes)
        ),
        Waste::PendingFree => format!(
            "most unused memory is pending frees: {} ({:.1}%) is freed but waits for other \
             streams (record_stream)",
            format_bytes(bytes),
            percent(bytes)
        ),
    };
    format!("{head}; {detail}.")
}

#[derive(Clone, Copy)]
enum Waste {
    Stranded,
    Releasable,
    Rounding,
    PendingFree,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fragmentation::{analyze, tests::sample_state};

    #[test]
    fn summary_names_the_dominant_waste() {
        let report = analyze(&sample_state());
        assert!(
            summarize(&report.device).contains("most unused memory is in cached free segments"),
            "{}",
            summarize(&report.device)
        );
        let mut state = sample_state();
        state.segments.remove(1);
        let summary = summarize(&analyze(&state).device);
        assert!(
            summary.contains("most unused memory is stranded"),
            "{summary}"
        );
        assert!(
            summary.contains("largest free block is only 4.00 MiB"),
            "{summary}"
        );
        assert_eq!(
            summarize(&FragmentationMetrics::default()),
            "Nothing is reserved: the allocator holds no memory."
        );
    }
}
