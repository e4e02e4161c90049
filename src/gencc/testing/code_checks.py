"""`check_code`: run a Code (gencc's own or a third party's) through the Code contract, like scikit-learn's
`check_estimator`.

It checks what every caller of a code relies on, with results simulated exactly as the decoder models them
(worker n returns sum_k E[n, k] f(x_k), f a random linear map):

- the interface: K, N, `min_results` in [0, N], `capabilities` a `gencc.codes.Capabilities`;
- shapes: `encode` (K, *in) -> (N, *in) (or a list of N arrays for `packed_groups`), `decode` (|R|, *out) ->
  (K, *out), `encoding_matrix` (N, K), `decoding_matrix(returned)` (K, |R|);
- the matrices agree with the maps: `encode(X) == E X`, `decode(Y, R) == D_R Y`;
- `decode` depends on the set of returned workers, not on their order;
- numpy in, numpy out; torch in, torch out (when torch is importable), with the same values;
- `min_results` honoured: fewer results raise a ValueError naming the minimum, and `can_decode` says False;
- the declared capabilities hold: not `partial` -> `missing` is always empty; `partial` -> every input not listed
  by `missing` is recovered exactly and the listed ones are zero rows; `count_rule` -> `can_decode` is the count
  rule; `uncertainty` -> `decode_uncertainty` gives a non-negative (K, out) spread; `groups` and `scales` are
  well formed; `colluders` (a private code) -> `encode(X)` is E X plus masks E_mask M (`mask_matrix`, (N, T)),
  fresh on every call, every worker's row weighs the masks (no worker receives an input raw, and no coded
  input equals one), and every set of T workers sees the masks through a block of full rank T (its leakage is
  finite: `gencc.metrics.leakage_bits`).

A failed check raises AssertionError saying which code, which rule, and what was seen. pytest is not needed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from itertools import combinations
from math import comb
from typing import Any

import numpy as np

from ..codes import Capabilities, Code

#: output coordinates and input features of the simulated results
OUT_DIM, IN_DIM = 3, 4
#: a private code's sets of T colluding workers are all checked up to this many, a random sample of this many above
MAX_COLLUDING_SETS = 2000


def check_code(code: Code, *, seed: int = 0, trials: int = 12, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    """Run `code` through the Code contract (module docstring); raise AssertionError on the first broken rule.

    `trials`: random sets of returned workers checked; `rtol`, `atol`: tolerance of the value comparisons."""
    rng = np.random.default_rng(seed)
    c = _Checker(code, rng, rtol, atol)
    c.interface()
    c.encoding()
    F = rng.normal(size=(code.K, OUT_DIM))
    for returned in c.returned_sets(trials):
        c.decoding(F, returned)
    c.below_minimum(F)
    c.capabilities(F, trials)
    c.torch(F)


class _Checker:
    def __init__(self, code: Code, rng: np.random.Generator, rtol: float, atol: float):
        self.code, self.rng, self.rtol, self.atol = code, rng, rtol, atol

    def fail(self, rule: str, seen: str) -> None:
        raise AssertionError(f"check_code({self.code!r}): {rule}; {seen}")

    def ensure(self, ok: bool, rule: str, seen: Callable[[], str] | str) -> None:
        if not ok:
            self.fail(rule, seen() if callable(seen) else seen)

    def close(self, a: np.ndarray, b: np.ndarray) -> bool:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        return a.shape == b.shape and bool(np.allclose(a, b, rtol=self.rtol, atol=self.atol * max(1.0, np.abs(b).max(
            initial=0.0))))

    # ----- the interface ------------------------------------------------------------------------------------
    def interface(self) -> None:
        code = self.code
        self.ensure(isinstance(code, Code), "a code subclasses gencc.codes.Code", f"got {type(code).__name__}")
        K, N, m = code.K, code.N, code.min_results
        self.ensure(isinstance(K, int) and isinstance(N, int) and 1 <= K <= N, "K and N are integers, 1 <= K <= N",
                    f"K={K!r}, N={N!r}")
        self.ensure(isinstance(m, (int, np.integer)) and 0 <= m <= N, "min_results is an integer in [0, N]",
                    f"min_results={m!r}, N={N}")
        caps = code.capabilities
        self.ensure(isinstance(caps, Capabilities), "capabilities is a gencc.codes.Capabilities",
                    f"got {type(caps).__name__}")
        if code.uniform_workers:
            f = _identity
            self.ensure(all(code.worker_function(f, n) is f for n in range(N)),
                        "uniform_workers True means every worker_function(f, n) is f", "some worker runs another")

    def encoding(self) -> None:
        code = self.code
        E = np.asarray(code.encoding_matrix)
        self.ensure(E.shape == (code.N, code.K), "encoding_matrix has shape (N, K)", f"got {E.shape}")
        self.ensure(bool(np.isfinite(E).all()), "encoding_matrix is finite", "it holds NaN or inf")
        X = self.rng.normal(size=(code.K, IN_DIM))
        if code.capabilities.colluders:
            self.private(E, X)
            return
        Z = code.encode(X)
        packs = code.packed_groups()
        if packs:
            self.ensure(isinstance(Z, list) and len(Z) == code.N,
                        "encode gives a list of N arrays for a code with packed_groups", f"got {type(Z).__name__}")
            for n in range(code.N):
                want = X[packs[n]] if n in packs else E[n] @ X
                self.ensure(self.close(Z[n], want), f"encode's worker {n} input is "
                            + ("its packed group's inputs" if n in packs else "row n of E X"),
                            lambda n=n: f"got shape {np.shape(Z[n])}")
            return
        self.ensure(isinstance(Z, np.ndarray), "encode of a numpy array gives a numpy array",
                    f"got {type(Z).__name__}")
        self.ensure(Z.shape == (code.N, IN_DIM), "encode maps (K, *in) to (N, *in)",
                    f"X {X.shape} gave {Z.shape}")
        self.ensure(self.close(Z, E @ X), "encode(X) equals encoding_matrix @ X",
                    lambda: f"largest difference {np.abs(Z - E @ X).max():.3g}")
        X3 = self.rng.normal(size=(code.K, 2, 2))
        Z3 = code.encode(X3)
        self.ensure(np.shape(Z3) == (code.N, 2, 2), "encode keeps the input's trailing shape",
                    f"X {X3.shape} gave {np.shape(Z3)}")

    def masked(self, E: np.ndarray, X: np.ndarray, Z: np.ndarray) -> np.ndarray:
        """The masks' part Z - E X of a private code's coded inputs, checked to lie in the span of mask_matrix."""
        B = np.asarray(self.code.mask_matrix, dtype=float)
        diff = np.asarray(Z, dtype=float).reshape(self.code.N, -1) - E @ X.reshape(self.code.K, -1)
        fit = B @ np.linalg.lstsq(B, diff, rcond=None)[0]
        self.ensure(self.close(fit, diff), "a private code's encode(X) is E X + mask_matrix @ M for masks M",
                    lambda: f"what the masks leave unexplained reaches {np.abs(fit - diff).max():.3g}")
        return diff

    def private(self, E: np.ndarray, X: np.ndarray) -> None:
        """The privacy contract of a code declaring `colluders` (module docstring)."""
        code, T = self.code, int(self.code.capabilities.colluders)
        B = np.asarray(getattr(code, "mask_matrix", np.zeros(0)))
        self.ensure(B.shape == (code.N, T) and bool(np.isfinite(B).all()),
                    "a private code's mask_matrix is finite with shape (N, colluders)", f"got shape {B.shape}")
        Z = code.encode(X)
        self.ensure(isinstance(Z, np.ndarray) and Z.shape == (code.N, IN_DIM), "encode maps (K, *in) to (N, *in)",
                    f"X {X.shape} gave {np.shape(Z)}")
        first = self.masked(E, X, Z)
        again = self.masked(E, X, code.encode(X))
        self.ensure(not np.allclose(first, again), "a private code draws fresh masks on every call of encode",
                    "two calls on the same inputs gave the same coded inputs")
        rows = np.linalg.norm(np.hstack([E, B]), axis=1)
        weak = np.flatnonzero(np.linalg.norm(B, axis=1) <= 1e-9 * rows)
        self.ensure(weak.size == 0, "every worker's coded input of a private code weighs the masks (no raw inputs)",
                    lambda: f"worker(s) {weak.tolist()[:8]} get no mask")
        gap = np.min(np.linalg.norm(np.asarray(Z)[:, None, :] - X[None, :, :], axis=2))
        self.ensure(gap > 1e-6 * max(1.0, float(np.abs(X).max())), "no coded input of a private code is a raw input",
                    f"a coded input lies within {gap:.3g} of an input")
        X3 = self.rng.normal(size=(code.K, 2, 2))
        self.ensure(np.shape(code.encode(X3)) == (code.N, 2, 2), "encode keeps the input's trailing shape",
                    f"X {X3.shape} gave {np.shape(code.encode(X3))}")
        if comb(code.N, T) <= MAX_COLLUDING_SETS:
            sets = [list(S) for S in combinations(range(code.N), T)]
        else:
            sets = [sorted(self.rng.choice(code.N, size=T, replace=False).tolist()) for _ in range(MAX_COLLUDING_SETS)]
        for S in sets:
            self.ensure(np.linalg.matrix_rank(B[S]) == T, f"every {T} colluding workers see the masks through a "
                        "block of full rank (their leakage is finite)", f"workers {S} do not")

    # ----- decoding -----------------------------------------------------------------------------------------
    def returned_sets(self, trials: int) -> list[list[int]]:
        """Every worker, every worker but one (each), and random sets of at least max(min_results, 1)."""
        N, least = self.code.N, max(int(self.code.min_results), 1)
        sets = [list(range(N))]
        if N - 1 >= least:
            sets += [[n for n in range(N) if n != d] for d in range(N)]
        for _ in range(trials):
            size = int(self.rng.integers(least, N + 1))
            sets.append(sorted(int(n) for n in self.rng.choice(N, size=size, replace=False)))
        return sets

    def results(self, F: np.ndarray, returned: list[int]) -> np.ndarray:
        """The returned workers' results as the decoder models them: E[returned] F."""
        return np.asarray(self.code.encoding_matrix)[returned] @ F

    def decoding(self, F: np.ndarray, returned: list[int]) -> None:
        code = self.code
        Y = self.results(F, returned)
        out = code.decode(Y, returned)
        self.ensure(isinstance(out, np.ndarray), "decode of numpy results gives a numpy array",
                    f"got {type(out).__name__} for returned={returned}")
        self.ensure(out.shape == (code.K, OUT_DIM), "decode maps (|returned|, *out) to (K, *out)",
                    f"Y {Y.shape} from returned={returned} gave {out.shape}")
        D = np.asarray(code.decoding_matrix(returned, Y if code.data_dependent else None))
        self.ensure(D.shape == (code.K, len(returned)), "decoding_matrix(returned) has shape (K, len(returned))",
                    f"got {D.shape} for returned={returned}")
        self.ensure(self.close(out, D @ Y), "decode(Y, returned) equals decoding_matrix(returned) @ Y",
                    lambda: f"largest difference {np.abs(out - D @ Y).max():.3g} for returned={returned}")
        perm = self.rng.permutation(len(returned))
        shuffled = [returned[i] for i in perm]
        again = code.decode(Y[perm], shuffled)
        self.ensure(self.close(again, out), "decode depends on the set of returned workers, not their order",
                    lambda: f"returned={returned} and {shuffled} gave results differing by "
                            f"{np.abs(np.asarray(again) - out).max():.3g}")
        Y3 = Y.reshape(len(returned), 1, OUT_DIM)
        out3 = code.decode(Y3, returned)
        self.ensure(np.shape(out3) == (code.K, 1, OUT_DIM) and self.close(np.reshape(out3, out.shape), out),
                    "decode keeps the results' trailing shape", f"Y {Y3.shape} gave {np.shape(out3)}")

    def below_minimum(self, F: np.ndarray) -> None:
        code = self.code
        least = int(code.min_results)
        if least == 0:
            return
        returned = sorted(int(n) for n in self.rng.choice(code.N, size=least - 1, replace=False))
        self.ensure(not code.can_decode(returned), "can_decode is False below min_results",
                    f"can_decode({returned}) is True with min_results={least}")
        try:
            code.decode(self.results(F, returned), returned)
        except ValueError as e:
            self.ensure(str(least) in str(e), "decode below min_results raises a ValueError naming the minimum",
                        f"the message was {str(e)!r}")
        else:
            self.fail("decode below min_results raises a ValueError",
                      f"decode from {least - 1} results (min_results={least}) returned an estimate")

    # ----- capabilities -------------------------------------------------------------------------------------
    def capabilities(self, F: np.ndarray, trials: int) -> None:
        code, caps = self.code, self.code.capabilities
        sets = self.returned_sets(trials)
        if caps.partial:
            sets += [[]] if code.min_results == 0 else []
        for returned in sets:
            miss = np.asarray(code.missing(returned))
            self.ensure(miss.ndim == 1 and (miss.size == 0 or (0 <= miss.min() and miss.max() < code.K)),
                        "missing gives input indices in [0, K)", f"got {miss!r}")
            if caps.count_rule:
                self.ensure(code.can_decode(returned) == (len(set(returned)) >= code.min_results),
                            "capabilities.count_rule: can_decode is 'at least min_results distinct workers'",
                            f"can_decode({returned}) is {code.can_decode(returned)} with min_results="
                            f"{code.min_results}")
            if not caps.partial:
                self.ensure(miss.size == 0, "capabilities.partial is False: missing(returned) is always empty "
                            "(declare partial=True for a code that leaves inputs without an estimate)",
                            f"missing({returned}) = {miss.tolist()}")
                continue
            out = np.asarray(code.decode(self.results(F, returned), returned)) if returned else np.zeros_like(F)
            want = F.copy()
            want[miss] = 0.0
            self.ensure(self.close(out, want), "capabilities.partial: every input not listed by missing is "
                        "recovered exactly and the missing ones are zero rows",
                        lambda r=returned, o=out, w=want, m=miss: f"returned={r}, missing={m.tolist()}, largest "
                                                                  f"error {np.abs(o - w).max():.3g}")
        if caps.uncertainty:
            self.uncertainty(F, sets)
        self.groups(caps, F)
        if caps.scales is not None:
            self.ensure(len(caps.scales) == code.N and all(a > 0 and b > 0 for a, b in caps.scales),
                        "capabilities.scales holds a positive (a, b) per worker", f"got {caps.scales!r}")

    def uncertainty(self, F: np.ndarray, sets: list[list[int]]) -> None:
        code = self.code
        for returned in sets[:4]:
            try:
                sd = np.asarray(code.decode_uncertainty(self.results(F, returned), returned), dtype=float)
            except NotImplementedError:
                self.fail("capabilities.uncertainty is True: decode_uncertainty(Y, returned) gives an estimate",
                          "it raised NotImplementedError")
            ok = sd.ndim >= 1 and sd.shape[0] == code.K
            try:
                np.broadcast_to(sd.reshape(code.K, -1), (code.K, OUT_DIM))
            except ValueError:
                ok = False
            self.ensure(ok, "decode_uncertainty gives per input (K rows) a spread broadcastable to the outputs",
                        f"got shape {sd.shape} for K={code.K}, {OUT_DIM} outputs")
            self.ensure(not np.isnan(sd).any() and bool((sd >= 0).all()),
                        "decode_uncertainty is non-negative (inf allowed, NaN not)", f"got {sd.ravel()[:6]}")

    def groups(self, caps: Capabilities, F: np.ndarray) -> None:
        code = self.code
        if caps.groups is None:
            return
        slots = [s for s, _ in caps.groups]
        members = [k for _, g in caps.groups for k in g]
        self.ensure(len(set(slots)) == len(slots) and all(0 <= s < code.N for s in slots),
                    "capabilities.groups: each group's coded slot is a distinct worker in [0, N)", f"slots {slots}")
        self.ensure(len(set(members)) == len(members) and all(0 <= k < code.K for k in members),
                    "capabilities.groups: each input lies in at most one group, inputs in [0, K)",
                    f"members {members}")
        if not caps.partial:
            return
        for slot, grp in caps.groups:  # exact recovery: every worker back but one member's own
            for k in grp:
                own = _own_worker(code, k)
                if own is None or own == slot:
                    continue
                returned = [n for n in range(code.N) if n != own]
                out = np.asarray(code.decode(self.results(F, returned), returned))
                self.ensure(k not in np.asarray(code.missing(returned)).tolist() and self.close(out[k], F[k]),
                            "capabilities.groups with partial: a group's coded result recovers one lost member",
                            f"input {k} (group slot {slot}) was not recovered from returned={returned}")

    # ----- array kinds --------------------------------------------------------------------------------------
    def torch(self, F: np.ndarray) -> None:
        if importlib.util.find_spec("torch") is None:
            return
        import torch

        code = self.code
        X = self.rng.normal(size=(code.K, IN_DIM))
        Z = code.encode(torch.from_numpy(X))
        if code.capabilities.colluders:
            self.ensure(isinstance(Z, torch.Tensor), "encode of a torch tensor gives a torch tensor",
                        f"got {type(Z).__name__}")
            self.masked(np.asarray(code.encoding_matrix, dtype=float), X, Z.numpy())
        elif not code.packed_groups():
            self.ensure(isinstance(Z, torch.Tensor), "encode of a torch tensor gives a torch tensor",
                        f"got {type(Z).__name__}")
            self.ensure(self.close(Z.numpy(), code.encode(X)), "encode gives the same values for torch and numpy",
                        "they differ")
        returned = list(range(code.N))
        Y = self.results(F, returned)
        out = code.decode(torch.from_numpy(Y), returned)
        self.ensure(isinstance(out, torch.Tensor), "decode of torch results gives a torch tensor",
                    f"got {type(out).__name__}")
        self.ensure(self.close(out.numpy(), code.decode(Y, returned)), "decode gives the same values for torch "
                    "and numpy", "they differ")


def _own_worker(code: Code, k: int) -> int | None:
    """The worker whose encoded input is x_k itself, if any."""
    E = np.asarray(code.encoding_matrix)
    e = np.zeros(code.K)
    e[k] = 1.0
    hits = np.flatnonzero(np.all(np.abs(E - e) < 1e-12, axis=1))
    return int(hits[0]) if hits.size else None


def _identity(x: Any) -> Any:
    return x


__all__ = ["check_code"]
