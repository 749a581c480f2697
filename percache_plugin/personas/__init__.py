"""Personas: a system prompt and optionally a peft LoRA adapter per persona; a persona's
session head is served from a K/V snapshot keyed by the model fingerprint and the head's ids
(``pc.personas``, ``pc.chat(..., persona=name)``)."""

from .adapters import AdapterError, AdapterSwitch
from .heads import HeadSnapshots
from .registry import Persona, Personas, UnknownPersona

__all__ = ["AdapterError", "AdapterSwitch", "HeadSnapshots", "Persona", "Personas", "UnknownPersona"]
