"""percache: a predictive cache for personal RAG on Hugging Face transformers.

``pc = percache_plugin.enable(model, tokenizer, store=path)`` switches a loaded causal LM to
percache and returns a :class:`PerCache` handle.

The names below are imported on first use (PEP 562), so ``import percache_plugin`` and the
``percache`` console script do not load torch and transformers until something needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .assistant import Answer
    from .attention.kinds import UnsupportedModelError
    from .config import Config, ConfigError
    from .core.capabilities import Capabilities
    from .core.query import Query
    from .handle import PerCache, enable
    from .hooks.contexts import AssistantContext, EngineContext
    from .hooks.manager import DEFAULT_PLUGINS
    from .hooks.specs import hookimpl
    from .idle import IdleReport
    from .kv.planner import ReusePlan
    from .kv.store import ChunkKV
    from .rag.knowledge import AddReport
    from .segments import Prompt, PromptPiece, Segment, SegmentError
    from .session import ChatStats, MessageTooLong, Reply, SessionBusy, SessionInfo, UnknownSession
    from .stats import Generation, GenerationStats, StatsTotals
    from .turnlog import TurnRecord, UnknownTurn

# public name -> the module defining it
_EXPORTS: dict[str, str] = {
    "AddReport": "rag.knowledge",
    "Answer": "assistant",
    "AssistantContext": "hooks.contexts",
    "Capabilities": "core.capabilities",
    "ChunkKV": "kv.store",
    "Config": "config",
    "ConfigError": "config",
    "DEFAULT_PLUGINS": "hooks.manager",
    "EngineContext": "hooks.contexts",
    "Generation": "stats",
    "GenerationStats": "stats",
    "IdleReport": "idle",
    "PerCache": "handle",
    "Prompt": "segments",
    "PromptPiece": "segments",
    "Query": "core.query",
    "ReusePlan": "kv.planner",
    "Segment": "segments",
    "SegmentError": "segments",
    "StatsTotals": "stats",
    "ChatStats": "session",
    "MessageTooLong": "session",
    "Reply": "session",
    "SessionBusy": "session",
    "SessionInfo": "session",
    "UnknownSession": "session",
    "TurnRecord": "turnlog",
    "UnknownTurn": "turnlog",
    "UnsupportedModelError": "attention.kinds",
    "enable": "handle",
    "hookimpl": "hooks.specs",
}

__all__ = [
    "AddReport",
    "Answer",
    "AssistantContext",
    "Capabilities",
    "ChatStats",
    "ChunkKV",
    "Config",
    "ConfigError",
    "DEFAULT_PLUGINS",
    "EngineContext",
    "Generation",
    "GenerationStats",
    "IdleReport",
    "MessageTooLong",
    "PerCache",
    "Prompt",
    "PromptPiece",
    "Query",
    "Reply",
    "ReusePlan",
    "Segment",
    "SegmentError",
    "SessionBusy",
    "SessionInfo",
    "StatsTotals",
    "TurnRecord",
    "UnknownSession",
    "UnknownTurn",
    "UnsupportedModelError",
    "enable",
    "hookimpl",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'percache_plugin' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
