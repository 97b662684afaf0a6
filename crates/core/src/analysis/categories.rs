//! Where the memory went: every allocated block of an allocator state attributed to what it
//! holds (parameters, gradients, optimizer state, activations, inference caches, CUDA-graph
//! private pools, temporaries, other), from the stack that allocated it and the pool it lives in.
//! The OOM explainer and `compare` share it.
//!
//! What a stack tells, from PyTorch's own code paths (`torch/nn/modules/module.py`,
//! `torch/optim/*.py`, `torch/autograd/`):
//! - parameters are made by a module's `__init__`/`reset_parameters` on the device, or copied
//!   there by `Module._apply` (`.to()`, `.cuda()`) or `load_state_dict`;
//! - optimizer state is made lazily in the optimizer's `_init_group` (`torch.zeros_like(p)`);
//!   anything else allocated inside `torch/optim/` is the step's own temporaries;
//! - activations are allocated inside a module's forward (`_call_impl`, `forward`);
//! - the backward pass runs on the autograd engine's device thread, which has no Python frames:
//!   with Python-only stacks its allocations have an empty stack, with C++ stacks they show the
//!   engine. A backward allocation of exactly a parameter's size is its gradient; the rest are
//!   the backward's temporaries (gradients of activations);
//! - blocks in a private pool belong to a CUDA graph, whatever allocated them.
//!
//! A trace recorded without stacks (`context=None`) says none of this: its blocks are "other".

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::timetravel::{AllocatorState, BlockOrigin, BlockStatus, StateBlock, TimeTravel};
use crate::model::allocator::{AllocatorSnapshot, StackId};

/// What a block of memory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryCategory {
    Parameters,
    Gradients,
    OptimizerState,
    Activations,
    InferenceCaches,
    GraphPools,
    /// cuBLAS (and cuBLASLt) workspaces: one block per handle and stream, made by the first
    /// matrix product and kept for the process's life.
    Workspaces,
    Temporaries,
    Other,
}

impl MemoryCategory {
    /// Every category, in the order reports list them.
    pub const ALL: [MemoryCategory; 9] = [
        MemoryCategory::Parameters,
        MemoryCategory::Gradients,
        MemoryCategory::OptimizerState,
        MemoryCategory::Activations,
        MemoryCategory::InferenceCaches,
        MemoryCategory::GraphPools,
        MemoryCategory::Workspaces,
        MemoryCategory::Temporaries,
        MemoryCategory::Other,
    ];

    /// Words for people.
    pub fn label(self) -> &'static str {
        match self {
            MemoryCategory::Parameters => "parameters",
            MemoryCategory::Gradients => "gradients",
            MemoryCategory::OptimizerState => "optimizer state",
            MemoryCategory::Activations => "activations",
            MemoryCategory::InferenceCaches => "inference caches",
            MemoryCategory::GraphPools => "CUDA-graph pools",
            MemoryCategory::Workspaces => "cuBLAS workspaces",
            MemoryCategory::Temporaries => "temporaries",
            MemoryCategory::Other => "other (your code, or no stack)",
        }
    }

    /// Whether the category's size follows the batch (or sequence) size: activations, caches and
    /// temporaries do; weights, their gradients and the optimizer's state do not.
    pub fn scales_with_batch(self) -> bool {
        matches!(
            self,
            MemoryCategory::Activations
                | MemoryCategory::InferenceCaches
                | MemoryCategory::Temporaries
        )
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Bytes and blocks of one state, per category.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CategoryTotals {
    bytes: [u64; 9],
    blocks: [u64; 9],
}

impl CategoryTotals {
    /// Bytes of allocated blocks attributed to `category`.
    pub fn bytes(&self, category: MemoryCategory) -> u64 {
        self.bytes[category.index()]
    }

    /// Allocated blocks attributed to `category`.
    pub fn blocks(&self, category: MemoryCategory) -> u64 {
        self.blocks[category.index()]
    }

    /// Bytes of every allocated block.
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }

    /// The category holding the most bytes (`None` when nothing is allocated).
    pub fn largest(&self) -> Option<MemoryCategory> {
        MemoryCategory::ALL
            .into_iter()
            .filter(|c| self.bytes(*c) > 0)
            .max_by_key(|c| self.bytes(*c))
    }

    /// Share of the batch-independent categories (parameters, gradients, optimizer state) in
    /// the allocated bytes, 0 to 1.
    pub fn batch_independent_fraction(&self) -> f64 {
        let total = self.total_bytes();
        if total == 0 {
            return 0.0;
        }
        let fixed: u64 = MemoryCategory::ALL
            .into_iter()
            .filter(|c| !c.scales_with_batch() && *c != MemoryCategory::Other)
            .filter(|c| !matches!(c, MemoryCategory::GraphPools | MemoryCategory::Workspaces))
            .map(|c| self.bytes(c))
            .sum();
        fixed as f64 / total as f64
    }

    fn add(&mut self, category: MemoryCategory, bytes: u64) {
        self.bytes[category.index()] += bytes;
        self.blocks[category.index()] += 1;
    }
}

/// What a stack says about the allocation it made, before sizes are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StackClass {
    Parameters,
    OptimizerState,
    OptimizerStep,
    Forward,
    Cache,
    /// The autograd engine's thread: C++ frames of the engine, or no frames at all in a trace
    /// that records Python frames.
    Backward,
    /// `AccumulateGrad` in the C++ frames: a gradient for certain.
    Gradient,
    Other,
}

/// Function names of `torch/nn/modules/module.py` that put parameters on the device.
const PARAMETER_MOVES: [&str; 6] = [
    "_apply",
    "to",
    "cuda",
    "to_empty",
    "load_state_dict",
    "_load_from_state_dict",
];

/// Function names of an optimizer that make its state.
const OPTIMIZER_STATE_MAKERS: [&str; 4] = [
    "_init_group",
    "__init__",
    "load_state_dict",
    "_process_value_according_to_param_policy",
];

fn classify_stack(
    snapshot: &AllocatorSnapshot,
    stack: StackId,
    trace_has_frames: bool,
) -> StackClass {
    let frames: Vec<(&str, &str)> = snapshot
        .frames
        .stack(stack)
        .iter()
        .filter_map(|&id| snapshot.frames.frame(id))
        .map(|f| (snapshot.string(f.filename), snapshot.string(f.name)))
        .collect();
    if frames.is_empty() {
        return if trace_has_frames {
            StackClass::Backward
        } else {
            StackClass::Other
        };
    }
    let any =
        |test: &dyn Fn(&str, &str) -> bool| frames.iter().any(|(file, name)| test(file, name));
    if any(&|_, name| name.contains("AccumulateGrad")) {
        return StackClass::Gradient;
    }
    if any(&|file, _| file.contains("torch/optim/")) {
        let makes_state = any(&|file, name| {
            file.contains("torch/optim/") && OPTIMIZER_STATE_MAKERS.contains(&name)
        });
        return if makes_state {
            StackClass::OptimizerState
        } else {
            StackClass::OptimizerStep
        };
    }
    if any(&|file, name| {
        (file.ends_with("torch/nn/modules/module.py") && PARAMETER_MOVES.contains(&name))
            || file.ends_with("torch/nn/init.py")
            || file.ends_with("torch/nn/parameter.py")
            || name == "reset_parameters"
            || (name == "__init__" && file.contains("torch/nn/modules/"))
    }) {
        return StackClass::Parameters;
    }
    if any(&|file, name| {
        let lower = file.to_ascii_lowercase();
        (lower.contains("cache") || name.to_ascii_lowercase().contains("cache"))
            && !name.contains("CachingAllocator")
    }) {
        return StackClass::Cache;
    }
    if any(&|file, name| {
        name.contains("torch::autograd::Engine")
            || name.contains("autograd::engine")
            || (file.ends_with("torch/autograd/__init__.py") && name == "backward")
            || (file.ends_with("torch/autograd/graph.py") && name == "_engine_run_backward")
    }) {
        return StackClass::Backward;
    }
    if any(&|_, name| name == "_call_impl" || name == "_wrapped_call_impl" || name == "forward") {
        return StackClass::Forward;
    }
    StackClass::Other
}

/// The stack that allocated `block`, when the trace or the snapshot knows it.
pub fn block_stack(travel: &TimeTravel, block: &StateBlock) -> StackId {
    let trace = travel.trace();
    match block.origin {
        BlockOrigin::AllocEvent(i) => trace
            .stacks
            .get(i as usize)
            .copied()
            .unwrap_or(StackId::EMPTY),
        BlockOrigin::SnapshotBlock(i) => travel
            .snapshot()
            .blocks
            .get(i as usize)
            .map_or(StackId::EMPTY, |b| b.stack),
        BlockOrigin::FreeEvent(_) | BlockOrigin::Unknown => StackId::EMPTY,
    }
}

/// Whether the trace recorded any stack (with `context=None` none has one).
pub fn trace_has_frames(travel: &TimeTravel) -> bool {
    travel.trace().stacks.iter().any(|s| *s != StackId::EMPTY)
}

/// Sizes of cuBLAS workspaces with PyTorch's default `CUBLAS_WORKSPACE_CONFIG`: `:4096:8`
/// (32 MiB) on Hopper and newer, `:4096:2:16:8` (8 MiB + 128 KiB) before
/// (`aten/src/ATen/cuda/CublasHandlePool.cpp`, `getChosenWorkspaceSize`).
const CUBLAS_WORKSPACE_BYTES: [u64; 2] = [32 << 20, (8 << 20) + (128 << 10)];

/// Trace events whose blocks are still allocated at the end of the trace: a block the program
/// never gives back.
fn never_freed(travel: &TimeTravel) -> HashSet<u32> {
    let end = travel.state_at(travel.len());
    end.segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.status == BlockStatus::Allocated)
        .filter_map(|b| match b.origin {
            BlockOrigin::AllocEvent(i) => Some(i),
            _ => None,
        })
        .collect()
}

/// A block allocated by a matrix product (in a forward or on the autograd thread) at exactly a
/// cuBLAS workspace's size and never freed: the library's workspace, not a tensor of the model.
fn is_cublas_workspace(class: StackClass, block: &StateBlock, kept: &HashSet<u32>) -> bool {
    matches!(class, StackClass::Forward | StackClass::Backward)
        && CUBLAS_WORKSPACE_BYTES.contains(&block.requested_bytes)
        && matches!(block.origin, BlockOrigin::AllocEvent(i) if kept.contains(&i))
}

/// A block of a state by position: segment index and block index.
pub type StateBlockRef = (usize, usize);

/// Attributes every allocated block of `state` (a state of `travel`) to a category; returns the
/// category of each allocated block by position, and the totals.
pub fn attribute(
    travel: &TimeTravel,
    state: &AllocatorState,
) -> (Vec<(StateBlockRef, MemoryCategory)>, CategoryTotals) {
    let snapshot = travel.snapshot();
    let with_frames = trace_has_frames(travel);
    let mut classes: HashMap<StackId, StackClass> = HashMap::new();
    let mut classified = Vec::new();
    let mut parameter_sizes: HashSet<u64> = HashSet::new();
    for (s, segment) in state.segments.iter().enumerate() {
        for (b, block) in segment.blocks.iter().enumerate() {
            if block.status != BlockStatus::Allocated {
                continue;
            }
            let stack = block_stack(travel, block);
            let class = *classes
                .entry(stack)
                .or_insert_with(|| classify_stack(snapshot, stack, with_frames));
            if class == StackClass::Parameters {
                parameter_sizes.insert(block.requested_bytes);
            }
            classified.push(((s, b), class, !segment.pool_id.is_default()));
        }
    }
    let kept = never_freed(travel);
    let mut totals = CategoryTotals::default();
    let mut out = Vec::with_capacity(classified.len());
    for ((s, b), class, private_pool) in classified {
        let block = &state.segments[s].blocks[b];
        let category = if private_pool {
            MemoryCategory::GraphPools
        } else if is_cublas_workspace(class, block, &kept) {
            MemoryCategory::Workspaces
        } else {
            match class {
                StackClass::Parameters => MemoryCategory::Parameters,
                StackClass::OptimizerState => MemoryCategory::OptimizerState,
                StackClass::OptimizerStep => MemoryCategory::Temporaries,
                StackClass::Forward => MemoryCategory::Activations,
                StackClass::Cache => MemoryCategory::InferenceCaches,
                StackClass::Gradient => MemoryCategory::Gradients,
                StackClass::Backward if parameter_sizes.contains(&block.requested_bytes) => {
                    MemoryCategory::Gradients
                }
                StackClass::Backward => MemoryCategory::Temporaries,
                StackClass::Other => MemoryCategory::Other,
            }
        };
        totals.add(category, block.size_bytes);
        out.push(((s, b), category));
    }
    (out, totals)
}
