"""Per-request statistics and their aggregate: is reuse actually happening?"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

__all__ = ["GenerationStats", "Generation", "StatsTotals"]


@dataclass
class GenerationStats:
    """What one request reused and computed.

    Token counts are deterministic (they do not depend on machine load); times are wall clock.
    """

    prompt_tokens: int = 0
    tokens_reused: int = 0  # served exactly from the store (same ids, same positions)
    tokens_shifted: int = 0  # served from the store at a new position (RoPE phase shift)
    tokens_recomputed: int = 0  # positions of served chunks computed again
    tokens_computed: int = 0  # prompt tokens the model computed in this request
    new_tokens: int = 0
    nodes_reused: int = 0
    nodes_stored: int = 0
    bytes_loaded: int = 0
    bytes_stored: int = 0
    load_misses: int = 0  # planned nodes that failed to load (corrupt, evicted meanwhile)
    corrupt_aborts: int = 0  # forwards aborted by a K/V layer failing its check mid-read (Config.kv_overlap_reads), then computed again
    ram_hits: int = 0  # nodes served from the RAM tier (no file read, no checksum)
    ram_bytes: int = 0  # bytes of those nodes
    ram_misses: int = 0  # nodes the RAM tier did not hold: read from the store
    store_errors: int = 0  # cache writes that failed (full disk, read-only store): answer kept
    plugin_errors: int = 0  # observer hooks that raised (hooks.specs.OBSERVER_HOOKS): logged, answer kept
    approximate: bool = False  # True when any reused K/V is not bit-exact (shifted, lossy dtype)
    fallback: str = ""  # why a plan was abandoned for a full prefill, if it was
    ttft_s: float = 0.0
    total_s: float = 0.0
    load_s: float = 0.0
    # decoding with verified drafts (percache_plugin.decode); zero when drafting is off
    drafting: str = ""  # "on", or why drafting was not used ("off", "sampling", ...)
    # the verify cost curve drafts were priced by: "built-in", "stored (measured <date>)",
    # "measured now" or "given" (Config.draft_verify_cost); "" when drafting was not used
    draft_cost_curve: str = ""
    tokens_drafted: int = 0  # draft tokens fed to the model for verification
    tokens_accepted: int = 0  # of them, equal to what the model chose (kept)
    decode_forwards: int = 0  # model forwards during decoding (the first token's included)
    first_forward_tokens: int = 0  # tokens the first forward emitted (1, plus draft tokens accepted in it)
    forwards_saved: int = 0  # new_tokens - decode_forwards: forwards plain decoding would add
    drafts_declined: int = 0  # drafts found but not verified: not expected to pay for the forward
    packed_linear_calls: int = 0  # linear layers drafted decoding computed over packed weights (Config.draft_packed_linears)
    folded_attention_calls: int = 0  # attention calls of verify forwards with folded query groups (decode/folded.py)
    draft_tree_forwards: int = 0  # verify forwards that fed a token tree of several branches (Config.draft_tree)
    draft_near_ties: int = 0  # tokens chosen in verify forwards with top-two scores within 1e-3 (kernel rounding could flip them)
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)

    def acceptance_by_source(self) -> dict[str, float]:
        """Accepted / drafted tokens per draft source."""
        return {k: self.accepted_by_source.get(k, 0) / v for k, v in self.drafted_by_source.items() if v}

    def summary(self) -> str:
        return (
            f"prompt={self.prompt_tokens} reused={self.tokens_reused} shifted={self.tokens_shifted} "
            f"recomputed={self.tokens_recomputed} computed={self.tokens_computed} "
            f"new={self.new_tokens} loaded={self.bytes_loaded}B stored={self.bytes_stored}B "
            f"ttft={self.ttft_s * 1000:.1f}ms total={self.total_s * 1000:.1f}ms"
            + (f" fallback={self.fallback}" if self.fallback else "")
            + (f" ram_hits={self.ram_hits} ram_bytes={self.ram_bytes}B ram_misses={self.ram_misses}"
               if self.ram_hits or self.ram_misses else "")
            + (f" store_errors={self.store_errors}" if self.store_errors else "")
            + (f" plugin_errors={self.plugin_errors}" if self.plugin_errors else "")
            + (f" drafted={self.tokens_drafted} accepted={self.tokens_accepted} "
               f"forwards_saved={self.forwards_saved}" if self.tokens_drafted else "")
        )


@dataclass
class Generation:
    """The result of :meth:`PerCache.generate`.

    :ivar text: decoded new text (special tokens skipped).
    :ivar token_ids: the new token ids.
    :ivar prompt_ids: the prompt's token ids (concatenation of the segments' ids).
    :ivar first_logits: fp32 logits at the last prompt position (the first generated token's).
    """

    text: str
    token_ids: list[int]
    prompt_ids: list[int]
    stats: GenerationStats
    first_logits: torch.Tensor | None = field(default=None, repr=False)


@dataclass
class StatsTotals:
    """Sums over requests (``pc.stats()``)."""

    requests: int = 0
    prompt_tokens: int = 0
    tokens_reused: int = 0
    tokens_shifted: int = 0
    tokens_recomputed: int = 0
    tokens_computed: int = 0
    new_tokens: int = 0
    bytes_loaded: int = 0
    bytes_stored: int = 0
    load_misses: int = 0
    corrupt_aborts: int = 0
    ram_hits: int = 0
    ram_bytes: int = 0
    ram_misses: int = 0
    store_errors: int = 0
    plugin_errors: int = 0
    tokens_drafted: int = 0
    tokens_accepted: int = 0
    forwards_saved: int = 0
    fallbacks: int = 0
    qa_lookups: int = 0  # QA-bank lookups and hits this session (filled by pc.stats())
    qa_hits: int = 0
    # Generated answers checked against their sources, and those flagged and not served to
    # paraphrases, this session (Config.answer_grounding; filled by pc.stats())
    answers_checked: int = 0
    answers_flagged: int = 0
    # Forgets (a removed chunk, a forgotten fact) that failed or were cut short and were completed
    # by running them again, in ids, and re-runs that failed (tried again later; pc.stats())
    forgets_rerun: int = 0
    forgets_rerun_failed: int = 0
    # The verify cost curve drafts are priced by now (as GenerationStats.draft_cost_curve), and
    # stored curves ignored because they did not read as one (filled by pc.stats())
    draft_cost_curve: str = ""
    draft_curves_ignored: int = 0
    # Measuring that curve (pc.measure_verify_cost(), the idle task 'calibrate'): runs started,
    # runs stopped between forwards (preempted), forwards timed and kept by an unfinished
    # measuring for its next run, tokens computed, and of those the tokens no curve stands for
    # (stopped runs' warm-up forwards, what a discarded measuring kept; filled by pc.stats())
    calibration_runs: int = 0
    calibration_preempted: int = 0
    calibration_points: int = 0
    calibration_tokens: int = 0
    calibration_tokens_abandoned: int = 0

    def add(self, s: GenerationStats) -> None:
        self.requests += 1
        for f in dataclasses.fields(self):
            if f.name in ("requests", "fallbacks", "qa_lookups", "qa_hits", "answers_checked",
                          "answers_flagged", "draft_cost_curve", "draft_curves_ignored") \
                    or f.name.startswith(("calibration_", "forgets_")):
                continue
            setattr(self, f.name, getattr(self, f.name) + getattr(s, f.name))
        self.fallbacks += bool(s.fallback)

    @property
    def reuse_ratio(self) -> float:
        return self.tokens_reused / self.prompt_tokens if self.prompt_tokens else 0.0
