"""gencc.serving.config: the scheme table on the codes registry, ServiceConfig and Slowdown, Service.build's split."""

from __future__ import annotations

import pytest

from gencc.codes.registry import CODES
from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import SCHEME_TABLE, SCHEMES, Service, ServiceConfig, Slowdown, make_dispatcher
from gencc.serving.config import _split, scheme


def test_every_coded_scheme_names_a_registry_code_and_builds_it():
    assert SCHEMES[:3] == ("uncoded", "replication", "hedged") and len(SCHEMES) == len(set(SCHEMES)) == 12
    env = VirtualWorkers(12, ServiceTimes(0.01))
    for name, s in SCHEME_TABLE.items():
        assert (s.code is None) == (s.dispatcher != "coded") and (s.code is None or s.code in CODES)
        assert s.mode == ("hedge" if name.endswith("-hedge") else "eager")
        if not s.parity:  # parity schemes need a trained parity model (test_parity.py)
            d = make_dispatcher(name, env, K=8)
            assert d.name == name
            if s.code is not None:
                assert CODES[s.code].cls is type(d.code)
    with pytest.raises(ValueError, match="unknown scheme 'nope'; choose one of uncoded"):
        scheme("nope")


@pytest.mark.parametrize("kwargs, match", [
    ({"scheme": "gcc-parity"}, "unknown scheme"),
    ({"workers": 0}, "workers"),
    ({"K": 1.5}, "K"),
    ({"backend": "gpu"}, "backend"),
    ({"max_wait_ms": -1}, "max_wait_ms"),
    ({"max_pending": 0}, "max_pending"),
    ({"request_timeout": 0}, "request_timeout"),
    ({"seed": -1}, "seed"),
    ({"check": "maybe"}, "check"),
])
def test_bad_configuration_names_the_option(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ServiceConfig(**kwargs)


def test_slowdown_builds_the_injection_objects():
    s = Slowdown(service_ms=20, slow_fraction=0.1, slow_factor=5, mean_slow_s=0.5)
    assert s.service_times().mean_s == pytest.approx(0.02)
    p = s.stragglers(4, seed=1)
    assert isinstance(p, PersistentStragglers) and (p.fraction, p.factor, p.mean_slow) == (0.1, 5.0, 0.5)
    for kwargs, match in (({"service_ms": -1}, "service_ms"), ({"slow_fraction": 1.0}, "slow_fraction"),
                          ({"slow_factor": 0.5}, "slow_factor"), ({"mean_slow_s": 0}, "mean_slow_s")):
        with pytest.raises(ValueError, match=match):
            Slowdown(**kwargs)


def test_build_options_split_into_configuration_and_slowdown():
    c, s = _split(None, None, scheme="sgcc", workers=10, K=None, service_ms=5.0, seed=3)
    assert (c.scheme, c.workers, c.K, c.seed) == ("sgcc", 10, 8, 3) and s == Slowdown(service_ms=5.0)
    c2, _ = _split(c, None)
    assert c2 is c
    with pytest.raises(ValueError, match="unknown service option.*slowness"):
        _split(None, None, slowness=2)
    with pytest.raises(ValueError, match="configuration once"):
        _split(c, None, workers=4)
    with pytest.raises(ValueError, match="slowdown once"):
        _split(None, Slowdown(), service_ms=1.0)
    with pytest.raises(ValueError, match="unknown service option"):  # before any workload is loaded
        Service.build("digits-cnn", "gcc", slowness=2)


def test_checked_and_baseline_schemes_follow_the_table():
    from gencc.serving.config import BASELINES, CHECKED_SCHEMES, SCHEME_TABLE

    assert set(CHECKED_SCHEMES) == {"gcc", "bacc", "sgcc", "sgcc-parity"}
    assert set(BASELINES) == {"uncoded", "replication", "hedged"}
    assert all(SCHEME_TABLE[n].dispatcher == "coded" and SCHEME_TABLE[n].mode == "eager" for n in CHECKED_SCHEMES)
