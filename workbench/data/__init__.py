"""Corpus and aspects: reading users' files, validating them, ACLSum, aspect files, sentences, writing papers back out."""
