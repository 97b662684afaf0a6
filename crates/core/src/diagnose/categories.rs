//! Where the memory went at an out-of-memory failure, judged: the live set by category
//! (`analysis::categories`, from the trace's stacks and pools) as evidence of the OOM finding, a
//! sentence for its explanation, and the advice the categories call for.
//!
//! The rules, in words:
//! - a smaller batch frees only what follows the batch; when most of the live set at the failure
//!   is parameters, gradients, optimizer state and the optimizer step's temporaries (a failure
//!   inside `optimizer.step()` is the usual case), reducing the batch is never the first advice:
//!   the optimizer-side changes come first, each with the bytes it saves from the category
//!   sizes, those that cover the shortfall before those that do not (without an optimizer, the
//!   weights' precision and sharding do);
//! - a private pool (a CUDA graph's, or a `torch.cuda.MemPool`) that holds memory while other
//!   work runs is named, with how to release it (drop the graph and its outputs, then
//!   `torch.cuda.empty_cache()`) or share it (`pool=` of another graph); first when releasing it
//!   covers the shortfall;
//! - a call site that grows a tensor by concatenation (a KV cache grown with `torch.cat`) is
//!   named, with preallocation as its fix. It comes after the batch and sequence advice: the
//!   trace shows the copies a concatenation makes, not the length the cache will reach, so
//!   whether a preallocated cache fits is not known;
//! - a failing request that the program's own code makes outside any module's forward and the
//!   optimizer, a quarter or more of the memory in use (a pairwise matrix, float32 logits over a
//!   large vocabulary), is named with its call site, to be made in pieces or on the CPU. After
//!   the batch advice: whether the tensor's size follows the batch is not in the trace.

use super::finding::{Evidence, EvidenceSource, Recommendation, Unit, Verification};
use crate::analysis::categories::{
    CategoryTotals, ConcatSite, MemoryBreakdown, MemoryCategory, PrivatePoolHold,
};
use crate::model::format_bytes;

/// Above this share of the live set, the batch-independent part is "most of it": a smaller batch
/// cannot free most of what is held.
pub const MOSTLY_BATCH_INDEPENDENT: f64 = 0.5;

/// Why a code change is not proven: only a run of the job with it can tell.
const CODE_CHANGE_UNVERIFIED: &str = "a code change, which a replay of the allocations cannot try; re-run the job with it (vramscope run --prove) to prove it";

/// What the categories advise, around the batch advice of a finding.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Advice {
    /// To try before a smaller batch.
    pub first: Vec<Recommendation>,
    /// To name after it.
    pub after_batch: Vec<Recommendation>,
}

/// Whether most of the live set at the failure would stay whatever the batch: parameters,
/// gradients, optimizer state and the optimizer step's temporaries.
pub fn mostly_batch_independent(breakdown: &MemoryBreakdown) -> bool {
    breakdown.judged().totals.batch_independent_fraction() > MOSTLY_BATCH_INDEPENDENT
}

/// "at the failure", or "at the peak of the trace" when the breakdown has no failure.
fn moment_words(breakdown: &MemoryBreakdown) -> &'static str {
    if breakdown.at_failure.is_some() {
        "at the failure"
    } else {
        "at the peak of the trace"
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    part as f64 * 100.0 / whole.max(1) as f64
}

/// The evidence of a breakdown read from `source`: the live set by category at the failure, its
/// batch-independent part, the peak before the failure in one line, what made the failing
/// request, the private pools and the concatenating call sites.
pub fn evidence(breakdown: &MemoryBreakdown, source: &EvidenceSource) -> Vec<Evidence> {
    let totals = &breakdown.judged().totals;
    let total = totals.total_bytes();
    let moment = moment_words(breakdown);
    let mut ev: Vec<Evidence> = MemoryCategory::ALL
        .into_iter()
        .filter(|c| totals.bytes(*c) > 0)
        .map(|category| {
            let bytes = totals.bytes(category);
            Evidence::number(
                format!("live {moment}: {}", category.label()),
                bytes as f64,
                Unit::Bytes,
                format!("{} ({:.0} %)", format_bytes(bytes), percent(bytes, total)),
                source.clone(),
            )
        })
        .collect();
    let fixed = totals.batch_independent_bytes();
    if fixed > 0 {
        ev.push(Evidence::number(
            format!(
                "live {moment} that no batch size changes (parameters, gradients, optimizer state and step)"
            ),
            fixed as f64,
            Unit::Bytes,
            format!("{} ({:.0} %)", format_bytes(fixed), percent(fixed, total)),
            source.clone(),
        ));
    }
    if let Some(failure) = &breakdown.at_failure
        && breakdown.at_peak.position != failure.position
    {
        ev.push(Evidence::text(
            format!(
                "live at the peak before the failure (event #{})",
                breakdown.at_peak.position
            ),
            largest_categories(&breakdown.at_peak.totals, 4),
            source.clone(),
        ));
    }
    if let Some(request) = &breakdown.failing_request {
        let made_by = if request.in_optimizer_step {
            format!("optimizer.step() ({})", request.category.label())
        } else {
            request.category.label().to_owned()
        };
        ev.push(Evidence::text(
            "the failing request was made for",
            made_by,
            source.clone(),
        ));
    }
    for pool in &breakdown.private_pools {
        ev.push(Evidence::number(
            format!(
                "private pool ({}, {}) reserved: {}",
                pool.pool_id.0,
                pool.pool_id.1,
                pool.owner()
            ),
            pool.reserved_bytes as f64,
            Unit::Bytes,
            format!(
                "{} ({} held by its tensors)",
                format_bytes(pool.reserved_bytes),
                format_bytes(pool.allocated_bytes)
            ),
            source.clone(),
        ));
    }
    for site in &breakdown.concatenating {
        ev.push(Evidence::text(
            format!("grown by concatenation: {}", site.site),
            format!(
                "{} reallocations, each larger: {} → {}",
                site.reallocations,
                format_bytes(site.first_bytes),
                format_bytes(site.largest_bytes)
            ),
            source.clone(),
        ));
    }
    ev
}

/// The `n` largest categories of `totals`: "activations 3.1 GiB, parameters 1.0 GiB".
fn largest_categories(totals: &CategoryTotals, n: usize) -> String {
    let mut categories: Vec<MemoryCategory> = MemoryCategory::ALL
        .into_iter()
        .filter(|c| totals.bytes(*c) > 0)
        .collect();
    categories.sort_by_key(|c| std::cmp::Reverse(totals.bytes(*c)));
    categories
        .into_iter()
        .take(n)
        .map(|c| format!("{} {}", c.label(), format_bytes(totals.bytes(c))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the categories add to the explanation of an OOM finding, when a rule of this module
/// applies (empty otherwise: the evidence lists the categories).
pub fn explanation(breakdown: &MemoryBreakdown) -> String {
    let totals = &breakdown.judged().totals;
    let mut text = String::new();
    if mostly_batch_independent(breakdown) {
        let fixed = totals.batch_independent_bytes();
        let in_step = breakdown
            .failing_request
            .is_some_and(|r| r.in_optimizer_step);
        text.push_str(&format!(
            " {} of the live memory {} was parameters, gradients and optimizer state ({:.0} %: {}), none of which shrinks with the batch{}, so a smaller batch is not the first thing to try.",
            format_bytes(fixed),
            moment_words(breakdown),
            percent(fixed, totals.total_bytes()),
            largest_categories(totals, 4),
            if in_step {
                "; the failing request came from optimizer.step()"
            } else {
                ""
            }
        ));
    }
    for pool in held_pools(breakdown) {
        text.push_str(&format!(
            " {} ({}, {}) held {} while other work ran: only requests captured into it can use that memory.",
            capitalised(pool.owner()),
            pool.pool_id.0,
            pool.pool_id.1,
            format_bytes(pool.reserved_bytes)
        ));
    }
    if !breakdown.concatenating.is_empty() {
        text.push_str(&format!(
            " {} grow{} a tensor by concatenation: every step allocates a larger copy while the old one lives, then frees the old one, whose cached block is too small for the next.",
            sites_text(&breakdown.concatenating),
            if breakdown.concatenating.len() == 1 {
                "s"
            } else {
                ""
            }
        ));
    }
    text
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// "a.py:1 f and a.py:2 f".
fn sites_text(sites: &[ConcatSite]) -> String {
    let names: Vec<&str> = sites.iter().map(|s| s.site.as_str()).collect();
    match names.as_slice() {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The private pools that held memory the failing work could not use: those it was not routed
/// to.
fn held_pools(breakdown: &MemoryBreakdown) -> impl Iterator<Item = &PrivatePoolHold> {
    breakdown
        .private_pools
        .iter()
        .filter(|p| !p.serves_failing_request && p.reserved_bytes > 0)
}

/// The advice of a breakdown for a failure that lacked `shortfall_bytes` (when known) on a
/// request of `request_bytes` (see the module comment for the rules).
pub fn advice(
    breakdown: &MemoryBreakdown,
    shortfall_bytes: Option<u64>,
    request_bytes: Option<u64>,
) -> Advice {
    let totals = &breakdown.judged().totals;
    let covers = |rec: &Recommendation| {
        shortfall_bytes.is_some_and(|short| rec.estimated_saving_bytes.unwrap_or(0) >= short)
    };
    let mut advice = Advice::default();
    for pool in held_pools(breakdown) {
        let rec = release_private_pool(pool);
        if covers(&rec) {
            advice.first.push(rec);
        } else {
            advice.after_batch.push(rec);
        }
    }
    let in_step = breakdown
        .failing_request
        .is_some_and(|r| r.in_optimizer_step);
    let step_request = breakdown
        .failing_request
        .filter(|r| r.in_optimizer_step && r.category == MemoryCategory::Temporaries)
        .and(request_bytes)
        .unwrap_or(0);
    let optimizer = optimizer_fixes(
        totals,
        breakdown.largest_parameter_bytes,
        step_request,
        optimizer_state_to_come(breakdown).unwrap_or(0),
        breakdown.state_tensors_per_parameter,
    );
    // Inside optimizer.step() the backward pass has freed the step's activations: a smaller
    // batch shrinks nothing the step still needs, whatever else is live.
    if mostly_batch_independent(breakdown) || in_step {
        let fixes = if optimizer.is_empty() {
            weight_fixes(totals)
        } else {
            optimizer
        };
        // Those that cover the shortfall first, each group cheapest first.
        let (covering, short): (Vec<_>, Vec<_>) = fixes.into_iter().partition(|r| covers(r));
        advice.first.extend(covering);
        advice.first.extend(short);
    }
    // After a smaller batch, unless the same line made only far smaller tensors before: whether
    // the tensor's size follows the batch (a batch-by-batch similarity matrix does, one image's
    // box matrix does not) is not in the trace otherwise.
    if let Some(bytes) = request_bytes
        && let Some(mut rec) = large_tensor_in_pieces(breakdown, bytes)
    {
        match outlier_of_its_site(breakdown, bytes) {
            Some(text) => {
                rec.expected_effect = format!("{text} {}", rec.expected_effect);
                advice.first.push(rec);
            }
            None => advice.after_batch.push(rec),
        }
    }
    if !breakdown.concatenating.is_empty() {
        advice
            .after_batch
            .push(preallocate_cache(&breakdown.concatenating));
    }
    advice
}

/// The share of the memory in use (live at the failure plus the request) from which a failing
/// request made outside the model is one tensor to make in pieces, not a step too large.
const LARGE_REQUEST_SHARE: f64 = 0.25;

/// Slices a tensor made in pieces is cut into, for the saving's estimate.
const PIECES: u64 = 8;

/// A failing request of `request_bytes` that the program's own code made outside any module's
/// forward pass and outside the optimizer (the request's category "other" or "temporaries"),
/// at least [`LARGE_REQUEST_SHARE`] of the memory in use: one tensor (a pairwise matrix, float32
/// logits over a large vocabulary) whose size need not follow the batch. Made in slices, in a
/// lower precision or on the CPU, it needs a fraction of that at once. `None` otherwise.
fn large_tensor_in_pieces(
    breakdown: &MemoryBreakdown,
    request_bytes: u64,
) -> Option<Recommendation> {
    let request = breakdown.failing_request?;
    let site = breakdown.failing_site.as_deref()?;
    if request.in_optimizer_step
        || !matches!(
            request.category,
            MemoryCategory::Other | MemoryCategory::Temporaries
        )
    {
        return None;
    }
    let live = breakdown.at_failure.as_ref()?.totals.total_bytes();
    let share = request_bytes as f64 / (live + request_bytes) as f64;
    if share < LARGE_REQUEST_SHARE {
        return None;
    }
    let size = format_bytes(request_bytes);
    Some(code_change(
        "tensor-in-pieces",
        format!("Make the {size} tensor at {site} in pieces, or on the CPU"),
        format!(
            "The failing request alone is {size}, {:.0} % of the memory in use, made by your code at {site} outside any module's forward pass and the optimizer: one tensor, not a layer's activations. Computed in slices (a loop over its rows, a loss over chunks of the sequence), in a lower precision or on the CPU, it needs a fraction of that at once (in {PIECES} slices, an eighth); a smaller batch shrinks it only where its size follows the batch.",
            share * 100.0
        ),
        "# a pairwise matrix in slices of rows:
out = torch.cat([f(a[i:i + rows], b) for i in range(0, len(a), rows)])
# a loss summed over chunks, without keeping every chunk's logits:
total = sum(loss_fn(head(h[:, i:i + n]).float(), y[:, i:i + n]) for i in range(0, h.shape[1], n))
# or on the CPU: f(a.cpu(), b.cpu())",
        request_bytes - request_bytes / PIECES,
    ))
}

/// How many times larger than every earlier tensor of its line a failing request must be to be
/// an outlier of the data, not of the settings: sizes that follow the inputs' lengths vary by a
/// few times from batch to batch.
const OUTLIER_FACTOR: u64 = 10;

/// Why a smaller batch does not bound the failing request, when the line that made it made
/// tensors before (at least twice), all of them [`OUTLIER_FACTOR`] times smaller or more: under
/// the same settings in every step, a tensor that much larger follows the data (one crowded
/// image, one long document), not the batch size. `None` otherwise.
fn outlier_of_its_site(breakdown: &MemoryBreakdown, request_bytes: u64) -> Option<String> {
    let history = breakdown.failing_site_history?;
    if history.allocations < 2
        || history.largest_bytes == 0
        || request_bytes < OUTLIER_FACTOR * history.largest_bytes
    {
        return None;
    }
    Some(format!(
        "The same line made {} tensors before this one, the largest {}; this one is {:.0} times that: its size follows one input of the data, not the batch size (the same in every step), so a smaller batch does not bound it, and this comes first.",
        history.allocations,
        format_bytes(history.largest_bytes),
        request_bytes as f64 / history.largest_bytes as f64
    ))
}

/// A recommendation of a code change (unverified until a run tries it).
fn code_change(
    id: &str,
    title: String,
    expected_effect: String,
    action: &str,
    saving_bytes: u64,
) -> Recommendation {
    Recommendation {
        id: id.to_owned(),
        title,
        expected_effect,
        action: action.to_owned(),
        estimated_saving_bytes: Some(saving_bytes).filter(|&b| b > 0),
        verification: Some(Verification::unverified(CODE_CHANGE_UNVERIFIED)),
    }
}

/// How the state still to come is counted, for a sentence: as many state tensors of each
/// gradient's size as the first step was seen making per parameter
/// (`MemoryBreakdown::state_tensors_per_parameter`), at least one.
pub fn state_per_gradient_text(per_parameter: u64) -> String {
    match per_parameter {
        0 | 1 => "at least one state tensor of each gradient's size".to_owned(),
        n => format!("{n} state tensors of each gradient's size, as the first step made them"),
    }
}

/// The optimizer state still to be made when the failing request makes it (the first
/// `optimizer.step()` makes it parameter by parameter): every parameter with a gradient gets as
/// many state tensors of its size as the trace shows the optimizer making per parameter
/// (`state_tensors_per_parameter`: SGD's momentum one, Adam's two, with `amsgrad` three; at
/// least one), so what is to come is that many times the gradients less the state already made.
/// `None` when the failing request is not the optimizer's state, or nothing is known to come.
pub fn optimizer_state_to_come(breakdown: &MemoryBreakdown) -> Option<u64> {
    let request = breakdown.failing_request?;
    if !request.in_optimizer_step || request.category != MemoryCategory::OptimizerState {
        return None;
    }
    let at_failure = &breakdown.at_failure.as_ref()?.totals;
    let to_come = (at_failure.bytes(MemoryCategory::Gradients)
        * breakdown.state_tensors_per_parameter.max(1))
    .saturating_sub(at_failure.bytes(MemoryCategory::OptimizerState));
    (to_come > 0).then_some(to_come)
}

/// The optimizer-side changes, cheapest first, each with what it saves from the category sizes:
/// a fused (or non-foreach) step for the step's temporaries (and the failing request of
/// `step_request_bytes`, when it was one), 8-bit or bfloat16 state, state sharded over GPUs,
/// state offloaded to the CPU, the state counting what the failing step has yet to make
/// (`state_to_come`, from [`optimizer_state_to_come`], counted with `state_per_parameter`
/// tensors per gradient). Empty without optimizer state or step temporaries.
fn optimizer_fixes(
    totals: &CategoryTotals,
    largest_parameter_bytes: u64,
    step_request_bytes: u64,
    state_to_come: u64,
    state_per_parameter: u64,
) -> Vec<Recommendation> {
    let made = totals.bytes(MemoryCategory::OptimizerState);
    let state = made + state_to_come;
    let held = if state_to_come > 0 {
        format!(
            "The optimizer state being made at the failure comes to at least {} ({})",
            format_bytes(state),
            state_per_gradient_text(state_per_parameter)
        )
    } else {
        format!("The optimizer state held {}", format_bytes(state))
    };
    let temporaries = totals.optimizer_step_bytes() + step_request_bytes;
    let mut fixes = Vec::new();
    if temporaries > 0 {
        fixes.push(code_change(
            "fused-optimizer",
            "Use the fused optimizer step (or turn foreach off)".to_owned(),
            format!(
                "The foreach step keeps a temporary per parameter at once: {} at the failure{}. fused=True updates the parameters in place without them; foreach=False needs one parameter's at a time (at most {}), at some speed.",
                format_bytes(totals.optimizer_step_bytes()),
                if step_request_bytes > 0 {
                    format!(", and the {} it asked for", format_bytes(step_request_bytes))
                } else {
                    String::new()
                },
                format_bytes(largest_parameter_bytes)
            ),
            "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n# or, where no fused kernel exists: foreach=False",
            temporaries,
        ));
    }
    if state > 0 {
        fixes.push(code_change(
            "low-precision-optimizer-state",
            "Keep the optimizer state in 8 bits (or bfloat16)".to_owned(),
            format!(
                "{held}: 8-bit states take about a quarter of 32-bit ones, saving about {}; bfloat16 states save half ({}).",
                format_bytes(state / 4 * 3),
                format_bytes(state / 2)
            ),
            "import bitsandbytes as bnb\noptimizer = bnb.optim.AdamW8bit(model.parameters(), lr=lr)\n# or: from torchao.optim import AdamW8bit",
            state / 4 * 3,
        ));
        fixes.push(code_change(
            "shard-optimizer-state",
            "Shard the optimizer state across GPUs".to_owned(),
            format!(
                "Each of N data-parallel GPUs keeps 1/N of the {} state: about {} less on 2 GPUs, {} on 8.",
                format_bytes(state),
                format_bytes(state / 2),
                format_bytes(state / 8 * 7)
            ),
            "from torch.distributed.optim import ZeroRedundancyOptimizer\noptimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)\n# or FSDP (fully_shard), or DeepSpeed ZeRO stage 1-2",
            state / 2,
        ));
        let offloaded = state + totals.optimizer_step_bytes();
        fixes.push(code_change(
            "offload-optimizer-state",
            "Offload the optimizer state and step to the CPU".to_owned(),
            format!(
                "The {} state and the step's temporaries move to host memory: about {} less on the GPU, for a slower step.",
                format_bytes(state),
                format_bytes(offloaded)
            ),
            "# DeepSpeed ZeRO-Offload:\n\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}\n# or FSDP: CPUOffload(offload_params=True)",
            offloaded,
        ));
    }
    fixes
}

/// Without an optimizer, what shrinks weights that fill the card: a lower precision (from
/// float32), or sharding them over GPUs.
fn weight_fixes(totals: &CategoryTotals) -> Vec<Recommendation> {
    let weights = totals.bytes(MemoryCategory::Parameters);
    if weights == 0 {
        return Vec::new();
    }
    vec![
        code_change(
            "low-precision-weights",
            "Load the weights in bfloat16 (or 8/4-bit)".to_owned(),
            format!(
                "The weights held {}: in bfloat16 instead of float32 they take half ({} less), in 8 bits a quarter.",
                format_bytes(weights),
                format_bytes(weights / 2)
            ),
            "model = model.to(torch.bfloat16)\n# or quantized: transformers' BitsAndBytesConfig(load_in_8bit=True), torchao",
            weights / 2,
        ),
        code_change(
            "shard-weights",
            "Shard the weights across GPUs".to_owned(),
            format!(
                "Each of N GPUs keeps 1/N of the {} weights: about {} less on 2 GPUs.",
                format_bytes(weights),
                format_bytes(weights / 2)
            ),
            "# tensor or pipeline parallelism, or FSDP: fully_shard(model)\n# transformers: from_pretrained(..., device_map=\"auto\")",
            weights / 2,
        ),
    ]
}

/// Release or share a private pool that held memory while other work ran.
fn release_private_pool(pool: &PrivatePoolHold) -> Recommendation {
    let graph_owned = pool.pool_id.1 == 0;
    let action = if graph_owned {
        "del graph, static_inputs, static_outputs  # the graph and every tensor it produced\ntorch.cuda.empty_cache()\n# or let graphs that run at different times share one pool:\npool = torch.cuda.graph_pool_handle()\nwith torch.cuda.graph(g1, pool=pool): ...\nwith torch.cuda.graph(g2, pool=pool): ..."
    } else {
        "del tensors_made_in_the_pool, mem_pool  # the torch.cuda.MemPool and what it holds\ntorch.cuda.empty_cache()\n# or, for graphs captured into it, give graphs that run at different times the same pool=\n# (torch.cuda.graph(g, pool=shared_pool))"
    };
    Recommendation {
        id: "release-private-pool".to_owned(),
        title: format!(
            "Release or share {} ({}, {}): {} held while other work runs",
            pool.owner(),
            pool.pool_id.0,
            pool.pool_id.1,
            format_bytes(pool.reserved_bytes)
        ),
        expected_effect: format!(
            "Only requests captured into the pool can use its memory: {} held by its tensors and {} cached for its replays were out of reach of the work that failed. Dropping {} and every tensor it produced, then torch.cuda.empty_cache(), returns the {}; pools shared by graphs that run at different times hold it once.",
            format_bytes(pool.allocated_bytes),
            format_bytes(pool.reserved_bytes.saturating_sub(pool.allocated_bytes)),
            if graph_owned {
                "the graph"
            } else {
                "the MemPool (or the graphs captured into it)"
            },
            format_bytes(pool.reserved_bytes)
        ),
        action: action.to_owned(),
        estimated_saving_bytes: Some(pool.reserved_bytes),
        verification: Some(Verification::unverified(CODE_CHANGE_UNVERIFIED)),
    }
}

/// Preallocate what the concatenating call sites grow.
fn preallocate_cache(sites: &[ConcatSite]) -> Recommendation {
    let largest = sites.iter().map(|s| s.largest_bytes).max().unwrap_or(0);
    let reallocations: u32 = sites.iter().map(|s| s.reallocations).sum();
    code_change(
        "preallocate-cache",
        format!(
            "Preallocate what {} grows by concatenation",
            sites_text(sites)
        ),
        format!(
            "{reallocations} reallocations, each copying the whole tensor into a larger block (up to {}) while the old one lives, and leaving the old block cached and too small for the next. Allocated once at its final length and filled in place, the cache needs no copy: up to {} less at each step, and no stranded blocks. Whether the full length fits is what the batch and sequence advice above decides.",
            format_bytes(largest),
            format_bytes(largest)
        ),
        "cache = torch.empty(batch, heads, max_len, head_dim, device=\"cuda\", dtype=dtype)  # once\ncache[:, :, pos:pos + n] = new  # instead of cache = torch.cat([cache, new], dim=2)\n# transformers: model.generate(..., cache_implementation=\"static\")",
        largest,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::analysis::categories::{CategoryMoment, FailingRequest, SiteHistory};
    use crate::diagnose::{Diagnosis, DiagnosisInput};
    use crate::model::MIB;
    use crate::model::allocator::{
        AllocatorSnapshot, BlockState, DeviceTrace, Frame, FrameId, PoolId, StackId, StringId,
        TraceAction,
    };

    const GB: u64 = 1 << 30;

    fn breakdown(
        bytes: &[(MemoryCategory, u64)],
        step_bytes: u64,
        request: Option<FailingRequest>,
    ) -> MemoryBreakdown {
        let totals = CategoryTotals::for_test(bytes, step_bytes);
        MemoryBreakdown {
            at_failure: Some(CategoryMoment {
                position: 100,
                totals: totals.clone(),
            }),
            at_peak: CategoryMoment {
                position: 100,
                totals,
            },
            failing_request: request,
            largest_parameter_bytes: 512 * MIB,
            private_pools: Vec::new(),
            concatenating: Vec::new(),
            failing_site: None,
            state_tensors_per_parameter: 1,
            parameter_layers: None,
            failing_site_history: None,
        }
    }

    fn ids(recs: &[Recommendation]) -> Vec<&str> {
        recs.iter().map(|r| r.id.as_str()).collect()
    }

    /// A failure inside Adam's foreach step: weights 4 GiB, gradients 4, state 8, step
    /// temporaries 3 of the live 20 GiB. The optimizer-side fixes come before a smaller batch,
    /// those that cover the 2 GiB shortfall first, each saving what its category holds.
    #[test]
    fn a_failure_in_the_optimizer_step_puts_the_optimizer_fixes_before_the_batch() {
        let b = breakdown(
            &[
                (MemoryCategory::Parameters, 4 * GB),
                (MemoryCategory::Gradients, 4 * GB),
                (MemoryCategory::OptimizerState, 8 * GB),
                (MemoryCategory::Temporaries, 3 * GB),
                (MemoryCategory::Activations, GB),
            ],
            3 * GB,
            Some(FailingRequest {
                category: MemoryCategory::Temporaries,
                in_optimizer_step: true,
            }),
        );
        assert!(mostly_batch_independent(&b));
        let advice = advice(&b, Some(2 * GB), Some(GB));
        assert_eq!(
            ids(&advice.first),
            [
                "fused-optimizer",
                "low-precision-optimizer-state",
                "shard-optimizer-state",
                "offload-optimizer-state"
            ]
        );
        let saving = |id: &str| {
            advice
                .first
                .iter()
                .find(|r| r.id == id)
                .and_then(|r| r.estimated_saving_bytes)
        };
        assert_eq!(saving("fused-optimizer"), Some(4 * GB));
        assert_eq!(saving("low-precision-optimizer-state"), Some(6 * GB));
        assert_eq!(saving("shard-optimizer-state"), Some(4 * GB));
        assert_eq!(saving("offload-optimizer-state"), Some(11 * GB));
        // Under a shortfall only offloading covers, it comes first.
        let advice = super::advice(&b, Some(10 * GB), Some(GB));
        assert_eq!(advice.first[0].id, "offload-optimizer-state");
        let text = explanation(&b);
        assert!(
            text.contains("none of which shrinks with the batch")
                && text.contains("optimizer.step()"),
            "{text}"
        );
    }

    /// A failure while the first optimizer.step() makes its state, with the model's float32
    /// copies kept where no stack names them ("other", most of the live set): the activations
    /// are gone by then, so the optimizer fixes still come before a smaller batch, sized on the
    /// state to come (at least the gradients), not on the none made yet.
    #[test]
    fn a_failure_making_the_optimizer_state_sizes_the_state_to_come_and_puts_it_first() {
        let b = breakdown(
            &[
                (MemoryCategory::Parameters, GB),
                (MemoryCategory::Gradients, GB),
                (MemoryCategory::Other, 4 * GB),
                (MemoryCategory::Activations, 100 * MIB),
            ],
            0,
            Some(FailingRequest {
                category: MemoryCategory::OptimizerState,
                in_optimizer_step: true,
            }),
        );
        assert!(!mostly_batch_independent(&b));
        let advice = advice(&b, Some(100 * MIB), Some(GB));
        assert_eq!(advice.first[0].id, "low-precision-optimizer-state");
        assert_eq!(advice.first[0].estimated_saving_bytes, Some(GB / 4 * 3));
        assert!(
            advice.first[0]
                .expected_effect
                .contains("comes to at least 1.00 GiB"),
            "{}",
            advice.first[0].expected_effect
        );
    }

    /// Activations make most of the live set: nothing goes before the batch, and without a
    /// failure in the optimizer step no optimizer advice is given.
    #[test]
    fn a_live_set_of_activations_leaves_the_batch_first() {
        let b = breakdown(
            &[
                (MemoryCategory::Parameters, GB),
                (MemoryCategory::OptimizerState, 2 * GB),
                (MemoryCategory::Activations, 12 * GB),
            ],
            0,
            Some(FailingRequest {
                category: MemoryCategory::Activations,
                in_optimizer_step: false,
            }),
        );
        assert!(!mostly_batch_independent(&b));
        assert_eq!(advice(&b, Some(GB), Some(GB)), Advice::default());
        assert_eq!(explanation(&b), "");
    }

    /// Inference whose weights fill the card: their precision and sharding come first.
    #[test]
    fn weights_that_fill_the_card_put_their_precision_first() {
        let b = breakdown(
            &[
                (MemoryCategory::Parameters, 30 * GB),
                (MemoryCategory::Activations, 2 * GB),
            ],
            0,
            None,
        );
        assert_eq!(
            ids(&advice(&b, Some(GB), None).first),
            ["low-precision-weights", "shard-weights"]
        );
    }

    /// A graph's private pool holding more than the shortfall is released first; one holding
    /// less is named after the batch; the pool the failing request was routed to is not.
    #[test]
    fn a_private_pool_holding_memory_is_named_with_its_release() {
        let mut b = breakdown(&[(MemoryCategory::Activations, 8 * GB)], 0, None);
        let pool = |id: PoolId, reserved: u64, serves: bool| PrivatePoolHold {
            pool_id: id,
            reserved_bytes: reserved,
            allocated_bytes: reserved / 2,
            segments: 2,
            serves_failing_request: serves,
        };
        b.private_pools = vec![
            pool(PoolId(1, 0), 6 * GB, false),
            pool(PoolId(0, 2), GB / 2, false),
            pool(PoolId(2, 0), 5 * GB, true),
        ];
        let advice = advice(&b, Some(4 * GB), None);
        assert_eq!(ids(&advice.first), ["release-private-pool"]);
        assert!(advice.first[0].title.contains("(1, 0)"));
        assert!(advice.first[0].action.contains("torch.cuda.empty_cache()"));
        assert!(advice.first[0].action.contains("pool=pool"));
        assert_eq!(ids(&advice.after_batch), ["release-private-pool"]);
        assert!(advice.after_batch[0].action.contains("MemPool"));
        let text = explanation(&b);
        assert!(
            text.contains("A CUDA graph's own private pool (1, 0) held 6.00 GiB"),
            "{text}"
        );
        assert!(!text.contains("(2, 0)"), "{text}");
    }

    /// One line growing a cache per layer, for many more layers than the fixtures' 16 (each
    /// layer's new copy made just before its old one is freed, the other layers' caches alive
    /// in between): the line is found, with every growth counted. The same line re-making its
    /// blocks at one size is no concatenation.
    #[test]
    fn a_line_growing_one_cache_per_layer_is_found_for_any_number_of_layers() {
        let sites = |growth_per_token: u64| {
            let mut p = Program::new();
            let site = p.stack(&[("generate.py", "generate")]);
            let mut caches: Vec<u64> = (0..40).map(|_| p.alloc(M, site)).collect();
            for token in 1..=8 {
                for cache in caches.iter_mut() {
                    let longer = p.alloc(M + token * growth_per_token, site);
                    p.free(*cache, false);
                    *cache = longer;
                }
            }
            let snapshot = p.oom(64 * M, site, 0);
            crate::analysis::categories::concatenation_sites(
                &crate::analysis::timetravel::TimeTravel::new(snapshot, 0),
            )
        };
        let found = sites(64 << 10);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].site, "generate.py:10 generate");
        assert_eq!(found[0].reallocations, 8 * 40);
        assert!(sites(0).is_empty());
    }

    /// A cache grown by concatenation is named with preallocation, after the batch advice.
    #[test]
    fn a_cache_grown_by_concatenation_is_named_with_preallocation() {
        let mut b = breakdown(&[(MemoryCategory::InferenceCaches, 20 * GB)], 0, None);
        b.concatenating = vec![ConcatSite {
            stack: StackId(3),
            site: "generate.py:40 step".to_owned(),
            reallocations: 30,
            first_bytes: GB,
            largest_bytes: 3 * GB,
        }];
        let advice = advice(&b, Some(GB), None);
        assert!(advice.first.is_empty());
        assert_eq!(ids(&advice.after_batch), ["preallocate-cache"]);
        assert_eq!(advice.after_batch[0].estimated_saving_bytes, Some(3 * GB));
        assert!(explanation(&b).contains("generate.py:40 step grows a tensor by concatenation"));
    }

    /// One large tensor made by the program's own code is named with its call site, after the
    /// batch advice; not a small one, nor a module's activation, nor without a site.
    #[test]
    fn a_large_tensor_of_the_programs_own_code_is_named_to_make_in_pieces() {
        let made_by = |category| FailingRequest {
            category,
            in_optimizer_step: false,
        };
        let mut b = breakdown(
            &[(MemoryCategory::Activations, 2 * GB)],
            0,
            Some(made_by(MemoryCategory::Other)),
        );
        b.failing_site = Some("assign.py:100 box_iou".to_owned());
        let advice_for = |b: &MemoryBreakdown, request| advice(b, Some(GB / 2), Some(request));
        let got = advice_for(&b, GB);
        assert!(got.first.is_empty());
        assert_eq!(ids(&got.after_batch), ["tensor-in-pieces"]);
        let rec = &got.after_batch[0];
        assert!(
            rec.title
                .contains("1.00 GiB tensor at assign.py:100 box_iou"),
            "{}",
            rec.title
        );
        assert!(
            rec.expected_effect.contains("33 %"),
            "{}",
            rec.expected_effect
        );
        assert_eq!(rec.estimated_saving_bytes, Some(GB - GB / 8));
        // A tenth of the memory in use is no such tensor.
        assert!(advice_for(&b, GB / 4).after_batch.is_empty());
        // Made inside a module's forward, it is a layer's activation: the batch advice's.
        let mut activation = b.clone();
        activation.failing_request = Some(made_by(MemoryCategory::Activations));
        assert!(advice_for(&activation, GB).after_batch.is_empty());
        // Without a recorded stack there is no site to name.
        let mut no_site = b.clone();
        no_site.failing_site = None;
        assert!(advice_for(&no_site, GB).after_batch.is_empty());
    }

    /// A large tensor of the program's own code comes before the batch advice when its line
    /// made only far smaller tensors before (its size follows one input, not the batch); not
    /// when the line made nothing before, made one only, or made tensors within ten times.
    #[test]
    fn a_tensor_far_larger_than_its_lines_earlier_ones_comes_before_the_batch() {
        let mut b = breakdown(
            &[(MemoryCategory::Activations, 2 * GB)],
            0,
            Some(FailingRequest {
                category: MemoryCategory::Other,
                in_optimizer_step: false,
            }),
        );
        b.failing_site = Some("assign.py:100 box_iou".to_owned());
        let with_history = |allocations, largest_bytes| {
            let mut b = b.clone();
            b.failing_site_history = Some(SiteHistory {
                allocations,
                largest_bytes,
            });
            advice(&b, Some(GB / 2), Some(GB))
        };
        let got = with_history(96, 15 * MIB);
        assert_eq!(ids(&got.first), ["tensor-in-pieces"]);
        assert!(got.after_batch.is_empty());
        assert!(
            got.first[0]
                .expected_effect
                .starts_with("The same line made 96 tensors before this one, the largest 15.0 MiB; this one is 68 times that"),
            "{}",
            got.first[0].expected_effect
        );
        for (allocations, largest) in [(0, 0), (1, MIB), (96, 200 * MIB)] {
            let got = with_history(allocations, largest);
            assert!(got.first.is_empty(), "{allocations} x {largest}");
            assert_eq!(ids(&got.after_batch), ["tensor-in-pieces"]);
        }
        assert_eq!(
            ids(&advice(&b, Some(GB / 2), Some(GB)).after_batch),
            ["tensor-in-pieces"]
        );
    }

    /// A synthetic program, event by event, for the whole path from a snapshot to the
    /// diagnosis: every block in a segment of its own, in the default pool or a private one.
    struct Program {
        snapshot: AllocatorSnapshot,
        trace: DeviceTrace,
        /// Live blocks: address → (size, stack, pool, freed but its segment kept).
        live: BTreeMap<u64, (u64, StackId, PoolId, bool)>,
        next_address: u64,
    }

    impl Program {
        fn new() -> Self {
            Program {
                snapshot: AllocatorSnapshot::default(),
                trace: DeviceTrace::default(),
                live: BTreeMap::new(),
                next_address: 0x7f00_0000_0000,
            }
        }

        /// A stack of Python frames, innermost first: `(file, function)`.
        fn stack(&mut self, frames: &[(&str, &str)]) -> StackId {
            let ids: Vec<FrameId> = frames
                .iter()
                .enumerate()
                .map(|(line, (file, name))| {
                    let frame = Frame {
                        filename: self.snapshot.strings.intern(file),
                        line: line as i64 + 10,
                        name: self.snapshot.strings.intern(name),
                    };
                    self.snapshot.frames.intern_frame(frame)
                })
                .collect();
            self.snapshot.frames.intern_stack(&ids)
        }

        fn push(&mut self, action: TraceAction, address: u64, size: u64, stack: StackId) {
            let t = &mut self.trace;
            t.actions.push(action);
            t.addresses.push(address);
            t.sizes_bytes.push(size);
            t.streams.push(0);
            t.times_us.push(1_000_000 + t.actions.len() as i64);
            t.stacks.push(stack);
            t.user_metadata.push(StringId(0));
            t.compile_context.push(StringId(0));
        }

        fn alloc_in(&mut self, size: u64, stack: StackId, pool: PoolId) -> u64 {
            let address = self.next_address;
            self.next_address += size;
            self.push(TraceAction::SegmentAlloc, address, size, StackId::EMPTY);
            self.push(TraceAction::Alloc, address, size, stack);
            self.live.insert(address, (size, stack, pool, false));
            address
        }

        fn alloc(&mut self, size: u64, stack: StackId) -> u64 {
            self.alloc_in(size, stack, PoolId::default())
        }

        /// Frees the block at `address`; its segment is released unless `keep_segment`.
        fn free(&mut self, address: u64, keep_segment: bool) {
            let Some(&(size, stack, pool, _)) = self.live.get(&address) else {
                return;
            };
            self.push(TraceAction::FreeRequested, address, size, StackId::EMPTY);
            self.push(TraceAction::FreeCompleted, address, size, StackId::EMPTY);
            if keep_segment {
                self.live.insert(address, (size, stack, pool, true));
            } else {
                self.push(TraceAction::SegmentFree, address, size, StackId::EMPTY);
                self.live.remove(&address);
            }
        }

        /// The failing request, then the snapshot.
        fn oom(mut self, size: u64, stack: StackId, device_free: u64) -> Arc<AllocatorSnapshot> {
            self.push(TraceAction::Oom, 0, size, stack);
            let index = (self.trace.actions.len() - 1) as u32;
            self.trace.device_free_bytes.push((index, device_free));
            let mut snapshot = self.snapshot;
            snapshot.name = "synthetic.pickle".to_owned();
            snapshot.traces = vec![self.trace];
            for (&address, &(size, stack, pool, freed)) in &self.live {
                let state = if freed {
                    BlockState::Inactive
                } else {
                    BlockState::ActiveAllocated
                };
                snapshot.push_one_block_segment(address, size, state, stack, pool);
            }
            snapshot.finish_as_device_zero()
        }
    }

    fn diagnosed(snapshot: &Arc<AllocatorSnapshot>) -> Diagnosis {
        crate::diagnose::diagnose(&DiagnosisInput {
            snapshots: crate::diagnose::snapshot::facts(snapshot),
            ..Default::default()
        })
    }

    const M: u64 = MIB;

    /// A training job that runs out inside Adam's foreach step: weights, gradients, Adam's
    /// state and the step's temporaries are nearly all of the live set. From the snapshot to
    /// the diagnosis: the categories are evidence, the explanation says why a smaller batch is
    /// not the fix, and the optimizer-side changes come before it, the fused step first (its
    /// temporaries cover the shortfall).
    #[test]
    fn a_snapshot_that_failed_in_the_optimizer_step_is_advised_optimizer_fixes_first() {
        let mut p = Program::new();
        let to_device = p.stack(&[
            ("/venv/torch/nn/modules/module.py", "_apply"),
            ("train.py", "<module>"),
        ]);
        let forward = p.stack(&[
            ("/venv/torch/nn/modules/module.py", "_call_impl"),
            ("train.py", "forward"),
        ]);
        let make_state = p.stack(&[
            ("/venv/torch/optim/adam.py", "_init_group"),
            ("/venv/torch/optim/adam.py", "step"),
            ("train.py", "<module>"),
        ]);
        let foreach = p.stack(&[
            ("/venv/torch/optim/adam.py", "_multi_tensor_adam"),
            ("/venv/torch/optim/adam.py", "step"),
            ("train.py", "<module>"),
        ]);
        for _ in 0..8 {
            p.alloc(64 * M, to_device);
        }
        let activations: Vec<u64> = (0..6).map(|_| p.alloc(32 * M, forward)).collect();
        for _ in 0..8 {
            // The backward's gradients: no Python frame, a parameter's size.
            p.alloc(64 * M, StackId::EMPTY);
        }
        for a in activations {
            p.free(a, false);
        }
        p.alloc(2 * M, forward);
        for _ in 0..16 {
            p.alloc(64 * M, make_state);
        }
        for _ in 0..4 {
            p.alloc(64 * M, foreach);
        }
        let snapshot = p.oom(64 * M, foreach, 10 * M);
        let d = diagnosed(&snapshot);
        let primary = d.primary().unwrap_or_else(|| panic!("a finding"));
        let ids: Vec<&str> = primary
            .recommendations
            .iter()
            .map(|r| r.id.as_str())
            .collect();
        assert_eq!(ids[0], "fused-optimizer", "{ids:?}");
        let batch = ids.iter().position(|id| *id == "reduce-batch-size");
        assert!(batch.is_some_and(|b| b >= 4), "{ids:?}");
        assert_eq!(
            primary.recommendations[0].estimated_saving_bytes,
            Some(5 * 64 * M)
        );
        let state = primary
            .evidence
            .iter()
            .find(|e| e.label == "live at the failure: optimizer state")
            .and_then(|e| e.value);
        assert_eq!(state, Some((1024 * M) as f64));
        assert!(
            primary
                .explanation
                .contains("none of which shrinks with the batch; the failing request came from optimizer.step()"),
            "{}",
            primary.explanation
        );
        assert_eq!(d.memory_categories.len(), 1);
    }

    /// A CUDA graph's private pool keeps 1 GiB (its output and the cached intermediates its
    /// replays reuse) while eager work runs out 156 MiB short: the pool is named, and releasing
    /// it comes first.
    #[test]
    fn a_graph_pool_held_while_eager_work_ran_out_is_released_first() {
        let mut p = Program::new();
        let capture = p.stack(&[
            ("/venv/torch/nn/modules/module.py", "_call_impl"),
            ("serve.py", "capture"),
        ]);
        let eager = p.stack(&[("serve.py", "eager_step")]);
        let graph = PoolId(1, 0);
        p.alloc_in(512 * M, capture, graph);
        let intermediate = p.alloc_in(512 * M, capture, graph);
        p.free(intermediate, true);
        for _ in 0..4 {
            p.alloc(256 * M, eager);
        }
        let snapshot = p.oom(256 * M, eager, 100 * M);
        let d = diagnosed(&snapshot);
        let primary = d.primary().unwrap_or_else(|| panic!("a finding"));
        let first = &primary.recommendations[0];
        assert_eq!(
            first.id, "release-private-pool",
            "{:?}",
            primary.recommendations
        );
        assert_eq!(first.estimated_saving_bytes, Some(1024 * M));
        assert!(first.action.contains("torch.cuda.empty_cache()"));
        assert!(
            primary.explanation.contains(
                "A CUDA graph's own private pool (1, 0) held 1.00 GiB while other work ran"
            ),
            "{}",
            primary.explanation
        );
    }
}
