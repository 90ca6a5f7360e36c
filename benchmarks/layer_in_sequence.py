"""What a held-out multi-op case's steps cost timed alone and timed in the case's own order.

The held-out encoder layer (``suites/test_heldout.py``, ``encoder-layer-256``) records each step
timed alone, back to back as the workload suite times a replayed op
(:func:`pytest_charz.workloads.optimer.replayed_s`: one untimed call, then a batch), and its whole
layer as one call; the model prices each step as calibrated (on microbenchmarks timed the same
way) and the layer as their sum. The layer end to end has read 13-16% slower than predicted on
every guest, and 1.13-1.23x the sum of its steps.

This benchmark measures where that goes, on the case's own steps (the suite's ``build``, the
same inputs and Work), in rounds:

* **alone**: each step by the suite's timer, as the case records it;
* **in sequence**: each step once per pass, in the layer's order, its call timed by
  ``perf_counter`` (the steps run 4-450 us, the clock's cost is under 0.1 us); each step then
  finds its operands and its code where the steps before it left them, as in the whole layer;
* **whole**: the layer as one call, by the suite's timer;
* **the layer's own views**: the attention on the strided q, k and v views the layer's
  ``view``/``permute`` gives it (the step runs on contiguous copies), and the copy that merges
  the heads (``permute(1, 0, 2).reshape``), which no step times.

Printed: per step the two medians and their ratio; the sums against the whole; the two views;
the minor page faults of one pass of the steps and of one whole call. One thread, as the held-out
benchmark measures with ``--threads 1``.

    python benchmarks/layer_in_sequence.py               # 5 rounds of 25 passes (about 5 s)
    python benchmarks/layer_in_sequence.py --rounds 9 --passes 41
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

CASE = "encoder-layer-256"


def minor_faults(call) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    call()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=25, help="passes (and alone timings) per round")
    args = parser.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [root, os.path.join(root, "suites")]
    import numpy as np
    import torch

    from pytest_charz.workloads.optimer import replayed_s
    from test_heldout import build

    torch.set_num_threads(1)
    F = torch.nn.functional
    with torch.inference_mode():
        steps, whole, reference = build(torch, CASE, np.random.default_rng(0))
        got, expected = whole().double(), reference()
        if float((got - expected).abs().max()) > 1e-3 * float(expected.abs().max()):
            raise SystemExit(f"{CASE}: result differs from float64")
        names = [name for name, _, _, _ in steps]
        calls = [fn for _, _, fn, _ in steps]

        # the layer's views, at the case's sizes (s 128, d 256, 4 heads), from fresh random inputs
        s, d, heads = 128, 256, 4
        generator = torch.Generator().manual_seed(1)
        packed = torch.randn(s, 3 * d, generator=generator)
        views = packed.view(s, 3, heads, d // heads).permute(1, 2, 0, 3)
        dense = views.contiguous()
        heads_out = F.scaled_dot_product_attention(dense[0], dense[1], dense[2])
        strided = F.scaled_dot_product_attention(views[0], views[1], views[2])
        if not torch.allclose(strided, heads_out, atol=1e-5):
            raise SystemExit("attention on the strided views differs from the contiguous one")
        extras = {"attention on strided q, k, v": lambda: F.scaled_dot_product_attention(views[0], views[1], views[2]),
                  "attention on contiguous q, k, v": lambda: F.scaled_dot_product_attention(dense[0], dense[1], dense[2]),
                  "merge of the heads (copy)": lambda: heads_out.permute(1, 0, 2).reshape(s, d)}

        for round_index in range(args.rounds):
            alone = [[replayed_s(fn) for fn in calls] for _ in range(args.passes)]
            sequence: list[list[float]] = []
            for _ in range(args.passes):
                row = []
                for fn in calls:
                    start = time.perf_counter()
                    fn()
                    row.append(time.perf_counter() - start)
                sequence.append(row)
            whole_s = statistics.median(replayed_s(whole) for _ in range(args.passes))
            extra = {name: statistics.median(replayed_s(fn) for _ in range(args.passes)) for name, fn in extras.items()}
            step_faults = minor_faults(lambda: [fn() for fn in calls])
            whole_faults = minor_faults(whole)

            alone_s = [statistics.median(times) for times in zip(*alone)]
            sequence_s = [statistics.median(times) for times in zip(*sequence)]
            print(f"round {round_index + 1} of {args.rounds} ({CASE}, {args.passes} passes)")
            print(f"  {'step':<12} {'alone':>10} {'in sequence':>12} {'ratio':>7}")
            for name, one, seq in zip(names, alone_s, sequence_s):
                print(f"  {name:<12} {one * 1e6:>8.1f}us {seq * 1e6:>10.1f}us {seq / one:>7.2f}")
            total_alone, total_sequence = sum(alone_s), sum(sequence_s)
            print(f"  sum of steps: alone {total_alone * 1e6:.1f} us, in sequence {total_sequence * 1e6:.1f} us; "
                  f"whole {whole_s * 1e6:.1f} us = x{whole_s / total_alone:.3f} the steps alone, "
                  f"x{whole_s / total_sequence:.3f} in sequence")
            print("  " + ", ".join(f"{name} {seconds * 1e6:.1f} us" for name, seconds in extra.items()))
            print(f"  minor page faults: {step_faults} a pass of the steps, {whole_faults} a whole call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
