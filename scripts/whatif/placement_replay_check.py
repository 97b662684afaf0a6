#!/usr/bin/env python3
"""Does where the driver put a run's segments change the what-if replay's verdicts? Checked with
real placements, from the H200 runs kept in this repository.

Usage (repository root, after `cargo build --release`):
    python3 scripts/whatif/placement_replay_check.py target/release/vramscope

1. Surveyed placements. `docs/gpu-verification/whatif-placement/survey.json` holds, for 11
   workloads, where 6 real uncapped default runs put every segment (relative to the first). The
   workload's ground-truth trace is rewritten with its segments (and their blocks) at each such
   run's addresses, and replayed under every capped (setting, cap) pair of its ground truth.
2. Single moves. `transformer_step`'s trace with one segment moved far above or far below every
   other, for each of its segments, replayed under the default settings and
   `roundup_power2_divisions:4` at the 3353 MiB cap: which moves change the verdict, and whether
   the survey saw that segment keep its relative address.
3. Capped runs' own placements. Each real capped `transformer_step` run under
   `garbage_collection_threshold:0.6` or `roundup_power2_divisions:4`
   (`gt_repeats.tar.xz`) made the same segments as the ground truth up to its first release:
   the ground-truth trace with those segments where that run put them, replayed under the
   run's setting and cap, against what the run itself did.
"""
import bisect
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
import tempfile

MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests/fixtures/whatif")
SURVEY = os.path.join(ROOT, "docs/gpu-verification/whatif-placement/survey.json")
REPEATS = os.path.join(ROOT, "docs/gpu-verification/whatif-placement/gt_repeats.tar.xz")


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def segment_events(snapshot, stop_at_first_free=False):
    """(allocations before, address, size) of each segment_alloc of device 0."""
    out, allocs = [], 0
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            allocs += 1
        elif e["action"] == "segment_free" and stop_at_first_free:
            break
        elif e["action"] == "segment_alloc":
            out.append((allocs, e["addr"], e["size"]))
    return out


def moved(snapshot, new_address):
    """A copy of `snapshot` with each segment starting at address A moved to new_address[A]
    (its blocks and every trace event inside it with it)."""
    snapshot = pickle.loads(pickle.dumps(snapshot))
    sizes = {a: s for _, a, s in segment_events(snapshot)}
    starts = sorted(a for a in new_address)

    def fix(address):
        i = bisect.bisect_right(starts, address) - 1
        if i >= 0:
            start = starts[i]
            if start <= address < start + sizes[start]:
                return address + new_address[start] - start
        return address

    for e in snapshot["device_traces"][0]:
        if "addr" in e:
            e["addr"] = fix(e["addr"])
    for segment in snapshot["segments"]:
        segment["address"] = fix(segment["address"])
        for block in segment.get("blocks", []):
            if "address" in block:
                block["address"] = fix(block["address"])
    return snapshot


def whatif(binary, snapshot, cap, settings):
    with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
        pickle.dump(snapshot, f)
        f.flush()
        args = [binary, "whatif", f.name, "--json", "--cap", str(cap)]
        for setting in settings:
            args += ["--setting", setting]
        done = subprocess.run(args, capture_output=True, text=True, check=True)
    return {r["setting"]: r for r in json.loads(done.stdout)["results"]}


def verdict(result):
    return ("OOM" if result["oom"] else "fits", result["peak_reserved_bytes"] // MiB)


def truths():
    out = {}
    for folder in ("", "heldout"):
        with open(os.path.join(FIXTURES, folder, "truth.json")) as f:
            for record in json.load(f).values():
                out.setdefault(record["workload"], (folder, []))[1].append(record)
    return out


def surveyed(binary):
    with open(SURVEY) as f:
        survey = json.load(f)
    print("## 1. Replayed from the surveyed real placements\n")
    varied = 0
    pairs = 0
    for workload, (folder, records) in sorted(truths().items()):
        if workload not in survey:
            continue
        trace = load(os.path.join(FIXTURES, folder, workload + ".pickle"))
        segments = segment_events(trace)
        caps = sorted({r["cap_bytes"] for r in records if r["cap_bytes"]})
        runs = [run for group in survey[workload].values() for run in group]
        outcomes = {}
        used = 0
        for run in runs:
            placed = run["segments"]
            if len(placed) != len(segments) or any(
                size != p[1] for (_, _, size), p in zip(segments, placed)
            ):
                continue  # this run made other segments (two streams' timing)
            used += 1
            base = segments[0][1]
            new = {a: base + p[2] for (_, a, _), p in zip(segments, placed)}
            for cap in caps:
                settings = [r["conf"] or "default" for r in records if r["cap_bytes"] == cap]
                for setting, result in whatif(binary, moved(trace, new), cap, settings).items():
                    outcomes.setdefault((setting, cap), []).append(verdict(result))
        for (setting, cap), seen in sorted(outcomes.items()):
            pairs += 1
            kinds = {v for v, _ in seen}
            peaks = sorted({p for _, p in seen})
            if len(kinds) > 1 or len(peaks) > 1:
                varied += len(kinds) > 1
                print(f"- {workload} `{setting}` cap {cap // MiB} MiB: {seen}")
        print(f"  {workload}: {used} surveyed placements replayed")
    print(f"\n{pairs} capped pairs; the verdict differed between real placements in {varied}.\n")


def single_moves(binary):
    print("## 2. transformer_step, one segment moved at a time (cap 3353 MiB)\n")
    with open(SURVEY) as f:
        runs = [run for group in json.load(f)["transformer_step"].values() for run in group]
    trace = load(os.path.join(FIXTURES, "transformer_step.pickle"))
    segments = segment_events(trace)
    settings = ["default", "roundup_power2_divisions:4"]
    recorded = whatif(binary, trace, 3353 * MiB, settings)
    print(f"recorded placement: {[(s, verdict(r)) for s, r in recorded.items()]}")
    for k, (allocs, address, size) in enumerate(segments):
        relative = {run["segments"][k][2] for run in runs if len(run["segments"]) > k}
        for where, to in (("above all", 1 << 46), ("below all", 1 << 40)):
            results = whatif(binary, moved(trace, {address: to}), 3353 * MiB, settings)
            flipped = [s for s in settings if bool(results[s]["oom"]) != bool(recorded[s]["oom"])]
            if flipped:
                print(
                    f"- segment {k} ({size // MiB} MiB, made after {allocs} allocations) moved "
                    f"{where}: {', '.join(flipped)} changes; surveyed relative addresses: "
                    f"{sorted(r // MiB for r in relative)} MiB"
                )
    print()


def own_placements(binary):
    print("## 3. Capped transformer_step runs, replayed from their own placement\n")
    trace = load(os.path.join(FIXTURES, "transformer_step.pickle"))
    segments = segment_events(trace)
    agree = total = 0
    with tarfile.open(REPEATS) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            name = os.path.basename(member.name)
            if not (name.startswith("transformer_step__") and name.endswith(".pickle")):
                continue
            run = pickle.load(io.BytesIO(archive.extractfile(member).read()))
            record = json.load(archive.extractfile(member.name[: -len(".pickle")] + ".json"))
            new = {}
            for (allocs, address, size), (run_allocs, run_address, run_size) in zip(
                segments, segment_events(run, stop_at_first_free=True)
            ):
                if (allocs, size) != (run_allocs, run_size):
                    break
                new[address] = run_address - segment_events(run)[0][1] + segments[0][1]
            setting = record["conf"] or "default"
            result = whatif(binary, moved(trace, new), record["cap_bytes"], [setting])[setting]
            real = ("OOM" if record["oom"] else "fits", record["reserved_peak_bytes"] // MiB)
            total += 1
            agree += verdict(result) == real
            print(
                f"- {name}: {len(new)} of {len(segments)} segments placed as the run did; "
                f"real {real}, replay {verdict(result)}"
            )
    print(f"\n{agree} of {total} runs: the replay's verdict and peak are the run's own.\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    surveyed(sys.argv[1])
    single_moves(sys.argv[1])
    own_placements(sys.argv[1])


if __name__ == "__main__":
    main()
