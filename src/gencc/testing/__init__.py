"""Tooling for gencc's tests and benchmarks (like numpy.testing): not part of the coded-computing API.

`check_code(code)` runs a Code (yours or gencc's) through the Code contract, like scikit-learn's
`check_estimator`. Importing this package needs no pytest. (Ray inside a loopback-only network namespace is
`gencc.engine.ray.namespace`, production code the commands use too.)
"""

from .code_checks import check_code

__all__ = ["check_code"]
