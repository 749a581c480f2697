"""What a QA-bank answer is bound to: the model and every setting that shaped it.

An answer is served again only to a handle that would generate it again: the same weights
(fingerprint) and the same settings of the prompt and of the generation. :data:`ANSWER_SETTINGS`
decides, for every :class:`~percache_plugin.config.Config` field, whether answers are bound to
it and why (``tests/plugins/test_answer_binding.py`` fails on a field missing from it). A bound
setting changed by ``configure()`` or set otherwise by another handle on the store makes the old
answers a miss: a fresh store with the new setting would answer differently. Changing it back
serves them again. ``Config.qa_share_across_models`` serves every binding's answers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["AnswerSetting", "ANSWER_SETTINGS", "BOUND_SETTINGS", "answer_model", "generation_defaults",
           "same_settings"]


@dataclass(frozen=True)
class AnswerSetting:
    """One ``Config`` field: whether QA answers are bound to it, and why (or why not)."""

    name: str
    bound: bool
    why: str


_B, _N = True, False
_STORAGE = "where and how K/V is stored or read; reuse is exact, the tokens are the same"
_LOOKUP = "read at every lookup, not at generation"
_CHAT = "chat sessions only; ask() answers do not read it"
_IDLE = "which questions idle time predicts or refreshes, not the prompt of their answers"

ANSWER_SETTINGS: tuple[AnswerSetting, ...] = (
    # -- the prompt ---------------------------------------------------------------------
    AnswerSetting("system_prompt", _B, "the prompt's first segment"),
    AnswerSetting("chat_template", _B, "how the prompt is rendered (bound as the flag in use: "
                                       "None and True agree for a tokenizer with a template)"),
    AnswerSetting("chunk_separator", _B, "appended to every chunk segment of the prompt"),
    AnswerSetting("top_k", _B, "how many retrieved chunks the prompt holds"),
    AnswerSetting("memory_in_ask", _B, "whether memory facts join the prompt's chunks"),
    AnswerSetting("memory_k", _B, "how many memory facts join the prompt"),
    AnswerSetting("memory_threshold", _B, "which memory facts join the prompt"),
    # -- whether and how it is answered -------------------------------------------------
    AnswerSetting("relevance_threshold", _B, "whether ask() answers at all or says no relevant "
                                             "documents were found"),
    AnswerSetting("answer_grounding", _B, "whether an answer its sources do not support is "
                                          "served to paraphrases"),
    AnswerSetting("reuse", _B, "'shifted' reuses approximate K/V: not the tokens of plain "
                               "generation"),
    AnswerSetting("recompute", _B, "which shifted positions are exact (reuse='shifted')"),
    AnswerSetting("storage_dtype", _B, "rounded K/V: not the tokens of plain generation"),
    # -- not bound ----------------------------------------------------------------------
    AnswerSetting("chunk_words", _N, "chunks documents added later; the chunks an answer was "
                                     "built on are its sources, and a document added again "
                                     "with other chunks drops the answers built on the old ones"),
    AnswerSetting("embedder", _N, "the QA bank refuses to open with another embedder"),
    AnswerSetting("similarity_threshold", _N, _LOOKUP),
    AnswerSetting("consistency_min_overlap", _N, _LOOKUP),
    AnswerSetting("meaning_guards", _N, _LOOKUP),
    AnswerSetting("audit_meaning_guards", _N, _LOOKUP),
    AnswerSetting("use_qa_bank", _N, _LOOKUP),
    AnswerSetting("qa_share_across_models", _N, _LOOKUP),
    AnswerSetting("qa_byte_limit", _N, "how many answers are kept"),
    AnswerSetting("drafting", _N, "verified drafts: the tokens of plain greedy decoding"),
    AnswerSetting("draft_sources", _N, "verified drafts: the tokens of plain greedy decoding"),
    AnswerSetting("draft_verify_cost", _N, "verified drafts: the tokens of plain greedy decoding"),
    AnswerSetting("draft_cost_online", _N, "verified drafts: the tokens of plain greedy decoding"),
    AnswerSetting("draft_calibrate_idle", _N, "verified drafts: the tokens of plain greedy decoding"),
    AnswerSetting("draft_packed_linears", _N, "the same tokens to float rounding, as on other "
                                              "hardware"),
    AnswerSetting("draft_tree", _N, "the same tokens to float rounding, as on other hardware"),
    AnswerSetting("use_kv", _N, _STORAGE),
    AnswerSetting("kv_byte_limit", _N, _STORAGE),
    AnswerSetting("kv_eviction", _N, _STORAGE),
    AnswerSetting("ram_cache_bytes", _N, _STORAGE),
    AnswerSetting("ram_join_buffers", _N, _STORAGE),
    AnswerSetting("ram_cache_policy", _N, _STORAGE),
    AnswerSetting("kv_trace", _N, _STORAGE),
    AnswerSetting("kv_warm", _N, _STORAGE),
    AnswerSetting("kv_warm_max_share", _N, _STORAGE),
    AnswerSetting("verify_checksums", _N, _STORAGE),
    AnswerSetting("kv_overlap_reads", _N, _STORAGE),
    AnswerSetting("kv_prefetch", _N, _STORAGE),
    AnswerSetting("background_prefill_chunk", _N, _STORAGE),
    AnswerSetting("predict", _N, _IDLE),
    AnswerSetting("prediction_stride", _N, _IDLE),
    AnswerSetting("knowledge_rounds", _N, _IDLE),
    AnswerSetting("prediction_quiet_s", _N, _IDLE),
    AnswerSetting("population_cutoff", _N, _IDLE),
    AnswerSetting("abstract_max_chunks", _N, _IDLE),
    AnswerSetting("abstract_batch_chunks", _N, _IDLE),
    AnswerSetting("abstract_max_words", _N, _IDLE),
    AnswerSetting("prompt_dir", _N, _IDLE + " (abstract and prediction templates)"),
    AnswerSetting("background_max_new_tokens", _N, "a length cap of idle-time generation: an "
                                                   "answer records its length and how it ended, "
                                                   "and the length guard serves it only to caps "
                                                   "it fits (rag/qa_length.py)"),
    AnswerSetting("debug_log", _N, "logging only"),
    AnswerSetting("session_kv_tokens", _N, _CHAT),
    AnswerSetting("session_eviction", _N, _CHAT),
    AnswerSetting("session_low_water", _N, _CHAT),
    AnswerSetting("session_recompute_head", _N, _CHAT),
    AnswerSetting("session_wait_s", _N, _CHAT),
    AnswerSetting("prefix_block_tokens", _N, _STORAGE),
    AnswerSetting("session_blocks", _N, _CHAT),
    AnswerSetting("memory_recall", _N, _CHAT),
    AnswerSetting("memory_recall_mode", _N, _CHAT),
    AnswerSetting("memory_recompute_head", _N, _CHAT),
    AnswerSetting("memory_region_facts", _N, _CHAT),
    AnswerSetting("memory_extraction", _N, "which facts exist; an answer names the facts it was "
                                           "built on as sources, forgetting one drops it"),
    AnswerSetting("memory_extract_tokens", _N, "which facts exist (see memory_extraction)"),
    AnswerSetting("memory_extract_grammar", _N, "which facts exist (see memory_extraction)"),
    AnswerSetting("memory_facts_per_turn", _N, "which facts exist (see memory_extraction)"),
    AnswerSetting("memory_grounding", _N, "which facts exist (see memory_extraction)"),
    AnswerSetting("memory_context_keys", _N, "which facts exist (see memory_extraction)"),
    AnswerSetting("memory_fact_tokens", _N, "which facts exist (see memory_extraction)"),
)

BOUND_SETTINGS: tuple[str, ...] = tuple(s.name for s in ANSWER_SETTINGS if s.bound
                                        and s.name != "chat_template")
"""The fields whose values are digested into the binding (``chat_template`` is bound as the
flag in use instead)."""


def generation_defaults(gen: object) -> str:
    """The model's own generation settings (``model.generation_config``, those that differ from
    transformers' defaults), which ``generate`` applies to every answer: a
    ``repetition_penalty`` or ``eos_token_id`` set there changes the greedy tokens like the same
    keyword argument would. All of them are bound, not a chosen few: a setting that leaves the
    tokens as they are costs at most a regenerated answer when it changes."""
    if gen is None or not hasattr(gen, "to_diff_dict"):
        return ""
    values = {k: v for k, v in gen.to_diff_dict().items() if k != "transformers_version"}
    return repr(sorted(values.items()))


def answer_model(fingerprint: str, config: Config, use_template: bool = True, generation: str = "") -> str:
    """What a QA-bank answer is bound to: the model's fingerprint, the values of
    :data:`BOUND_SETTINGS`, whether the prompt was rendered with the chat template and the
    model's generation settings (:func:`generation_defaults`)."""
    values = repr([(name, getattr(config, name)) for name in BOUND_SETTINGS] + [use_template, generation])
    digest = hashlib.blake2b(values.encode("utf-8"), digest_size=8).hexdigest()
    return f"{fingerprint}/answer-{digest}"


def same_settings(model: str, other: str) -> bool:
    """Whether two bindings hold the same settings (their fingerprints may differ)."""
    return model.rpartition("/answer-")[2] == other.rpartition("/answer-")[2]
