"""Does the seed's embedding search find reusable prefixes the prefix-block index misses?

Runs each workload through ``pc.complete`` (and, for the mixed workload, ``pc.generate``
first) with the :class:`EmbeddingSearch` plugin (all-MiniLM-L6-v2) and reports, summed over the
plain prompts: tokens the block index serves, tokens the plugin served beyond it, and the
longest exact common token prefix with any earlier prompt (what any exact method could reuse,
at most). Text that the chunk path tokenized piece by piece rarely shares more than a few
exact tokens with the same text tokenized whole (SmolLM2 merges "\n\n" differently at piece
boundaries), so the mixed workload is run on text and on the chunk path's own ids (an
application re-sending ids). Token counts do not depend on the weights, so the model is a tiny random Llama with
SmolLM2's tokenizer (real tokenization, no minutes of prefill on a busy machine).

    python benchmarks/embedding_search.py
"""

from __future__ import annotations

import json
from pathlib import Path

import percache_plugin as percache
from percache_plugin.bundled import SMOLLM2_GGUF, smollm2_path
from percache_plugin.plugins.embedding_search import EmbeddingSearch, common_prefix

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev5.json"  # ../shared beside the repository
FEW_SHOT = "".join(f"Q: What is the capital of country number {i}? A: City {i}.\n" for i in range(40))
SYSTEM = "You answer questions about a conversation between two friends."


def _model(tok: object) -> object:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,  # type: ignore[arg-type]
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=8192)
    return LlamaForCausalLM(config).eval()


def _sessions(n: int) -> list[str]:
    conv = json.loads(LOCOMO.read_text())[0]["conversation"]
    return ["\n".join(f"{t['speaker']}: {t['text']}" for t in conv[f"session_{k}"]) for k in range(1, n + 1)]


def workloads() -> dict[str, list[tuple[str, object]]]:
    """Requests per workload: ("complete", text) or ("generate", segments)."""
    questions = [f"Q: What is the capital of country number {i}? A:" for i in (41, 57, 73, 88, 99)]
    out: dict[str, list[tuple[str, object]]] = {
        "few-shot preamble": [("complete", FEW_SHOT + q) for q in questions]}
    transcript, grow = FEW_SHOT, []
    for i in range(5):
        transcript += f"Q: What is the capital of country number {40 + i}? A: City {40 + i}.\n"
        grow.append(("complete", transcript + "Q: And the next one? A:"))
    out["growing transcript"] = grow
    sessions = _sessions(4)
    text, lines = "", []
    for s in sessions:  # a LoCoMo transcript growing session by session
        text += s + "\n"
        lines.append(("complete", text + "What did they talk about?"))
    out["LoCoMo transcript"] = lines
    mixed: list[tuple[str, object]] = []
    for k, s in enumerate(sessions):  # chunk path first, then a plain prompt over the same text
        mixed.append(("generate", [SYSTEM, s, "What did they talk about?"]))
        mixed.append(("complete", f"{SYSTEM}\n\n{s}\n\nWho spoke first in session {k + 1}?"))
    out["LoCoMo chunk path, then the same text as a plain prompt"] = mixed
    out["LoCoMo chunk path, then its ids as a plain prompt"] = [
        (kind, what if kind == "generate" else ("ids", [SYSTEM, sessions[k // 2], f"Who spoke first in session {k // 2 + 1}?"]))
        for k, (kind, what) in enumerate(mixed)]
    return out


def main() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path(), gguf_file=SMOLLM2_GGUF)
    rows = []
    for name, requests in workloads().items():
        search = EmbeddingSearch(top_k=4)
        model = _model(tok)
        pc = percache.enable(model, tok, plugins=[search], chat_template=False, chunk_separator="\n\n")
        seen: list[list[int]] = []
        served = oracle = prompts = tokens = 0
        for kind, what in requests:
            if kind == "generate":
                gen = pc.generate(what, max_new_tokens=1)
            else:
                if isinstance(what, tuple):  # the chunk path's ids of every piece but the query
                    prompt = pc.prompt(what[1])
                    what = prompt.input_ids[:prompt.pieces[-1].start] + list(
                        tok(what[1][-1], add_special_tokens=False)["input_ids"])
                gen = pc.complete(what, max_new_tokens=1)
                ids = gen.prompt_ids
                prompts += 1
                tokens += len(ids)
                served += gen.stats.tokens_reused
                oracle += max((min(common_prefix(s, ids), len(ids) - 1) for s in seen), default=0)
            seen.append(list(gen.prompt_ids))
        s = search.stats()
        rows.append([name, prompts, tokens, served - s["extra_tokens"], s["extra_tokens"], oracle,
                     s["searched"], s["found"]])
        pc.close()
    print("| workload | plain prompts | prompt tokens | served by block index | extra by embedding "
          "search | longest exact common prefix (any method's ceiling) | searches | finds |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


if __name__ == "__main__":
    main()
