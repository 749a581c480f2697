"""Meta-tests: every hook is documented and every hook is exercised."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import percache_plugin as percache
from percache_plugin.hooks import specs
from percache_plugin.hooks.manager import DEFAULT_PLUGINS, Hooks, make_plugin_manager
from tests.helpers import SEGMENTS, tiny_pair


def test_every_hook_is_documented() -> None:
    assert specs.HOOK_NAMES, "no hooks found"
    for name in specs.HOOK_NAMES:
        fn = getattr(specs, name)
        doc = inspect.getdoc(fn) or ""
        assert doc, f"{name} has no docstring"
        assert "firstresult" in doc or "Every implementation is called" in doc, (
            f"{name}: say whether it is firstresult"
        )
        for param in inspect.signature(fn).parameters:
            assert f":param {param}:" in doc, f"{name}: parameter {param!r} is undocumented"
        opts = fn.percache_spec
        assert ("firstresult." in doc) == bool(opts.get("firstresult")), f"{name}: firstresult mismatch"


def test_facade_covers_every_hook() -> None:
    facade = {n for n, _ in inspect.getmembers(Hooks, inspect.isfunction) if not n.startswith("_")}
    assert {n.removeprefix("percache_") for n in specs.HOOK_NAMES} == facade


class Recorder:
    """Implements every hook as an observer and records the calls."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        for name in specs.HOOK_NAMES:
            params = list(inspect.signature(getattr(specs, name)).parameters)
            setattr(self, name, self._make(name, params))

    def _make(self, name: str, params: list[str]) -> Any:
        seen = self.seen
        if getattr(specs, name).percache_spec.get("firstresult"):
            def wrapper(**kw: Any) -> Any:
                seen.add(name)
                return (yield)
            impl = percache.hookimpl(wrapper=True)(wrapper)
        else:
            def observer(**kw: Any) -> None:
                seen.add(name)
            impl = percache.hookimpl(observer)
        impl.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in params]
        )
        return impl


def test_every_hook_is_exercised(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    rec = Recorder()
    pc = percache.enable(model, tok, reuse="shifted", embedder="hash", plugins=[rec],  # register_*
                         kv_prefetch=True)  # prefetch_chunks
    pc.generate(SEGMENTS, max_new_tokens=2)  # miss: store
    pc.generate(SEGMENTS, max_new_tokens=2)  # hit: plan + load
    pc.generate([SEGMENTS[0], SEGMENTS[2], SEGMENTS[1], SEGMENTS[-1]], max_new_tokens=2)  # shifted
    pc.complete("A plain prompt.", max_new_tokens=2)  # plain_prompt
    # add_documents, then documents_added
    report = pc.add_documents(["Ana: rehearsal on Friday.", "Ben: budget on Monday."])
    # retrieve, qa_lookup (miss), chunk_vectors (relevance), qa_store
    pc.ask("When is the rehearsal?", max_new_tokens=2)
    pc.predict("knowledge")  # list_chunks
    assert pc.hooks.resolve_chunks(pc.assistant.ctx, [c.id for c in report.new_chunks])
    pc.hooks.model_profile(model)
    pc.configure(similarity_threshold=0.5)  # queue_conversions: qa_entries
    assert pc.hooks.qa_known(pc.assistant.ctx, pc.assistant.query("When is the rehearsal?"), None)
    pc.configure(qa_byte_limit=1 << 20)  # configured
    assert pc.stats().qa_lookups >= 1  # qa_stats
    [entry] = pc.qa_bank.entries()
    pc.correct(entry.id, "On Friday.")  # qa_correct, then qa_similar and qa_mark_stale (disputes)
    # Chat: edit_cache every turn; mask_function every forward; a small budget evicts
    # (select_eviction), masked mode scores turns (turn_relevance).
    pc.configure(session_kv_tokens=90)
    for i in range(4):
        pc.chat(f"Tell me about item {i}, please.", max_new_tokens=2)
    pc.configure(session_eviction="masked")
    for i in range(3):
        pc.chat(f"And item {i + 4}?", max_new_tokens=2)
    fact = pc.memory.add("Ana sings alto.").fact
    pc.memory.forget(fact.id)  # sources_forgotten
    pc.close()  # close
    pc.plugins.unregister(rec)
    for i in range(2):  # session_saved, then session_loaded
        stored = percache.enable(model, tok, store=tmp_path / "store", plugins=[rec])
        stored.chat("Hello.", max_new_tokens=2)
        if i == 0:
            stored.personas.add("plain", "You are plain.")
        stored.sessions.create(f"persona-{i}")  # the head stored, then read: load_head
        stored.chat("Hi.", session=f"persona-{i}", persona="plain", max_new_tokens=1)
        stored.close()
        stored.plugins.unregister(rec)
    assert rec.seen == set(specs.HOOK_NAMES)


def test_default_plugins_are_registered_and_replaceable() -> None:
    pm = make_plugin_manager(autoload=False)
    names = [n for n, _ in pm.list_name_plugin()]
    assert names == list(DEFAULT_PLUGINS)

    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)

    class NoReuse:
        @percache.hookimpl
        def percache_plan_reuse(self, ctx: Any, prompt: Any) -> percache.ReusePlan:
            return percache.ReusePlan(note="never reuse")

    pc.generate(SEGMENTS, max_new_tokens=2)
    plugin = NoReuse()
    pc.plugins.register(plugin)
    assert pc.generate(SEGMENTS, max_new_tokens=2).stats.tokens_reused == 0
    pc.plugins.unregister(plugin)
    assert pc.generate(SEGMENTS, max_new_tokens=2).stats.tokens_reused > 0


def test_prompt_building_hook_replaces_tokenization() -> None:
    from percache_plugin.segments import chain_pieces

    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)

    class FixedIds:
        """Builds prompts from token ids it already has (one id per character here)."""

        @percache.hookimpl
        def percache_build_prompt(self, ctx: Any, segments: Any) -> percache.Prompt:
            ids = [[3 + (ord(ch) % 50) for ch in s.text] for s in segments]
            return chain_pieces(segments, ids, fingerprint=ctx.fingerprint)

    pc.plugins.register(FixedIds())
    prompt = pc.prompt(SEGMENTS)
    assert prompt.pieces[0].token_ids == tuple(3 + (ord(c) % 50) for c in SEGMENTS[0])
    first = pc.generate(SEGMENTS, max_new_tokens=2)
    again = pc.generate(SEGMENTS, max_new_tokens=2)
    assert first.stats.tokens_reused == 0 and again.stats.tokens_reused > 0  # keys chain as usual
    pc.close()
