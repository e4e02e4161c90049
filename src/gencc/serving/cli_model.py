"""The --model options of `gencc serve`: your own model, its training inputs and its parity model, each checked
before any slow work and refused with the option's name (exit 2)."""

from __future__ import annotations

from pathlib import Path

from ..cli.options import refuse
from .parity import PARITY_SCHEMES, parity_k


def check_model_options(workload: str | None, model: str | None, input_shape: str | None, data: Path | None,
                         parity: Path | None) -> None:
    if model is not None and workload is not None:
        raise refuse("--model", "give --model (your model) or --workload (a built-in one), not both")
    if model is None:
        for option, value in (("--input-shape", input_shape), ("--data", data), ("--parity", parity)):
            if value is not None:
                raise refuse(option, f"{option} goes with --model (your own model)")


def load_model(spec: str, input_shape: str | None, data: Path | None, parity: Path | None, scheme: str,
                K: int, workers: int, parm_k: int, check_results: str, packed: bool) -> tuple:  # noqa: N803
    """(Model, training inputs or None, parity model or None) of --model, each refused with the option's name."""
    from ..workloads.parity_commands import load_cli_model

    m, X = load_cli_model(spec, input_shape, data)
    if X is None and (scheme.startswith("sgcc-parity") or check_results != "off"):
        what = "sgcc-parity calibrates" if scheme.startswith("sgcc-parity") else "--check-results calibrates"
        raise refuse("--data", f"{what} on your model's training inputs: give --data FILE.npy")
    pk = parity_k(scheme, K, workers, parm_k)
    if pk is None:
        if parity is not None:
            raise refuse("--parity", f"--parity applies to {' and '.join(PARITY_SCHEMES)} (and their -hedge forms), "
                                     f"not {scheme!r}")
        return m, X, None
    if parity is None:
        raise refuse("--parity", f"{scheme} runs a parity model for k={pk}: train one with `gencc parity train "
                                 f"--model {spec} --data FILE --K {pk} --out parity.pt`, then pass --parity parity.pt")
    from ..workloads.parity_training import load_parity_file

    try:
        return m, X, load_parity_file(parity, m, k=pk, packed=True if packed else None)
    except ValueError as e:
        raise refuse("--parity", str(e)) from None
