"""The server's shared state."""

from __future__ import annotations

from typing import Any

from percache_plugin.server.render import chat_ids
from percache_plugin.server.state import ServerSettings, ServerState


def test_requests_are_rendered_with_a_tokenizer_the_runner_does_not_use(pc: Any) -> None:
    """The event loop tokenizes requests while the runner's thread decodes: they must not share
    one tokenizer object, and the copy must render exactly as the handle's tokenizer does."""
    state = ServerState(pc, ServerSettings())
    try:
        assert state.tokenizer is not pc.tokenizer
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there."}]
        assert chat_ids(state.tokenizer, messages) == chat_ids(pc.tokenizer, messages)
    finally:
        state.close()
