"""Registries filled through ``percache_register_*`` hooks: recompute strategies, idle task
kinds, model profiles, K/V eviction policies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.assistant.idle_context import IdleContext
from percache_plugin.attention.profile import ModelProfile
from percache_plugin.config import ConfigError
from percache_plugin.core.registry import Registry
from percache_plugin.kv.eviction import StoredNode, lfu_leaves
from percache_plugin.kv.recompute import RecomputeStrategy
from tests.helpers import SEGMENTS, tiny_pair

REORDERED = [SEGMENTS[0], SEGMENTS[2], SEGMENTS[1], SEGMENTS[-1]]


def test_registry_replaces_and_names_the_known() -> None:
    reg: Registry[int] = Registry("thing")
    reg.register("a", 1)
    reg.register("a", 2)
    assert reg["a"] == 2 and list(reg) == ["a"] and len(reg) == 1
    with pytest.raises(ValueError, match="unknown thing 'b'; known: \\['a'\\]"):
        reg.require("b")
    with pytest.raises(ValueError, match="without ':'"):
        reg.register("x:y", 3)


class EveryOther:
    calls = 0

    @percache.hookimpl
    def percache_register_recompute_strategies(self, register: Any) -> None:
        def choose(ctx: Any, amount: float) -> list[int]:
            EveryOther.calls += 1
            return ctx.candidates.tolist()[::2]
        register("every_other", RecomputeStrategy(choose))


def test_plugin_recompute_strategy_is_usable_by_name() -> None:
    model, tok = tiny_pair("llama")
    with pytest.raises(ConfigError, match="unknown recompute strategy 'every_other'"):
        percache.enable(model, tok, reuse="shifted", recompute="every_other")
    pc = percache.enable(model, tok, reuse="shifted", recompute="every_other", plugins=[EveryOther()])
    pc.generate(SEGMENTS, max_new_tokens=2)
    g = pc.generate(REORDERED, max_new_tokens=2)
    assert EveryOther.calls == 1
    assert g.stats.tokens_recomputed > 0 and g.stats.tokens_shifted > 0
    with pytest.raises(ConfigError, match="unknown recompute strategy"):
        pc.configure(recompute="nope")
    pc.close()


class Tally:
    def __init__(self) -> None:
        self.ran: list[str] = []

    @percache.hookimpl
    def percache_register_idle_tasks(self, register: Any) -> None:
        def tally(ctx: Any, task: Any, report: Any) -> None:
            self.ctx = ctx
            self.ran.append(task.question)
        register("tally", tally)


def test_plugin_idle_task_kind_runs() -> None:
    model, tok = tiny_pair("llama")
    tally = Tally()
    # draft_calibrate_idle off: these tests count the other idle tasks (tests/assistant/test_calibrate_task.py)
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", plugins=[tally])
    assert pc.idle_queue.push("tally", "count me", None)
    with pytest.raises(ValueError, match="unknown idle task kind 'nope'"):
        pc.idle_queue.push("nope", "x", None)
    report = pc.idle()
    assert tally.ran == ["count me"] and report.by_kind == {"tally": 1}
    # A runner gets the narrow idle context, not the assistant or the handle.
    assert isinstance(tally.ctx, IdleContext) and not hasattr(tally.ctx, "engine")
    assert tally.ctx.ctx is pc.assistant.ctx and tally.ctx.ctx.config is pc.config
    pc.close()


class NoPositions:
    @percache.hookimpl
    def percache_register_model_profiles(self, register: Any) -> None:
        register("llama", ModelProfile("llama", "learned", notes="pretend: learned positions"))


def test_plugin_model_profile_replaces_the_table_entry() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    assert pc.capabilities.shifted_reuse
    pc.close()
    pc = percache.enable(model, tok, plugins=[NoPositions()])
    assert not pc.capabilities.shifted_reuse
    assert "pretend" in pc.capabilities.reasons["shifted_reuse"]
    pc.close()


class NewestFirst:
    """A third-party K/V eviction policy: the most recently created leaf goes first."""

    def __init__(self) -> None:
        self.calls = 0

    @percache.hookimpl
    def percache_register_eviction_policies(self, register: Any) -> None:
        def newest_first(nodes: Sequence[StoredNode], limit: int, protect: str | None) -> list[str]:
            self.calls += 1
            parents = {n.parent for n in nodes}
            leaves = sorted((n for n in nodes if n.key not in parents and n.key != protect),
                            key=lambda n: -n.created)
            out, total = [], sum(n.nbytes for n in nodes)
            for n in leaves:
                if total <= limit:
                    break
                out.append(n.key)
                total -= n.nbytes
            return out
        register("newest-first", newest_first)


def test_plugin_eviction_policy_is_used_by_name() -> None:
    model, tok = tiny_pair("llama")
    with pytest.raises(ConfigError, match="kv_eviction: unknown eviction policy 'newest-first'"):
        percache.enable(model, tok, kv_eviction="newest-first")
    policy = NewestFirst()
    pc = percache.enable(model, tok, kv_eviction="newest-first", plugins=[policy])
    assert pc.engine.store.eviction is not lfu_leaves
    pc.generate(SEGMENTS, max_new_tokens=2)
    before = pc.engine.store.total_bytes()
    pc.engine.store.set_byte_limit(before - 1)
    assert policy.calls == 1 and pc.engine.store.stats().evictions >= 1
    with pytest.raises(ConfigError, match="unknown eviction policy 'nope'"):
        pc.configure(kv_eviction="nope")
    pc.configure(kv_eviction="lfu-leaves")
    assert pc.engine.store.eviction is lfu_leaves
    pc.close()
