"""Measurement engine: clock, sampler, statistics, conditions, counters, provenance."""
