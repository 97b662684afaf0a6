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
        verification: None,
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

/// Raise a per-process memory cap to what the job is known to need (`needed_bytes`, with a 5 %
/// margin). `cap_bytes` is `None` when the cap was inferred (the device had room) rather than
/// printed. Without a history this is one request's shortfall, and the effect says so.
pub fn raise_memory_fraction(
    cap_bytes: Option<u64>,
    needed_bytes: u64,
    total_bytes: Option<u64>,
) -> Recommendation {
    memory_fraction(cap_bytes, needed_bytes, total_bytes, false, None, None)
}

/// Raise (or remove) a per-process memory cap, knowing the job's history: `still_growing` when
/// the live set was still growing at the failure, so that no figure below the whole card can be
/// shown to suffice and the cap is best removed; `need_why` says where the need comes from.
pub fn raise_memory_fraction_from_history(
    cap_bytes: Option<u64>,
    needed_bytes: u64,
    total_bytes: Option<u64>,
    still_growing: bool,
    need_why: &str,
) -> Recommendation {
    memory_fraction(
        cap_bytes,
        needed_bytes,
        total_bytes,
        still_growing,
        Some(need_why),
        None,
    )
}

/// [`raise_memory_fraction`] (no `need_why`) or [`raise_memory_fraction_from_history`], on a card
/// that leaves the process at most `room_bytes` at the failure (what it holds plus the free
/// memory): a cap above that cannot be used, so the fraction asks for no more than it, and when
/// even that is less than what is needed, the effect says that a raised cap alone cannot make
/// the job fit.
pub fn raise_memory_fraction_within(
    cap_bytes: Option<u64>,
    needed_bytes: u64,
    total_bytes: Option<u64>,
    still_growing: bool,
    need_why: Option<&str>,
    room_bytes: Option<u64>,
) -> Recommendation {
    memory_fraction(
        cap_bytes,
        needed_bytes,
        total_bytes,
        still_growing,
        need_why,
        room_bytes,
    )
}

fn memory_fraction(
    cap_bytes: Option<u64>,
    needed_bytes: u64,
    total_bytes: Option<u64>,
    still_growing: bool,
    need_why: Option<&str>,
    room_bytes: Option<u64>,
) -> Recommendation {
    // A growing need asks for the whole card (or no cap), which takes what is free anyway.
    let room_bytes = room_bytes.filter(|_| !still_growing);
    let fraction = total_bytes.filter(|&t| t > 0).map(|t| {
        if still_growing {
            1.0
        } else {
            let wanted = ((needed_bytes as f64 / t as f64) * 100.0 + 5.0)
                .ceil()
                .min(100.0)
                / 100.0;
            let room = room_bytes.map_or(1.0, |room| {
                ((room as f64 / t as f64) * 100.0).floor() / 100.0
            });
            wanted.min(room)
        }
    });
    let was = match (cap_bytes, total_bytes) {
        (Some(c), Some(t)) if t > 0 => format!("was {:.2}; ", c as f64 / t as f64),
        _ => String::new(),
    };
    let action = match (fraction, still_growing) {
        (Some(f), true) => format!(
            "torch.cuda.set_per_process_memory_fraction({f:.1})  # {was}or remove the call: the need keeps growing\n# under MPS: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
        ),
        (Some(f), false) => format!(
            "torch.cuda.set_per_process_memory_fraction({f:.2})  # {was}needs >= {}\n# or remove the call; under MPS: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            format_bytes(needed_bytes)
        ),
        (None, _) => "torch.cuda.set_per_process_memory_fraction(1.0)  # or remove the call\n# under MPS: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(),
    };
    let mut effect = match (cap_bytes, still_growing) {
        (Some(cap), true) => format!(
            "The cap of {} is what stopped the allocation, and the job needs more than the {} it asked for at the failure.",
            format_bytes(cap),
            format_bytes(needed_bytes)
        ),
        (Some(cap), false) => format!(
            "The cap of {} is what stopped the allocation; at least {} is needed ({} more).",
            format_bytes(cap),
            format_bytes(needed_bytes),
            format_bytes(needed_bytes.saturating_sub(cap))
        ),
        (None, _) => format!(
            "The job needs at least {} under the cap.",
            format_bytes(needed_bytes)
        ),
    };
    if let Some(room) = room_bytes.filter(|&room| room < needed_bytes) {
        effect.push_str(&format!(
            " The card leaves this process at most {} (what it holds plus the free memory), less than that: a raised cap alone cannot make it fit.",
            format_bytes(room)
        ));
    }
    match need_why {
        Some(why) => {
            effect.push(' ');
            effect.push_str(why);
        }
        None if !still_growing => effect.push_str(
            " That is one request's shortfall: what the rest of the run needs is unknown without a history of the live set (a snapshot with a trace, or a log printing memory per step).",
        ),
        None => {}
    }
    let saving = match (cap_bytes, total_bytes, still_growing) {
        (Some(cap), Some(total), true) => Some(total.saturating_sub(cap)),
        (Some(cap), _, _) => Some(needed_bytes.saturating_sub(cap)),
        _ => None,
    };
    rec(
        "raise-memory-fraction",
        if still_growing {
            "Remove the per-process memory cap (or raise it to the whole card)"
        } else {
            "Raise the per-process memory cap"
        },
        effect,
        &action,
        saving,
    )
}

/// One allocator setting in `PYTORCH_CUDA_ALLOC_CONF` syntax, as a recommendation (its
/// verification is the caller's: a replay proved it, or it is unverified). The id names the
/// setting's first key.
pub fn allocator_setting(conf: &str) -> Recommendation {
    let key = conf.split(',').next().unwrap_or(conf).trim();
    let (id, title, effect) = if key.starts_with("expandable_segments") {
        (
            "expandable-segments",
            "Turn on expandable segments in the PyTorch allocator",
            "Segments grow in place instead of being split, so cached memory is reusable for larger requests.",
        )
    } else if key.starts_with("max_split_size_mb") {
        (
            "max-split-size",
            "Stop large cached blocks from being split with max_split_size_mb",
            "Blocks at or above the limit are never split by smaller requests.",
        )
    } else if key.starts_with("garbage_collection_threshold") {
        (
            "gc-threshold",
            "Let the allocator release old cached blocks with garbage_collection_threshold",
            "Cached blocks not used for longest go back to CUDA once reserved memory passes the threshold.",
        )
    } else if key.starts_with("roundup_power2_divisions") {
        (
            "roundup-power2-divisions",
            "Round requests to fewer sizes with roundup_power2_divisions",
            "Requests of similar size share block sizes, so freed blocks fit the next requests.",
        )
    } else {
        (
            "allocator-setting",
            "Change the PyTorch allocator settings",
            "The allocator packs memory differently.",
        )
    };
    rec(
        id,
        title,
        effect.to_owned(),
        &format!(
            "export PYTORCH_CUDA_ALLOC_CONF={conf}\n# or, before the first CUDA allocation:\nimport os; os.environ[\"PYTORCH_CUDA_ALLOC_CONF\"] = \"{conf}\""
        ),
        None,
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
/// power of two MiB at or below the request, so the request is "oversize" (requests below the
/// smallest allowed limit get that limit, which keeps them out of larger cached blocks) (c10
/// `CUDACachingAllocator`: blocks of at least the limit are never split, a smaller request never
/// takes one, and when an oversize request finds no block the allocator frees whole cached
/// oversize blocks and reserves one of the right size). A limit above the request would do the
/// opposite: the request could no longer use the larger cached segments at all. `None` when the
/// request is unknown or below 1 MiB (the small pool, which the limit does not touch).
pub fn max_split_size(requested_bytes: Option<u64>) -> Option<Recommendation> {
    let requested_mb = requested_bytes? / MIB;
    if requested_mb == 0 {
        return None;
    }
    if requested_mb < MIN_MAX_SPLIT_SIZE_MB {
        // Too small to be made oversize: keep requests of its size out of the big cached
        // blocks instead, so those stay whole and can be released when memory runs short.
        let requested = format_bytes(requested_bytes?);
        return Some(rec(
            "max-split-size",
            "Stop small requests from splitting large cached blocks with max_split_size_mb",
            format!(
                "With a limit of {MIN_MAX_SPLIT_SIZE_MB} MiB (the smallest PyTorch accepts above the {requested} request) requests below it no longer split cached blocks of {MIN_MAX_SPLIT_SIZE_MB} MiB or more: those stay whole, so when a request finds no small block the allocator releases them and reserves a segment of the right size, instead of carving every large cached block into pieces whose remainders nothing can use."
            ),
            &format!("export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{MIN_MAX_SPLIT_SIZE_MB}"),
            None,
        ));
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

/// [`reduce_batch_size_within`] when the activations are not known (only the allocated total
/// bounds what a smaller batch saves).
pub fn reduce_batch_size(
    shortfall_bytes: Option<u64>,
    allocated_bytes: Option<u64>,
) -> Recommendation {
    reduce_batch_size_within(shortfall_bytes, allocated_bytes, None)
}

/// Smaller batches (with gradient accumulation to keep the effective batch). `shortfall_bytes`
/// is what the failure lacked; `activation_bytes` what a smaller batch can shrink at most (a
/// step's rise above its floor, from a trace) — without it only `allocated_bytes` bounds it, and
/// weights and optimizer state do not shrink. The recommendation never promises more than there
/// is to save: it names the smallest power-of-two cut that covers the shortfall, or says that no
/// cut of the batch alone can.
pub fn reduce_batch_size_within(
    shortfall_bytes: Option<u64>,
    allocated_bytes: Option<u64>,
    activation_bytes: Option<u64>,
) -> Recommendation {
    let (shrinkable, what) = match (activation_bytes, allocated_bytes) {
        (Some(a), _) => (
            Some(a),
            "activations (a step's rise above its floor in the trace)",
        ),
        (None, Some(a)) => (
            Some(a),
            "allocated memory (an upper bound: weights and optimizer state do not shrink)",
        ),
        (None, None) => (None, ""),
    };
    let mut divisor: u64 = 2;
    let mut saving = None;
    let effect = match (shortfall_bytes, shrinkable) {
        (Some(short), Some(pool)) if pool > 0 && short < pool => {
            // Smallest power-of-two cut whose saving, pool * (1 - 1/d), covers the shortfall.
            while (pool as f64) * (1.0 - 1.0 / divisor as f64) < short as f64 && divisor < 1024 {
                divisor *= 2;
            }
            let frees = (pool as f64 * (1.0 - 1.0 / divisor as f64)) as u64;
            saving = Some(short);
            format!(
                "The peak must shrink by at least {}; of the {} {what}, dividing the batch by {divisor} frees at most {}{}.",
                format_bytes(short),
                format_bytes(pool),
                format_bytes(frees),
                if divisor == 2 {
                    ""
                } else {
                    ", and halving it would free at most half, which is not enough"
                }
            )
        }
        (Some(short), Some(pool)) => {
            saving = Some(pool / 2);
            format!(
                "The peak must shrink by at least {}, more than all {} {what}: no smaller batch covers it alone. Halving frees at most {}; combine it with the changes below.",
                format_bytes(short),
                format_bytes(pool),
                format_bytes(pool / 2)
            )
        }
        (Some(short), None) => {
            saving = Some(short);
            format!(
                "The peak must shrink by at least {}; activations scale with the batch size, weights and optimizer state do not.",
                format_bytes(short)
            )
        }
        (None, Some(pool)) if pool > 0 => {
            saving = Some(pool / 2);
            format!(
                "Halving the batch frees at most half of the {} {what}.",
                format_bytes(pool)
            )
        }
        _ => "Activation memory scales with the batch size; halving it frees at most half of the activations."
            .to_owned(),
    };
    let accumulation = divisor.to_string();
    rec(
        "reduce-batch-size",
        &format!(
            "Reduce the batch size{} (keep the effective batch with gradient accumulation)",
            if divisor > 2 {
                format!(" to 1/{divisor}")
            } else {
                String::new()
            }
        ),
        effect,
        &format!(
            "batch_size //= {accumulation}\naccumulation_steps *= {accumulation}\nfor i, batch in enumerate(loader):\n    loss = model(batch).loss / accumulation_steps\n    loss.backward()\n    if (i + 1) % accumulation_steps == 0:\n        optimizer.step(); optimizer.zero_grad(set_to_none=True)"
        ),
        saving,
    )
}

/// bf16 autocast. `activation_bytes` bounds what it can save: half of the fp32 activations (the
/// allocated total when the activations are not known, an upper bound).
pub fn mixed_precision(activation_bytes: Option<u64>) -> Recommendation {
    rec(
        "mixed-precision",
        "Train in bf16 (or fp16) mixed precision",
        match activation_bytes {
            Some(a) => format!(
                "fp32 activations take half the memory in bf16: at most {} of {} (weights and optimizer state stay fp32 under autocast).",
                format_bytes(a / 2),
                format_bytes(a)
            ),
            None => "fp32 activations take half the memory in bf16.".to_owned(),
        },
        "with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16):\n    loss = model(batch)",
        activation_bytes.map(|a| a / 2),
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

/// Try allocator settings on the recorded history before a real run: what to do when the
/// history did not prove one (the replay was not run, or its self-check failed).
pub fn verify_with_whatif(snapshot: Option<&str>) -> Recommendation {
    let file = snapshot.unwrap_or("oom.pickle");
    rec(
        "replay-settings",
        "Replay the allocation history under other allocator settings before changing one",
        "No allocator setting is recommended without proof: settings chosen from the state at the failure failed as often as they worked when real runs were repeated. The what-if replay shows, for each setting, whether the recorded run would still have run out and with how much headroom.".to_owned(),
        &format!("vramscope whatif {file}"),
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

/// Find what a job keeps from every step, when an allocator trace measured it: the growth per
/// step and, when known, the call site whose allocations the completed steps kept (`kept_by`:
/// the site and the bytes still alive when the last step ended), so that the search starts
/// where the memory is held.
pub fn find_leak_per_step(per_step_bytes: u64, kept_by: Option<&(String, u64)>) -> Recommendation {
    let mut rec = find_leak(None);
    let kept = kept_by
        .map(|(site, bytes)| {
            format!(
                " The steps kept {} allocated at {site} (still alive when the last completed step ended): start there.",
                format_bytes(*bytes)
            )
        })
        .unwrap_or_default();
    rec.expected_effect = format!(
        "Stops the growth of {} per step.{kept} The usual culprits are losses or outputs accumulated with their autograd graph.",
        format_bytes(per_step_bytes)
    );
    rec
}

/// Settle whether an allocator setting that passes the failing request gets the job through:
/// re-run the job under it (`vramscope run --prove` tries the candidate settings on the job
/// itself), since a replay of a trace that ends at the failure cannot show the rest of the step.
pub fn prove_by_rerun(conf: &str) -> Recommendation {
    rec(
        "prove-by-rerun",
        "Settle it: re-run the job under the setting",
        "A real re-run goes past the failing request and through the rest of the step, which a trace that ends at the failure cannot show; vramscope keeps the change only if the job gets past its failure by a clear margin.".to_owned(),
        &format!(
            "vramscope run --prove -- python train.py  # re-runs it under the settings the replay found, {conf} among them\n# or: catch torch.OutOfMemoryError, run one more step, dump the snapshot and diagnose it again"
        ),
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
        assert!(
            r.expected_effect.contains("one request's shortfall"),
            "{}",
            r.expected_effect
        );
        // Still growing: no figure below the card can be shown to suffice.
        let r = raise_memory_fraction_from_history(
            Some(4 * GIB),
            5 * GIB,
            Some(100 * GIB),
            true,
            "It grew.",
        );
        assert!(
            r.action.contains("set_per_process_memory_fraction(1.0)"),
            "{}",
            r.action
        );
        assert!(
            r.expected_effect.ends_with("It grew."),
            "{}",
            r.expected_effect
        );
        assert_eq!(r.estimated_saving_bytes, Some(96 * GIB));
    }

    #[test]
    fn batch_cuts_never_promise_more_than_there_is_to_save() {
        // 6 GiB short with 10 GiB of activations: halving frees 5, a quarter frees 7.5.
        let r = reduce_batch_size_within(Some(6 * GIB), Some(30 * GIB), Some(10 * GIB));
        assert!(r.action.starts_with("batch_size //= 4"), "{}", r.action);
        assert!(
            r.expected_effect
                .contains("halving it would free at most half, which is not enough"),
            "{}",
            r.expected_effect
        );
        assert_eq!(r.estimated_saving_bytes, Some(6 * GIB));
        // More short than all activations: no cut of the batch covers it, and it says so.
        let r = reduce_batch_size_within(Some(12 * GIB), Some(30 * GIB), Some(10 * GIB));
        assert!(
            r.expected_effect
                .contains("no smaller batch covers it alone"),
            "{}",
            r.expected_effect
        );
        assert_eq!(r.estimated_saving_bytes, Some(5 * GIB));
        // Enough with half: halve.
        let r = reduce_batch_size(Some(GIB), Some(30 * GIB));
        assert!(r.action.starts_with("batch_size //= 2"), "{}", r.action);
    }

    #[test]
    fn allocator_settings_get_the_id_of_their_key() {
        assert_eq!(
            allocator_setting("expandable_segments:True").id,
            "expandable-segments"
        );
        assert_eq!(
            allocator_setting("max_split_size_mb:128").id,
            "max-split-size"
        );
        assert_eq!(
            allocator_setting("garbage_collection_threshold:0.6,max_split_size_mb:64").id,
            "gc-threshold"
        );
        assert!(
            allocator_setting("roundup_power2_divisions:[256:1,>:8]")
                .action
                .contains("PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[256:1,>:8]")
        );
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
        // Below the smallest limit PyTorch accepts: the smallest limit, which keeps requests of
        // that size out of larger cached blocks; unknown: nothing to recommend.
        assert_eq!(
            action(18 * MIB).as_deref(),
            Some("export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:32")
        );
        assert!(
            max_split_size(Some(18 * MIB))
                .is_some_and(|r| r.expected_effect.contains("no longer split cached blocks")),
        );
        assert!(max_split_size(None).is_none());
        assert!(max_split_size(Some(1000)).is_none());
        let text = max_split_size(Some(1536 * MIB))
            .map(|r| r.expected_effect)
            .unwrap_or_default();
        assert!(text.contains("oversize"), "{text}");
    }
}
