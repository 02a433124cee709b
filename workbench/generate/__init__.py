"""Stage 01 (generate): LLM backends, prompts, parsing, the summary and sentence-label stores."""
