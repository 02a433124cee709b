"""Measures every stage shares: retrieval ranks, per-paper Spearman and the permutation test, the heads' health
(rank, anisotropy, CKA, the swap probe), and `metrics.json`. No stage's driver lives here, so the stages that
train (02-03), map (05) and evaluate (06) all read them."""
