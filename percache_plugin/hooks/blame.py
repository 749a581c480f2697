"""Which plugin an exception came from, and readable names for the plugins a caller registers.

An exception raised in a ``percache_attention`` implementation surfaces from deep inside the
model's forward (the attention module calls percache's relay), with nothing in its message
saying which plugin raised it. :func:`blame` adds a note naming the plugin and the hook, found
by matching the traceback's frames against the hook implementations registered.
"""

from __future__ import annotations

from typing import Any

import pluggy

__all__ = ["blame", "plugin_label", "register_named"]


def plugin_label(pm: pluggy.PluginManager, plugin: object) -> str:
    """The name ``plugin`` is registered under, or its class's dotted name where pluggy named it
    by ``id()`` (an instance registered without a name)."""
    name = pm.get_name(plugin)
    if name is None or name == str(id(plugin)):
        cls = type(plugin)
        return f"{cls.__module__}.{cls.__qualname__}"
    return name


def register_named(pm: pluggy.PluginManager, plugin: object) -> None:
    """Register ``plugin`` under a readable name (a module's ``__name__``, else the instance's
    class, numbered when taken), so pluggy's own errors (a wrapper that is not a generator, an
    argument the spec does not have) name it instead of an ``id()``."""
    base = getattr(plugin, "__name__", None)
    if not isinstance(base, str):
        cls = type(plugin)
        base = f"{cls.__module__}.{cls.__qualname__}"
    name, n = base, 1
    while pm.has_plugin(name):
        n += 1
        name = f"{base}#{n}"
    pm.register(plugin, name=name)


def blame(pm: pluggy.PluginManager, exc: BaseException, hook: str) -> None:
    """Add a note to ``exc`` naming the plugin whose ``hook`` implementation it was raised in
    (the innermost one in its traceback); nothing when none was, or when already noted."""
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
    if culprit is None:
        return
    note = f"percache: raised in plugin {plugin_label(pm, culprit)!r} ({hook})"
    notes = getattr(exc, "__notes__", None)
    if notes is None:  # what BaseException.add_note does (Python 3.11+), on 3.10 too
        notes = []
        setattr(exc, "__notes__", notes)  # noqa: B010 - mypy's 3.10 stubs lack __notes__
    if note not in notes:
        notes.append(note)
