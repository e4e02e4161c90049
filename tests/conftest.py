"""Test-wide settings: property tests draw the same examples on every run, so CI never flakes on a new one."""

from hypothesis import settings

settings.register_profile("gencc", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("gencc")
