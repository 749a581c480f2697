"""Benchmarks behind ``percache bench ...``."""
