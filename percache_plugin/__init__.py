"""percache: a predictive cache for personal RAG on Hugging Face transformers.

``pc = percache_plugin.enable(model, tokenizer, store=path)`` switches a loaded causal LM to
percache and returns a :class:`PerCache` handle.
"""

from .config import Config, ConfigError
from .engine import Capabilities, PerCache, enable
from .hooks.specs import hookimpl
from .kv.planner import ReusePlan
from .kv.store import ChunkKV
from .segments import Prompt, PromptPiece, Segment, SegmentError
from .stats import Generation, GenerationStats, StatsTotals

__all__ = [
    "Capabilities",
    "ChunkKV",
    "Config",
    "ConfigError",
    "Generation",
    "GenerationStats",
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
