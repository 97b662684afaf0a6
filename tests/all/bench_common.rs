//! The benches' shared measuring helpers (`benches/common/mod.rs`), tested here: bench binaries
//! run without the test harness, so their own `#[cfg(test)]` code would never run.

#[path = "../../benches/common/mod.rs"]
mod common;

use common::{Samples, percentile, time_runs};

#[test]
fn percentiles_take_the_nearest_rank() {
    assert_eq!(percentile::<u32>(&[], 0.5), None);
    assert_eq!(percentile(&[7], 0.99), Some(7));
    // Odd count: the middle one; even count: the upper middle one.
    assert_eq!(percentile(&[1, 2, 3, 4, 5], 0.5), Some(3));
    assert_eq!(percentile(&[1, 2, 3, 4], 0.5), Some(3));
    let hundred: Vec<u32> = (1..=100).collect();
    assert_eq!(percentile(&hundred, 0.99), Some(99));
    assert_eq!(percentile(&hundred, 1.0), Some(100));
    assert_eq!(percentile(&hundred, 0.0), Some(1));
}

#[test]
fn samples_are_sorted_before_reading() {
    let samples = Samples::from_values(vec![3.0, 1.0, 2.0, f64::NAN]);
    assert_eq!(samples.min(), 1.0);
    assert_eq!(samples.percentile(2.0 / 3.0), 3.0);
    assert!(samples.max().is_nan(), "NaN sorts last");
    let (times, last) = time_runs(3, || 42);
    assert_eq!((times.len(), last), (3, 42));
    assert!(times.min() <= times.median() && times.median() <= times.max());
}
