"""Stage 04 (decode): the retrieval and soft-prompt decoders, their training and faithfulness."""
