"""The placement options of the Ray backend, checked before Ray starts, in one vocabulary (Python:
`worker_placement`, `worker_cpus`, `worker_resources`; the command line: --worker-placement, --worker-cpus,
--worker-resource), refused for other backends; which nodes are fit to hold a worker (a raylet that does not
answer makes its node gone); and the rebalancing rule, against a brute-force search. No Ray starts here (the
cluster runs are in test_ray_churn.py, inside the loopback-only namespace)."""

from __future__ import annotations

import itertools
import socket

import numpy as np
import pytest
from typer.testing import CliRunner

from gencc.cli import app
from gencc.engine.ray.placement import NodeView, check_placement, least_loaded, parse_resource, rebalance_move
from gencc.errors import ConfigError

runner = CliRunner()


def test_the_options_say_ray_s_options() -> None:
    p = check_placement("spread", 0.5, {"gpu_node": 1, "GPU": 1})
    assert p.actor_options() == {"num_cpus": 0.5, "scheduling_strategy": "SPREAD", "num_gpus": 1.0,
                                 "resources": {"gpu_node": 1.0}}
    assert p.request() == {"CPU": 0.5, "gpu_node": 1.0, "GPU": 1.0}
    assert check_placement().actor_options() == {"num_cpus": 0.0, "scheduling_strategy": "DEFAULT"}
    assert parse_resource("gpu_node=0.25") == ("gpu_node", 0.25)


@pytest.mark.parametrize(("kw", "field"), [
    ({"worker_placement": "wide"}, "worker_placement"),
    ({"worker_cpus": -1}, "worker_cpus"),
    ({"worker_cpus": float("nan")}, "worker_cpus"),
    ({"worker_resources": {"gpu_node": 0}}, "worker_resources"),
    ({"worker_resources": {"CPU": 1}}, "worker_resources"),
    ({"worker_resources": {"": 1}}, "worker_resources"),
    ({"worker_resources": [("a", 1)]}, "worker_resources"),
])
def test_a_bad_option_is_a_config_error_naming_it_in_python_and_serving(kw: dict, field: str) -> None:
    from gencc.runtime import RayExecutor
    from gencc.serving import ServiceConfig

    with pytest.raises(ConfigError) as info:
        RayExecutor(num_actors=2, **kw)  # before Ray starts: none is running here
    assert info.value.field == field
    if not isinstance(kw.get("worker_resources"), list):
        with pytest.raises(ConfigError) as info:
            ServiceConfig(backend="ray", **kw)
        assert info.value.field == field


def test_serving_keeps_the_options_and_refuses_them_without_ray() -> None:
    from gencc.serving import ServiceConfig

    c = ServiceConfig(backend="ray", worker_placement="spread", worker_cpus=1, worker_resources={"b": 2, "a": 1})
    assert (c.worker_placement, c.worker_cpus, c.worker_resources) == ("spread", 1.0, (("a", 1.0), ("b", 2.0)))
    with pytest.raises(ConfigError) as info:
        ServiceConfig(worker_cpus=1)
    assert info.value.field == "worker_cpus" and "backend ray" in str(info.value)


@pytest.mark.parametrize(("argv", "option"), [
    (["serve", "--worker-placement", "spread"], "--worker-placement"),
    (["run", "--worker-cpus", "1"], "--worker-cpus"),
    (["serve", "--backend", "ray", "--worker-resource", "gpu_node"], "--worker-resource"),
    (["run", "--backend", "ray", "--worker-resource", "gpu_node=-1"], "--worker-resource"),
    (["serve", "--backend", "ray", "--worker-cpus", "-0.5"], "--worker-cpus"),
    (["run", "--backend", "ray", "--worker-placement", "wide"], "--worker-placement"),
    (["serve", "--backend", "ray", "--worker-resource", "CPU=1"], "--worker-resource"),
])
def test_the_command_line_refuses_a_bad_option_with_exit_2_naming_it(argv: list[str], option: str) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    assert f"'{option}'" in r.output, r.output
    assert not any(name in r.output for name in ("worker_placement", "worker_cpus", "worker_resources")), r.output


def test_a_node_whose_raylet_does_not_answer_is_gone() -> None:
    """Three nodes listed alive (and one dead): one raylet listens, one does not (a port just freed), one
    listens but lacks the resource a worker asks for."""
    with socket.socket() as up, socket.socket() as other:
        up.bind(("127.0.0.1", 0))
        up.listen()
        other.bind(("127.0.0.1", 0))
        other.listen()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            down = s.getsockname()[1]

        def node(i: str, port: int, res: dict, alive: bool = True) -> dict:
            return {"NodeID": i, "Alive": alive, "NodeManagerAddress": "127.0.0.1", "NodeManagerPort": port,
                    "Resources": res}

        class Ray:
            @staticmethod
            def nodes() -> list[dict]:
                return [node("a", up.getsockname()[1], {"CPU": 2, "gpu_node": 1}),
                        node("b", down, {"CPU": 2, "gpu_node": 1}),
                        node("c", other.getsockname()[1], {"CPU": 2}),
                        node("d", up.getsockname()[1], {"CPU": 2, "gpu_node": 1}, alive=False)]

        view = NodeView(check_placement("spread", 1, {"gpu_node": 1}).request()).refresh(Ray)
        assert (view.fit, view.gone) == (["a"], {"b"})
        assert view.answers("a") and not view.answers("b") and not view.answers("d")
        view.refresh(Ray, 0, probe=False)  # without trying the raylets: what was gone stays gone
        assert (view.fit, view.gone) == (["a"], {"b"})
        assert NodeView({}).refresh(Ray).fit == ["a", "c"]


def _spread(counts: tuple[int, ...]) -> int:
    return max(counts) - min(counts)


@pytest.mark.parametrize("n_nodes", [2, 3, 4])
def test_rebalancing_moves_one_worker_from_the_busiest_node_to_an_empty_one_and_stops(n_nodes: int) -> None:
    """For every way of placing up to 7 workers on the nodes: a move is proposed exactly when a node is empty
    and another holds more than its share (brute force over the counts), it goes from a busiest node to an
    empty one, and repeating the moves ends with no node empty (when there are at least as many workers as
    nodes) in at most as many moves as there are workers."""
    nodes = [f"n{i}" for i in range(n_nodes)]
    for workers in range(1, 8):
        for placed in itertools.product(range(n_nodes), repeat=workers):
            where = [nodes[i] for i in placed]
            counts = [where.count(n) for n in nodes]
            due = 0 in counts and max(counts) * n_nodes > workers and max(counts) >= 2
            move = rebalance_move(where, nodes)
            assert (move is not None) == due, (where, move)
            if move is None:
                continue
            assert where.count(move[0]) == max(counts) and where.count(move[1]) == 0
            moves = 0
            while (move := rebalance_move(where, nodes)) is not None and moves <= workers:
                where[where.index(move[0])] = move[1]
                moves += 1
            assert move is None and moves <= workers
            if workers >= n_nodes:
                assert all(n in where for n in nodes), where


def test_a_replacement_goes_to_the_fit_node_holding_the_fewest_workers() -> None:
    where = ["a", "a", "b", "c", "c", "c"]
    assert least_loaded(["a", "c"], where) == "a" and least_loaded(["b", "a"], where) == "b"
    assert least_loaded([], where) is None
    rng = np.random.default_rng(0)
    for _ in range(50):  # against a sort by count
        nodes = list(rng.permutation(["a", "b", "c", "d"])[:rng.integers(1, 5)])
        w = list(rng.choice(["a", "b", "c", "d"], size=8))
        assert w.count(least_loaded(nodes, w)) == min(w.count(n) for n in nodes)
