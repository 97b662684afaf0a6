//! Pure functions over the model: level-of-detail pyramids for timelines, threshold crossings,
//! robust trend lines,
//! allocator snapshot totals, and the allocator analyses (time travel, fragmentation, OOM
//! explanations, the what-if replay of a trace under other allocator settings, and the
//! repetitions of a trace's call sites: steps and layers).

pub mod allocator_rules;
pub mod categories;
pub mod compare;
pub mod deadline;
pub mod fleet;
pub mod fragmentation;
pub mod frames;
pub mod lod;
pub mod oom;
pub mod repetition;
pub mod replay;
pub mod snapshot_analysis;
pub mod threshold;
pub mod timetravel;
pub mod totals;
pub mod trend;
