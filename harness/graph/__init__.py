"""Graphs: capture backends (CUDA graph, CPU tape, eager), static decode buffers, the GraphRunner."""
