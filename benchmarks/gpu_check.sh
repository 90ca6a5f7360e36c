#!/usr/bin/env bash
# One prepared check on a machine with an NVIDIA H200: print the GPU's state, check that the
# GPU libraries load and compile a kernel, run the suites against the target, then build the
# capability profile of the run.
#
#   benchmarks/gpu_check.sh [OUT_DIR]        (default OUT_DIR: $OUT, else .charz/gpu-check)
#
# Installs nothing: the environment must already have pytest-charz's `cuda` extra (CuPy,
# nvidia-ml-py, PyTorch). CHARZ_TARGET names the target (default h200; an H200 NVL is not in
# the catalogue and fails cleanly). The whole check ends within about 7 minutes: the preflight
# gets 60 s, the suites CHARZ_SUITE_BUDGET_S (default 240 s), the peer transfers between GPUs
# CHARZ_PEER_BUDGET_S (default 60 s; with one GPU visible they skip, and the step shows why),
# each profile CHARZ_PROFILE_BUDGET_S (default 60 s); a step that overruns is stopped and
# counts as a failure. Then it checks that the cases recorded NVML energy and counters (and, with
# CHARZ_GPU_CHECK_NCU=1, re-runs one STREAM case under Nsight Compute). Exits non-zero when any
# step fails.
set -uo pipefail

cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-.charz/gpu-check}}"
SUITE_BUDGET_S="${CHARZ_SUITE_BUDGET_S:-240}"
TARGET="${CHARZ_TARGET:-h200}"
PROFILE_BUDGET_S="${CHARZ_PROFILE_BUDGET_S:-60}"
PEER_BUDGET_S="${CHARZ_PEER_BUDGET_S:-60}"
PYTHON="${PYTHON:-python}"
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# Compiled kernels stay in memory: a read-only home directory cannot break their compilation.
export CUPY_CACHE_IN_MEMORY=1

failures=()

echo "== GPU state before the run"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi || failures+=("nvidia-smi")
    nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active \
        --format=csv || true
else
    echo "nvidia-smi not found: no NVIDIA driver on this machine" >&2
    exit 2
fi

echo "== preflight: libraries, devices, one compiled kernel"
timeout --kill-after=10 60 "$PYTHON" - <<'PY'
import sys
failed = []
try:
    import torch
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}")
except Exception as exc:
    failed.append(f"torch: {exc}")
try:
    import cupy
    print(f"cupy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
    kernel = cupy.RawKernel(r'''#include <cuda_fp16.h>
extern "C" __global__ void one(float* x) { x[0] = __half2float(__float2half(1.0f)); }''', "one")
    x = cupy.zeros(1, dtype=cupy.float32)
    kernel((1,), (1,), (x,))
    assert float(x[0]) == 1.0, "the preflight kernel did not write its result"
    print("cupy compiled and ran a kernel (cuda_fp16.h found)")
except Exception as exc:
    failed.append(f"cupy: {exc}")
try:
    import pynvml
    pynvml.nvmlInit()
    print(f"NVML driver {pynvml.nvmlSystemGetDriverVersion()}, {pynvml.nvmlDeviceGetCount()} device(s)")
except Exception as exc:
    failed.append(f"nvidia-ml-py: {exc}")
try:
    from pytest_charz.devices.detect import visible_devices
    print("visible to pytest-charz:", visible_devices())
except Exception as exc:
    failed.append(f"pytest-charz detection: {exc}")
for line in failed:
    print("PREFLIGHT FAILED:", line, file=sys.stderr)
sys.exit(1 if failed else 0)
PY
status=$?
if [ "$status" -ne 0 ]; then
    failures+=("preflight (exit $status)")
fi

# The plugin loads through its pytest11 entry point when the package is installed; from a bare
# checkout it is named explicitly.
plugin_args=()
if ! "$PYTHON" -c "import importlib.metadata as m; m.distribution('pytest-charz')" >/dev/null 2>&1; then
    plugin_args=(-p pytest_charz.plugin)
fi

echo "== suites on target $TARGET (budget ${SUITE_BUDGET_S} s; peer transfers in the next step)"
timeout --signal=INT --kill-after=20 "$SUITE_BUDGET_S" \
    "$PYTHON" -m pytest suites/ ${plugin_args[@]+"${plugin_args[@]}"} -p no:cacheprovider --target="$TARGET" --charz-quick \
    -k "not test_peer_transfer_gpu" --charz-out "$OUT_DIR/run.json" -q -rfE
status=$?
if [ "$status" -ne 0 ]; then
    failures+=("suites (exit $status)")
fi

gpu_count=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
echo "== peer transfers between GPUs: $gpu_count GPU(s) visible (budget ${PEER_BUDGET_S} s)"
# -rs prints each skip's reason: with one GPU every peer case skips, and says so.
timeout --signal=INT --kill-after=20 "$PEER_BUDGET_S" \
    "$PYTHON" -m pytest suites/test_movement.py ${plugin_args[@]+"${plugin_args[@]}"} -p no:cacheprovider \
    --target="$TARGET" --charz-quick -k test_peer_transfer_gpu --charz-out "$OUT_DIR/peer-run.json" -q -rsfE
status=$?
if [ "$status" -ne 0 ]; then
    failures+=("peer transfers (exit $status)")
fi

echo "== profile (budget ${PROFILE_BUDGET_S} s)"
if command -v charz >/dev/null 2>&1; then
    profile_cmd=(charz)
else
    profile_cmd=("$PYTHON" -c "import sys; from pytest_charz.cli import main; sys.exit(main(sys.argv[1:]))")
fi
if [ -f "$OUT_DIR/run.json" ]; then
    timeout --kill-after=10 "$PROFILE_BUDGET_S" "${profile_cmd[@]}" profile "$OUT_DIR/run.json" -o "$OUT_DIR" \
        || failures+=("charz profile (exit $?)")
else
    failures+=("no run file at $OUT_DIR/run.json")
fi
# Peer cases that ran (two GPUs or more) have a run file of their own: transfer:peer, both ways.
if [ -f "$OUT_DIR/peer-run.json" ]; then
    timeout --kill-after=10 "$PROFILE_BUDGET_S" "${profile_cmd[@]}" profile "$OUT_DIR/peer-run.json" \
        -o "$OUT_DIR/peer-profile" || failures+=("charz profile of the peer run (exit $?)")
fi

echo "== counters and NVML energy per case"
if [ -f "$OUT_DIR/run.json" ]; then
    timeout --kill-after=10 60 "$PYTHON" - "$OUT_DIR/run.json" <<'PY'
import json
import sys

cases = json.load(open(sys.argv[1]))["cases"]
energy = [c for c in cases if (c.get("energy") or {}).get("joules_per_call") is not None]
counted = [c for c in cases if (c.get("counters") or {}).get("values")]
print(f"{len(cases)} cases: energy in {len(energy)}, counters in {len(counted)}")
for c in (energy or cases)[:3]:
    print(c["id"], json.dumps(c.get("energy")), json.dumps(c.get("counters"))[:400])
missing = sorted({str((c.get("energy") or {}).get("missing")) for c in cases if (c.get("energy") or {}).get("missing")})
print("energy missing:", missing)
sys.exit(0 if energy else 1)
PY
    status=$?
    [ "$status" -eq 0 ] || failures+=("no case recorded NVML energy (exit $status)")
fi
# Nsight Compute counters of one STREAM case, when asked (it re-runs the case under ncu: minutes).
if [ "${CHARZ_GPU_CHECK_NCU:-0}" = 1 ] && command -v ncu >/dev/null 2>&1 && [ -f "$OUT_DIR/run.json" ]; then
    echo "== Nsight Compute counters of one case"
    case_id=$("$PYTHON" -c "import json,sys; c=json.load(open(sys.argv[1]))['cases']; print(next((x['nodeid'] for x in c if x['work'].get('op')=='stream'), c[0]['nodeid']))" "$OUT_DIR/run.json")
    timeout --kill-after=10 150 "$PYTHON" -m pytest_charz.evidence.ncu "$case_id" --target="$TARGET" \
        --out "$OUT_DIR/ncu-counters.json" --launch-skip 20 --launch-count 5 --timeout 140 || failures+=("ncu counters")
    head -c 3000 "$OUT_DIR/ncu-counters.json" 2>/dev/null || true
fi

echo "== GPU state after the run"
nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv || true

if [ "${#failures[@]}" -ne 0 ]; then
    printf 'FAILED: %s\n' "${failures[@]}" >&2
    exit 1
fi
echo "gpu check passed; run and profile in $OUT_DIR"
