//! Pure functions over the model: level-of-detail pyramids for timelines, threshold crossings,
//! allocator snapshot totals.

pub mod lod;
pub mod threshold;
pub mod totals;
