#!/usr/bin/env bash
# One prepared check on a machine with an NVIDIA H200: print the GPU's state, run the suites
# against the h200 target, then build the capability profile of the run.
#
#   benchmarks/gpu_check.sh [OUT_DIR]        (default OUT_DIR: $OUT, else .charz/gpu-check)
#
# Installs nothing: the environment must already have pytest-charz's `cuda` extra (CuPy,
# nvidia-ml-py, PyTorch). The whole check ends within 8 minutes: the suites get
# CHARZ_SUITE_BUDGET_S (default 400 s) and the profile CHARZ_PROFILE_BUDGET_S (default 60 s);
# a step that overruns is stopped and counts as a failure. Exits non-zero when any step fails.
set -uo pipefail

cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-.charz/gpu-check}}"
SUITE_BUDGET_S="${CHARZ_SUITE_BUDGET_S:-400}"
PROFILE_BUDGET_S="${CHARZ_PROFILE_BUDGET_S:-60}"
PYTHON="${PYTHON:-python}"
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

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

# The plugin loads through its pytest11 entry point when the package is installed; from a bare
# checkout it is named explicitly.
plugin_args=()
if ! "$PYTHON" -c "import importlib.metadata as m; m.distribution('pytest-charz')" >/dev/null 2>&1; then
    plugin_args=(-p pytest_charz.plugin)
fi

echo "== suites (budget ${SUITE_BUDGET_S} s)"
timeout --signal=INT --kill-after=20 "$SUITE_BUDGET_S" \
    "$PYTHON" -m pytest suites/ "${plugin_args[@]}" -p no:cacheprovider --target=h200 --charz-quick \
    --charz-out "$OUT_DIR/run.json" -q -rfE
status=$?
if [ "$status" -ne 0 ]; then
    failures+=("suites (exit $status)")
fi

echo "== profile (budget ${PROFILE_BUDGET_S} s)"
if [ -f "$OUT_DIR/run.json" ]; then
    if command -v charz >/dev/null 2>&1; then
        profile_cmd=(charz)
    else
        profile_cmd=("$PYTHON" -c "import sys; from pytest_charz.cli import main; sys.exit(main(sys.argv[1:]))")
    fi
    timeout --kill-after=10 "$PROFILE_BUDGET_S" "${profile_cmd[@]}" profile "$OUT_DIR/run.json" -o "$OUT_DIR" \
        || failures+=("charz profile (exit $?)")
else
    failures+=("no run file at $OUT_DIR/run.json")
fi

echo "== GPU state after the run"
nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv || true

if [ "${#failures[@]}" -ne 0 ]; then
    printf 'FAILED: %s\n' "${failures[@]}" >&2
    exit 1
fi
echo "gpu check passed; run and profile in $OUT_DIR"
