"""Starts a corpus program as a two-process job, as `torchrun --nproc-per-node 2` would: the
launcher runs the same file again per rank with `--worker` and RANK, LOCAL_RANK and WORLD_SIZE
set, and exits with the first failing rank's status (issue 32: a job of several processes under
`vramscope run`). It never imports torch, so the launcher process never touches the GPU.

    from ranks import run_as_ranks
    run_as_ranks(__file__, args.worker)   # returns only in a worker
"""

import os
import subprocess
import sys

WORLD_SIZE = 2


def run_as_ranks(program, worker):
    """In the launcher (`worker` false): runs `program` once per rank and exits with the first
    non-zero status of the ranks (0 when all finished). In a worker: returns at once."""
    if worker:
        return
    ranks = []
    for rank in range(WORLD_SIZE):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE))
        ranks.append(subprocess.Popen([sys.executable, program, "--worker", *sys.argv[1:]], env=env))
    codes = [p.wait() for p in ranks]
    failed = [c for c in codes if c != 0]
    sys.exit(failed[0] if failed else 0)
