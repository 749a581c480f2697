"""percache: a predictive cache for personal RAG on Hugging Face transformers.

``pc = percache_plugin.enable(model, tokenizer, store=path)`` switches a loaded causal LM to
percache and returns a :class:`PerCache` handle.
"""

from .assistant import Answer
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
from .stats import Generation, GenerationStats, StatsTotals

__all__ = [
    "AddReport",
    "Answer",
    "AssistantContext",
    "Capabilities",
    "ChunkKV",
    "Config",
    "ConfigError",
    "DEFAULT_PLUGINS",
    "EngineContext",
    "Generation",
    "GenerationStats",
    "IdleReport",
    "PerCache",
    "Prompt",
    "PromptPiece",
    "Query",
    "ReusePlan",
    "Segment",
    "SegmentError",
    "StatsTotals",
    "enable",
    "hookimpl",
]
__version__ = "0.1.0"
