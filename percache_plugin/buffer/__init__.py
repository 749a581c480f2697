"""LLM-aware buffer caches: a RAM tier for chunk K/V and for offloaded weights, their replacement
policies, block-level access traces and the cache-sizing model."""

from .cache import BufferCache, CacheStats, simulate
from .llm_aware import LLMAwarePolicy
from .policies import (
    LeCaRPolicy,
    LFUPolicy,
    LRUPolicy,
    Policy,
    PolicyRegistry,
    make_policy,
    policy_names,
    register_policy,
)
from .trace import Access, Tracer, read_trace, write_trace

__all__ = [
    "BufferCache", "CacheStats", "simulate", "Policy", "PolicyRegistry", "LRUPolicy", "LFUPolicy",
    "LeCaRPolicy", "LLMAwarePolicy", "make_policy", "policy_names", "register_policy", "Access",
    "Tracer", "read_trace", "write_trace",
]
