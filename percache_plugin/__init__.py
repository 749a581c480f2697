"""percache: a predictive cache for personal RAG on Hugging Face transformers.

``pc = percache_plugin.enable(model, tokenizer, store=path)`` switches a loaded causal LM to
percache and returns a :class:`PerCache` handle.
"""

from .ask import Answer
from .config import Config, ConfigError
from .engine import Capabilities, PerCache, enable
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
    "Capabilities",
    "ChunkKV",
    "Config",
    "ConfigError",
    "DEFAULT_PLUGINS",
    "Generation",
    "GenerationStats",
    "IdleReport",
    "PerCache",
    "Prompt",
    "PromptPiece",
    "ReusePlan",
    "Segment",
    "SegmentError",
    "StatsTotals",
    "enable",
    "hookimpl",
]
__version__ = "0.1.0"
