"""Corpus and aspects: reading users' files, validating them, ACLSum, aspect files, the views of a paper."""
