"""Answered: what sets the default's tail in front of a Triton fleet near capacity (docs/guides/upstreams.md).

Not grouping a worker's queued tasks into one request (it held or shortened
the tail at 90% load), but eager coded tasks spent while the gate holds every decode (they cost replica time and
buy only the decode deadline's timer, which the default now keeps without them). That timer's copies pay: without
it ("nodeadline", copies only at the observed p90 of latency) the tail at 90% was longer in the same A/B.

benchmarks/upstreams.py's fleet (W = 12 `tritonserver` replicas, 50 ms per input, each slow x10 10% of the time),
its open-loop client, and several `gencc serve` front ends in front of the same replicas, each started with some
of gencc's rules switched off in its own process (patched at start-up, nothing changed on disk), so one run
compares them on the same arrivals and the same slow periods (they restart with each draw):

- "group": a worker's queued tasks always go to its replica as one request, up to its max batch (whatever the
  request times say of a batch's cost);
- "nogroup": a worker's queued tasks go to its replica one request each (no grouping into the replica's batch);
- "eager": the default scheme sends its eager coded tasks even while its gate holds every decode;
- "noeager": the default scheme sends no eager coded task (a late member still gets its copies);
- "nodeadline": a group formed without coded tasks keeps no decode deadline (its members get copies only when
  late, at the observed p90 of latency);
- "nocopyrush": the gate's copies of a held request go only to idle workers (none idle: they wait for one).

Each front end is `NAME=OPTIONS[+PATCH...]`, e.g. `default=` (gencc's default), `hedged=--scheme hedged`,
`default+nogroup=`. Reported per load: p50 / p99 / p99.9 pooled over the draws, each draw's p99.9, how many
requests took over 250 and 500 ms and the slowest (a p99.9 rests on a handful of requests), and the tasks
per request (the inputs the replicas ran over the requests answered). The machine is shared and noisy: compare
figures of one run only.

    flock /tmp/gencc-bench.lock python benchmarks/investigations/upstreams_tail.py --loads 0.6 0.9 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import upstreams as up  # noqa: E402

PATCHES = ("group", "nogroup", "eager", "noeager", "nocopyrush", "nodeadline")
DEFAULT_FRONTS = ("hedged=--scheme hedged", "hedged+nogroup=--scheme hedged", "default=", "default+nogroup=",
                  "default+noeager=", "default+nogroup+noeager=")


def patch(names: list[str]) -> None:
    """Switch gencc's rules named in `names` off in this process (see the module docstring)."""
    if "group" in names:
        from gencc.engine.remote_backend import RemoteBackend

        RemoteBackend.group_limit = lambda self, worker: self.signature.max_batch
    if "nogroup" in names:
        from gencc.engine.remote_backend import RemoteBackend

        RemoteBackend.group_limit = lambda self, worker: 1
    if "eager" in names:
        from gencc.serving._policy.coded import CodedDispatcher

        CodedDispatcher.coding_pays = lambda self: True
    if "noeager" in names:
        from gencc.serving._policy.redundancy import Redundancy

        Redundancy.admit = lambda self, load: False
    if "nodeadline" in names:
        from gencc.serving._policy.coded import CodedDispatcher

        CodedDispatcher._would_code = lambda self, g: False
    if "nocopyrush" in names:
        import numpy as _np

        from gencc.serving._policy import gate as g

        def copy(self, disp, r, busy) -> None:  # copies on idle workers only
            have = sum(t.kind == "copy" for t in r.tasks)
            if have >= self.copies or r.status or not disp.can_make(r):
                return
            used = set(busy) | {int(w) for w in _np.flatnonzero(_np.asarray(disp.env.loads()) > 0)}
            used |= {t.worker for t in r.tasks if t.kind == "copy"}
            for _ in range(self.copies - have):
                t = disp.send_copy(r, "copy", exclude=used)
                if t is None:
                    self._wanting.setdefault(r, disp)
                    return
                used.add(t.worker)
            self._wanting.pop(r, None)

        g.Gate.copy = copy


def serve(urls_file: Path, name: str, options: list[str], env: dict) -> tuple[subprocess.Popen, str]:
    """A front end with the patches its name carries (`default+nogroup`), started as `upstreams.serve` starts one."""
    patches = ",".join(name.split("+")[1:])
    return up.serve(urls_file, options, env, launcher=[sys.executable, str(Path(__file__).resolve()), "--front",
                                                       patches], name=name)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--front":  # a patched `gencc serve`
        patch([p for p in sys.argv[2].split(",") if p])
        sys.argv = ["gencc", *sys.argv[3:]]
        runpy.run_module("gencc.cli", run_name="__main__")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loads", type=float, nargs="+", default=[0.6, 0.9])
    ap.add_argument("--fronts", nargs="+", default=list(DEFAULT_FRONTS), help="NAME[+PATCH...]=OPTIONS")
    ap.add_argument("--dump", type=Path, default=None, help="write every latency (JSON) here")
    a = ap.parse_args()
    if a.requests < 50 or not 1 <= a.seeds <= 20 or not all(0 < x < 1.2 for x in a.loads):
        ap.error("--requests must be at least 50, --seeds in 1..20, --loads in (0, 1.2)")
    bad = [f for f in a.fronts if "=" not in f or not f.split("=", 1)[0]]
    if bad:
        ap.error(f"--fronts takes NAME[+PATCH...]=OPTIONS, e.g. 'hedged=--scheme hedged'; got {bad[0]!r}")
    fronts_spec = [(s.split("=", 1)[0], s.split("=", 1)[1].split()) for s in a.fronts]
    if len({name for name, _ in fronts_spec}) < len(fronts_spec):
        ap.error("--fronts: each front end needs a name of its own")
    for name, _ in fronts_spec:
        bad = [p for p in name.split("+")[1:] if p not in PATCHES]
        if bad:
            ap.error(f"unknown patch {bad[0]!r}; choose from {', '.join(PATCHES)}")
    from measure import machine

    print(machine(), flush=True)
    env = {**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    starts = {name: lambda listing, name=name, opts=opts: serve(listing, name, opts, env) for name, opts in fronts_spec}
    with tempfile.TemporaryDirectory() as tmp:
        rows = up.tails(a, env, Path(tmp), starts)
    if a.dump is not None:
        a.dump.write_text(json.dumps([{k: r[k] for k in ("config", "load", "seed", "lat", "tasks")} for r in rows]))
    print("| load | front end | p50 | p99 | p99.9 pooled | p99.9 per draw | over 250 ms | over 500 ms | max | "
          "tasks per request | failed | cores |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for load in a.loads:
        for name, _ in fronts_spec:
            rs = [r for r in rows if r["load"] == load and r["config"] == name]
            lat = np.concatenate([r["lat"] for r in rs])
            p50, p99, p999 = np.percentile(lat, [50, 99, 99.9])
            per = ", ".join(f"{np.percentile(r['lat'], 99.9):.0f}" for r in rs)
            tasks = sum(r["tasks"] for r in rs) / max(len(lat), 1)
            print(f"| {load:.0%} | {name} | {p50:.0f} | {p99:.0f} | {p999:.0f} | {per} | {int((lat > 250).sum())} | "
                  f"{int((lat > 500).sum())} | {lat.max():.0f} | {tasks:.2f} | "
                  f"{sum(r['not_200'] for r in rs)} | {max(r['cores'] for r in rs):.2f} |")
    print(json.dumps({"machine": machine()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
