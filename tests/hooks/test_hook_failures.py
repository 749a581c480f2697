"""A plugin raising in any hook is named in the error; one raising in an observer hook
(``specs.OBSERVER_HOOKS``) is logged and counted and the request keeps its answer."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import pluggy
import pytest

import percache_plugin as percache
from percache_plugin.hooks import specs
from percache_plugin.hooks.blame import register_named
from percache_plugin.hooks.manager import Hooks, make_plugin_manager
from tests.helpers import SEGMENTS, tiny_pair

GEN = {"max_new_tokens": 3, "do_sample": False}


def raising_plugin(hook: str) -> object:
    """An instance of a class named after ``hook`` whose implementation of it raises."""
    params = list(inspect.signature(getattr(specs, hook)).parameters)

    def impl(**kw: Any) -> Any:
        raise ValueError(f"boom in {hook}")

    impl.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in params])
    cls = type(f"Raises_{hook}", (), {"__module__": __name__})
    plugin = cls()
    setattr(plugin, hook, percache.hookimpl(tryfirst=True)(impl))  # before the built-ins
    return plugin


def call_facade(hooks: Hooks, hook: str) -> Any:
    """Call the façade method of ``hook`` with placeholder arguments (the plugin raises first)."""
    method = getattr(hooks, hook.removeprefix("percache_"))
    needed = [p for p in inspect.signature(method).parameters.values() if p.default is p.empty]
    return method(*[("k",) for _ in needed])


@pytest.mark.parametrize("hook", sorted(set(specs.HOOK_NAMES) - specs.OBSERVER_HOOKS))
def test_a_plugin_raising_in_any_hook_is_named(hook: str) -> None:
    pm = make_plugin_manager(autoload=False)
    plugin = raising_plugin(hook)
    register_named(pm, plugin)
    with pytest.raises(ValueError, match=f"boom in {hook}") as info:
        call_facade(Hooks(pm), hook)
    name = f"{__name__}.Raises_{hook}"
    assert info.value.__notes__ == [f"percache: raised in plugin {name!r} ({hook})"]


@pytest.mark.parametrize("hook", sorted(specs.OBSERVER_HOOKS))
def test_a_plugin_raising_in_an_observer_hook_is_logged_and_counted(
        hook: str, caplog: pytest.LogCaptureFixture) -> None:
    pm = pluggy.PluginManager(specs.PROJECT)  # no built-ins: they would need real arguments
    pm.add_hookspecs(specs)
    calls: list[str] = []

    class After:  # registered first, so called after the raising one
        pass

    params = list(inspect.signature(getattr(specs, hook)).parameters)

    def record(**kw: Any) -> None:
        calls.append(hook)

    record.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in params])
    after = After()
    after.__dict__[hook] = percache.hookimpl(record)
    pm.register(after, name="after")
    register_named(pm, raising_plugin(hook))
    with caplog.at_level(logging.WARNING, logger="percache"):
        assert call_facade(Hooks(pm), hook) == 1
    assert calls == [hook]  # the implementation after the raising one still ran
    assert f"plugin '{__name__}.Raises_{hook}' raised in {hook}" in caplog.text


def test_a_request_end_failure_keeps_the_answer(caplog: pytest.LogCaptureFixture) -> None:
    model, tok = tiny_pair("llama")
    plain = percache.enable(model, tok)
    want = plain.generate(SEGMENTS, max_new_tokens=4).token_ids
    plain.close()
    pc = percache.enable(model, tok, plugins=[raising_plugin("percache_request_end")])
    with caplog.at_level(logging.WARNING, logger="percache"):
        gen = pc.generate(SEGMENTS, max_new_tokens=4)
    assert gen.token_ids == want
    assert gen.stats.plugin_errors == 1 and pc.stats().plugin_errors == 1
    assert f"plugin '{__name__}.Raises_percache_request_end' raised in percache_request_end" in caplog.text
    pc.close()


def test_chat_observer_failures_keep_the_reply(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model, tok = tiny_pair("llama")
    plain = percache.enable(model, tok, store=tmp_path / "plain")
    want = plain.chat("Hello there.", **GEN).text
    plain.close()
    pc = percache.enable(model, tok, store=tmp_path / "pc", plugins=[
        raising_plugin("percache_session_saved"), raising_plugin("percache_turn_logged")])
    with caplog.at_level(logging.WARNING, logger="percache"):
        reply = pc.chat("Hello there.", **GEN)
    assert reply.text == want and reply.turn_id == 1
    assert reply.stats.plugin_errors == 2 and pc.stats().plugin_errors == 2
    for hook in ("percache_session_saved", "percache_turn_logged"):
        assert f"plugin '{__name__}.Raises_{hook}' raised in {hook}" in caplog.text
    pc.close()


def test_a_qa_store_failure_keeps_the_answer(caplog: pytest.LogCaptureFixture) -> None:
    model, tok = tiny_pair("llama")
    docs = ["Ana: rehearsal on Friday.", "Ben: budget on Monday."]
    plain = percache.enable(model, tok, embedder="hash", predict="off")
    plain.add_documents(docs)
    want = plain.ask("When is the rehearsal?", **GEN).text
    plain.close()
    pc = percache.enable(model, tok, embedder="hash", predict="off",
                         plugins=[raising_plugin("percache_qa_store")])
    pc.add_documents(docs)
    with caplog.at_level(logging.WARNING, logger="percache"):
        answer = pc.ask("When is the rehearsal?", **GEN)
    assert answer.text == want and answer.source == "generated"
    assert answer.stats is not None and answer.stats.plugin_errors == 1
    assert pc.stats().plugin_errors == 1
    assert f"plugin '{__name__}.Raises_percache_qa_store' raised in percache_qa_store" in caplog.text
    pc.close()


def test_an_idle_qa_store_failure_reaches_the_handle_stats(caplog: pytest.LogCaptureFixture) -> None:
    """A predicted question whose entry fails to store in idle time ("populate", prefill only)
    is counted in ``pc.stats()`` as a foreground failure is, not only in the prefill's stats."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off", similarity_threshold=0.95,
                         population_cutoff=0.9, draft_calibrate_idle=False,
                         plugins=[raising_plugin("percache_qa_store")])
    pc.add_documents(["Ana: rehearsal on Friday.", "Ben: budget on Monday."])
    pc.idle()  # the documents' warm tasks
    before = pc.stats().requests
    pc.idle_queue.push("populate", "When is the rehearsal?", None)
    with caplog.at_level(logging.WARNING, logger="percache"):
        report = pc.idle()
    assert report.by_kind == {"populate": 1}
    assert pc.stats().requests == before + 1  # the prefill ran
    assert pc.stats().plugin_errors == 1
    assert "raised in percache_qa_store" in caplog.text
    pc.close()


def test_a_hook_called_inside_another_names_only_the_plugin_that_raised() -> None:
    pm = make_plugin_manager(autoload=False)
    hooks = Hooks(pm)
    register_named(pm, raising_plugin("percache_documents_added"))

    class Adds:  # an add_documents that reports through documents_added, as the built-in does
        @percache.hookimpl(tryfirst=True)
        def percache_add_documents(self, ctx: Any, docs: Any, scope: Any) -> Any:
            hooks.documents_added(ctx, docs)

    register_named(pm, Adds())
    with pytest.raises(ValueError) as info:
        hooks.add_documents(None, [], None)  # type: ignore[arg-type]
    name = f"{__name__}.Raises_percache_documents_added"
    assert info.value.__notes__ == [f"percache: raised in plugin {name!r} (percache_documents_added)"]
