"""Import shim: ``torchvision.io.decode_jpeg``, which SGLang 0.5.10.post1-0.5.20 import at module level in
``sglang/srt/utils/common.py`` (for image inputs, never on the memory paths); calling it fails loudly."""


def decode_jpeg(*args, **kwargs):
    raise NotImplementedError("torchvision.io.decode_jpeg: this is swa-harness's import shim, not torchvision")
