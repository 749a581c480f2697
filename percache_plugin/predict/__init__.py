"""Predictive population: knowledge abstract, predicted questions, their parsing."""
