"""ONNX Runtime server and exporter."""
