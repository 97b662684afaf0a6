//! The `.vramcap` capture format: versioned header, append-only checksummed chunks.
