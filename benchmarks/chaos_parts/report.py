"""The chaos run's page (benchmarks/chaos.py): the per-minute table, each fault's recovery, the bursts, the hostile
traffic and the head node's loss, all computed from the client's records and the run's samples."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: the window of the per-fault p99, seconds; the tail is back when a window's p99 is within RECOVERED x before
WINDOW_S, RECOVERED, STEP_S, AFTER_S = 10.0, 2.0, 0.5, 30.0
COLUMNS = ("minute", "sent", "answered", "503", "504", "other 5xx", "lost", "wrong", "degraded", "agreement",
           "p50 ms", "p99 ms", "p99.9 ms", "server RSS MB", "health not ok s", "actors per node")


def _q(x: np.ndarray, q: float) -> float:
    """Quantile, the higher sample (a request not answered counts as infinitely slow: never interpolated)."""
    return float(np.quantile(x, q, method="higher")) if x.size else math.nan


def _ms(v: float) -> str:
    return "-" if math.isnan(v) else ("never" if math.isinf(v) else f"{v * 1000:.0f}")


def counts(r: dict[str, np.ndarray], sel: np.ndarray) -> dict[str, int]:
    """The requests of `sel` among the records `r`: sent, answered (200), 503, 504, lost (no answer), and of the
    200s the degraded and the wrong ones."""
    st = r["status"]
    ok = sel & (st == 200)
    return {"sent": int(sel.sum()), "200": int(ok.sum()), "503": int((sel & (st == 503)).sum()),
            "504": int((sel & (st == 504)).sum()), "lost": int((sel & (st == 0)).sum()),
            "degraded": int((ok & r["degraded"]).sum()), "wrong": int((ok & r["wrong"]).sum())}


def minutes(m: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per minute of arrivals."""
    r, ms, n = m["records"], m["minute_s"], m["n_minutes"]
    t, st = r["t"], r["status"]
    idx = np.minimum((t // ms).astype(int), n - 1)
    rows = []
    for k in range(n):
        sel = idx == k
        ok = sel & (st == 200)
        deg = ok & r["degraded"]
        end = (k + 1) * ms
        before = [s for s in m["samples"] if s[0] < end]
        inside = [s for s in before if s[0] >= k * ms]
        c = counts(r, sel)
        rows.append({"minute": k + 1, "sent": c["sent"], "answered": c["200"], "503": c["503"], "504": c["504"],
                     "other 5xx": int((sel & (st >= 500) & (st != 503) & (st != 504)).sum()),
                     "other 4xx": int((sel & (st >= 400) & (st < 500)).sum()),
                     "lost": c["lost"], "wrong": c["wrong"], "degraded": c["degraded"],
                     "agreement": float(r["agree"][deg].mean()) if deg.any() else math.nan,
                     "p50": _q(r["latency"][ok], 0.5), "p99": _q(r["latency"][ok], 0.99),
                     "p999": _q(r["latency"][ok], 0.999), "rss": before[-1][3] if before else math.nan,
                     "not_ok": sum(1 for s in inside if s[1] != 200),
                     "placement": m["placement"][k] if k < len(m["placement"]) else "-"})
    return rows


def recovery(m: dict[str, Any], t_f: float) -> tuple[float, float]:
    """(the load's p99 in the WINDOW_S before t_f, seconds after t_f until a WINDOW_S window's p99 is within
    RECOVERED x of it; inf when none is before the run ends)."""
    r = m["records"]
    base = r["kind"] == 0
    t = r["t"][base]
    lat = np.where(r["status"][base] == 200, r["latency"][base], np.inf)
    before = _q(lat[(t >= t_f - WINDOW_S) & (t < t_f)], 0.99)
    d = 0.0
    while t_f + d + WINDOW_S <= m["duration"] + 1e-9:
        w = lat[(t >= t_f + d) & (t < t_f + d + WINDOW_S)]
        if w.size >= 5 and _q(w, 0.99) <= RECOVERED * before:
            return before, d
        d += STEP_S
    return before, math.inf


def health_times(m: dict[str, Any], t_f: float, until: float) -> tuple[float, float]:
    """Seconds after t_f until /healthz first was not ok (before `until`: the next fault), and then ok again (nan:
    it stayed ok; inf: not ok again within the run)."""
    after = [s for s in m["samples"] if s[0] >= t_f]
    bad = next((s[0] for s in after if s[1] != 200 and s[0] < until), None)
    if bad is None:
        return math.nan, math.nan
    good = next((s[0] for s in after if s[0] > bad and s[1] == 200), None)
    return bad - t_f, (good - t_f) if good is not None else math.inf


def _s(v: float) -> str:
    return "stayed ok" if math.isnan(v) else ("not within the run" if math.isinf(v) else f"{v:.1f}")


def faults_table(m: dict[str, Any]) -> list[str]:
    r = m["records"]
    lines = ["| at | fault | load's 10-s p99 before, ms | back within 2x after, s | /healthz not ok after, s | "
             "then ok again after, s | lost in the 30 s after | 503 / 504 in the 30 s after |",
             "|---|---|---|---|---|---|---|---|"]
    for e in m["events"]:
        before, back = recovery(m, e["t"])
        later = [x["t"] for x in m["events"] if x["t"] > e["t"] + 1.0]
        bad, good = health_times(m, e["t"], min([e["t"] + 60.0, *later]))
        c = counts(r, (r["t"] >= e["t"]) & (r["t"] < e["t"] + AFTER_S))
        lines.append(f"| {e['t'] // 60:.0f}:{e['t'] % 60:04.1f} | {e['what']} | {_ms(before)} | {_s(back)} | "
                     f"{'stayed ok' if math.isnan(bad) else f'{bad:.1f}'} | {'-' if math.isnan(bad) else _s(good)} | "
                     f"{c['lost']} | {c['503']} / {c['504']} |")
    return lines


def bursts_table(m: dict[str, Any]) -> list[str]:
    r = m["records"]
    lines = ["| burst at | requests | 200 (of them degraded) | 503 | 504 | lost | wrong |",
             "|---|---|---|---|---|---|---|"]
    for e in (e for e in m["events"] if e["kind"] == "burst"):
        c = counts(r, (r["kind"] == 1) & (np.abs(r["t"] - e["t"]) < 2.0))
        lines.append(f"| {e['t']:.0f} s | {c['sent']} | {c['200']} ({c['degraded']}) | {c['503']} | {c['504']} | "
                     f"{c['lost']} | {c['wrong']} |")
    return lines


def hostile_table(m: dict[str, Any]) -> list[str]:
    lines = ["| from | malformed requests | their statuses | slow connections | closed by the server after the read "
             "timeout | still open |", "|---|---|---|---|---|---|"]
    for e in (e for e in m["events"] if e["kind"] == "hostile"):
        st = ", ".join(f"{k}: {v}" for k, v in e.get("statuses", {}).items())
        lines.append(f"| {e['t']:.0f} s | {e.get('malformed', '-')} | {st} | {e.get('slow', '-')} | "
                     f"{e.get('closed', '-')} | {e.get('still_open', '-')} |")
    return lines


def head_table(m: dict[str, Any]) -> list[str]:
    e = next((e for e in m["events"] if e["kind"] == "head"), None)
    if e is None:
        return []
    r, t_h = m["records"], e["t"]
    after = [s for s in m["samples"] if s[0] >= t_h]
    first_bad = next((s for s in after if s[1] != 200), None)
    said = ("-" if first_bad is None else
            f"{first_bad[1] or 'no answer'} {first_bad[2].get('status', '')} after {first_bad[0] - t_h:.1f} s "
            f"(alive {first_bad[2].get('alive', '-')}, replacing {first_bad[2].get('replacing', '-')}, dead "
            f"{first_bad[2].get('dead', '-')})")
    exit_s = e.get("exit_s", math.nan)
    until_exit = (r["t"] >= t_h) & (r["t"] < t_h + exit_s)
    down = (r["t"] >= t_h + exit_s) & (r["t"] < t_h + e.get("ready_s", math.inf))
    rows = [
        ("/healthz after the loss", said),
        ("requests sent between the loss and the server's exit: answered / lost / 5xx",
         f"{int((until_exit & (r['status'] == 200)).sum())} / {int((until_exit & (r['status'] == 0)).sum())} / "
         f"{int((until_exit & (r['status'] >= 500)).sum())}"),
        ("the server exited after", f"{exit_s:.1f} s, exit status {e.get('exit_status', '-')}"),
        ("its last words", f"`{str(e.get('exit_says', ''))[:300].replace('|', '/').replace('`', '')}`"),
        ("the operator's fresh cluster up after", f"{e.get('fresh_cluster_s', math.nan):.1f} s"),
        ("the restarted server ready (/healthz ok) after", f"{e.get('ready_s', math.nan):.1f} s"),
        ("requests sent while no server listened: lost / answered",
         f"{int((down & (r['status'] == 0)).sum())} / {int((down & (r['status'] == 200)).sum())}"),
    ]
    return ["| the head node's loss | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]


def summary(m: dict[str, Any], rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    r = m["records"]
    ok = r["status"] == 200
    head = next((e["t"] for e in m["events"] if e["kind"] == "head"), None)
    pre = r["t"] < head if head is not None else np.ones(len(r["t"]), bool)
    deg = ok & r["degraded"]
    last = max((k for k in range(len(rows)) if head is None or (k + 1) * m["minute_s"] <= head), default=0)
    first = max(0, last - 5)
    growth = (rows[last]["rss"] - rows[first]["rss"]) / rows[first]["rss"]
    errors = ", ".join(f"{k}: {v}" for k, v in zip(r["error_kinds"], r["error_counts"], strict=True))
    out = [("requests sent / answered", f"{len(ok)} / {int(ok.sum())}"),
           ("lost (no HTTP answer) before the head's loss / from it on",
            f"{int((pre & (r['status'] == 0)).sum())} / {int((~pre & (r['status'] == 0)).sum())}"),
           ("wrong (exact answers that differ from the model's)", f"{int((ok & r['wrong']).sum())}"),
           ("degraded answers, their top-1 agreement with the model",
            f"{int(deg.sum())}, {r['agree'][deg].mean():.3f}" if deg.any() else "0"),
           (f"server RSS growth, end of minute {first + 1} to end of minute {last + 1}",
            f"{rows[first]['rss']:.0f} MB to {rows[last]['rss']:.0f} MB ({growth:+.1%})"),
           ("lost requests by error", errors or "none"),
           ("SIGTERM at the end: exit status, seconds", f"{m['stop_status']}, {m['stop_s']:.1f}")]
    return out


def render(m: dict[str, Any], argv: list[str]) -> str:
    from measure import generated_by, machine

    rows = minutes(m)
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for x in rows:
        agreement = "-" if math.isnan(x["agreement"]) else f"{x['agreement']:.3f}"
        other = f"{x['other 5xx']}" + (f" (4xx: {x['other 4xx']})" if x["other 4xx"] else "")
        table.append(f"| {x['minute']} | {x['sent']} | {x['answered']} | {x['503']} | {x['504']} | {other} | "
                     f"{x['lost']} | {x['wrong']} | {x['degraded']} | {agreement} | {_ms(x['p50'])} | "
                     f"{_ms(x['p99'])} | {_ms(x['p999'])} | {x['rss']:.0f} | {x['not_ok']} | {x['placement']} |")
    bursts = (f"bursts of {m['burst_n']} requests with a {m['burst_ms']:g} ms deadline; "
              if any(e["kind"] == "burst" for e in m["events"]) else "")
    setup = (f"{m['n_minutes']} minutes of {m['minute_s']:g} s; `gencc serve {' '.join(m['argv'])}` "
             f"({m['scheme']}: groups of K requests on {m['needed']} workers), placement option: "
             f"{m['placement_option']}; {m['rate']:.1f} requests/s (capacity {m['capacity']:.1f}); "
             f"{bursts}cluster and server up in "
             f"{m['startup_s']:.0f} s; actors per node at the start: {m['placement_start']}, at the end: "
             f"{m['placement_end']}.")
    parts = [generated_by("chaos", argv), machine(), setup,
             "\n".join(["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in summary(m, rows))]),
             "\n".join(table), "\n".join(faults_table(m))]
    for extra in (bursts_table(m), hostile_table(m), head_table(m)):
        if len(extra) > 2:
            parts.append("\n".join(extra))
    return "\n\n".join(parts) + "\n"
