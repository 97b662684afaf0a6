//! Where the app can go, as plain values that every module may name: the main [`View`]s and a
//! request to show a snapshot's GPU in the Allocator tab. A leaf: it imports nothing of the app,
//! so commands, views and wizards all use it without importing each other.

/// One of the app's main views.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum View {
    /// Memory over time of a capture or the live machine.
    #[default]
    Timeline,
    /// Block map, fragmentation and time travel of a PyTorch allocator snapshot.
    Allocator,
    /// The guided diagnosis wizards over every opened file.
    Diagnose,
    /// CUDA facts, CUDA vs NVML, largest block and the memory test (desktop only).
    HardwareChecks,
}

impl View {
    /// Every view, in tab order.
    pub const ALL: [View; 4] = [
        View::Timeline,
        View::Allocator,
        View::Diagnose,
        View::HardwareChecks,
    ];

    /// The tab's text.
    pub fn label(self) -> &'static str {
        match self {
            View::Timeline => "Timeline",
            View::Allocator => "Allocator",
            View::Diagnose => "Diagnose",
            View::HardwareChecks => "Hardware checks",
        }
    }

    /// What the tab's tooltip says the view is for.
    pub fn description(self) -> &'static str {
        match self {
            View::Timeline => "Memory over time: the live machine or an opened capture",
            View::Allocator => {
                "Inside the PyTorch caching allocator: open a snapshot (.pickle) to see its blocks"
            }
            View::Diagnose => {
                "Guided diagnosis of out-of-memory errors, fragmentation, leaks \
                               and hardware problems from every opened file"
            }
            View::HardwareChecks => "Checks of this machine's GPUs and driver",
        }
    }
}

/// The user asked to see a snapshot device in the Allocator tab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatorTabRequest {
    /// The snapshot's name in the evidence (`SnapshotFacts::name`: the app's file name).
    pub snapshot_name: String,
    pub device: u32,
}

impl AllocatorTabRequest {
    /// The text of the buttons that send this request.
    pub const LABEL: &'static str = "Open in Allocator tab";
    /// What those buttons do.
    pub const TOOLTIP: &'static str = "Time travel, OOM details and block details of this snapshot";
}
