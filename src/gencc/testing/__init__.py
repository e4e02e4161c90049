"""Tooling for gencc's tests and benchmarks (like numpy.testing): not part of the coded-computing API.

`gencc.testing.isolation` runs Ray inside a loopback-only network namespace.
"""
