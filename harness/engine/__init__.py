"""The engine under test: ForwardBatch, scheduler, pool-backed attention, model runner, generate()."""

from harness.engine.engine import Engine, EngineConfig, StepOutput
from harness.engine.forward_batch import ForwardBatch, ForwardMode
from harness.engine.request import FinishReason, GenerateOutput, RequestError, SamplingParams

__all__ = [
    "Engine",
    "EngineConfig",
    "FinishReason",
    "ForwardBatch",
    "ForwardMode",
    "GenerateOutput",
    "RequestError",
    "SamplingParams",
    "StepOutput",
]
