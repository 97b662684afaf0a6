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

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::timetravel::{AllocatorState, BlockOrigin, BlockStatus, StateBlock, TimeTravel};
use crate::model::allocator::{AllocatorSnapshot, PoolId, StackId, TraceAction};

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
    /// Of the temporaries, the bytes `optimizer.step()` made (a foreach optimizer's lists of
    /// per-parameter intermediates): they follow the parameters, not the batch.
    optimizer_step_bytes: u64,
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

    /// Of the temporaries, the bytes made inside `optimizer.step()` (what a fused optimizer, or
    /// one that does not use foreach kernels, would not hold at once).
    pub fn optimizer_step_bytes(&self) -> u64 {
        self.optimizer_step_bytes
    }

    /// Bytes whose size follows the model and not the batch: parameters, gradients, optimizer
    /// state and the optimizer step's temporaries. A smaller batch shrinks none of them.
    pub fn batch_independent_bytes(&self) -> u64 {
        self.bytes(MemoryCategory::Parameters)
            + self.bytes(MemoryCategory::Gradients)
            + self.bytes(MemoryCategory::OptimizerState)
            + self.optimizer_step_bytes
    }

    /// Share of the batch-independent bytes ([`Self::batch_independent_bytes`]) in the
    /// allocated bytes, 0 to 1.
    pub fn batch_independent_fraction(&self) -> f64 {
        let total = self.total_bytes();
        if total == 0 {
            return 0.0;
        }
        self.batch_independent_bytes() as f64 / total as f64
    }

    fn add(&mut self, category: MemoryCategory, bytes: u64) {
        self.bytes[category.index()] += bytes;
        self.blocks[category.index()] += 1;
    }

    /// Totals with `bytes` (one block each) per category, for tests of the rules that read them.
    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn for_test(bytes: &[(MemoryCategory, u64)], optimizer_step_bytes: u64) -> Self {
        let mut totals = CategoryTotals::default();
        for &(category, b) in bytes {
            totals.add(category, b);
        }
        totals.optimizer_step_bytes = optimizer_step_bytes;
        totals
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
    // A Python frame of a cache (a file or function named so, `empty_cache()` aside): C++
    // frames name the library's own caches (autocast's `cached_cast`, cuDNN's plan
    // `CacheKeyWrapper`), not the model's.
    if any(&|file, name| {
        file.ends_with(".py")
            && (file.to_ascii_lowercase().contains("cache")
                || name.to_ascii_lowercase().contains("cache"))
            && !name.contains("empty_cache")
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

/// Workspaces one stream can hold at one size: PyTorch keeps one per cuBLAS handle and stream,
/// and a handle per thread (the forward's and the autograd engine's), each with a cuBLASLt
/// handle beside it.
const WORKSPACES_PER_STREAM_AND_SIZE: usize = 4;

/// The never-freed allocations that can be cuBLAS workspaces: on each stream, the earliest few
/// of a workspace's exact size ([`WORKSPACES_PER_STREAM_AND_SIZE`]). A program that keeps many
/// tensors of that size (attention maps of 32 MiB kept every step) keeps tensors, not
/// workspaces: the library makes its workspaces once, at the first products.
fn workspace_candidates(travel: &TimeTravel, kept: &HashSet<u32>) -> HashSet<u32> {
    let trace = travel.trace();
    // (event, size) of every never-freed allocation of a workspace's size, oldest first.
    let mut in_order: Vec<(u32, u64)> = kept
        .iter()
        .filter_map(|&i| {
            let size = *trace.sizes_bytes.get(i as usize)?;
            CUBLAS_WORKSPACE_BYTES.contains(&size).then_some((i, size))
        })
        .collect();
    in_order.sort_unstable();
    let mut per_stream_and_size: HashMap<(u64, u64), usize> = HashMap::new();
    in_order
        .into_iter()
        .filter_map(|(i, size)| {
            let stream = trace.streams.get(i as usize).copied().unwrap_or(0);
            let seen = per_stream_and_size.entry((stream, size)).or_insert(0);
            *seen += 1;
            (*seen <= WORKSPACES_PER_STREAM_AND_SIZE).then_some(i)
        })
        .collect()
}

/// A block allocated by a matrix product (in a forward or on the autograd thread) at exactly a
/// cuBLAS workspace's size, never freed, and among the first of that size on its stream
/// (`workspaces`, from [`workspace_candidates`]): the library's workspace, not a tensor of the
/// model.
fn is_cublas_workspace(class: StackClass, block: &StateBlock, workspaces: &HashSet<u32>) -> bool {
    matches!(class, StackClass::Forward | StackClass::Backward)
        && CUBLAS_WORKSPACE_BYTES.contains(&block.requested_bytes)
        && matches!(block.origin, BlockOrigin::AllocEvent(i) if workspaces.contains(&i))
}

/// A block of a state by position: segment index and block index.
pub type StateBlockRef = (usize, usize);

/// What attributing blocks needs from the whole trace, learnt once and reused for every state:
/// whether the trace recorded stacks, which allocations can be library workspaces (never given
/// back, made first), and which call sites grow a tensor by concatenation
/// ([`concatenation_sites`]).
pub struct Attributor<'a> {
    travel: &'a TimeTravel,
    with_frames: bool,
    workspaces: HashSet<u32>,
    sites: Vec<ConcatSite>,
    concatenating: HashSet<StackId>,
}

impl<'a> Attributor<'a> {
    /// Learns the trace's facts (one pass over it, and its final state).
    pub fn new(travel: &'a TimeTravel) -> Self {
        let sites = concatenation_sites(travel);
        Attributor {
            travel,
            with_frames: trace_has_frames(travel),
            workspaces: {
                let kept = never_freed(travel);
                workspace_candidates(travel, &kept)
            },
            concatenating: sites.iter().map(|site| site.stack).collect(),
            sites,
        }
    }

    /// Every allocation of the trace before event `end`, in order: its size and the class of its
    /// stack (each stack classed once).
    fn classified_allocations(&self, end: usize) -> impl Iterator<Item = (u64, StackClass)> + '_ {
        let trace = self.travel.trace();
        let snapshot = self.travel.snapshot();
        let mut classes: HashMap<StackId, StackClass> = HashMap::new();
        (0..end.min(trace.len()))
            .filter(move |&i| trace.actions[i] == TraceAction::Alloc)
            .map(move |i| {
                let stack = trace.stacks.get(i).copied().unwrap_or(StackId::EMPTY);
                let class = *classes
                    .entry(stack)
                    .or_insert_with(|| classify_stack(snapshot, stack, self.with_frames));
                (trace.sizes_bytes[i], class)
            })
    }

    /// Attributes every allocated block of `state` (a state of the travel) to a category;
    /// returns the category of each allocated block by position, and the totals.
    pub fn attribute(
        &self,
        state: &AllocatorState,
    ) -> (Vec<(StateBlockRef, MemoryCategory)>, CategoryTotals) {
        let snapshot = self.travel.snapshot();
        let mut classes: HashMap<StackId, StackClass> = HashMap::new();
        let mut classified = Vec::new();
        let mut parameter_sizes: HashSet<u64> = HashSet::new();
        for (s, segment) in state.segments.iter().enumerate() {
            for (b, block) in segment.blocks.iter().enumerate() {
                if block.status != BlockStatus::Allocated {
                    continue;
                }
                let stack = block_stack(self.travel, block);
                let mut class = *classes
                    .entry(stack)
                    .or_insert_with(|| classify_stack(snapshot, stack, self.with_frames));
                if self.concatenating.contains(&stack)
                    && matches!(class, StackClass::Forward | StackClass::Other)
                {
                    class = StackClass::Cache;
                }
                if class == StackClass::Parameters {
                    parameter_sizes.insert(block.requested_bytes);
                }
                classified.push(((s, b), class, !segment.pool_id.is_default()));
            }
        }
        let mut totals = CategoryTotals::default();
        let mut out = Vec::with_capacity(classified.len());
        for ((s, b), class, private_pool) in classified {
            let block = &state.segments[s].blocks[b];
            let category = if private_pool {
                MemoryCategory::GraphPools
            } else if is_cublas_workspace(class, block, &self.workspaces) {
                MemoryCategory::Workspaces
            } else {
                category_of(class, parameter_sizes.contains(&block.requested_bytes))
            };
            totals.add(category, block.size_bytes);
            if !private_pool && class == StackClass::OptimizerStep {
                totals.optimizer_step_bytes += block.size_bytes;
            }
            out.push(((s, b), category));
        }
        (out, totals)
    }
}

/// The category of a block its stack classed as `class`; `parameter_sized` when its size is
/// that of a parameter (a backward allocation of that size is the parameter's gradient).
fn category_of(class: StackClass, parameter_sized: bool) -> MemoryCategory {
    match class {
        StackClass::Parameters => MemoryCategory::Parameters,
        StackClass::OptimizerState => MemoryCategory::OptimizerState,
        StackClass::OptimizerStep => MemoryCategory::Temporaries,
        StackClass::Forward => MemoryCategory::Activations,
        StackClass::Cache => MemoryCategory::InferenceCaches,
        StackClass::Gradient => MemoryCategory::Gradients,
        StackClass::Backward if parameter_sized => MemoryCategory::Gradients,
        StackClass::Backward => MemoryCategory::Temporaries,
        StackClass::Other => MemoryCategory::Other,
    }
}

/// Attributes every allocated block of `state` (a state of `travel`) to a category; returns the
/// category of each allocated block by position, and the totals. Attributing several states of
/// one trace: make one [`Attributor`].
pub fn attribute(
    travel: &TimeTravel,
    state: &AllocatorState,
) -> (Vec<(StateBlockRef, MemoryCategory)>, CategoryTotals) {
    Attributor::new(travel).attribute(state)
}

/// Reallocations a call site needs before it counts as growing a tensor by concatenation: fewer
/// are what any layer loop does once.
const MIN_REALLOCATIONS: u32 = 4;

/// A call site that grows one tensor by concatenation (`x = torch.cat([x, new])`, a KV cache
/// grown token by token, predictions gathered batch by batch): it allocates a larger block
/// while its previous one lives, copies, and frees the previous one, again and again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConcatSite {
    /// The allocating stack (the site).
    pub stack: StackId,
    /// The site in words: its innermost frame of the user's code (`file.py:12 function`).
    pub site: String,
    /// Reallocations in the longest run of appending ones (a run ends when its largest block is
    /// freed without a larger one after it; caches kept whole, never freed, run on).
    pub reallocations: u32,
    /// The smallest block of that run (the first replaced) and the largest (the last made).
    pub first_bytes: u64,
    pub largest_bytes: u64,
}

/// A run of reallocations of one call site while it is followed: the program freed a block of
/// the site while a newer block of the site lived.
#[derive(Clone, Copy, Default)]
struct ReallocationRun {
    /// Every such free whose newer block was not much larger (a replacement).
    replaced: u32,
    /// Those whose newer block was larger by at most half the old size: a concatenation appends
    /// a piece, where an upsampling layer (also a larger output replacing a smaller input)
    /// multiplies.
    grew: u32,
    first_bytes: u64,
    largest_bytes: u64,
}

impl ReallocationRun {
    /// A concatenation: enough reallocations, nearly all of them appending to the block they
    /// replace (an input re-made each step at the same size, sometimes larger, is not one).
    fn is_concatenation(&self) -> bool {
        self.grew >= MIN_REALLOCATIONS && self.grew * 4 >= self.replaced * 3
    }
}

/// One call site while [`concatenation_sites`] follows it.
#[derive(Default)]
struct SiteFollowed {
    /// Its live blocks: size by the event that made it.
    live: BTreeMap<usize, u64>,
    /// Its longest run of reallocations so far, and the current one.
    best: ReallocationRun,
    run: ReallocationRun,
}

impl SiteFollowed {
    /// The current run ended (its block was dropped, or a smaller one replaced it: the next
    /// sequence, batch): kept if the longest so far.
    fn end_run(&mut self) {
        if self.run.grew > self.best.grew {
            self.best = self.run;
        }
        self.run = ReallocationRun::default();
    }

    /// The site's block of `old_bytes` made at event `allocated_at` is freed.
    fn freed(&mut self, allocated_at: usize, old_bytes: u64) {
        self.live.remove(&allocated_at);
        // The site's newest block, when made after it: `x = torch.cat([x, y])` frees `x` right
        // after making its replacement, however many other blocks of the line live (one cache
        // per layer) and whatever temporaries the line made and freed before. Older blocks of
        // the line are not looked at: one larger by chance (varying lengths) is no replacement.
        let newest = self
            .live
            .range(allocated_at + 1..)
            .next_back()
            .map(|(_, &bytes)| bytes);
        // Appended to: larger by at most half.
        let appended = newest
            .filter(|&bytes| bytes > old_bytes && bytes <= old_bytes.saturating_add(old_bytes / 2));
        if let Some(new_bytes) = appended {
            if self.run.grew == 0 {
                // Same-size re-makes before it still count against it: a line whose blocks
                // mostly keep their size and grow now and then (routing indices) is no cache.
                self.run.first_bytes = old_bytes;
            }
            self.run.replaced += 1;
            self.run.grew += 1;
            self.run.largest_bytes = self.run.largest_bytes.max(new_bytes);
            return;
        }
        // Re-made at its size or smaller: a replacement that did not grow.
        if newest.is_some_and(|bytes| bytes <= old_bytes) {
            self.run.replaced += 1;
        }
        // The run's largest block went without a larger one after it: the run ended. (A
        // temporary the same line made, freed while a much larger block of the line lives,
        // is no part of the run: `torch.cat([cache, torch.stack(pieces)])`.)
        if old_bytes >= self.run.largest_bytes && self.run.grew > 0 {
            self.end_run();
        }
    }
}

/// The call sites of `travel`'s trace that grow a tensor by concatenation: the program frees a
/// block of the site while the site's newest block, made after it, is larger by at most half
/// the old size, at least [`MIN_REALLOCATIONS`] times in a row (nearly every time it replaces one),
/// until the run's largest block goes without a larger one after it. Other blocks the same
/// line makes (a piece stacked before it is appended) do not break the run. Found from the
/// trace's stacks: a trace without stacks has none.
pub fn concatenation_sites(travel: &TimeTravel) -> Vec<ConcatSite> {
    let trace = travel.trace();
    // Live blocks of the trace by address: the event that allocated them, its stack, its size.
    let mut live: HashMap<u64, (usize, StackId, u64)> = HashMap::new();
    let mut sites: HashMap<StackId, SiteFollowed> = HashMap::new();
    for (index, action) in trace.actions.iter().enumerate() {
        let address = trace.addresses.get(index).copied().unwrap_or(0);
        match action {
            TraceAction::Alloc => {
                let stack = trace.stacks.get(index).copied().unwrap_or(StackId::EMPTY);
                let size = trace.sizes_bytes.get(index).copied().unwrap_or(0);
                live.insert(address, (index, stack, size));
                if stack != StackId::EMPTY {
                    sites.entry(stack).or_default().live.insert(index, size);
                }
            }
            TraceAction::FreeRequested => {
                let Some((allocated_at, stack, old_bytes)) = live.remove(&address) else {
                    continue;
                };
                if let Some(site) = sites.get_mut(&stack) {
                    site.freed(allocated_at, old_bytes);
                }
            }
            _ => {}
        }
    }
    let mut found: Vec<ConcatSite> = sites
        .into_iter()
        .filter_map(|(stack, SiteFollowed { best, run, .. })| {
            let longest = if run.grew > best.grew { run } else { best };
            longest.is_concatenation().then(|| ConcatSite {
                stack,
                site: super::frames::user_call_site(travel.snapshot(), stack),
                reallocations: longest.grew,
                first_bytes: longest.first_bytes,
                largest_bytes: longest.largest_bytes,
            })
        })
        .collect();
    found.sort_by_key(|site| (std::cmp::Reverse(site.largest_bytes), site.stack));
    found
}

/// Live memory by category at one moment of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CategoryMoment {
    /// Trace position: events applied.
    pub position: usize,
    pub totals: CategoryTotals,
}

/// What made the request that failed, from its stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailingRequest {
    /// The category the request's block would have had.
    pub category: MemoryCategory,
    /// Made inside `optimizer.step()`: its state (the first step makes it) or its temporaries.
    pub in_optimizer_step: bool,
}

/// A private pool (a CUDA graph's, or a `torch.cuda.MemPool`) at the failure: its memory serves
/// only allocations routed to it (while a graph is captured, or inside `use_mem_pool`), so while
/// other work runs none of it, used or cached, can serve that work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrivatePoolHold {
    pub pool_id: PoolId,
    pub reserved_bytes: u64,
    /// Bytes of its blocks still allocated (a graph's static inputs, outputs and the
    /// intermediates its replays reuse).
    pub allocated_bytes: u64,
    pub segments: usize,
    /// The failing request was routed to this pool (known only from traces with pool ids).
    pub serves_failing_request: bool,
}

impl PrivatePoolHold {
    /// Whose pool it is, from PyTorch's numbering: a graph captured without `pool=` gets
    /// `(n, 0)`; `torch.cuda.MemPool()` and `torch.cuda.graph_pool_handle()` make `(0, n)`.
    pub fn owner(&self) -> &'static str {
        if self.pool_id.1 == 0 {
            "a CUDA graph's own private pool"
        } else {
            "a private pool made by torch.cuda.MemPool() or graph_pool_handle()"
        }
    }
}

/// Where the live memory went at a failure (and at the peak before it), by category, with what
/// the trace tells about the request that failed, the private pools that held memory, and the
/// call sites that grow a tensor by concatenation.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryBreakdown {
    /// At the failure: the state right before the failing request; `None` without a failure.
    pub at_failure: Option<CategoryMoment>,
    /// At the highest allocated position up to the failure (the whole trace without one).
    pub at_peak: CategoryMoment,
    pub failing_request: Option<FailingRequest>,
    /// The largest parameter block at the failure (else at the peak): what an optimizer that
    /// steps one parameter at a time still needs at once.
    pub largest_parameter_bytes: u64,
    /// Private pools holding memory at the failure (else at the peak), largest first.
    pub private_pools: Vec<PrivatePoolHold>,
    /// Call sites growing a tensor by concatenation, largest first.
    pub concatenating: Vec<ConcatSite>,
    /// The user call site of the failing request (`frames::user_call_site`), in a trace that
    /// records stacks; `None` without a failure or without stacks.
    pub failing_site: Option<String>,
    /// State tensors the optimizer makes per parameter (SGD's momentum 1, Adam 2, Adam with
    /// `amsgrad` 3), learnt from the order in which its first step made them
    /// ([`state_tensors_per_parameter`]), where the failing request makes that state; 1 when
    /// the trace cannot tell, and for any other failure.
    pub state_tensors_per_parameter: u64,
    /// What the failing request's call stack allocated before it, where the program's own code
    /// made the request outside the model and the optimizer (category "other" or "temporaries"):
    /// whether the same line made tensors of that size before, or only far smaller ones.
    pub failing_site_history: Option<SiteHistory>,
    /// The model's repeated layers, counted from its parameters ([`parameter_layers`]), where
    /// the failing request is a forward pass's activation (the layers still to come are the
    /// rest of that pass); `None` otherwise, or where the parameters do not repeat.
    pub parameter_layers: Option<ParameterLayers>,
}

/// The allocations one call stack made before a failing request from the same stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteHistory {
    pub allocations: u64,
    /// The largest of them; 0 without any.
    pub largest_bytes: u64,
}

/// A model's body of identical layers, read from the order its parameters were allocated: the
/// same sizes again, layer after layer (a transformer block's weights and biases, a stack of
/// equal linear layers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParameterLayers {
    /// Layers: repetitions of the sizes' pattern.
    pub layers: u64,
    /// Parameter tensors per layer.
    pub tensors_per_layer: usize,
}

impl MemoryBreakdown {
    /// The moment the rules judge: the failure when there is one, else the peak.
    pub fn judged(&self) -> &CategoryMoment {
        self.at_failure.as_ref().unwrap_or(&self.at_peak)
    }
}

/// The breakdown of `travel`'s live memory at the failure (`failure`: the index of its `oom`
/// event) and at the peak before it.
pub fn breakdown(travel: &TimeTravel, failure: Option<usize>) -> MemoryBreakdown {
    let attributor = Attributor::new(travel);
    let failure = failure.filter(|&event| event < travel.len());
    let end = failure.unwrap_or(travel.len());
    let series = travel.allocated_series();
    let peak = series
        .iter()
        .take(end + 1)
        .enumerate()
        .fold((end, 0u64), |best, (position, &bytes)| {
            if bytes > best.1 {
                (position, bytes)
            } else {
                best
            }
        })
        .0;
    let moment = |position: usize| {
        let state = travel.state_at(position);
        let (blocks, totals) = attributor.attribute(&state);
        (state, blocks, CategoryMoment { position, totals })
    };
    let (peak_state, peak_blocks, at_peak) = moment(peak);
    let judged = failure.map(moment);
    let (state, blocks) = match &judged {
        Some((state, blocks, _)) => (state, blocks),
        None => (&peak_state, &peak_blocks),
    };
    let largest_parameter_bytes = blocks
        .iter()
        .filter(|(_, category)| *category == MemoryCategory::Parameters)
        .map(|((s, b), _)| state.segments[*s].blocks[*b].size_bytes)
        .max()
        .unwrap_or(0);
    let failing_pool = failure.map(|event| travel.trace().pool_id(event));
    let private_pools = private_pools(state, failing_pool);
    let failing_request = failure.map(|event| failing_request(&attributor, event));
    // Read only where the failing request makes the optimizer's state (the state still to
    // come): the pass over the whole trace is not paid for other failures.
    let state_tensors_per_parameter = if failing_request
        .is_some_and(|r| r.in_optimizer_step && r.category == MemoryCategory::OptimizerState)
    {
        let parameter_sizes: HashSet<u64> = blocks
            .iter()
            .filter(|(_, category)| *category == MemoryCategory::Parameters)
            .map(|((s, b), _)| state.segments[*s].blocks[*b].size_bytes)
            .collect();
        state_tensors_per_parameter(&attributor, end, &parameter_sizes)
    } else {
        1
    };
    let parameter_layers = failing_request
        .filter(|r| r.category == MemoryCategory::Activations && !r.in_optimizer_step)
        .and_then(|_| parameter_layers(&attributor, end));
    let failing_site_history = failure
        .filter(|_| {
            attributor.with_frames
                && failing_request.is_some_and(|r| {
                    !r.in_optimizer_step
                        && matches!(
                            r.category,
                            MemoryCategory::Other | MemoryCategory::Temporaries
                        )
                })
        })
        .and_then(|event| site_history(travel, event));
    let failing_site = failure
        .filter(|_| attributor.with_frames)
        .and_then(|event| travel.trace().stacks.get(event).copied())
        .filter(|stack| *stack != StackId::EMPTY)
        .map(|stack| super::frames::user_call_site(travel.snapshot(), stack));
    MemoryBreakdown {
        failing_site,
        state_tensors_per_parameter,
        parameter_layers,
        failing_site_history,
        failing_request,
        at_failure: judged.map(|(_, _, moment)| moment),
        at_peak,
        largest_parameter_bytes,
        private_pools,
        concatenating: attributor.sites,
    }
}

/// State tensors the optimizer made per parameter in the trace before position `end`: its first
/// step makes them parameter by parameter (`_init_group`: `zeros_like(p)` once per kind of
/// state), so among its allocations of a parameter's size (`parameter_sizes`; a `step` counter
/// kept on the device is smaller) the sizes come in runs of that many, or a multiple of it where
/// neighbouring parameters have one size: the greatest common divisor of the runs' lengths. The
/// last run is left out (the failure may have cut it). 1 when there is no whole run to judge.
fn state_tensors_per_parameter(
    attributor: &Attributor,
    end: usize,
    parameter_sizes: &HashSet<u64>,
) -> u64 {
    let mut runs: Vec<(u64, u64)> = Vec::new(); // (size, length)
    for (size, class) in attributor.classified_allocations(end) {
        if class != StackClass::OptimizerState || !parameter_sizes.contains(&size) {
            continue;
        }
        match runs.last_mut() {
            Some((run_size, length)) if *run_size == size => *length += 1,
            _ => runs.push((size, 1)),
        }
    }
    runs.pop();
    runs.iter()
        .map(|&(_, length)| length)
        .reduce(greatest_common_divisor)
        .unwrap_or(1)
        .max(1)
}

/// What the stack of trace event `event` (a failing request) allocated before it; `None` for a
/// request without a stack.
fn site_history(travel: &TimeTravel, event: usize) -> Option<SiteHistory> {
    let trace = travel.trace();
    let stack = trace
        .stacks
        .get(event)
        .copied()
        .filter(|stack| *stack != StackId::EMPTY)?;
    let mut history = SiteHistory {
        allocations: 0,
        largest_bytes: 0,
    };
    for i in 0..event.min(trace.len()) {
        if trace.actions[i] == TraceAction::Alloc && trace.stacks.get(i) == Some(&stack) {
            history.allocations += 1;
            history.largest_bytes = history.largest_bytes.max(trace.sizes_bytes[i]);
        }
    }
    Some(history)
}

/// Parameter allocations read for a layer count at most: the pattern search is quadratic in
/// them, and a model of more tensors than this is not one a trace of a failing first step
/// needs counted.
const MAX_PARAMETER_ALLOCATIONS: usize = 4096;

/// The model's layers, from the sizes of the parameters allocated up to `end` (trace events), in
/// order ([`repeated_run`]): the pattern that repeats over the most of them, when it repeats at
/// least twice and its repetitions hold at least half of the parameters' bytes (the model's
/// body, not a few equal biases). `None` without stacks (no allocation is known to be a
/// parameter).
fn parameter_layers(attributor: &Attributor, end: usize) -> Option<ParameterLayers> {
    if !attributor.with_frames {
        return None;
    }
    let mut sizes: Vec<u64> = Vec::new();
    for (size, class) in attributor.classified_allocations(end) {
        if class == StackClass::Parameters {
            sizes.push(size);
            if sizes.len() > MAX_PARAMETER_ALLOCATIONS {
                return None;
            }
        }
    }
    let run = super::repetition::repeated_run(&sizes)?;
    let repeated_bytes: u64 = sizes[run.start..run.start + run.period * run.repeats]
        .iter()
        .sum();
    let all_bytes: u64 = sizes.iter().sum();
    (run.repeats >= 2 && repeated_bytes * 2 >= all_bytes).then_some(ParameterLayers {
        layers: run.repeats as u64,
        tensors_per_layer: run.period,
    })
}

fn greatest_common_divisor(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        greatest_common_divisor(b, a % b)
    }
}

/// What made the request of trace event `event`.
fn failing_request(attributor: &Attributor, event: usize) -> FailingRequest {
    let travel = attributor.travel;
    let stack = travel
        .trace()
        .stacks
        .get(event)
        .copied()
        .unwrap_or(StackId::EMPTY);
    let mut class = classify_stack(travel.snapshot(), stack, attributor.with_frames);
    if attributor.concatenating.contains(&stack)
        && matches!(class, StackClass::Forward | StackClass::Other)
    {
        class = StackClass::Cache;
    }
    FailingRequest {
        category: category_of(class, false),
        in_optimizer_step: matches!(
            class,
            StackClass::OptimizerState | StackClass::OptimizerStep
        ),
    }
}

/// The private pools of `state` with what each holds, largest first; `failing_pool` is the
/// pool the failing request was routed to, when the trace says.
fn private_pools(state: &AllocatorState, failing_pool: Option<PoolId>) -> Vec<PrivatePoolHold> {
    let mut pools: Vec<PrivatePoolHold> = Vec::new();
    for segment in state.segments.iter().filter(|s| !s.pool_id.is_default()) {
        let allocated: u64 = segment
            .blocks
            .iter()
            .filter(|b| b.status != BlockStatus::Free)
            .map(|b| b.size_bytes)
            .sum();
        match pools.iter_mut().find(|p| p.pool_id == segment.pool_id) {
            Some(pool) => {
                pool.reserved_bytes += segment.size_bytes;
                pool.allocated_bytes += allocated;
                pool.segments += 1;
            }
            None => pools.push(PrivatePoolHold {
                pool_id: segment.pool_id,
                reserved_bytes: segment.size_bytes,
                allocated_bytes: allocated,
                segments: 1,
                serves_failing_request: failing_pool == Some(segment.pool_id),
            }),
        }
    }
    pools.sort_by_key(|p| (std::cmp::Reverse(p.reserved_bytes), p.pool_id));
    pools
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::formats::pytorch::read_file;
    use crate::model::allocator::TraceAction;
    use crate::test_fixtures::fixture_path;

    fn travel(relative: &str) -> TimeTravel {
        let path = fixture_path(relative);
        let snapshot = read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{relative}: {e}"));
        TimeTravel::new(Arc::new(snapshot), 0)
    }

    fn last_oom(travel: &TimeTravel) -> Option<usize> {
        travel
            .trace()
            .actions
            .iter()
            .rposition(|a| *a == TraceAction::Oom)
    }

    /// Within 5 % of `expected`.
    fn within_5_percent(actual: u64, expected: u64) -> bool {
        actual.abs_diff(expected) as f64 <= 0.05 * expected as f64
    }

    /// The real H100 runs of `tests/fixtures/compare/` (their truth files hold what each
    /// program knows about itself: parameter count × bytes, gradients, Adam's state, and
    /// `torch.cuda.memory_stats()` when the snapshot was taken): every known category within
    /// 5 % at the snapshot's moment, the categories adding up to what PyTorch counted as
    /// allocated, and Adam's state twice the parameters.
    #[test]
    fn categories_match_what_the_real_programs_know_of_themselves() {
        let truths = [
            ("batch64", "batch64"),
            ("batch256", "batch256"),
            ("fix_after", "fix_after"),
            ("fix_before", "fix_before"),
            ("leak_step8", "leak"),
            ("rank0", "rank0"),
            ("rank1", "rank1"),
            ("rank2", "rank2"),
        ];
        for (snapshot, truth) in truths {
            let text =
                std::fs::read_to_string(fixture_path(&format!("compare/{truth}.truth.json")))
                    .unwrap_or_else(|e| panic!("{truth}: {e}"));
            let truth: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{truth}: {e}"));
            let known = |key: &str| truth[key].as_u64().unwrap_or_else(|| panic!("{key}"));
            let travel = travel(&format!("compare/{snapshot}.pickle"));
            let end = breakdown(&travel, None);
            let totals = &travel_end_totals(&travel);
            for (category, key) in [
                (MemoryCategory::Parameters, "parameter_bytes"),
                (MemoryCategory::Gradients, "gradient_bytes"),
                (MemoryCategory::OptimizerState, "optimizer_state_bytes"),
            ] {
                let (got, expected) = (totals.bytes(category), known(key));
                if expected == 0 {
                    assert!(
                        got * 20 <= known("parameter_bytes"),
                        "{snapshot}: {} {got} where the program has none",
                        category.label()
                    );
                } else {
                    assert!(
                        within_5_percent(got, expected),
                        "{snapshot}: {} {got} against {expected}",
                        category.label()
                    );
                }
            }
            let allocated = truth["stats"]["allocated_bytes.all.current"]
                .as_u64()
                .unwrap_or(0);
            assert_eq!(
                totals.total_bytes(),
                allocated,
                "{snapshot}: every byte attributed"
            );
            if known("optimizer_state_bytes") > 0 {
                let ratio = totals.bytes(MemoryCategory::OptimizerState) as f64
                    / totals.bytes(MemoryCategory::Parameters) as f64;
                assert!(
                    (1.95..=2.05).contains(&ratio),
                    "{snapshot}: Adam's state ×{ratio}"
                );
            }
            // The peak holds at least what the end holds of the model, and the step's
            // temporaries the end no longer has.
            assert!(end.at_failure.is_none());
            assert!(
                end.at_peak.totals.bytes(MemoryCategory::Parameters)
                    >= totals.bytes(MemoryCategory::Parameters)
            );
        }
    }

    fn travel_end_totals(travel: &TimeTravel) -> CategoryTotals {
        attribute(travel, &travel.state_at(travel.len())).1
    }

    /// A real H200 decoding job whose per-layer KV caches grow by `torch.cat`
    /// (`scripts/cases2/jobs.py:499-500`), and a real H100 one (`whatif/kv_cache.pickle`): the
    /// two concatenating lines are found, and their blocks are inference caches.
    #[test]
    fn caches_grown_by_concatenation_are_found_on_real_runs() {
        let travel = travel("cases2/kv_cache.pickle");
        let found = breakdown(&travel, last_oom(&travel));
        let lines: Vec<&str> = found
            .concatenating
            .iter()
            .map(|site| site.site.as_str())
            .collect();
        assert_eq!(
            lines,
            ["jobs.py:499 job_kv_cache", "jobs.py:500 job_kv_cache"]
        );
        assert!(found.concatenating.iter().all(|s| s.reallocations >= 16));
        let at_failure = found.at_failure.as_ref().map(|m| &m.totals);
        assert!(at_failure.is_some_and(|t| t.largest() == Some(MemoryCategory::InferenceCaches)));
        let travel = travel_of_whatif_kv_cache();
        assert_eq!(concatenation_sites(&travel).len(), 2);
    }

    /// A real beam search (`scripts/whatif/workloads_heldout.py:87`) grows each request's
    /// history with `torch.cat([history.index_select(..), piece])`: the same line also makes the
    /// gathered copies, which once hid the growth (a smaller block of the line was taken for the
    /// next sequence starting). The line is found, with a run per token of the longest request.
    #[test]
    fn a_cache_grown_by_a_line_that_also_makes_temporaries_is_found() {
        let sites = concatenation_sites(&travel("whatif/heldout/beam_search.pickle"));
        let lines: Vec<&str> = sites.iter().map(|site| site.site.as_str()).collect();
        assert_eq!(lines, ["workloads_heldout.py:87 beam_search"]);
        assert!(sites[0].reallocations >= 64, "{sites:?}");
        assert!(
            sites[0].largest_bytes > 16 * sites[0].first_bytes,
            "{sites:?}"
        );
    }

    fn travel_of_whatif_kv_cache() -> TimeTravel {
        travel("whatif/kv_cache.pickle")
    }

    /// Real runs with no concatenating call site: training loops (layers, varying sequence
    /// lengths, random token counts, gradient accumulation), fragmentation patterns and a leak.
    #[test]
    fn other_real_runs_have_no_concatenating_site() {
        for name in [
            "cases2/capacity_long_batch.pickle",
            "cases2/leak_oom.pickle",
            "cases2/healthy_train.pickle",
            "cases2/frag_fill_card.pickle",
            "whatif/train_varlen.pickle",
            "whatif/transformer_step.pickle",
            "whatif/heldout/cnn_train.pickle",
            "whatif/heldout/mlp_grad_accum.pickle",
            "whatif/heldout2/moe_routing.pickle",
            "whatif/heldout2/unet_segment.pickle",
            "whatif/heldout3/lstm_varlen.pickle",
            "whatif/heldout3/vit_patches.pickle",
        ] {
            let sites = concatenation_sites(&travel(name));
            assert!(sites.is_empty(), "{name}: {sites:?}");
        }
    }

    /// A real run that captures a CUDA graph and fills a `torch.cuda.MemPool`
    /// (`scripts/record_snapshots.py`, scenario `graphs`): both pools are found with what they
    /// reserve and hold, and their blocks are CUDA-graph pools.
    #[test]
    fn private_pools_are_found_with_what_they_hold() {
        let travel = travel("pytorch/graphs.pickle");
        let found = breakdown(&travel, None);
        let pools: Vec<(PoolId, u64, u64)> = found
            .private_pools
            .iter()
            .map(|p| (p.pool_id, p.reserved_bytes, p.allocated_bytes))
            .collect();
        assert_eq!(
            pools,
            [
                (PoolId(0, 1), 140_509_184, 136_781_312),
                (PoolId(1, 0), 37_748_736, 36_962_304)
            ]
        );
        assert_eq!(
            found.private_pools[1].owner(),
            "a CUDA graph's own private pool"
        );
        let held: u64 = pools.iter().map(|p| p.2).sum();
        assert_eq!(found.at_peak.totals.bytes(MemoryCategory::GraphPools), held);
    }

    /// A real job that ran out inside Adam's foreach step (`tests/fixtures/run/hook_oom/`):
    /// the failing request is the step's, and the step's temporaries are counted apart.
    #[test]
    fn a_failure_inside_the_optimizer_step_is_named() {
        let travel = travel("run/hook_oom/snapshots/rank3-pid668-oom-1.pickle");
        let found = breakdown(&travel, last_oom(&travel));
        let request = found.failing_request.unwrap_or_else(|| panic!("a failure"));
        assert!(request.in_optimizer_step);
        assert_eq!(request.category, MemoryCategory::Temporaries);
        let totals = &found.judged().totals;
        // One foreach list of the four weights and their biases (16 MiB weights, small biases).
        assert!(
            (32 << 20..33 << 20).contains(&totals.optimizer_step_bytes()),
            "{}",
            totals.optimizer_step_bytes()
        );
        assert_eq!(found.largest_parameter_bytes, 16 << 20);
        assert!(
            totals.bytes(MemoryCategory::OptimizerState)
                == 2 * totals.bytes(MemoryCategory::Parameters)
        );
    }
}
