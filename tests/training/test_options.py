"""`TrainOptions`: the one check of `train`'s options, without torch or data; a refusal is a ConfigError naming the
parameter, and `train`, `make_plan` and `parse_stragglers` refuse the same way."""

import subprocess
import sys

import numpy as np
import pytest

from gencc.errors import ConfigError
from gencc.faults import Bimodal, PersistentStragglers
from gencc.training import TrainOptions, make_plan, parse_stragglers, train
from gencc.training.options import check_workload

# (options, the field refused, a fragment of the message): one row per rule
REFUSED = [
    ({"scheme": "fastest"}, "scheme", "unknown scheme 'fastest'; choose one of"),
    ({"workers": 0}, "workers", "workers must be a positive integer, got 0"),
    ({"workers": 2.0}, "workers", "pass 2 (an int)"),
    ({"steps": 0}, "steps", "steps must be a positive integer"),
    ({"eval_every": 0}, "eval_every", "eval_every must be a positive integer"),
    ({"seed": -1}, "seed", "seed must be a non-negative integer"),
    ({"batch_size": 0}, "batch_size", "batch_size must be a positive integer or None"),
    ({"lr": 0.0}, "lr", "lr must be a positive finite number"),
    ({"lr": float("nan")}, "lr", "lr must be"),
    ({"sample_s": -1.0}, "sample_s", "sample_s must be a non-negative finite number of seconds"),
    ({"delay_s": float("inf")}, "delay_s", "delay_s must be"),
    ({"step_timeout": 0}, "step_timeout", "step_timeout must be a positive"),
    ({"optimizer": "lbfgs"}, "optimizer", "unknown optimizer 'lbfgs'; choose one of sgd, momentum, adam"),
    ({"gc_kind": "mds"}, "gc_kind", "unknown gradient code 'mds'; choose one of frc, cyclic"),
    ({"placement": "random"}, "placement", "unknown placement 'random'; choose one of stratified, by-label"),
    ({"backend": "mpi"}, "backend", "unknown backend 'mpi'; choose one of local, ray"),
    ({"backend": "remote"}, "backend", "unknown backend 'remote'; choose one of local, ray"),
    ({"address": "127.0.0.1:6379"}, "address", "address needs backend ray"),
    ({"backend": "ray", "address": "bogus"}, "address", "a Ray address is auto, HOST:PORT or ray://HOST:PORT"),
    ({"stragglers": 8}, "stragglers", "stragglers as a count must lie in [0, N - 1 = 7] (N = workers), got 8"),
    ({"stragglers": "two"}, "stragglers", "stragglers must be an int S"),
    ({"stragglers": PersistentStragglers(4, 0.5, 2.0)}, "stragglers", "built for 4 workers, fewer than N=8"),
    ({"tolerate": 8}, "tolerate", "tolerate must be an integer in [0, N - 1 = 7] (N = workers), got 8"),
    ({"tolerate": -1}, "tolerate", "tolerate must be an integer in [0, N - 1 = 7]"),
    ({"scheme": "gcc", "partitions": 9}, "partitions", "partitions must be an integer in [1, N = 8] (N = workers)"),
    ({"scheme": "ignore", "partitions": 3}, "partitions", "partitions applies to gcc and bacc only"),
    ({"scheme": "gc", "gc_kind": "frc", "workers": 5, "stragglers": 1}, "gc_kind", "needs s + 1 to divide N"),
    ({"scheme": "gc", "gc_kind": "frc", "workers": 6, "tolerate": 3}, "gc_kind", "s + 1 = 4"),
    ({"scheme": "agc", "workers": 5}, "replication", "replication = 2, which must divide N = 5"),
    ({"replication": 0}, "replication", "replication must be an integer in [1, N = 8]"),
    ({"slow_fraction": 1.0}, "slow_fraction", "slow_fraction must be a probability in [0, 1)"),
    ({"slow_fraction": -0.1}, "slow_fraction", "slow_fraction must be a probability in [0, 1)"),
    ({"slow_fraction": 0.2, "slow_factor": 0.5}, "slow_factor", "slow_factor must be a finite number >= 1"),
    ({"slow_factor": 3.0}, "slow_factor", "slow_factor applies with slow_fraction > 0"),
    ({"slow_fraction": 0.2, "stragglers": [1, PersistentStragglers(8, 0.1, 2.0)]}, "slow_fraction",
     "stragglers already holds a PersistentStragglers"),
]


@pytest.mark.parametrize(("options", "field", "fragment"), REFUSED,
                         ids=[f"{f}-{i}" for i, (_, f, _) in enumerate(REFUSED)])
def test_each_rule_refuses_with_a_config_error_naming_its_field(options, field, fragment):
    with pytest.raises(ConfigError) as err:
        TrainOptions(**options)
    assert err.value.field == field
    assert fragment in str(err.value)
    assert isinstance(err.value, ValueError)  # callers catching ValueError still catch it


def test_the_defaults_and_good_values_pass_normalised():
    opts = TrainOptions()
    assert (opts.scheme, opts.workers, opts.tolerance, opts.K, opts.backend) == ("sync", 8, 0, 8, "local")
    opts = TrainOptions(scheme="gcc", workers=np.int64(8), stragglers=np.int64(1), backend="threads", lr=1,
                        sample_s=np.float32(0.5))
    assert type(opts.workers) is int and opts.backend == "local" and opts.lr == 1.0 and opts.sample_s == 0.5
    assert opts.tolerance == 1 and opts.K == 4 and opts.coded  # K = ceil(N / (S + 1))
    assert TrainOptions(scheme="gcc", workers=8, stragglers=1, tolerate=3).K == 2  # tolerate overrides S
    assert TrainOptions(scheme="ignore", partitions=8).K == 8  # K = N is what ignore uses anyway
    assert TrainOptions(scheme="gc", gc_kind="frc", workers=6, stragglers=2).tolerance == 2
    assert TrainOptions(backend="ray", address="127.0.0.1:6379").address == "127.0.0.1:6379"


def test_stragglers_and_slow_fraction_are_parsed_once():
    opts = TrainOptions(workers=8, stragglers=[1, Bimodal(0.25, 4.0, 0.01)], slow_fraction=0.3, slow_factor=2.0,
                        seed=3)
    inj = opts.injected
    assert inj.count == 1 and isinstance(inj.latency, Bimodal)
    assert inj.persistent is not None and inj.persistent.fraction == 0.3 and inj.persistent.factor == 2.0
    assert opts.tolerance == 3  # ceil(0.3 * 8), the largest of the expected counts
    assert TrainOptions(slow_fraction=0.2).injected.persistent.factor == 10.0  # the default slowdown


def test_kwargs_are_train_s_keywords():
    import inspect

    from gencc.training.trainer import train as train_fn

    opts = TrainOptions(scheme="gc", workers=6, stragglers=2)
    kwargs = opts.kwargs()
    assert set(kwargs) <= set(inspect.signature(train_fn).parameters)
    assert TrainOptions(**kwargs) == opts


def test_the_workload_name_is_checked():
    assert check_workload("digits-logreg") == "digits-logreg"
    with pytest.raises(ConfigError, match="unknown training workload 'imagenet'; choose one of") as err:
        check_workload("imagenet")
    assert err.value.field == "workload"


@pytest.mark.parametrize(("text", "fragment"), [
    ("slow", "unknown part 'slow'"),
    ("bernoulli:q=1", "bernoulli: options are p, factor, base"),
    ("exp:rate=x", "exp: rate must be a number, got 'x'"),
    ("bernoulli:p=2", "bernoulli: p must be a probability in [0, 1], got 2.0"),
    ("persistent:fraction=1", "persistent: slow fraction must lie in [0, 1)"),
])
def test_the_command_line_straggler_form_refuses_naming_stragglers(text, fragment):
    with pytest.raises(ConfigError) as err:
        parse_stragglers(text, 4)
    assert err.value.field == "stragglers" and fragment in str(err.value)


def test_train_and_make_plan_refuse_as_train_options_does(problem, linear):
    X, y, _, _ = problem
    for options, field, fragment in [({"scheme": "agc", "workers": 5}, "replication", "must divide N = 5"),
                                     ({"scheme": "gcc", "workers": 6, "partitions": 9}, "partitions", "[1, N = 6]"),
                                     ({"workers": 6, "slow_factor": 2.0}, "slow_factor", "slow_fraction > 0")]:
        with pytest.raises(ConfigError, match=fragment) as err:
            train(linear, (X, y), steps=1, **options)
        assert err.value.field == field
    with pytest.raises(ConfigError, match="s \\+ 1 = 2") as err:
        make_plan("gc", X, y, 10, N=5, S=1, gc_kind="frc")
    assert err.value.field == "gc_kind"
    with pytest.raises(ConfigError, match="tolerate must be an integer in \\[0, N - 1 = 5\\]") as err:
        make_plan("ignore", X, y, 10, N=6, S=6)
    assert err.value.field == "tolerate"


def test_slow_fraction_trains_with_persistent_stragglers(problem, linear):
    X, y, _, _ = problem
    res = train(linear, (X, y), scheme="ignore", workers=4, steps=2, lr=0.5, slow_fraction=0.5, slow_factor=2.0,
                tolerate=1)
    assert res.tolerate == 1 and len(res.history) == 2


def test_options_are_checked_without_torch():
    code = ("import sys; from gencc.training import TrainOptions\n"
            "TrainOptions(scheme='gcc', workers=8, stragglers=1, slow_fraction=0.1)\n"
            "try:\n    TrainOptions(scheme='gcc', partitions=9)\nexcept ValueError as e:\n    print(e.field)\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["partitions", "False"]
