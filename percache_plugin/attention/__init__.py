"""Attention seam: the percache attention backend, RoPE phase shift, splice cache, per-family profiles."""
