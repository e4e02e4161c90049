"""The `privacy` preset's pieces (gencc.experiments.tables.privacy): a cell's scores against a direct computation on
a classifier defined here, and the equal-leakage comparison and operating points on curves built by hand."""

from __future__ import annotations

import numpy as np
import pytest

from gencc.codes import BACC
from gencc.experiments.tables import privacy as P

rng = np.random.default_rng(2)
W = rng.normal(size=(6, 4))


def clf(x):
    """A linear classifier on 6 features, 4 classes (batched)."""
    return np.asarray(x, dtype=float).reshape(len(x), -1) @ W


clf.batched = True


def test_cell_scores_the_decode_it_describes():
    sets = [rng.normal(size=(P.K, 6)) for _ in range(3)]
    truth = np.stack([clf(X) for X in sets])
    labels = truth.argmax(axis=2)  # f is right on every input: RelAcc is the decode's accuracy
    code = BACC(P.K, P.N, colluders=1, mask_scale=0.5)
    got = P._cell(code, clf, sets, truth, labels, S=0)
    rels, hits = [], 0
    for b, X in enumerate(sets):  # the same computation written out: masks from seed b, every worker back
        code.reseed(b)
        Yh = code.decode(clf(code.encode(X)), np.arange(P.N))
        rels.append(((Yh - truth[b]) ** 2).sum() / (truth[b] ** 2).sum())
        hits += int((Yh.argmax(axis=1) == labels[b]).sum())
    assert got["rel_mse"] == pytest.approx(np.mean(rels))
    assert got["rel_acc"] == pytest.approx(hits / (3 * P.K))
    assert got["agreement"] == pytest.approx(got["rel_acc"])
    more = P._cell(BACC(P.K, P.N, colluders=1, mask_scale=64.0), clf, sets, truth, labels, S=2)
    assert more["rel_mse"] > got["rel_mse"]  # bigger masks: f read further from the inputs


def rows(scheme, bits, acc, T=1, S=0):
    return [{"workload": "w", "scheme": scheme, "T": T, "S": S, "mask_scale": 2.0**i, "leakage_bits": b,
             "rel_acc": a} for i, (b, a) in enumerate(zip(bits, acc, strict=True))]


def test_compare_at_equal_leakage():
    gcc = rows("gcc", [8, 4, 2, 1], [1.0, 0.9, 0.7, 0.4])
    bacc = rows("bacc", [6, 3, 1.5, 0.5], [0.9, 0.6, 0.4, 0.1])  # below GCC's curve everywhere they overlap
    (c,) = P.compare(gcc + bacc, levels=9)
    assert (c["lo"], c["hi"]) == (1, 6) and c["at_or_above"] == 9 and c["min_diff"] > 0
    worse = rows("bacc", [6, 3, 1.5, 0.5], [1.0, 0.95, 0.9, 0.2])
    (c,) = P.compare(gcc + worse, levels=9)
    assert c["at_or_above"] < 9 and c["min_diff"] < 0


def test_operating_point_is_the_least_leakage_keeping_the_accuracy():
    pts = P.operating_points(rows("gcc", [8, 4, 2, 1], [1.0, 0.95, 0.91, 0.4]))
    assert pts[0]["row"]["leakage_bits"] == 2
    assert P.operating_points(rows("gcc", [8, 4], [0.5, 0.4]))[0]["row"] is None
