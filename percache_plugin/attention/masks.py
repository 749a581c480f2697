"""Extra mask functions ANDed into the model's own masks (causal, sliding, splice).

transformers builds a model's masks by calling the mask function registered under the model's
attention name with a ``mask_function(batch_idx, head_idx, q_idx, kv_idx) -> bool``; percache
registers :func:`with_extras` around ``sdpa_mask``/``eager_mask``, which composes that function
with the extra one of the model's handle using transformers' own ``and_masks``. Indices are
cache slots (== RoPE positions); a mask function must be index-based (broadcastable tensor
operations, as transformers' own are).

The mask interface is called with the model's config but not the model, so providers are kept
by ``id(config)`` (configs are not hashable) and dropped with :func:`release_mask_provider`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from transformers.masking_utils import and_masks, causal_mask_function

__all__ = ["MaskFunction", "with_extras", "register_mask_provider", "release_mask_provider",
           "apply_to_additive"]

MaskFunction = Callable[[Any, Any, Any, Any], Any]
Provider = Callable[[], "MaskFunction | None"]

_PROVIDERS: dict[int, weakref.ref[Provider]] = {}


def _configs(model: Any) -> list[Any]:
    cfg = model.config
    text = cfg.get_text_config(decoder=True)
    return [cfg] if text is cfg else [cfg, text]


def register_mask_provider(model: Any, provider: Provider) -> None:
    """Masks built for ``model`` AND in what ``provider()`` returns (None: nothing)."""
    ref: weakref.ref[Provider] = (weakref.WeakMethod(provider) if hasattr(provider, "__self__")  # type: ignore[arg-type]
                                  else weakref.ref(provider))
    for cfg in _configs(model):
        _PROVIDERS[id(cfg)] = ref


def release_mask_provider(model: Any) -> None:
    for cfg in _configs(model):
        _PROVIDERS.pop(id(cfg), None)


def _extra(config: Any) -> MaskFunction | None:
    ref = _PROVIDERS.get(id(config)) if config is not None else None
    provider = ref() if ref is not None else None
    return provider() if provider is not None else None


def with_extras(base: Callable[..., Any]) -> Callable[..., Any]:
    """``base`` (``sdpa_mask`` or ``eager_mask``) with the handle's extra mask ANDed in; with an
    extra mask the causal shortcut (mask None) is off, since the mask is no longer causal."""

    def percache_mask(*args: Any, mask_function: MaskFunction = causal_mask_function,
                      config: Any = None, **kwargs: Any) -> Any:
        extra = _extra(config)
        if extra is not None:
            mask_function = and_masks(mask_function, extra)
            kwargs["allow_is_causal_skip"] = False
        return base(*args, mask_function=mask_function, config=config, **kwargs)

    return percache_mask


def apply_to_additive(mask: torch.Tensor, extra: MaskFunction, q_positions: torch.Tensor) -> torch.Tensor:
    """AND ``extra`` into an additive ``[1, 1, q, kv]`` mask built for queries at ``q_positions``
    (the splice mask): a new tensor, the dtype's minimum where ``extra`` is False."""
    q = q_positions.reshape(-1, 1).to(torch.long)
    kv = torch.arange(mask.shape[-1], device=mask.device).reshape(1, -1)
    zero = torch.zeros((), dtype=torch.long, device=mask.device)
    allowed = torch.as_tensor(extra(zero, zero, q, kv), device=mask.device).expand(q.shape[0], kv.shape[1])
    return mask.masked_fill(~allowed[None, None], torch.finfo(mask.dtype).min)
