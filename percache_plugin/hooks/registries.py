"""The named registries of one handle, filled once from the ``percache_register_*`` hooks, and
the check that the settings name entries some plugin registered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import Config, ConfigError
from ..core.registry import Registry
from ..kv.recompute import parse_strategy

if TYPE_CHECKING:
    from ..attention.profile import ModelProfile
    from ..buffer.policies import PolicyFactory
    from ..kv.eviction import EvictionPolicy
    from ..kv.recompute import RecomputeStrategy
    from .manager import Hooks

__all__ = ["Registries"]


@dataclass(frozen=True)
class Registries:
    """K/V eviction policies, RAM-tier policies, recompute strategies and model profiles. Built-ins
    register first, so a plugin registering the same name replaces the built-in entry."""

    eviction_policies: Registry[EvictionPolicy]
    buffer_policies: Registry[PolicyFactory]
    recompute_strategies: Registry[RecomputeStrategy]
    model_profiles: Registry[ModelProfile]

    @classmethod
    def fill(cls, hooks: Hooks) -> Registries:
        reg = cls(Registry("eviction policy"), Registry("buffer-cache policy"),
                  Registry("recompute strategy"), Registry("model profile"))
        hooks.register_eviction_policies(reg.eviction_policies.register)
        hooks.register_buffer_policies(reg.buffer_policies.register)
        hooks.register_recompute_strategies(reg.recompute_strategies.register)
        hooks.register_model_profiles(reg.model_profiles.register)
        return reg

    def check(self, config: Config, changed: set[str] | None = None) -> None:
        """ConfigError for a ``kv_eviction``, ``ram_cache_policy`` or ``recompute`` naming
        nothing registered (every field, or only the ``changed`` ones)."""
        if changed is None or "recompute" in changed:
            try:
                parse_strategy(config.recompute, self.recompute_strategies)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        for field, registry in (("kv_eviction", self.eviction_policies),
                                ("ram_cache_policy", self.buffer_policies)):
            if changed is None or field in changed:
                try:
                    registry.require(getattr(config, field))
                except ValueError as exc:
                    raise ConfigError(f"{field}: {exc}") from None
