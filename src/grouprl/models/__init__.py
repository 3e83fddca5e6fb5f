"""Where models come from: hub ids, local folders, packaged GGUF models, the tiny builders, loading."""
