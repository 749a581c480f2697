"""The K/V engine: owns the model switch, the K/V store and the plugins; runs requests.

It knows nothing of the assistant (banks, ask, idle work): :class:`~percache_plugin.handle.PerCache`
composes an :class:`Engine` with an :class:`~percache_plugin.assistant.Assistant`.

- :mod:`.engine`: :class:`Engine`, requests (tokenize, plan, load, splice, generate, store);
- :mod:`.switch`: the attention switch on the model, the relay into the hooks, ``disabled()``;
- :mod:`.drafting`: the drafted decoding set up per request (sources, schedule, packed weights).
"""

from .engine import Engine

__all__ = ["Engine"]
