"""A plugin that raises in a hook is named in the error, though the attention hook raises from
deep inside the model's forward; pluggy's own errors name the plugin, not its id()."""

from __future__ import annotations

from typing import Any

import pluggy
import pytest

import percache_plugin as percache
from percache_plugin.conformance import SuiteOptions, byte_tokenizer, run_suite, tiny_model
from percache_plugin.hooks.blame import blame
from percache_plugin.hooks.manager import make_plugin_manager
from tests.helpers import SEGMENTS, tiny_pair


class RaisesOverCache:
    """Raises in the attention hook once the keys include cached ones (a decoding step)."""

    @percache.hookimpl(wrapper=True)
    def percache_attention(self, ctx: Any, module: Any, query: Any, key: Any, value: Any,
                           attention_mask: Any, kwargs: Any) -> Any:
        if key.shape[-2] > query.shape[-2]:
            raise ValueError("boom")
        return (yield)


class NotAGenerator:
    @percache.hookimpl(wrapper=True)
    def percache_attention(self, ctx: Any, module: Any, query: Any, key: Any, value: Any,
                           attention_mask: Any, kwargs: Any) -> Any:
        return None


NAME = f"{__name__}.RaisesOverCache"


def test_an_attention_plugin_that_raises_is_named() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, plugins=[RaisesOverCache()])
    with pytest.raises(ValueError, match="boom") as info:
        pc.generate(SEGMENTS, max_new_tokens=3)
    assert info.value.__notes__ == [f"percache: raised in plugin {NAME!r} (percache_attention)"]
    pc.close()


def test_the_suite_names_the_plugin_in_the_failed_check() -> None:
    report = run_suite(tiny_model("llama"), byte_tokenizer(), checks=["exact_reuse"],
                       options=SuiteOptions(plugins=(RaisesOverCache(),)))
    message = report.results[0].outcome.message
    assert "raised ValueError: boom" in message and NAME in message


def test_a_plugin_pluggy_refuses_is_named_not_numbered() -> None:
    model, tok = tiny_pair("llama")
    with pytest.raises(pluggy.PluginValidationError, match=f"{__name__}.NotAGenerator"):
        percache.enable(model, tok, plugins=[NotAGenerator()])


def test_two_instances_of_one_class_both_register() -> None:
    model, tok = tiny_pair("llama")
    a, b = RaisesOverCache(), RaisesOverCache()
    pc = percache.enable(model, tok, plugins=[a, b])
    assert pc.plugins.get_name(a) == NAME and pc.plugins.get_name(b) == f"{NAME}#2"
    pc.close()


def test_an_exception_from_no_plugin_gets_no_note() -> None:
    pm = make_plugin_manager(autoload=False)
    pm.register(RaisesOverCache())
    try:
        raise RuntimeError("elsewhere")
    except RuntimeError as exc:
        blame(pm, exc, "percache_attention")
        assert not getattr(exc, "__notes__", None)
