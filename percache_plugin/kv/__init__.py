"""Chunk K/V reuse: prefix tree, persistent store and planner."""
