"""Stage 06 (evaluate): the paper's tables, metrics.json, the heads' health check."""
