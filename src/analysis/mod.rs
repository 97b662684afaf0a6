//! Pure functions over the model: level-of-detail pyramids for timelines, threshold crossings.

pub mod lod;
pub mod threshold;
