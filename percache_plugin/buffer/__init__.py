"""LLM-aware buffer caches: a RAM tier for chunk K/V and for offloaded weights, their replacement
policies, block-level access traces and the cache-sizing model."""

from .adaptive import AdaptiveLLMPolicy
from .cache import BufferCache, CacheStats, simulate
from .llm_aware import LLMAwarePolicy
from .policies import (
    BUILTIN_POLICIES,
    LeCaRPolicy,
    LFUPolicy,
    LRUPolicy,
    Policy,
    PolicyFactory,
    make_policy,
    policy_names,
)
from .trace import Access, Tracer, read_trace, write_trace

__all__ = [
    "BufferCache", "CacheStats", "simulate", "Policy", "PolicyFactory", "BUILTIN_POLICIES", "LRUPolicy",
    "LFUPolicy", "LeCaRPolicy", "LLMAwarePolicy", "AdaptiveLLMPolicy", "make_policy", "policy_names", "Access",
    "Tracer", "read_trace", "write_trace",
]
