"""Profiler evidence beside a case's timing: hardware and software counters (Linux perf,
Nsight Compute, CUPTI, rocprofv3) and measured energy (RAPL, NVML, amdsmi).

Every source says what it can count and, for each thing it cannot, why (no PMU, no permission,
tool missing), so a run file never holds a silently empty field. Nothing is imported here: each
module imports its own dependencies when it is used.
"""
