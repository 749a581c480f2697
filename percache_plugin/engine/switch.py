"""The attention switch on the model: installed at enable(), relayed into the hooks, lifted by
``disabled()`` and removed by ``close()``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch

from ..attention.backend import AttentionSwitch, install, release, uninstall
from ..attention.hook_probe import HookProbe
from ..attention.masks import (
    MaskFunction,
    apply_to_additive,
    register_mask_provider,
    release_mask_provider,
)
from ..hooks.blame import plugin_label
from ..hooks.contexts import EngineContext
from ..hooks.manager import Hooks
from ..plugins.builtin import DefaultAttention
from ..reuse import ReuseRunner

__all__ = ["ModelSwitch"]

log = logging.getLogger("percache")


class ModelSwitch:
    """percache's attention on ``model``: every attention call goes through the splice mask of
    the forward in progress into the ``percache_attention`` hook.

    Installed at construction (``verify``: check on a forward that the hook fires once per layer,
    for a family with no built-in profile); :meth:`attach` gives it the engine's context and
    reuse runner, which are built from what the installed switch can do.
    """

    def __init__(self, model: Any, hooks: Hooks, *, verify: bool) -> None:
        self._model = model
        self._hooks = hooks
        self._probe = HookProbe()
        self._ctx: EngineContext | None = None
        self._reuse: ReuseRunner | None = None
        self.enabled = True
        self._warned: set[str] = set()  # plugins told their attention hook is never called
        self.installed: AttentionSwitch = install(model, self.relay)
        if verify:
            self.installed = self._probe.verify(model, self.installed)

    def attach(self, ctx: EngineContext, reuse: ReuseRunner) -> None:
        self._ctx, self._reuse = ctx, reuse
        register_mask_provider(self._model, self.mask_function)

    def relay(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
              value: torch.Tensor, attention_mask: torch.Tensor | None,
              **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self._probe.recording:  # the check that the hook fires once per layer
            return self._probe.attend(module, query, key, value, attention_mask, kwargs)  # type: ignore[no-any-return]
        assert self._reuse is not None and self._ctx is not None
        mask = self._reuse.splice_mask(module, query, key, kwargs)
        if mask is not None:
            extra = self.mask_function()
            splice = self._reuse.active_splice
            if extra is not None and splice is not None and splice.positions is not None:
                mask = apply_to_additive(mask, extra, splice.positions.to(mask.device))
            attention_mask = mask
        # a plugin's exception surfaces deep in the model's forward: the façade names the plugin
        return self._hooks.attention(self._ctx, module, query, key, value, attention_mask, kwargs)

    def mask_function(self) -> MaskFunction | None:
        """The extra mask plugins AND into the model's masks (``percache_mask_function``)."""
        if not self.enabled or self._ctx is None:
            return None
        return self._hooks.mask_function(self._ctx)

    def check_masks(self) -> None:
        """Raise where a plugin has an extra mask that cannot apply: the model's attention does
        not go through percache's masks (Falcon, GPT-J, Bloom, ...), so it would be ignored.
        Warn (once per plugin) about ``percache_attention`` plugins that are never called there."""
        if self.installed.active:
            return
        if self.mask_function() is not None:
            raise RuntimeError(
                f"a plugin's percache_mask_function cannot apply to {type(self._model).__name__}: "
                f"its attention does not go through percache's masks ({self.installed.reason}); "
                "the mask would be ignored")
        for name in self.idle_attention_plugins():
            if name not in self._warned:
                self._warned.add(name)
                log.warning("percache: plugin %r implements percache_attention, which is never "
                            "called on %s (%s)", name, type(self._model).__name__, self.installed.reason)

    def idle_attention_plugins(self) -> list[str]:
        """The plugins implementing ``percache_attention`` (the built-in one aside) that are never
        called because the model's attention does not go through percache ([] where it does)."""
        if self.installed.active:
            return []
        pm = self._hooks.pm
        return [plugin_label(pm, impl.plugin) for impl in pm.hook.percache_attention.get_hookimpls()
                if not isinstance(impl.plugin, DefaultAttention)]

    @contextlib.contextmanager
    def lifted(self) -> Iterator[None]:
        """The model's own attention inside the block."""
        if not self.enabled:
            raise RuntimeError("the handle is already disabled (nested disabled() blocks)")
        uninstall(self._model, self.installed)
        self.enabled = False
        try:
            yield
        finally:
            if self.installed.active:
                self._model.set_attn_implementation(self.installed.name)
            self.enabled = True

    def remove(self) -> None:
        """Restore the model's own attention and masks for good."""
        if self.enabled:
            uninstall(self._model, self.installed)
            self.enabled = False
        release(self._model, self.relay)
        release_mask_provider(self._model)
