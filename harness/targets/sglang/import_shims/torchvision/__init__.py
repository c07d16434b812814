"""Import shim (see ../README.md): lets SGLang's module-level imports of torchvision succeed on CPU."""
