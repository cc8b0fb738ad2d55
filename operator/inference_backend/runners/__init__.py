"""Our own serving engines: a PyTorch eager runner and an ONNX Runtime server (see docs/runners.md)."""
