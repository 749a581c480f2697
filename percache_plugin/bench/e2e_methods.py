"""The methods compared by ``percache bench e2e``: each one is our own engine with some plugins
switched on and off through :class:`~percache_plugin.config.Config`, so every method shares one
code path and the comparison is fair.

The table is data (:data:`METHODS`); the harness never special-cases a method by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..config import Config

__all__ = [
    "Method",
    "MethodUnavailable",
    "METHODS",
    "PREDICTION_PAIRS",
    "SMOKE_METHODS",
    "SWEEP_METHOD",
    "REFERENCE_METHOD",
    "OFF_VALUES",
    "select_methods",
    "method_config",
]


class MethodUnavailable(RuntimeError):
    """A method needs an engine feature this version does not have; the run is skipped."""


@dataclass(frozen=True)
class Method:
    """One compared method.

    :ivar name: the ``--methods`` name.
    :ivar label: the name in tables and plots.
    :ivar config: keyword arguments of :func:`percache_plugin.enable` (besides store/embedder).
    :ivar predicts: calls ``pc.predict`` (two knowledge rounds before the first question, one
        history round after each answer); needs ``PerCache.predict``.
    :ivar idle: runs ``pc.idle()`` after document arrival and between questions. Baselines
        that fill their caches only on misses do no background work.
    :ivar description: one line for the docs.
    """

    name: str
    label: str
    config: Mapping[str, Any]
    predicts: bool
    idle: bool
    description: str = ""


def _m(name: str, label: str, description: str, *, predicts: bool, idle: bool,
       **config: Any) -> Method:
    return Method(name, label, MappingProxyType(dict(config)), predicts, idle, description)


_NO_PREDICT = {"predict": "off"}
_PLAIN = {"drafting": False}  # the baselines decode plainly: drafting is percache's own
_RAG = {"use_kv": True, "reuse": "exact", "kv_warm": False}  # filled by requests (and predictions)
_SLEEP = {"predict": "both", "population_cutoff": 1.0}
_FULL = {"use_kv": True, "reuse": "shifted", "use_qa_bank": True, "predict": "both",
         "drafting": True, "kv_warm": True}

METHODS: tuple[Method, ...] = (
    _m("naive", "Naive", "no cache: every question retrieves and prefills its whole prompt",
       predicts=False, idle=False, use_kv=False, use_qa_bank=False, **_NO_PREDICT, **_PLAIN),
    _m("ragcache", "RAGCache-like", "exact chunk-prefix K/V reuse, filled only on misses",
       predicts=False, idle=False, use_qa_bank=False, **_RAG, **_NO_PREDICT, **_PLAIN),
    _m("meancache", "MeanCache-like", "semantic QA bank, filled only on misses",
       predicts=False, idle=False, use_kv=False, use_qa_bank=True, **_NO_PREDICT, **_PLAIN),
    _m("sleeptime", "Sleep-time-like",
       "predicted questions fully answered in idle time, QA bank only",
       predicts=True, idle=True, use_kv=False, use_qa_bank=True, **_SLEEP, **_PLAIN),
    _m("ragcache+meancache", "RAGCache+MeanCache", "both caches, filled only on misses",
       predicts=False, idle=False, use_qa_bank=True, **_RAG, **_NO_PREDICT, **_PLAIN),
    _m("ragcache+sleeptime", "RAGCache+Sleep-time",
       "exact K/V reuse plus predicted questions fully answered in idle time",
       predicts=True, idle=True, use_qa_bank=True, **_RAG, **_SLEEP, **_PLAIN),
    _m("percache", "percache",
       "both banks, shifted K/V reuse, prediction, the population scheduler, document K/V "
       "warmed in idle time and verified drafts",
       predicts=True, idle=True, **_FULL),
    _m("percache-no-qa", "percache w/o QA bank", "percache without the QA bank",
       predicts=True, idle=True, **{**_FULL, "use_qa_bank": False}),
    _m("percache-no-kv", "percache w/o K/V", "percache without K/V reuse",
       predicts=True, idle=True, **{**_FULL, "use_kv": False}),
    _m("percache-no-predict", "percache w/o prediction",
       "percache without prediction (deferred work still runs in idle time)",
       predicts=False, idle=True, **{**_FULL, "predict": "off"}),
)

PREDICTION_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("QA bank", "meancache", "sleeptime"),
    ("RAGCache + QA bank", "ragcache+meancache", "ragcache+sleeptime"),
    ("percache", "percache-no-predict", "percache"),
)
"""``(label, without prediction, with prediction)`` for the hit-rate plot (Fig. 16b)."""

SMOKE_METHODS: tuple[str, ...] = ("naive", "percache")
REFERENCE_METHOD = "naive"
"""The method whose answers the others' ROUGE-L "vs naive" is measured against."""
SWEEP_METHOD = "percache"

OFF_VALUES: Mapping[str, Any] = MappingProxyType({"predict": "off", "drafting": False, "kv_warm": False})
"""Values that mean "feature off": when this engine's Config lacks the key, a method asking
for exactly this value runs without it (the feature does not exist, so it is off)."""


def select_methods(names: Iterable[str] | None) -> list[Method]:
    """The methods named (all when None), in table order, naive first (the other methods'
    ROUGE-L vs naive needs its answers). Unknown names raise ValueError listing the known ones."""
    by_name = {m.name: m for m in METHODS}
    if names is None:
        return list(METHODS)
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; known: {list(by_name)}")
    return [m for m in METHODS if m.name in wanted]


def method_config(method: Method, overrides: Mapping[str, Any] | None = None, *,
                  common: Mapping[str, Any] | None = None,
                  fields: Iterable[str] | None = None) -> dict[str, Any]:
    """The ``enable()`` keywords of ``method``: ``common`` settings (dropped where this engine's
    :class:`Config` lacks the key), then the method's own, then ``overrides``.

    A method or override key the Config does not have (``fields``, default: the real ones) is
    dropped when its value means "off" (:data:`OFF_VALUES`); any other raises
    :class:`MethodUnavailable` naming it, so the method is skipped at set-up."""
    known = set(fields) if fields is not None else {f.name for f in dataclasses.fields(Config)}
    out = {k: v for k, v in (common or {}).items() if k in known}
    for key, value in {**method.config, **(overrides or {})}.items():
        if key in known:
            out[key] = value
        elif key in OFF_VALUES and OFF_VALUES[key] == value:
            continue
        else:
            raise MethodUnavailable(
                f"this engine's Config has no {key!r} (needed for {key}={value!r})")
    return out
