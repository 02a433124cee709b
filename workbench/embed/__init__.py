"""Stages 02 (train) and 03 (distill): aspect models, frozen-backbone heads, their training and caches."""
