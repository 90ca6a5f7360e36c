"""Collectives as NCCL/RCCL run them (models/comm.py): NVLink SHARP where the topology has it,
ring or tree by size, and the achievable fraction of the link fitted on published busbw."""
from __future__ import annotations

import pytest

from pytest_charz import predict
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.models.comm import (
    COLLECTIVE_LIBRARIES, bus_factor, collective_library, library_collective_s, nccl_algorithms,
)
from pytest_charz.published import load_measurements
from pytest_charz.published.score import fitted_fractions
from pytest_charz.published.table import CollectiveCase
from pytest_charz.targets.catalogue import resolve
from pytest_charz.work import Collective, Work

GiB = 2**30


def busbw_gb_s(message: Collective, seconds: float) -> float:
    return message.bytes * bus_factor(message.op, message.ranks) / seconds / 1e9


def test_an_8x_h100_all_reduce_uses_nvls_at_the_published_bus_bandwidth() -> None:
    ceilings = Ceilings.from_spec(resolve("h100-sxm"))
    message = Collective("all-reduce", 4 * GiB, 8)
    chosen = library_collective_s(message, ceilings)
    assert chosen is not None
    algorithm, seconds = chosen
    assert algorithm == "nvls/Simple"
    library = collective_library(ceilings)
    assert library is not None and library.nvls_fraction is not None
    link = ceilings.link_bandwidth("peer")
    assert link == pytest.approx(450e9)                      # 18 NVLink4 links, per direction
    assert busbw_gb_s(message, seconds) == pytest.approx(library.nvls_fraction * 450, rel=0.01)
    # the held-out published figures: 476 GB/s (nccl-tests issue 290), H200 475 (issue 272)
    assert busbw_gb_s(message, seconds) == pytest.approx(476, rel=0.03)
    # the default model prices a Work's collective the same way
    work = Work(collectives=(message,))
    assert predict(work, target="h100-sxm").time_s == pytest.approx(seconds, rel=1e-9)


def test_without_nvls_a_large_all_reduce_is_a_ring_at_the_fitted_fraction() -> None:
    ceilings = Ceilings.from_spec(resolve("a100-sxm-80gb"))
    message = Collective("all-reduce", 4 * GiB, 8)
    chosen = library_collective_s(message, ceilings)
    assert chosen is not None and chosen[0] == "ring/Simple"
    library = collective_library(ceilings)
    assert library is not None and library.nvls_fraction is None
    assert busbw_gb_s(message, chosen[1]) == pytest.approx(library.ring_fraction * 300, rel=0.01)


def test_small_messages_take_the_low_latency_tree_and_large_ones_the_bandwidth_algorithm() -> None:
    library = COLLECTIVE_LIBRARIES["nvlink4"]
    small = nccl_algorithms("all-reduce", 4096, 8, 450e9, library)
    large = nccl_algorithms("all-reduce", GiB, 8, 450e9, library)
    assert min(small, key=small.__getitem__) == "tree/LL"    # log2(p) steps beat 2(p-1)
    assert min(large, key=large.__getitem__) == "nvls/Simple"
    no_nvls = nccl_algorithms("all-reduce", GiB, 8, 450e9, COLLECTIVE_LIBRARIES["nvlink3"])
    assert min(no_nvls, key=no_nvls.__getitem__) == "ring/Simple"
    # every algorithm's time grows with the bytes; one rank moves nothing
    assert all(large[key] > small[key] for key in small)
    ceilings = Ceilings.from_spec(resolve("h100-sxm"))
    assert library_collective_s(Collective("all-reduce", GiB, 1), ceilings) == ("none", 0.0)


def test_a_link_the_library_table_does_not_know_keeps_the_alpha_beta_ring() -> None:
    ceilings = Ceilings.from_spec(resolve("tpu-v5e"))
    assert collective_library(ceilings) is None
    assert library_collective_s(Collective("all-reduce", GiB, 8), ceilings) is None
    assert collective_library(Ceilings(target_id="not-a-catalogue-target", kind="gpu")) is None


def test_the_collective_fractions_are_the_fits_of_the_rows_they_cite() -> None:
    fitted = fitted_fractions()
    assert COLLECTIVE_LIBRARIES["nvlink4"].ring_fraction == pytest.approx(fitted["collective-model:ring_nvlink4"],
                                                                          abs=6e-4)
    assert COLLECTIVE_LIBRARIES["nvlink4"].nvls_fraction == pytest.approx(fitted["collective-model:nvls_nvlink4"],
                                                                          abs=6e-4)
    for library in COLLECTIVE_LIBRARIES.values():
        assert "https://" in library.source


def test_no_held_out_collective_row_shares_a_target_with_the_rows_of_its_rule() -> None:
    rows = load_measurements()
    fitted_targets: dict[str, set[str]] = {}
    for row in rows:
        if not row.held_out:
            fitted_targets.setdefault(row.fits, set()).add(row.target)
    held = [row for row in rows if row.held_out and isinstance(row.case, CollectiveCase)]
    assert len(held) >= 2
    for row in held:
        assert isinstance(row.case, CollectiveCase)
        ceilings = Ceilings.from_spec(resolve(row.target))
        chosen = library_collective_s(Collective(row.case.op, row.case.bytes, row.case.ranks), ceilings)
        assert chosen is not None
        rule = "collective-model:nvls_nvlink4" if chosen[0].startswith("nvls") else "collective-model:ring_nvlink4"
        assert row.target not in fitted_targets[rule], row.id
