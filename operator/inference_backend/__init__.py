"""InferenceBackend: pick, configure and run the right LLM serving engine for each model."""

__version__ = "0.1.0"
