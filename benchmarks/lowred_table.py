"""The low-redundancy table (issue 10): GCC, BACC, replication, ParM and SystematicGCC (untrained, and with
ParM's parity model on its coded workers) at N/K = 1.5 (K = 10, N = 15) and 1.25 (K = 8, N = 10).

    python benchmarks/lowred_table.py [--sets 200] [--workloads digits-cnn mnist1d-cnn] [--extra]

Random stragglers (S = 1, 2, 3) are scored by their exact expectation (every straggler set decoded) per input
set; worst adjacent pair: the largest loss over neighbouring workers (n, n + 1), per input set. Means over
input sets with 95% confidence half-widths, agreement in parentheses. SystematicGCC's prior length scale and
rho are calibrated on 50 sets of training inputs (`SystematicGCC.calibrated`), never on the scored test inputs;
--extra adds SystematicGCC with rho a tenth and ten times the calibrated value, and with GCC's length scale 0.3.
Parity models are trained once and cached.
"""

from __future__ import annotations

import argparse
import time

from gencc.experiments.lowred import SETTINGS, WORKLOADS, markdown, preset_args, run_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sets", type=int, default=200)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--extra", action="store_true")
    args = ap.parse_args()
    try:  # the preset's own checks of sets and workloads
        sets, workloads = preset_args({"sets": args.sets, "workloads": args.workloads})
    except ValueError as e:
        ap.error(str(e))
    t0 = time.perf_counter()
    rows = run_table(sets=sets, workloads=workloads, settings=SETTINGS, extra=args.extra,
                     log=lambda s: print(s, flush=True))
    print("\n".join(markdown(rows)))
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
