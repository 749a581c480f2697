"""Which plugin an exception came from, and readable names for the plugins a caller registers.

An exception raised in a hook implementation surfaces with nothing in its message saying which
plugin raised it (from ``percache_attention``, deep inside the model's forward). :func:`blame`
adds a note naming the plugin and the hook, found by matching the traceback's frames against
the hook implementations registered; :class:`BlamingRelay` does so for every hook call, and
:func:`observe` calls an observer hook best-effort (``hooks.specs.OBSERVER_HOOKS``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pluggy

__all__ = ["BlamingRelay", "blame", "observe", "plugin_label", "register_named"]

log = logging.getLogger("percache")

_NOTE = "percache: raised in plugin "


def plugin_label(pm: pluggy.PluginManager, plugin: object) -> str:
    """The name ``plugin`` is registered under, or its class's dotted name where pluggy named it
    by ``id()`` (an instance registered without a name)."""
    name = pm.get_name(plugin)
    return _class_name(plugin) if name is None or name == str(id(plugin)) else name


def _class_name(plugin: object) -> str:
    cls = type(plugin)
    return f"{cls.__module__}.{cls.__qualname__}"


def register_named(pm: pluggy.PluginManager, plugin: object) -> None:
    """Register ``plugin`` under a readable name (a module's ``__name__``, else the instance's
    class, numbered when taken), so pluggy's own errors (a wrapper that is not a generator, an
    argument the spec does not have) name it instead of an ``id()``."""
    base = getattr(plugin, "__name__", None)
    if not isinstance(base, str):
        base = _class_name(plugin)
    name, n = base, 1
    while pm.has_plugin(name):
        n += 1
        name = f"{base}#{n}"
    pm.register(plugin, name=name)


def _culprit(pm: pluggy.PluginManager, exc: BaseException, hook: str) -> object | None:
    """The plugin whose ``hook`` implementation ``exc`` was raised in (the innermost one in its
    traceback), or None."""
    owners: dict[Any, object] = {}
    for impl in getattr(pm.hook, hook).get_hookimpls():
        code = getattr(impl.function, "__code__", None)
        if code is not None:
            owners[code] = impl.plugin
    culprit = None
    tb = exc.__traceback__
    while tb is not None:
        culprit = owners.get(tb.tb_frame.f_code, culprit)
        tb = tb.tb_next
    return culprit


def blame(pm: pluggy.PluginManager, exc: BaseException, hook: str) -> object | None:
    """Add a note to ``exc`` naming the plugin whose ``hook`` implementation it was raised in
    (the innermost one in its traceback); nothing when none was, or when a plugin is already
    noted (a hook called inside another hook's implementation names its own plugin, the one
    that raised). Returns that plugin (None: none)."""
    culprit = _culprit(pm, exc, hook)
    if culprit is None:
        return None
    notes = getattr(exc, "__notes__", None)
    if notes is None:  # what BaseException.add_note does (Python 3.11+), on 3.10 too
        notes = []
        setattr(exc, "__notes__", notes)  # noqa: B010 - mypy's 3.10 stubs lack __notes__
    if not any(str(n).startswith(_NOTE) for n in notes):
        notes.append(f"{_NOTE}{plugin_label(pm, culprit)!r} ({hook})")
    return culprit


class BlamingRelay:
    """``pm.hook`` whose calls note the plugin an exception was raised in (:func:`blame`)
    before it propagates; the :class:`~percache_plugin.hooks.manager.Hooks` façade calls
    every hook through it."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._pm = pm

    def __getattr__(self, hook: str) -> Callable[..., Any]:
        caller = getattr(self._pm.hook, hook)
        pm = self._pm

        def call(**kwargs: Any) -> Any:
            try:
                return caller(**kwargs)
            except Exception as exc:
                blame(pm, exc, hook)
                raise

        setattr(self, hook, call)  # built once per hook and handle
        return call


def observe(pm: pluggy.PluginManager, hook: str, kwargs: Mapping[str, Any]) -> int:
    """Call ``hook``, an observer whose failure must not lose the answer, best-effort: an
    implementation that raises is logged naming its plugin and skipped, the implementations
    after it are still called (without wrappers; with one, the call ends there). Returns how
    many raised, for the caller to count in ``plugin_errors``."""
    caller = getattr(pm.hook, hook)
    order = [impl.plugin for impl in reversed(caller.get_hookimpls())]  # pluggy's call order
    wrapped = any(impl.wrapper or impl.hookwrapper for impl in caller.get_hookimpls())
    done: list[object] = []  # plugins called already (the culprits included)
    failures = 0
    while True:
        try:
            (pm.subset_hook_caller(hook, done) if done else caller)(**kwargs)
            return failures
        except Exception as exc:
            failures += 1
            culprit = blame(pm, exc, hook)
            name = "?" if culprit is None else plugin_label(pm, culprit)
            log.warning("percache: plugin %r raised in %s (%s: %s); ignored, the answer is kept",
                        name, hook, type(exc).__name__, exc, exc_info=exc)
            if culprit is None or wrapped or culprit not in order:
                return failures
            done = order[:order.index(culprit) + 1]
