"""Tooling for gencc's tests and benchmarks (like numpy.testing): not part of the coded-computing API.

(Ray inside a loopback-only network namespace is `gencc.netns`, production code the commands use too.)
"""
