//! The recommendations the rules hand out, each with the exact code or configuration and, where
//! the numbers allow, an estimate of what it frees. Kept in one place so that wording, ids and
//! snippets stay consistent between the OOM, fragmentation, leak and hardware findings.

use super::finding::Recommendation;
use crate::model::{GIB, MIB, format_bytes};

fn rec(
    id: &str,
    title: &str,
    expected_effect: String,
    action: &str,
    estimated_saving_bytes: Option<u64>,
) -> Recommendation {
    Recommendation {
        id: id.to_owned(),
        title: title.to_owned(),
        expected_effect,
        action: action.to_owned(),
        estimated_saving_bytes,
    }
}

/// Free (or move away from) the processes that hold the memory.
pub fn free_other_process(others: &[(u32, u64)], shortfall_bytes: Option<u64>) -> Recommendation {
    let total: u64 = others.iter().map(|(_, b)| b).sum();
    let list = others
        .iter()
        .map(|(pid, bytes)| {
            if *pid == 0 {
                format!("{} not listed by the framework", format_bytes(*bytes))
            } else {
                format!("PID {pid} ({})", format_bytes(*bytes))
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut effect = format!("Makes {} available to this job", format_bytes(total));
    if let Some(short) = shortfall_bytes {
        effect.push_str(&format!(" (it was {} short)", format_bytes(short)));
    }
    effect.push('.');
    let pids: Vec<String> = others
        .iter()
        .filter(|(pid, _)| *pid != 0)
        .map(|(pid, _)| pid.to_string())
        .collect();
    let pids = if pids.is_empty() {
        "<pid>".to_owned()
    } else {
        pids.join(" ")
    };
    rec(
        "free-other-process",
        &format!(
            "Stop or move the other process{} on this GPU: {list}",
            if others.len() > 1 { "es" } else { "" }
        ),
        effect,
        &format!(
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv\n# if it is yours and idle:\nkill {pids}\n# or run this job on a free GPU:\nCUDA_VISIBLE_DEVICES=<free gpu> python train.py"
        ),
        Some(total),
    )
}

/// Raise (or remove) a per-process memory cap. `cap_bytes` is `None` when the cap was inferred
/// (the device had room) rather than printed.
pub fn raise_memory_fraction(
    cap_bytes: Option<u64>,
    needed_bytes: u64,
    total_bytes: Option<u64>,
) -> Recommendation {
    let fraction = total_bytes.filter(|&t| t > 0).map(|t| {
        ((needed_bytes as f64 / t as f64) * 100.0 + 5.0)
            .ceil()
            .min(100.0)
            / 100.0
    });
    let was = match (cap_bytes, total_bytes) {
        (Some(c), Some(t)) if t > 0 => format!("was {:.2}; ", c as f64 / t as f64),
        _ => String::new(),
    };
    let action = match fraction {
        Some(f) => format!(
            "torch.cuda.set_per_process_memory_fraction({f:.2})  # {was}needs >= {}\n# or remove the call; under MPS: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            format_bytes(needed_bytes)
        ),
        None => "torch.cuda.set_per_process_memory_fraction(0.95)  # or remove the call\n# under MPS: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(),
    };
    let effect = match cap_bytes {
        Some(cap) => format!(
            "The cap of {} is what stopped the allocation; {} is needed ({} more).",
            format_bytes(cap),
            format_bytes(needed_bytes),
            format_bytes(needed_bytes.saturating_sub(cap))
        ),
        None => format!(
            "The job needs at least {} under the cap.",
            format_bytes(needed_bytes)
        ),
    };
    rec(
        "raise-memory-fraction",
        "Raise the per-process memory cap",
        effect,
        &action,
        cap_bytes.map(|cap| needed_bytes.saturating_sub(cap)),
    )
}

/// `expandable_segments:True`: segments grow in place instead of being split, so cached memory is
/// reusable for larger requests.
pub fn expandable_segments(stranded_bytes: Option<u64>) -> Recommendation {
    rec(
        "expandable-segments",
        "Turn on expandable segments in the PyTorch allocator",
        match stranded_bytes {
            Some(b) => format!(
                "The {} cached in blocks too small for the request becomes usable: segments grow in place instead of being split into fragments.",
                format_bytes(b)
            ),
            None => "Cached memory stops fragmenting into blocks too small for large requests."
                .to_owned(),
        },
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n# or, before the first CUDA allocation:\nimport os; os.environ[\"PYTORCH_CUDA_ALLOC_CONF\"] = \"expandable_segments:True\"",
        stranded_bytes,
    )
}

/// Smallest `max_split_size_mb` PyTorch accepts is above 20 (`kLargeBuffer`); the smallest power
/// of two above it.
const MIN_MAX_SPLIT_SIZE_MB: u64 = 32;

/// `max_split_size_mb` for a request that failed although enough memory was cached: the largest
/// power of two MiB at or below the request, so the request is "oversize" (c10
/// `CUDACachingAllocator`: blocks of at least the limit are never split, a smaller request never
/// takes one, and when an oversize request finds no block the allocator frees whole cached
/// oversize blocks and reserves one of the right size). A limit above the request would do the
/// opposite: the request could no longer use the larger cached segments at all. `None` when the
/// request is unknown or too small for any allowed limit to help.
pub fn max_split_size(requested_bytes: Option<u64>) -> Option<Recommendation> {
    let requested_mb = requested_bytes? / MIB;
    if requested_mb < MIN_MAX_SPLIT_SIZE_MB {
        return None;
    }
    // Largest power of two <= requested_mb.
    let mb = 1u64 << (63 - requested_mb.leading_zeros());
    let requested = format_bytes(requested_bytes?);
    Some(rec(
        "max-split-size",
        "Stop large cached blocks from being split with max_split_size_mb",
        format!(
            "With a limit of {mb} MiB (the largest power of two not above the {requested} request) blocks of {mb} MiB or more are never split by smaller allocations, and the {requested} request counts as oversize: when no cached block fits it, the allocator frees whole unused large blocks and reserves one of the right size instead of failing. A limit above the request would keep the request out of the larger cached segments."
        ),
        &format!("export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{mb}"),
        None,
    ))
}

/// Smaller batches (with gradient accumulation to keep the effective batch).
pub fn reduce_batch_size(
    shortfall_bytes: Option<u64>,
    allocated_bytes: Option<u64>,
) -> Recommendation {
    let effect = match (shortfall_bytes, allocated_bytes) {
        (Some(short), Some(alloc)) if alloc > 0 => format!(
            "The peak must shrink by at least {} ({:.0}% of the {} allocated); activations scale with the batch, so halving it frees up to half of the activation memory.",
            format_bytes(short),
            (short as f64 / alloc as f64 * 100.0).min(100.0),
            format_bytes(alloc)
        ),
        (Some(short), _) => format!(
            "The peak must shrink by at least {}; activations scale with the batch size.",
            format_bytes(short)
        ),
        _ => "Activation memory scales with the batch size; halving it roughly halves activations."
            .to_owned(),
    };
    rec(
        "reduce-batch-size",
        "Reduce the batch size (keep the effective batch with gradient accumulation)",
        effect,
        "batch_size //= 2\naccumulation_steps *= 2\nfor i, batch in enumerate(loader):\n    loss = model(batch).loss / accumulation_steps\n    loss.backward()\n    if (i + 1) % accumulation_steps == 0:\n        optimizer.step(); optimizer.zero_grad(set_to_none=True)",
        shortfall_bytes,
    )
}

/// bf16 autocast.
pub fn mixed_precision(allocated_bytes: Option<u64>) -> Recommendation {
    rec(
        "mixed-precision",
        "Train in bf16 (or fp16) mixed precision",
        match allocated_bytes {
            Some(a) => format!(
                "fp32 activations take half the memory in bf16: up to {} of the {} allocated.",
                format_bytes(a / 2),
                format_bytes(a)
            ),
            None => "fp32 activations take half the memory in bf16.".to_owned(),
        },
        "with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16):\n    loss = model(batch)",
        allocated_bytes.map(|a| a / 2),
    )
}

/// Recompute activations in the backward pass.
pub fn activation_checkpointing() -> Recommendation {
    rec(
        "activation-checkpointing",
        "Use activation checkpointing on the largest blocks",
        "Activations of checkpointed blocks are recomputed in the backward pass instead of stored: memory for them drops to about one block's worth, for ~30% more compute.".to_owned(),
        "from torch.utils.checkpoint import checkpoint\nx = checkpoint(block, x, use_reentrant=False)",
        None,
    )
}

/// No autograd graph for inference.
pub fn inference_mode() -> Recommendation {
    rec(
        "no-grad-inference",
        "For inference, run without autograd",
        "No activations are kept for a backward pass; inference memory drops to weights plus one layer's activations.".to_owned(),
        "with torch.inference_mode():  # or torch.no_grad()\n    output = model(batch)",
        None,
    )
}

/// FSDP sharding across GPUs.
pub fn shard_model(total_bytes: Option<u64>) -> Recommendation {
    rec(
        "shard-fsdp",
        "Shard parameters, gradients and optimizer state across GPUs (FSDP)",
        match total_bytes {
            Some(t) => format!(
                "With N GPUs each holds about 1/N of the model state; needed when the model state alone approaches the {} of one GPU.",
                format_bytes(t)
            ),
            None => "With N GPUs each holds about 1/N of the model state.".to_owned(),
        },
        "from torch.distributed.fsdp import fully_shard  # torch >= 2.6; FullyShardedDataParallel before\nfor layer in model.layers:\n    fully_shard(layer)\nfully_shard(model)",
        None,
    )
}

/// Return cached blocks between phases.
pub fn empty_cache() -> Recommendation {
    rec(
        "empty-cache",
        "Release cached memory between phases (e.g. after evaluation)",
        "Whole unused segments go back to the driver, so the next phase starts without the previous phase's cache. It does not fix fragments inside used segments.".to_owned(),
        "import gc; gc.collect(); torch.cuda.empty_cache()",
        None,
    )
}

/// JAX: do not preallocate 75% of the card.
pub fn jax_preallocation() -> Recommendation {
    rec(
        "jax-preallocation",
        "Let JAX use more of the GPU, or allocate on demand",
        "JAX preallocates 75% of the GPU at start; a larger fraction gives it room, disabling preallocation lets other processes share the GPU.".to_owned(),
        "export XLA_PYTHON_CLIENT_MEM_FRACTION=.95\n# or share the GPU:\nexport XLA_PYTHON_CLIENT_PREALLOCATE=false",
        None,
    )
}

/// TensorFlow: grow instead of taking the whole GPU; the async allocator against fragmentation.
pub fn tensorflow_memory_growth() -> Recommendation {
    rec(
        "tf-memory-growth",
        "Let TensorFlow grow its memory instead of reserving the GPU",
        "TensorFlow stops reserving the whole GPU up front; with the async allocator, fragmentation of its BFC pool goes away.".to_owned(),
        "for gpu in tf.config.list_physical_devices(\"GPU\"):\n    tf.config.experimental.set_memory_growth(gpu, True)\n# against fragmentation:\nexport TF_GPU_ALLOCATOR=cuda_malloc_async",
        None,
    )
}

/// Leave room on a GPU that runs near full.
pub fn leave_headroom(peak_bytes: u64, total_bytes: u64) -> Recommendation {
    let margin_bytes = total_bytes / 10;
    rec(
        "leave-headroom",
        "Keep a tenth of the GPU free for spikes",
        format!(
            "At a peak of {} of {}, the next spike fails; keeping {} free absorbs one.",
            format_bytes(peak_bytes),
            format_bytes(total_bytes),
            format_bytes(margin_bytes)
        ),
        "# see who holds the GPU:\nnvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv\n# cap a PyTorch job below the GPU's size (it then fails alone, not its neighbours):\ntorch.cuda.set_per_process_memory_fraction(0.9)",
        None,
    )
}

/// Find what grows between steps.
pub fn find_leak(growth_bytes_per_hour: Option<u64>) -> Recommendation {
    rec(
        "fix-leak",
        "Find what keeps references between steps",
        match growth_bytes_per_hour {
            Some(g) => format!("Stops the growth of {} per hour; the usual culprits are losses or outputs accumulated with their autograd graph.", format_bytes(g)),
            None => "Stops the growth; the usual culprits are losses or outputs accumulated with their autograd graph.".to_owned(),
        },
        "total_loss += loss.item()          # not: total_loss += loss\nhistory.append(output.detach().cpu())  # not: history.append(output)\n# to see what grows, take two snapshots a few steps apart:\ntorch.cuda.memory._record_memory_history(max_entries=100000)\ntorch.cuda.memory._dump_snapshot(\"step_100.pickle\")",
        None,
    )
}

/// Reset a GPU or reboot the node.
pub fn reset_gpu(reason: &str) -> Recommendation {
    rec(
        "reset-gpu",
        "Drain the GPU and reset it",
        format!("{reason} A reset applies pending row remaps and clears the error state."),
        "# stop every process on the GPU, then:\nsudo nvidia-smi -r -i <gpu index>\n# if the reset fails or the GPU is lost: reboot the node",
        None,
    )
}

/// Check a GPU's memory health and report it.
pub fn check_hardware() -> Recommendation {
    rec(
        "check-hardware",
        "Check the GPU's memory health and keep the evidence",
        "Tells a one-off from a failing GPU: repeated uncorrectable errors or remap failures mean an RMA.".to_owned(),
        "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT -i <gpu index>\nsudo dmesg -T | grep -i 'NVRM: Xid'\nsudo nvidia-bug-report.sh   # attach to a support case",
        None,
    )
}

/// Install the NVIDIA driver where the GPU checks found none.
pub fn install_driver() -> Recommendation {
    rec(
        "install-driver",
        "Install the NVIDIA driver (or add its folder to LD_LIBRARY_PATH)",
        "The checks can read the GPUs".to_owned(),
        "nvidia-smi should list the GPUs; then run the checks again",
        None,
    )
}

/// Take a GPU whose memory test found mismatches out of service.
pub fn drain_gpu() -> Recommendation {
    rec(
        "drain-gpu",
        "Take the GPU out of service and report it to the vendor or the cluster admins",
        "Jobs stop failing or silently computing wrong results on this card".to_owned(),
        "Give them the mismatch addresses above and nvidia-smi -q -d ECC,ROW_REMAPPER",
        None,
    )
}

/// Look at row remapping after counters moved under a memory test.
pub fn check_remap() -> Recommendation {
    rec(
        "check-remap",
        "Check row remapping and reset the GPU if a remap is pending",
        "A pending remap takes effect after a GPU reset; a failed one means the card needs \
         replacing"
            .to_owned(),
        "nvidia-smi -q -d ROW_REMAPPER",
        None,
    )
}

/// Make the CUDA driver library and the kernel module agree.
pub fn match_driver() -> Recommendation {
    rec(
        "match-driver",
        "Make the CUDA driver library and the kernel module the same version",
        "CUDA and NVML agree; version-dependent failures go away".to_owned(),
        "Compare nvidia-smi's driver version with the libcuda.so.1 the job loads",
        None,
    )
}

/// Find the failing kernel.
pub fn debug_kernel_fault() -> Recommendation {
    rec(
        "debug-kernel-fault",
        "Find the kernel that faulted",
        "Reports the exact kernel and access instead of a later, unrelated call.".to_owned(),
        "CUDA_LAUNCH_BLOCKING=1 python train.py\ncompute-sanitizer --tool memcheck python train.py",
        None,
    )
}

/// Upgrade the driver (or use a build for an older CUDA).
pub fn upgrade_driver(needed: &str) -> Recommendation {
    rec(
        "upgrade-driver",
        "Upgrade the NVIDIA driver (or install a framework build for an older CUDA)",
        format!(
            "The driver then supports the CUDA version the framework was built for ({needed})."
        ),
        "nvidia-smi   # shows the driver and the highest CUDA it supports\n# e.g. a PyTorch wheel built for an older CUDA:\npip install torch --index-url https://download.pytorch.org/whl/cu126",
        None,
    )
}

/// Improve cooling or raise the power limit.
pub fn cooling() -> Recommendation {
    rec(
        "check-cooling",
        "Check cooling and power",
        "Clocks stop being cut, so steps get faster again; sustained thermal slowdown also ages the GPU.".to_owned(),
        "nvidia-smi -q -d TEMPERATURE,POWER,PERFORMANCE -i <gpu index>",
        None,
    )
}

/// Turn persistence mode on so volatile counters and the driver state survive between jobs.
pub fn persistence_mode() -> Recommendation {
    rec(
        "persistence-mode",
        "Turn on persistence mode",
        "The driver stays loaded between jobs: volatile ECC counters keep their history and jobs start faster.".to_owned(),
        "sudo nvidia-smi -pm 1   # or enable nvidia-persistenced",
        None,
    )
}

/// A rough size threshold below which a number is not worth a recommendation.
pub const NOTABLE_BYTES: u64 = 64 * MIB;
/// Another process counts as "holding the card" from this share of the total.
pub const NOTABLE_OTHER_PROCESS_FRACTION: f64 = 0.2;
/// Growth below this over a whole capture is not called a leak.
pub const MIN_LEAK_GROWTH_BYTES: u64 = GIB / 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_fraction_covers_what_was_needed() {
        let r = raise_memory_fraction(Some(4 * GIB), 5 * GIB, Some(100 * GIB));
        assert!(
            r.action.contains("set_per_process_memory_fraction(0.10)"),
            "{}",
            r.action
        );
        assert_eq!(r.estimated_saving_bytes, Some(GIB));
    }

    #[test]
    fn split_size_makes_the_request_oversize() {
        let action = |bytes| max_split_size(Some(bytes)).map(|r| r.action);
        // 1.5 GiB with 2 GiB segments: 1024, not 2048 (which would keep it out of them).
        assert_eq!(
            action(1536 * MIB).as_deref(),
            Some("export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:1024")
        );
        assert_eq!(
            action(2 * GIB).as_deref(),
            Some("export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:2048")
        );
        assert_eq!(
            action(300 * MIB).as_deref(),
            Some("export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256")
        );
        // Below the smallest limit PyTorch accepts, or unknown: nothing to recommend.
        assert_eq!(action(20 * MIB), None);
        assert!(max_split_size(None).is_none());
        let text = max_split_size(Some(1536 * MIB))
            .map(|r| r.expected_effect)
            .unwrap_or_default();
        assert!(text.contains("oversize"), "{text}");
    }
}
