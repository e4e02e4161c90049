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


@pytest.mark.parametrize("scheme, options, match", [
    ("gcc", {"nope": 1}, "gcc has no option 'nope'"),
    ("gcc-hedge", {"lam_dec": -1}, "gcc option lam_dec must be a finite non-negative number"),
    ("bacc", {"lam_dec": 1}, "bacc has no option 'lam_dec'"),
    ("uncoded", {"lam_dec": 1}, r"code options apply to the coded schemes without a parity model \(bacc, gcc, "
                                r"sgcc, gcc-hedge, sgcc-hedge\); uncoded is a baseline and runs no code"),
    ("sgcc-parity", {"lam_dec": 1}, "sgcc-parity's code follows from its parity model"),
    ("gcc", [1, 2], "code_options must be a dict"),
])
def test_bad_code_options_are_refused_with_the_reason(scheme, options, match):
    with pytest.raises(ValueError, match=match):
        ServiceConfig(scheme=scheme, code_options=options)


def test_code_options_reach_the_served_code_on_a_model_gencc_does_not_ship():
    """ServiceConfig.code_options (gencc serve --opt) builds the scheme's code with them, over the serving defaults
    (GCC's interpolating decoder, BACC on GCC's nested points), and the answers still match the model."""
    import numpy as np
    import torch

    class Affine(torch.nn.Module):  # a model of the test's own
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(5, 3)

        def forward(self, x):
            return torch.tanh(self.lin(x))

    X = np.random.default_rng(1).normal(size=(40, 5)).astype(np.float32)
    assert ServiceConfig(scheme="gcc", code_options={"lam_dec": 0.01, "gaps": "fit"}).code_options == (
        ("gaps", "fit"), ("lam_dec", 0.01))
    model = Affine()
    for name, options, check in (
            ("gcc", {"lam_dec": 0.01, "gaps": "fit"},
             lambda c: c.lam_dec == 0.01 and c.gaps == "fit" and c.decoder == "interpolate"),
            ("gcc-hedge", {"decoder": "select"}, lambda c: c.decoder == "select"),
            ("sgcc", {}, lambda c: type(c).__name__ == "SystematicGCC")):
        svc = Service.build(model, name, 12, 8, data=X, code_options=options, gate="off")
        try:
            assert check(svc.dispatcher.code), (name, svc.dispatcher.code)
            with torch.no_grad():
                want = model(torch.from_numpy(X[:4])).numpy()
            got = np.stack([svc.submit(x).result(timeout=60).output for x in X[:4]])
            np.testing.assert_allclose(got, want, atol=1e-4)
        finally:
            svc.close()


def test_make_dispatcher_refuses_as_service_config_does():
    """`make_dispatcher` without a ServiceConfig asks the same checks: the field and the words are ServiceConfig's."""
    import re

    from gencc.errors import ConfigError

    for name, W, kwargs, field, words in [
            ("gcc", 8, {"K": 8}, "workers", "gcc needs more workers than K=8 (got workers=8)"),
            ("gcc-hedge", 8, {"K": 8}, "workers", "gcc needs more workers than K=8"),
            ("replication", 1, {}, "workers", "replication sends two copies to distinct workers"),
            ("parm", 2, {"K": 4, "parm_k": 2}, "workers", "parm with parm_k=2 runs groups on 3 distinct workers"),
            ("uncoded", 4, {"check": "on"}, "check", "wrong-result checks apply to the eager coded schemes"),
            ("gcc", 12, {"check": "maybe"}, "check", "unknown check 'maybe'")]:
        with pytest.raises(ConfigError, match=re.escape(words)) as by_dispatcher:
            make_dispatcher(name, VirtualWorkers(W, ServiceTimes(0.01)), **kwargs)
        with pytest.raises(ConfigError, match=re.escape(words)) as by_config:
            ServiceConfig(scheme=name, workers=W, **kwargs)
        assert by_dispatcher.value.field == by_config.value.field == field
        assert str(by_dispatcher.value) == str(by_config.value)


def test_from_config_takes_a_checked_configuration():
    with pytest.raises(TypeError, match="config must be a ServiceConfig"):
        Service.from_config("digits-cnn", {"scheme": "gcc", "packed_parity": True})


def test_a_private_code_needs_the_gate_off() -> None:
    """The gate answers an untrusted decode with a plain copy, which a private code never sends: refused up front
    (otherwise every request the gate held would time out); with the gate off it serves."""
    from gencc.errors import ConfigError

    with pytest.raises(ConfigError, match="turn the gate off") as e:
        ServiceConfig(scheme="gcc", K=4, workers=10, code_options={"colluders": 1})
    assert e.value.field == "gate"
    cfg = ServiceConfig(scheme="gcc", K=4, workers=10, gate="off", code_options={"colluders": 1, "mask_scale": 2})
    assert dict(cfg.code_options)["colluders"] == 1
