"""Model fingerprints: K/V and answers stored for one model state are never served to another.

The fingerprint covers the config, the tokenizer, every weight's bytes and the peft adapters'
flags; :class:`ModelFingerprint` follows it from request to request at the cost of reading
each tensor's version counter (see :mod:`.tracker`).
"""

from .adapters import AdapterState, adapter_state, tuner_layers
from .static import static_digest
from .tracker import FingerprintStats, ModelFingerprint, model_fingerprint
from .weights import WeightDigests, named_tensors, tensor_digest

__all__ = [
    "AdapterState",
    "FingerprintStats",
    "ModelFingerprint",
    "WeightDigests",
    "adapter_state",
    "model_fingerprint",
    "named_tensors",
    "static_digest",
    "tensor_digest",
    "tuner_layers",
]
