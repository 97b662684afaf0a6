//! The one palette of vramscope: what each kind of allocator byte and each timeline mark looks
//! like, in the app and in every report image, so that a report reads like the screen. The app
//! turns these into egui colours; the report writers draw them as they are.

use crate::analysis::categories::MemoryCategory;

/// An sRGB colour, red, green, blue.
pub type Rgb = [u8; 3];

/// What a painted stretch of the block map shows: the kinds of bytes a segment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockPaint {
    /// The requested part of an allocated block.
    Allocated,
    /// The tail of an allocated block lost to rounding (size − requested).
    RoundingWaste,
    /// Freed, waiting for other streams.
    PendingFree,
    /// Cached free memory.
    Free,
}

impl BlockPaint {
    /// Every kind, in legend order.
    pub const ALL: [BlockPaint; 4] = [
        BlockPaint::Allocated,
        BlockPaint::RoundingWaste,
        BlockPaint::PendingFree,
        BlockPaint::Free,
    ];

    /// Fill colour: blue for bytes handed out to tensors, red for rounding waste, amber for
    /// blocks waiting for other streams, grey for cached free memory.
    pub const fn rgb(self) -> Rgb {
        match self {
            BlockPaint::Allocated => [66, 133, 214],
            BlockPaint::RoundingWaste => [222, 84, 62],
            BlockPaint::PendingFree => [224, 172, 44],
            BlockPaint::Free => [92, 96, 104],
        }
    }

    /// Legend text.
    pub const fn label(self) -> &'static str {
        match self {
            BlockPaint::Allocated => "allocated",
            BlockPaint::RoundingWaste => "rounding waste",
            BlockPaint::PendingFree => "pending free",
            BlockPaint::Free => "cached free",
        }
    }

    /// Which kind wins when several share one sliver: what is in use matters most.
    pub const fn priority(self) -> u8 {
        match self {
            BlockPaint::Allocated => 3,
            BlockPaint::PendingFree => 2,
            BlockPaint::RoundingWaste => 1,
            BlockPaint::Free => 0,
        }
    }
}

/// Line colours of a memory timeline, in series order (the first is the GPU's used memory, the
/// others are processes). The HTML legend uses the same.
pub const SERIES_COLORS: [Rgb; 7] = [
    [31, 78, 160],
    [40, 150, 60],
    [200, 40, 140],
    [20, 150, 160],
    [140, 90, 40],
    [120, 70, 200],
    [120, 130, 20],
];
/// The device capacity (horizontal, solid).
pub const CAPACITY_COLOR: Rgb = [110, 110, 110];
/// The threshold (horizontal, dashed) and its first crossing (vertical, dashed).
pub const THRESHOLD_COLOR: Rgb = [225, 150, 0];
/// Out-of-memory events.
pub const OOM_COLOR: Rgb = [210, 0, 0];
/// Xid events.
pub const XID_COLOR: Rgb = [0, 0, 0];
/// Other hardware events (critical events, ECC increases, lost GPUs).
pub const HARDWARE_COLOR: Rgb = [150, 20, 60];
/// Notes.
pub const NOTE_COLOR: Rgb = [30, 120, 210];

/// The colour of a memory category's bars (the OOM explainer, the reports, `compare`): the
/// model's own memory in blues and purple, what the batch drives in warm colours, the
/// allocator's and libraries' in teal and greys.
pub const fn category_rgb(category: MemoryCategory) -> Rgb {
    match category {
        MemoryCategory::Parameters => [52, 101, 164],
        MemoryCategory::Gradients => [114, 159, 207],
        MemoryCategory::OptimizerState => [117, 80, 123],
        MemoryCategory::Activations => [245, 121, 0],
        MemoryCategory::InferenceCaches => [204, 0, 102],
        MemoryCategory::GraphPools => [0, 140, 140],
        MemoryCategory::Workspaces => [136, 138, 133],
        MemoryCategory::Temporaries => [237, 212, 0],
        MemoryCategory::Other => [85, 87, 83],
    }
}
