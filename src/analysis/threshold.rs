//! Threshold crossings derived from samples (the threshold is a view setting, not data).
