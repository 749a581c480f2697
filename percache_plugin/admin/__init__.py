"""Store administration: look into a store and manage it (``percache store ...``)."""

from .store_admin import (
    DocumentInfo,
    FingerprintInfo,
    RemoveReport,
    StoreAdmin,
    StoreInfo,
    StoreInUseError,
)

__all__ = ["DocumentInfo", "FingerprintInfo", "RemoveReport", "StoreAdmin", "StoreInfo",
           "StoreInUseError"]
