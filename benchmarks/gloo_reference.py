"""A plain torch.distributed all-reduce loop on 2 Gloo ranks, without pytest-charz: the floor
this machine sets under the collectives suite's figures.

    python benchmarks/gloo_reference.py [--sizes 16,1024,65536,1048576,4194304] [--rounds 30]

Rank 0 is this process, rank 1 a child; both all-reduce float32 tensors of each size (bytes per
rank), 20 calls per round after a barrier, and rank 0 prints the median and minimum per call.
Compare with ``collective:all-reduce`` of ``pytest suites/test_collectives.py`` run right after.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

CALLS_PER_ROUND = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_rank(rank: int, port: int, sizes: list[int], rounds: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        for size in sizes:
            tensor = torch.rand(max(1, size // 4)) + 1.0
            for _ in range(CALLS_PER_ROUND):
                dist.all_reduce(tensor)
            per_call = []
            for _ in range(rounds):
                dist.barrier()
                start = time.perf_counter()
                for _ in range(CALLS_PER_ROUND):
                    dist.all_reduce(tensor)
                per_call.append((time.perf_counter() - start) / CALLS_PER_ROUND)
                tensor.fill_(1.0)  # keep the values finite over many rounds
            if rank == 0:
                print(f"{size:>10} B  median {1e6 * statistics.median(per_call):8.1f} us  "
                      f"min {1e6 * min(per_call):8.1f} us  ({rounds} rounds of {CALLS_PER_ROUND})")
    finally:
        dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,1024,65536,1048576,4194304")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.rank == 1:
        run_rank(1, args.port, sizes, args.rounds)
        return 0
    port = free_port()
    peer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", "1", "--port", str(port),
                             "--sizes", args.sizes, "--rounds", str(args.rounds)])
    try:
        run_rank(0, port, sizes, args.rounds)
    finally:
        try:
            peer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            peer.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
