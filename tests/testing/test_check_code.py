"""gencc.testing.check_code: every built-in code passes, a code this test defines passes, and broken codes are
caught with a message naming the broken rule."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gencc.codes import BACC, GCC, LCC, Capabilities, Code, ParM, Replication, SystematicGCC
from gencc.rkhs.points import equispaced
from gencc.testing import check_code

BUILT_IN = [GCC(4, 8), GCC(6, 8), GCC(4, 9, lam_dec="gcv"), GCC(5, 12, gaps="bridge"), GCC(5, 12, gaps="fit"),
            BACC(4, 8), LCC(3, 7, degree=2), ParM(4, 2), ParM(5, 2),
            Replication(3, 7), SystematicGCC(6, 9), SystematicGCC(6, 9, parity=lambda z: z)]


@pytest.mark.parametrize("code", BUILT_IN, ids=repr)
def test_every_built_in_code_passes(code):
    check_code(code)


class NearestWorker(Code):
    """A code gencc does not ship: worker n computes f at the input nearest its point; input k is read from the
    returned worker nearest alpha_k (an approximate code: one result estimates every input)."""

    name = "nearest"

    def __init__(self, K: int, N: int):
        super().__init__(K, N)
        self.alpha, self.beta = equispaced(K), equispaced(N)

    @property
    def min_results(self) -> int:
        return 1

    def _encoding_matrix(self) -> np.ndarray:
        E = np.zeros((self.N, self.K))
        E[np.arange(self.N), np.abs(self.beta[:, None] - self.alpha[None, :]).argmin(axis=1)] = 1.0
        return E

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        D = np.zeros((self.K, returned.size))
        D[np.arange(self.K), np.abs(self.alpha[:, None] - self.beta[returned][None, :]).argmin(axis=1)] = 1.0
        return D


def test_a_code_the_test_defines_passes():
    check_code(NearestWorker(3, 7))
    check_code(NearestWorker(5, 5))


class Undeclared(NearestWorker):
    """Leaves inputs without an estimate (like replication) but keeps the plain declaration."""

    def missing(self, returned):
        got = {int(np.abs(self.alpha - self.beta[n]).argmin()) for n in returned}
        return np.array(sorted(set(range(self.K)) - got), dtype=np.int64)


class OrderDependent(NearestWorker):
    """Reads the results as if `returned` were sorted: right for sorted indices only."""

    def decode(self, Y, returned):
        return super().decode(Y, sorted(returned))

    def decoding_matrix(self, returned, Y=None):
        return super().decoding_matrix(sorted(returned), Y)


class WrongShape(NearestWorker):
    def decode(self, Y, returned):
        return super().decode(Y, returned)[:-1]


class ClaimsUncertainty(NearestWorker):
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(uncertainty=True)


class SilentBelowMinimum(NearestWorker):
    @property
    def min_results(self) -> int:
        return 2

    def _validated(self, returned):
        arr = np.asarray(returned, dtype=np.int64)
        order = np.argsort(arr, kind="stable")
        return arr, order, arr[order]


class FalseExact(Replication):
    """Declares exact recovery, but reads each input from the next input's replica."""

    def _decoding_matrix(self, returned, Y):
        return np.roll(super()._decoding_matrix(returned, Y), 1, axis=0)


@pytest.mark.parametrize("code, rule", [
    (Undeclared(3, 4), "capabilities.partial is False: missing"),
    (OrderDependent(3, 7), "not their order"),
    (WrongShape(3, 7), r"decode maps \(\|returned\|, \*out\) to \(K, \*out\)"),
    (ClaimsUncertainty(3, 7), "capabilities.uncertainty is True"),
    (SilentBelowMinimum(3, 7), "below min_results"),
    (FalseExact(3, 7), "recovered exactly"),
], ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_a_broken_code_is_caught_with_the_rule_it_breaks(code, rule):
    with pytest.raises(AssertionError, match=rule) as err:
        check_code(code)
    assert repr(code) in str(err.value)


def test_gencc_testing_imports_without_pytest():
    code = ("import sys; sys.modules['pytest'] = None; import gencc.testing; "
            "from gencc.testing import check_code; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
