"""Shared plumbing: the run directory, whole-file writes, vectors, devices, progress, packaged models."""
