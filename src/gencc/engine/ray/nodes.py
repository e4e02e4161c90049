"""Where a `gencc.engine.ray.backend.RayBackend`'s actors run, as the cluster's nodes come and go (`Nodes`): a
replacement is kept off a node Ray still lists but whose raylet is gone, and with the "spread" placement the
workers are moved onto nodes that join, one at a time, without dropping a call.

Ray is imported only inside functions, so importing this module never imports it."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..task import describe_error
from .placement import VIEW_S, NodeView, least_loaded, rebalance_move

log = logging.getLogger("gencc.engine")
#: seconds between two looks for a node that holds no worker while another holds more than its share
REBALANCE_S = 1.0


class Nodes:
    """The nodes of a `RayBackend`'s actors (the backend calls it; its waiting thread calls `step`).

    - `target`: the node a replacement goes to. When Ray lists a node alive whose raylet does not answer (a node
      being removed, not yet marked dead), the replacement is pinned to the node fit to hold it (listed alive, its
      raylet answering, offering the worker's resource request) that holds the fewest of the workers; otherwise
      Ray places it as the placement says. Should it die before it is ready anyway, the backend's backoff tries
      again.
    - Rebalancing (the "spread" placement, unless the actor options pin the actors themselves): every
      REBALANCE_S seconds, when every slot is alive and a node fit to hold a worker holds none while another
      holds more than its share, one worker moves there: a fresh actor is started on the new node, and once it
      has built its models it takes the worker's slot (the calls sent from then on go to it); the old actor
      ends once its calls out have answered (or after the backend's ready timeout). `rebalanced` counts the
      moves."""

    def __init__(self, backend: Any, timeout: float):
        self.be, self.timeout = backend, float(timeout)
        opts = backend._opts
        strategy = opts.get("scheduling_strategy")
        self.pinned = strategy is not None and not isinstance(strategy, str)  # the actor options place them
        self.spread = strategy == "SPREAD"
        request = {"CPU": float(opts.get("num_cpus") or 0), "GPU": float(opts.get("num_gpus") or 0),
                   **(opts.get("resources") or {})}
        self.view = NodeView({k: v for k, v in request.items() if v > 0})
        self.rebalanced = 0
        self._out: dict[Any, set[int]] = {}  # actor -> the keys of its calls out
        self._out_lock = threading.Lock()
        self._moving: dict[Any, tuple[int, Any, str, float]] = {}  # ready ref -> (slot, actor, node, started)
        self._retiring: list[tuple[Any, float]] = []  # (old actor, when it ends at the latest)
        self._next = time.monotonic() + REBALANCE_S

    # ----- what the backend tells ---------------------------------------------------------------------------
    def sent(self, actor: Any, key: int) -> None:
        with self._out_lock:
            self._out.setdefault(actor, set()).add(key)

    def answered(self, call: Any) -> None:
        with self._out_lock:
            keys = self._out.get(call.actor)
            if keys is not None:
                keys.discard(call.key)

    def forget(self, actor: Any) -> None:
        with self._out_lock:
            self._out.pop(actor, None)

    # ----- where the actors go ------------------------------------------------------------------------------
    def on(self, node: str) -> Any:
        """The scheduling strategy that puts an actor on `node` and nowhere else."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node, soft=False)

    def look(self, max_age: float = VIEW_S, probe: bool = True) -> None:
        """Ask Ray which nodes are listed alive and which fit, and (`probe`) which answer, unless it was asked
        less than `max_age` seconds ago; a failure keeps the last view."""
        try:
            self.view.refresh(self.be.ray, max_age, probe)
        except Exception as e:  # noqa: BLE001 - Ray's control store unreachable: the last view stands
            log.warning("looking at the Ray nodes failed: %s", describe_error(e))

    def check_fit(self) -> None:
        """A `gencc.errors.ConfigError` when no node of the cluster offers what a worker asks for (its actors
        would wait for such a node for ever), naming the option to change."""
        if self.pinned or not self.view.request:
            return
        self.look(0, probe=False)
        if self.view.addresses and not self.view.fit:
            from ...errors import ConfigError

            request = ", ".join(f"{k}={v:g}" for k, v in self.view.request.items())
            field = "worker_resources" if set(self.view.request) - {"CPU"} else "worker_cpus"
            raise ConfigError(f"no node of the Ray cluster offers what each worker asks for ({request}): ask for "
                              f"less, or add a node that offers it", field)

    def target(self) -> str | None:
        """The node a replacement goes to: None (as the placement says) unless a node listed alive is gone."""
        if self.pinned or not self.view.gone or not self.view.fit:
            return None
        node = least_loaded(self.view.fit, self.known())
        log.info("a Ray node listed alive does not answer (%s): the replacement goes to node %s",
                 ", ".join(sorted(n[:8] for n in self.view.gone)), (node or "")[:8])
        return node

    def known(self) -> list[str]:
        """The node of each actor whose node is known (resolved from its `node` call)."""
        return [w for w in self.be._where if isinstance(w, str)]

    # ----- the waiting thread's look --------------------------------------------------------------------------
    def step(self) -> None:
        """Learn where new actors run, finish the moves whose actor is ready, end the old actors whose calls
        have answered, and start a move if one is due (see the class)."""
        self._resolve()
        self._finish_moves()
        self._retire()
        be, now = self.be, time.monotonic()
        if not self.spread or self.pinned or self._moving or now < self._next:
            return
        self._next = now + REBALANCE_S
        if be._due or any(s != "alive" for s in be.states):
            return
        self.look(probe=False)  # each second: only the node a worker would move to is tried (below)
        where = self.known()
        if len(where) < len(be.actors):
            return
        move = rebalance_move(where, self.view.fit)
        if move is None:
            return
        src, dst = move
        if not self.view.answers(dst):
            return
        slot = max(i for i, w in enumerate(be._where) if w == src)
        actor = be._new_actor(slot, dst, watch=False)
        self._moving[actor.ready.remote()] = (slot, actor, dst, now)
        log.info("Ray node %s holds no worker while node %s holds %d of %d: moving slot %d there", dst[:8],
                 src[:8], where.count(src), len(where), slot)

    def _resolve(self) -> None:
        ray, where = self.be.ray, self.be._where
        refs = [w for w in where if w is not None and not isinstance(w, str)]
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=True)
        for ref in ready:
            try:
                node = ray.get(ref, timeout=0)
            except Exception:  # noqa: BLE001 - the actor died: its replacement says where it runs
                node = None
            for i, w in enumerate(where):
                if w is ref:
                    where[i] = node

    def _finish_moves(self) -> None:
        if not self._moving:
            return
        be, ray, now = self.be, self.be.ray, time.monotonic()
        ready, _ = ray.wait(list(self._moving), num_returns=len(self._moving), timeout=0, fetch_local=True)
        for ref in ready:
            slot, actor, node, _ = self._moving.pop(ref)
            try:
                pid = ray.get(ref, timeout=0)
            except Exception as e:  # noqa: BLE001 - it could not start there: the worker stays where it is
                log.warning("moving slot %d to Ray node %s failed: %s", slot, node[:8], describe_error(e))
                self._kill(actor)
                continue
            with be._lock:
                if slot >= len(be.actors) or be.states[slot] != "alive":  # its actor died meanwhile: replaced
                    old = None
                else:
                    old, be.actors[slot], be._where[slot], be.actor_pids[slot] = be.actors[slot], actor, node, pid
                    for r, (_, a) in list(be._watches.items()):
                        if a is old:
                            del be._watches[r]
                    be._watch(slot, actor)
                    self.rebalanced += 1
            if old is None:
                self._kill(actor)
                continue
            self._retiring.append((old, now + self.timeout))
            log.info("Ray actor of slot %d moved to node %s", slot, node[:8])
        for ref, (slot, actor, node, t0) in list(self._moving.items()):
            if now - t0 > self.timeout:
                log.warning("moving slot %d to Ray node %s: not ready after %.0f s, given up", slot, node[:8],
                            self.timeout)
                del self._moving[ref]
                self._kill(actor)

    def _retire(self) -> None:
        if not self._retiring:
            return
        now, keep = time.monotonic(), []
        for actor, until in self._retiring:
            with self._out_lock:
                busy = bool(self._out.get(actor))
            if busy and now < until:
                keep.append((actor, until))
            else:
                self._kill(actor)
        self._retiring = keep

    def _kill(self, actor: Any) -> None:
        self.forget(actor)
        try:
            self.be.ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def close(self) -> list:
        """The actors being started or ended (for the backend to kill at close)."""
        actors = [a for _, a, _, _ in self._moving.values()] + [a for a, _ in self._retiring]
        self._moving.clear()
        self._retiring.clear()
        with self._out_lock:
            self._out.clear()
        return actors
