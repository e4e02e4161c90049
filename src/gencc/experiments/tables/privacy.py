"""The privacy table and figure: accuracy against leakage for the private codes (gencc.codes.private).

For GCC, BACC (with masks: PBACC) and LCC (degree 1: f read as a polynomial of degree K + T - 1 along the curve)
with `colluders` T in {1, 2, 4} and the masks' scale swept, on the trained digits and mnist1d CNNs at K = 8, N = 24:
RelAcc, agreement with f and rel_mse of the decode with S = 0 and S = 2 uniformly random stragglers, beside the
leakage of the worst set of T colluding workers (`gencc.metrics.leakage_bits`, bits per input coordinate under
independent unit-variance coordinates, the masks' scale relative to the inputs' rms as `encode` sets it). The
non-private GCC and BACC are the reference rows (leakage unbounded).

Input set b holds K test inputs drawn with seed b, in chain order (`order_inputs`, as `simulate` places them); its
masks come from seed b and its straggler sets from seed 10_000 + b, the same for every code (paired comparisons).
RelAcc pools every decoded input of a cell: the accuracy of argmax of the decode on the labels over that of f.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gencc.codes import Code, make_code
from gencc.codes.ordering import order_inputs
from gencc.model import apply_batch
from gencc.runtime.metrics import leakage_bits

from ..drawing import color, finish, grid, null_formatter, save
from ..markdown import table
from .options import Option, parse_overrides
from .output import table_section, write_table

PRESET = "privacy"
WORKLOADS = ("digits-cnn", "mnist1d-cnn")
K, N = 8, 24
SCHEMES = ("gcc", "bacc", "lcc")
#: the private GCC with the plain GCC's length scale (0.3), beside its own default (0.15)
GCC_03 = "gcc[length_scale=0.3]"
SCALES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
STRAGGLERS = (0, 2)
#: straggler sets drawn per input set at S > 0
DRAWS = 20
#: RelAcc at or above this is what the recommended operating point keeps
KEEP_REL_ACC = 0.9
DEFAULTS = {"sets": 30, "colluders": (1, 2, 4), "workloads": WORKLOADS}
OPTIONS = {"sets": Option("input sets per cell"),
           "colluders": Option("colluding workers T (a list)", many=True),
           "workloads": Option("trained workloads", choices=WORKLOADS)}
DESCRIPTION = (f"Private codes: accuracy against leakage, K = {K}, N = {N}, on the trained digits and mnist1d CNNs. "
               "GCC (its private default, length scale 0.15, and with the plain default 0.3), BACC (private: "
               "PBACC) and LCC (degree 1) with T colluders and the masks' scale swept over "
               f"{', '.join(f'{s:g}' for s in SCALES)} (the masks' sd over the inputs' rms); S = 0 and S = 2 "
               "uniformly random stragglers. Leakage: bits per input coordinate that the worst set of T colluding "
               "workers learns (`gencc.metrics.leakage_bits`, independent unit-variance coordinates). The plain GCC "
               "and BACC leak without bound and are the reference.")


def _code(scheme: str, T: int, scale: float) -> Code:
    opts: dict[str, Any] = {"degree": 1} if scheme == "lcc" else {"length_scale": 0.3} if scheme == GCC_03 else {}
    return make_code(scheme.split("[")[0], K, N, colluders=T, mask_scale=scale, **opts)


def _cell(code: Code, f: Callable, sets: list[np.ndarray], truth: np.ndarray, labels: np.ndarray,
          S: int) -> dict[str, float]:
    """Mean rel_mse, pooled agreement and RelAcc of `code` on the input sets (fresh masks from seed b per set)."""
    B = len(sets)
    Zs = []
    for b, X in enumerate(sets):
        if getattr(code, "colluders", 0):
            code.reseed(b)
        Zs.append(np.asarray(code.encode(X)))
    Z = np.stack(Zs)
    Y = apply_batch(f, Z.reshape(B * N, *Z.shape[2:])).reshape(B, N, -1)
    rels, hits, agree, total = [], 0, 0, 0
    for b in range(B):
        rng = np.random.default_rng(10_000 + b)
        patterns = [np.arange(N)] if S == 0 else [np.sort(rng.choice(N, N - S, replace=False)) for _ in range(DRAWS)]
        for ret in patterns:
            Yh = code.decode(Y[b][ret], ret)
            t = truth[b]
            rels.append(float(((Yh - t) ** 2).sum() / (t**2).sum()))
            guess = Yh.argmax(axis=1)
            hits += int((guess == labels[b]).sum())
            agree += int((guess == t.argmax(axis=1)).sum())
            total += K
    f_acc = float((truth.argmax(axis=2) == labels).mean())
    return {"rel_mse": float(np.mean(rels)), "agreement": agree / total,
            "rel_acc": (hits / total) / f_acc if f_acc else float("nan")}


def run_table(workloads: tuple[str, ...], sets: int, colluders: tuple[int, ...],
              log: Callable[[str], Any] | None = None) -> list[dict]:
    """One row per (workload, scheme, T, mask scale, S): leakage in bits, rel_mse, agreement, RelAcc."""
    from gencc.workloads import load

    schemes = (*SCHEMES, GCC_03)
    leak = {(s, T, c): leakage_bits(_code(s, T, c)) for s in schemes for T in colluders for c in SCALES}
    rows = []
    for name in workloads:
        w = load(name, progress=False)
        X_test, y_test = np.asarray(w.X_test), np.asarray(w.y_test)
        chosen = []
        for b in range(sets):
            idx = np.random.default_rng(b).choice(len(X_test), K, replace=False)
            chosen.append(idx[order_inputs(X_test[idx])])
        inputs = [X_test[idx] for idx in chosen]
        labels = np.stack([y_test[idx] for idx in chosen])
        X = np.stack(inputs)
        truth = apply_batch(w.f, X.reshape(sets * K, *X.shape[2:])).reshape(sets, K, -1)
        t0 = time.perf_counter()
        cells: list[tuple[str, int, float, Code]] = [(s, 0, 0.0, make_code(s, K, N)) for s in ("gcc", "bacc")]
        cells += [(s, T, c, _code(s, T, c)) for s in schemes for T in colluders for c in SCALES]
        for scheme, T, scale, code in cells:
            for S in STRAGGLERS:
                res = _cell(code, w.f, inputs, truth, labels, S)
                rows.append({"workload": name, "K": K, "N": N, "scheme": scheme, "T": T, "mask_scale": scale,
                             "S": S, "leakage_bits": leak[(scheme, T, scale)] if T else float("inf"),
                             "sets": sets, **res})
        if log:
            log(f"{name}: {time.perf_counter() - t0:.0f} s")
    return rows


def _interp(rows: list[dict], level: float) -> float:
    """RelAcc at `level` bits along a curve (rows of one code), linear in log leakage; NaN outside its range."""
    pts = sorted((float(r["leakage_bits"]), float(r["rel_acc"])) for r in rows)
    x = np.log([p[0] for p in pts])
    if not pts or not x[0] <= np.log(level) <= x[-1]:
        return float("nan")
    return float(np.interp(np.log(level), x, [p[1] for p in pts]))


def _curves(rows: list[dict]) -> dict[tuple, dict[str, list[dict]]]:
    """{(workload, T, S): {scheme: its private rows}}."""
    out: dict[tuple, dict[str, list[dict]]] = {}
    for r in rows:
        if int(r["T"]) > 0:
            out.setdefault((r["workload"], int(r["T"]), int(r["S"])), {}).setdefault(r["scheme"], []).append(r)
    return out


def compare(rows: list[dict], a: str = "gcc", b: str = "bacc", levels: int = 25) -> list[dict]:
    """Per (workload, T, S): at `levels` leakage levels spread (log) over the range both curves cover, how often
    `a`'s RelAcc is at or above `b`'s, and the least and largest difference."""
    out = []
    for (w, T, S), by in sorted(_curves(rows).items()):
        la = [float(r["leakage_bits"]) for r in by[a]]
        lb = [float(r["leakage_bits"]) for r in by[b]]
        lo, hi = max(min(la), min(lb)), min(max(la), max(lb))
        if lo >= hi:
            out.append({"workload": w, "T": T, "S": S, "lo": lo, "hi": hi, "levels": 0})
            continue
        grid_ = np.exp(np.linspace(np.log(lo), np.log(hi), levels))
        diff = np.array([_interp(by[a], x) - _interp(by[b], x) for x in grid_])
        out.append({"workload": w, "T": T, "S": S, "lo": lo, "hi": hi, "levels": levels,
                    "at_or_above": int((diff >= -1e-12).sum()), "min_diff": float(diff.min()),
                    "max_diff": float(diff.max())})
    return out


def operating_points(rows: list[dict]) -> list[dict]:
    """Per (workload, scheme, T, S): the least leakage on the curve whose RelAcc stays at or above KEEP_REL_ACC."""
    out = []
    for (w, T, S), by in sorted(_curves(rows).items()):
        for scheme, rs in sorted(by.items()):
            ok = [r for r in rs if float(r["rel_acc"]) >= KEEP_REL_ACC]
            best = min(ok, key=lambda r: float(r["leakage_bits"])) if ok else None
            out.append({"workload": w, "scheme": scheme, "T": T, "S": S, "row": best})
    return out


def plot(rows: list[dict], path: Path) -> Path:
    """RelAcc against leakage (log x), a panel per (workload, T, S), a line per code; the plain codes dashed."""
    panels = sorted(_curves(rows))
    workloads = sorted({p[0] for p in panels})
    cols = sorted({(T, S) for _, T, S in panels})
    fig, axes = grid(len(workloads), len(cols), w=3.6, h=3.0)
    for i, w in enumerate(workloads):
        for j, (T, S) in enumerate(cols):
            ax = axes[i, j]
            by = _curves(rows).get((w, T, S), {})
            for k, scheme in enumerate((*SCHEMES, GCC_03)):
                q = sorted(by.get(scheme, []), key=lambda r: float(r["leakage_bits"]))
                ax.plot([float(r["leakage_bits"]) for r in q], [float(r["rel_acc"]) for r in q],
                        "o-" if scheme in SCHEMES else "x:", ms=3, lw=1.1,
                        color=color(scheme, k) if scheme in SCHEMES else "0.5", label=f"{scheme}, T={T}")
            for k, scheme in enumerate(("gcc", "bacc")):
                plain = [r for r in rows if r["workload"] == w and r["scheme"] == scheme and int(r["T"]) == 0
                         and int(r["S"]) == S]
                if plain:
                    ax.axhline(float(plain[0]["rel_acc"]), ls="--", lw=0.9, color=color(scheme, k),
                               label=f"{scheme}, not private")
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(null_formatter())
            finish(ax, "leakage, bits per coordinate (worst T workers)", "RelAcc", f"{w}, T={T}, S={S}",
                   fontsize=9)
            if i or S != cols[0][1]:  # one legend per T, on the top row (the codes' labels name it)
                ax.get_legend().remove()
    return save(fig, path, f"Private codes: RelAcc against leakage, K={K}, N={N} (mask scale swept)")


def markdown(rows: list[dict]) -> list[str]:
    """The GCC-against-BACC check at equal leakage, the recommended operating points, and the table."""
    lines = []
    cmp = compare(rows)
    for c in cmp:
        if not c["levels"]:
            lines.append(f"- {c['workload']}, T={c['T']}, S={c['S']}: the GCC and BACC curves share no leakage range.")
            continue
        lines.append(f"- {c['workload']}, T={c['T']}, S={c['S']}: over {c['lo']:.2g} to {c['hi']:.2g} bits, GCC's "
                     f"RelAcc is at or above BACC's at {c['at_or_above']} of {c['levels']} leakage levels (GCC minus "
                     f"BACC from {c['min_diff']:+.3f} to {c['max_diff']:+.3f}).")
    lines += ["", f"Least leakage at which RelAcc stays at or above {KEEP_REL_ACC:g} (mask scale in parentheses; "
              "\"none\": no point of the sweep keeps it):", ""]
    body = []
    for p in operating_points(rows):
        r = p["row"]
        body.append([p["workload"], p["scheme"], str(p["T"]), str(p["S"]),
                     f"{float(r['leakage_bits']):.2f} bits ({float(r['mask_scale']):g})" if r else "none",
                     f"{float(r['rel_acc']):.3f}" if r else ""])
    lines += table(["workload", "code", "T", "S", "least leakage", "RelAcc there"], body)
    scales = sorted({float(r["mask_scale"]) for r in rows if int(r["T"])})
    lines += ["", f"{rows[0]['sets']} input sets per cell ({DRAWS} straggler draws per set at S > 0). Per mask scale: "
              "the leakage in bits and, after the colon, RelAcc (the plain codes: unbounded leakage; rel_mse and "
              "agreement with f per cell in the CSV):", ""]
    body = []
    for (w, scheme, T, S), g in _by_curve(rows).items():
        by = {float(r["mask_scale"]): r for r in g}
        if not T:
            r = g[0]
            body.append([w, scheme, "-", str(S), f"unbounded: {float(r['rel_acc']):.3f}", *[""] * (len(scales) - 1)])
            continue
        body.append([w, scheme, str(T), str(S), *[f"{float(by[c]['leakage_bits']):.2f}: {float(by[c]['rel_acc']):.3f}"
                                                  if c in by else "" for c in scales]])
    return lines + table(["workload", "code", "T", "S", *[f"scale {c:g}" for c in scales]], body)


def _by_curve(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Rows grouped by (workload, code, T, S), in the table's order."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault((r["workload"], r["scheme"], int(r["T"]), int(r["S"])), []).append(r)
    return out


def reproduce(out: str | Path, overrides: Any = None, progress: bool = True) -> dict[str, Any]:
    """Compute the table into <out>/tables/privacy.csv and its figure into <out>/figures/privacy.png; `overrides`:
    sets=B, colluders=1,2,4, workloads=digits-cnn."""
    opts = {**DEFAULTS, **parse_overrides(PRESET, overrides, OPTIONS)}
    t0 = time.perf_counter()
    rows = run_table(tuple(opts["workloads"]), opts["sets"], tuple(opts["colluders"]),
                     log=print if progress else None)
    res = write_table(out, PRESET, rows, t0)
    res["paths"].append(plot(rows, Path(out) / "figures" / f"{PRESET}.png"))
    return res


def section(out: str | Path) -> list[str]:
    """The preset's part of docs/results.md (empty when its table is absent); the figure is figures/privacy.png."""
    return table_section(out, PRESET, DESCRIPTION, markdown)
