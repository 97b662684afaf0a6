//! Pure functions over the model: level-of-detail pyramids for timelines, threshold crossings,
//! allocator snapshot totals, and the allocator analyses (time travel, fragmentation, OOM
//! explanations).

pub mod allocator_rules;
pub mod deadline;
pub mod fragmentation;
pub mod lod;
pub mod oom;
pub mod snapshot_analysis;
pub mod threshold;
pub mod timetravel;
pub mod totals;
