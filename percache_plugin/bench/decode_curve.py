"""The verify cost curve of ``percache bench decode``: ``--verify-cost`` parsed, and ``--calibrate``
(the curve measured once and stored in each meeting's store before its handle opens)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["calibrate_once", "parse_curve", "store_curve"]


def parse_curve(text: str | None) -> tuple[float, ...] | None:
    """``--verify-cost``: comma-separated positive ratios, or None; SystemExit naming bad input."""
    if text is None:
        return None
    try:
        curve = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"--verify-cost must be comma-separated numbers, got {text!r}") from None
    if not curve or any(not r > 0 for r in curve):
        raise SystemExit(f"--verify-cost must list positive ratios (k = 1, 2, ...), got {text!r}")
    return curve


def calibrate_once(model: Any, tok: Any, store: Path) -> dict[str, Any]:
    """Measure the verify cost curve once with a default handle's set-up (its defaults)."""
    import percache_plugin as percache

    with percache.enable(model, tok, store=store) as pc:
        t0 = time.perf_counter()
        curve = pc.measure_verify_cost(progress=False)
        return {"ratios": list(curve), "seconds": round(time.perf_counter() - t0, 1), "measured": time.time(),
                "fingerprint": pc.fingerprint, "packed": pc.engine.drafts.packs(pc.config)}


def store_curve(store: Path, model: Any, calibration: dict[str, Any]) -> None:
    """Write the measured curve into ``store``'s database, keyed as a handle there looks it up."""
    from ..decode.stored_cost import CurveLookup
    from ..kv.store import DB_NAME

    store.mkdir(parents=True, exist_ok=True)
    curves = CurveLookup(store / DB_NAME)
    curves.put(calibration["fingerprint"], model, calibration["packed"], calibration["ratios"],
               measured=calibration["measured"])
    curves.close()
