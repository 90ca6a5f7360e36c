"""Capability profiles: the measured ceilings of a target from its runs (:func:`build_profile`)
and the profile file read back (:func:`load_profile`).

:mod:`.build` combines runs; :mod:`.cases`, :mod:`.compute` and :mod:`.levels` read one run's
cases into ceilings; :mod:`.figures` holds what they share; :mod:`.sanity` holds the ceilings to
what the hardware can do (flagged figures are kept out of the ceilings and named in the bottom
line). Writing and printing are ``charz profile``'s, in
:mod:`pytest_charz.report.profile_command`.
"""
from __future__ import annotations

from .build import build_profile, load_profile

__all__ = ["build_profile", "load_profile"]
