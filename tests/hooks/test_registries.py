"""A handle's registries are filled from the register hooks; settings naming nothing registered are refused."""

from __future__ import annotations

from typing import Any

import pytest

from percache_plugin.config import Config, ConfigError
from percache_plugin.hooks.manager import Hooks, make_plugin_manager
from percache_plugin.hooks.registries import Registries
from percache_plugin.hooks.specs import hookimpl


class Extra:
    @hookimpl
    def percache_register_eviction_policies(self, register: Any) -> None:
        register("none", lambda nodes, limit, protect: [])


def test_fill_and_check() -> None:
    pm = make_plugin_manager(autoload=False)
    pm.register(Extra())
    reg = Registries.fill(Hooks(pm))
    assert {"lfu-leaves", "none"} <= set(reg.eviction_policies)
    assert len(reg.recompute_strategies) and len(reg.buffer_policies) and len(reg.model_profiles)
    reg.check(Config())
    reg.check(Config(kv_eviction="none"), {"kv_eviction"})
    with pytest.raises(ConfigError, match="kv_eviction"):
        reg.check(Config(kv_eviction="nowhere"))
    reg.check(Config(kv_eviction="nowhere"), {"recompute"})  # only the changed fields
    with pytest.raises(ConfigError):
        reg.check(Config(recompute="nowhere"), {"recompute"})
