"""PyTorch eager runner (transformers + torch)."""
