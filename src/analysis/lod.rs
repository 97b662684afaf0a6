//! Level-of-detail pyramids (min/max per bucket) so that long timelines draw quickly.
