"""``grouprl generate``: bootstrap training data from an OpenAI-compatible endpoint."""
