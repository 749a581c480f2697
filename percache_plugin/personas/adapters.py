"""Switching a model between peft LoRA adapters (or none) for one persona turn.

Works on a ``peft.PeftModel`` and on a transformers model with adapters loaded through its
``load_adapter`` (transformers' peft integration), through their public methods only:
``load_adapter``, ``set_adapter``, ``disable_adapter()`` (PeftModel, a context manager) or
``disable_adapters()``/``enable_adapters()`` (transformers), ``enable_adapter_layers()``/
``disable_adapter_layers()`` (peft tuners). :meth:`AdapterSwitch.applied` puts the model back
the way it found it (active adapters, disabled or not), so code outside a persona turn sees
the model as the user left it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..fingerprint.adapters import tuner_layers

__all__ = ["AdapterSwitch", "AdapterError", "check_adapter_dir"]


class AdapterError(ValueError):
    """An adapter directory that cannot be used, or a model that cannot take adapters."""


def check_adapter_dir(path: str | Path) -> Path:
    """``path`` as a peft adapter directory (holding ``adapter_config.json``).

    :raises AdapterError: not such a directory."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise AdapterError(f"adapter {str(p)!r} is not a directory (give a peft adapter directory, "
                           "as written by save_pretrained)")
    if not (p / "adapter_config.json").is_file():
        raise AdapterError(f"adapter directory {str(p)!r} has no adapter_config.json (not a peft adapter)")
    return p.resolve()


def _is_peft_model(model: Any) -> bool:
    return all(hasattr(model, a) for a in ("base_model", "peft_config", "disable_adapter", "load_adapter"))


class AdapterSwitch:
    """Loads persona adapters into ``model`` and applies one for the length of a turn."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.peft_model = _is_peft_model(model)

    def loaded(self) -> set[str]:
        """Names of the adapters loaded into the model."""
        config = getattr(self.model, "peft_config", None)
        return set(config) if isinstance(config, dict) else set()

    def load(self, name: str, path: Path) -> None:
        """Load the adapter at ``path`` as ``name`` (nothing when already loaded), leaving the
        model's active adapters and their on/off state as they were."""
        if name in self.loaded():
            return
        if not hasattr(self.model, "load_adapter"):
            raise AdapterError(f"{type(self.model).__name__} cannot load peft adapters")
        had = bool(self.loaded())
        before = self._active() if had else []
        was_disabled = self._disabled() if had else False
        grads = self._grads()
        try:
            if self.peft_model:
                self.model.load_adapter(str(path), adapter_name=name, is_trainable=False)
            else:
                self.model.load_adapter(str(path), adapter_name=name, hotswap=False)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise AdapterError(f"cannot load adapter {str(path)!r}: {exc}") from exc
        if had:
            self._set(before)
            self._enable(not was_disabled)
        else:  # the model had no adapters: it stays the base model until a persona asks
            self._enable(False)
        self._restore_grads(grads)

    def unload(self, name: str) -> None:
        """Delete adapter ``name`` from the model (nothing when it is not loaded), leaving the
        other adapters' active and on/off state as they were."""
        if name not in self.loaded():
            return
        others = self.loaded() - {name}
        before = [n for n in self._active() if n != name] or sorted(others)[:1]
        was_disabled = self._disabled()
        grads = self._grads()
        self.model.delete_adapter(name)
        if others:
            self._set(before)
            self._enable(not was_disabled)
        self._restore_grads(grads)

    def _grads(self) -> dict[str, bool]:
        return {name: p.requires_grad for name, p in self.model.named_parameters()}

    def _restore_grads(self, grads: dict[str, bool]) -> None:
        """``set_adapter`` and ``load_adapter`` change which adapter weights require grad: put
        back what the user had (new adapter weights stay frozen)."""
        for name, p in self.model.named_parameters():
            want = grads.get(name, False)
            if p.requires_grad != want:
                p.requires_grad_(want)

    def _active(self) -> list[str]:
        active = self.model.active_adapters
        names = active() if callable(active) else active
        return [names] if isinstance(names, str) else list(names)

    def _set(self, names: list[str]) -> None:
        if not names:
            return
        if self.peft_model:
            if len(names) == 1:
                self.model.set_adapter(names[0], inference_mode=True)
            else:
                self.model.base_model.set_adapter(names, inference_mode=True)
        else:
            self.model.set_adapter(names if len(names) > 1 else names[0])

    def _disabled(self) -> bool:
        return any(bool(m.disable_adapters) for _, m in tuner_layers(self.model))

    def _enable(self, on: bool) -> None:
        if self.peft_model:
            tuner = self.model.base_model
            tuner.enable_adapter_layers() if on else tuner.disable_adapter_layers()
        else:
            self.model.enable_adapters() if on else self.model.disable_adapters()

    @contextlib.contextmanager
    def applied(self, name: str | None) -> Iterator[None]:
        """Run the block under adapter ``name`` alone (None: the base model, every adapter
        off), then restore the model's adapter state."""
        if not self.loaded():
            if name is not None:
                raise AdapterError(f"adapter {name!r} is not loaded into the model")
            yield
            return
        if name is None:
            if self.peft_model:
                with self.model.disable_adapter():
                    yield
                return
            was_disabled = self._disabled()
            self._enable(False)
            try:
                yield
            finally:
                self._enable(not was_disabled)
            return
        if name not in self.loaded():
            raise AdapterError(f"adapter {name!r} is not loaded into the model")
        before, was_disabled, grads = self._active(), self._disabled(), self._grads()
        self._set([name])
        if was_disabled:
            self._enable(True)
        try:
            yield
        finally:
            self._set(before)
            if was_disabled:
                self._enable(False)
            self._restore_grads(grads)
