"""A small table of opposite words for the QA bank's antonym guard (a data table).

Each pair is two words (any inflection is matched through ``meaning.stem``) whose swap turns
a question into one with another answer: "Is the shop open on Sunday?" / "Is the shop closed
on Sunday?". Negating prefixes (un-, dis-, in-, im-, non-) are handled by rule, not listed,
and so is "least" said by one question only ("favorite" / "least favorite",
:func:`~percache_plugin.rag.meaning.meaning_checks`).
"""

from __future__ import annotations

__all__ = ["ANTONYM_PAIRS", "CONVERSE_PAIRS"]

ANTONYM_PAIRS: tuple[tuple[str, str], ...] = (
    ("open", "close"), ("open", "shut"), ("start", "stop"), ("start", "finish"),
    ("begin", "end"), ("start", "end"), ("increase", "decrease"), ("raise", "lower"),
    ("rise", "fall"), ("up", "down"), ("win", "lose"),
    ("won", "lost"), ("accept", "reject"), ("accept", "decline"), ("approve", "reject"),
    ("before", "after"), ("first", "last"), ("earliest", "latest"), ("early", "late"),
    ("love", "hate"), ("like", "hate"), ("add", "remove"), ("include", "exclude"),
    ("arrive", "leave"), ("arrive", "depart"), ("come", "go"), ("pass", "fail"),
    ("succeed", "fail"), ("success", "failure"), ("enable", "disable"), ("more", "less"),
    ("more", "fewer"), ("many", "few"), ("much", "little"), ("most", "least"), ("most", "fewest"), ("higher", "lower"),
    ("highest", "lowest"), ("best", "worst"), ("better", "worse"), ("good", "bad"),
    ("easy", "hard"), ("easy", "difficult"), ("cheap", "expensive"), ("cheapest", "dearest"),
    ("hire", "fire"), ("give", "take"), ("push", "pull"), ("positive", "negative"), ("advantage", "disadvantage"),
    ("pro", "con"), ("strength", "weakness"), ("true", "false"), ("right", "wrong"),
    ("allow", "forbid"), ("allow", "ban"), ("allow", "prohibit"), ("permit", "forbid"),
    ("big", "small"), ("large", "small"), ("long", "short"), ("tall", "short"),
    ("same", "different"), ("agree", "object"), ("agree", "refuse"), ("accept", "refuse"), ("support", "oppose"), ("import", "export"),
    ("inside", "outside"), ("above", "below"), ("maximum", "minimum"), ("max", "min"),
    ("upstairs", "downstairs"), ("lock", "unlock"), ("join", "quit"), ("join", "leave"),
    ("enter", "exit"), ("on", "off"), ("online", "offline"), ("new", "old"),
    ("young", "old"), ("hot", "cold"), ("warm", "cold"), ("fast", "slow"), ("full", "empty"),
    ("heavy", "light"), ("strong", "weak"), ("rich", "poor"), ("safe", "dangerous"),
    ("happy", "sad"), ("alive", "dead"), ("present", "absent"), ("public", "private"),
    ("internal", "external"), ("import", "export"), ("deposit", "withdraw"),
    ("income", "expense"), ("profit", "loss"), ("gain", "loss"), ("credit", "debit"),
    ("asleep", "awake"), ("wet", "dry"), ("clean", "dirty"), ("light", "dark"),
    ("north", "south"), ("east", "west"), ("left", "right"), ("top", "bottom"),
    ("front", "back"), ("always", "never"), ("everyone", "nobody"), ("all", "none"),
    ("confirm", "cancel"), ("attend", "miss"), ("remember", "forget"), ("find", "lose"),
    ("found", "lost"), ("mount", "unmount"), ("connect", "disconnect"), ("upload", "download"),
    ("input", "output"), ("minimum", "maximum"), ("entrance", "exit"),
)

CONVERSE_PAIRS: tuple[tuple[str, str], ...] = (
    ("give", "receive"), ("send", "receive"), ("lend", "borrow"), ("buy", "sell"),
    ("bought", "sold"), ("sell", "purchase"), ("teach", "learn"),
)
"""Converse verbs: one event seen from either side. With the other words in the same order
they are opposites ("What gifts has Calvin received from his artist friends?" / "... given to
his artist friends?", qa_fresh4, seen); with the people trading places they are a paraphrase
("What gift did Evan receive from a close friend?" / "What did a close friend give Evan?"),
see :func:`~percache_plugin.rag.meaning.meaning_checks`."""
