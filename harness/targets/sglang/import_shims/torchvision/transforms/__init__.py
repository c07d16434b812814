"""Import shim: ``torchvision.transforms`` as SGLang's config modules import it; nothing is callable."""

from torchvision.transforms.functional import InterpolationMode

__all__ = ["InterpolationMode"]


def __getattr__(name: str):
    raise NotImplementedError(f"torchvision.transforms.{name}: this is swa-harness's import shim, not torchvision")
