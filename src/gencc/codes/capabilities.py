"""What a code can do, declared: the contract callers (runtime policies, serving's dispatchers and gate) read
instead of probing a code's attributes.

Every `gencc.codes.Code` answers `code.capabilities` with a frozen `Capabilities`. The base class declares the
plain case (every decode from at least `min_results` workers estimates every input; no coding groups; no
uncertainty estimate; every worker runs f on its coded input unscaled); a code that does more overrides the
`capabilities` property. `gencc.testing.check_code` holds a code's declaration to its behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """A code's declared abilities (module docstring). Fields:

    - partial: a decode may leave inputs without an estimate (`code.missing(returned)` lists them, their rows
      are zero); every input it does estimate is recovered exactly (a replica's result, a parity recovery).
      False: any `min_results` returned workers estimate every input and `missing` is always empty.
    - count_rule: `code.can_decode(returned)` is exactly "at least `min_results` distinct workers", so a caller
      may count results instead of calling it. False: ask `can_decode`.
    - uncertainty: `code.decode_uncertainty(Y, returned)` gives, per input, the estimated standard deviation of
      each decoded output coordinate's error, shape (K, *out_shape flattened) or broadcastable to it.
    - groups: the coding groups, each (the worker slot of the group's coded result, the inputs it combines),
      or None. With `partial` a group's coded result recovers exactly one lost member (ParM's parity); without,
      it informs the estimate of its members (SystematicGCC).
    - scales: per worker slot (a, b) when some worker that does not run f runs the code's parity model as
      z -> model(a z) / b on its coded input z; None: every such scale is 1.
    - colluders: the code is private against this many colluding workers (0: not private). Its `encode` adds
      masks drawn fresh for every call (`mask_matrix`, shape (N, colluders), says how), no worker ever receives
      an input raw, and `gencc.metrics.leakage_bits` measures what any `colluders` workers learn together.
    """

    partial: bool = False
    count_rule: bool = True
    uncertainty: bool = False
    groups: tuple[tuple[int, tuple[int, ...]], ...] | None = None
    scales: tuple[tuple[float, float], ...] | None = None
    colluders: int = 0

    @property
    def private(self) -> bool:
        """True when the code masks its coded inputs against at least one colluding worker."""
        return self.colluders > 0

    def group_slot(self) -> dict[int, int]:
        """{input: the worker slot of its coding group's coded result} (empty without groups)."""
        return {k: slot for slot, members in (self.groups or ()) for k in members}


#: the plain declaration (the base `Code`'s), and a GCC's (an uncertainty estimate): frozen, so shared by every
#: code that declares them (a job's policy reads a code's capabilities once per job)
PLAIN = Capabilities()
UNCERTAIN = Capabilities(uncertainty=True)


def as_groups(pairs: object) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Coding groups as plain ints: (slot, inputs) pairs from numpy indices."""
    return tuple((int(slot), tuple(int(k) for k in members)) for slot, members in pairs)  # type: ignore[attr-defined]
