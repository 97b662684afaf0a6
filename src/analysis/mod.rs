//! Pure functions over the model: level-of-detail pyramids for timelines, threshold crossings,
//! and the allocator-snapshot analyses (time travel, fragmentation, OOM explanations).

pub mod allocator_rules;
pub mod fragmentation;
pub mod lod;
pub mod oom;
pub mod threshold;
pub mod timetravel;
