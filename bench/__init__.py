"""Benchmarks: Kiln against onnxruntime on whole models and single kernels (see README.md)."""
