"""Decoding: running ``generate`` over a prepared cache, and greedy decoding with drafts
copied from the prompt, the QA bank and the conversation, verified by the model."""

from .acceptance import AcceptanceHistory, Tally, draft_kind
from .cost import SMOLLM2_CPU_COST, SMOLLM2_CPU_COST_PACKED, VerifyCost
from .generate import context_limit, context_note, dtype_device, greedy_reason, run_generate
from .lookup import Draft, DraftIndex
from .measured import MeasuredCost
from .packed import PackedLinears, PackOnDemand
from .schedule import DraftSchedule
from .sources import DraftHints, DraftSource, prompt_source, text_source
from .verify import DraftCounts, DraftedDecoding

__all__ = ["context_limit", "context_note", "dtype_device", "greedy_reason", "run_generate", "Draft", "DraftIndex",
           "DraftSchedule", "DraftHints", "DraftSource", "prompt_source", "text_source",
           "DraftCounts", "DraftedDecoding", "AcceptanceHistory", "Tally", "draft_kind",
           "SMOLLM2_CPU_COST", "SMOLLM2_CPU_COST_PACKED", "VerifyCost", "PackedLinears",
           "PackOnDemand", "MeasuredCost"]
