"""Piecewise graphs: captured pieces with eager breaks between them, as SGLang's piecewise runner
splits an extend forward around attention.

An extend batch is ragged: which keys each new token attends over depends on per-request extents
that only the host knows. So the forward is captured in pieces (embedding, projections, norms, MLPs,
logits) and every call of ``graph_break(run, *inputs)`` inside the captured callable ends the current
piece, runs ``run(*inputs)`` eagerly, and starts the next piece. At replay the pieces replay and each
break runs ``run`` again, between them, on the same input tensors, writing into the tensor the capture
returned to the caller, so the following piece reads it where capture recorded it. Outside a
piecewise capture, ``graph_break(run, *inputs)`` is just ``run(*inputs)``.

A break names its tensor inputs instead of closing over them, so the graph, not a closure, decides
where they live (the tape plans them into memory shared across graphs, ``harness.graph.tape_memory``).
How a backend splits is its own: the tape records each break as one step of a single tape
(``TapeBackend.capture_piecewise``); CUDA records one graph per piece (``capture_pieces``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from harness.graph.errors import check_static_inputs, input_addresses


class Piece(Protocol):
    def replay(self, current_inputs: Any = None) -> Any: ...


class Segmenter(Protocol):
    """A backend's way of recording one piece: ``begin()`` starts recording, ``end()`` returns the piece."""

    def begin(self) -> None: ...

    def end(self) -> Piece: ...


@dataclass
class PiecewiseGraph:
    pieces: list[Piece]
    breaks: list[Callable[[], None]]  # breaks[i] runs after pieces[i]
    output: Any
    input_ptrs: dict[str, int] = field(default_factory=dict)

    def replay(self, current_inputs: Mapping[str, torch.Tensor] | None = None) -> Any:
        if current_inputs is not None:
            check_static_inputs(self.input_ptrs, current_inputs)
        with torch.no_grad():
            for i, piece in enumerate(self.pieces):
                piece.replay()
                if i < len(self.breaks):
                    self.breaks[i]()
        return self.output


class Splitter(Protocol):
    def split(self, run: Callable[..., torch.Tensor], inputs: tuple) -> torch.Tensor: ...


class _Capture:
    def __init__(self, segmenter: Segmenter) -> None:
        self.segmenter = segmenter
        self.pieces: list[Piece] = []
        self.breaks: list[Callable[[], None]] = []

    def split(self, run: Callable[..., torch.Tensor], inputs: tuple) -> torch.Tensor:
        self.pieces.append(self.segmenter.end())
        static = run(*inputs)  # eager: nothing of it is recorded

        def again() -> None:
            static.copy_(run(*inputs))

        self.breaks.append(again)
        self.segmenter.begin()
        return static


_active: list[Splitter] = []


@contextmanager
def splitting(splitter: Splitter) -> Iterator[None]:
    """``graph_break`` calls inside this block go to ``splitter``."""
    _active.append(splitter)
    try:
        yield
    finally:
        _active.pop()


def graph_break(run: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
    """Run ``run(*inputs)`` outside the piece being captured, and again between the pieces at every replay."""
    if not _active:
        return run(*inputs)
    return _active[-1].split(run, inputs)


def capture_pieces(
    segmenter: Segmenter, fn: Callable[[], Any], *, static_inputs: Mapping[str, torch.Tensor]
) -> PiecewiseGraph:
    """One recorded piece between each two breaks (a backend that records pieces separately: CUDA)."""
    capture = _Capture(segmenter)
    segmenter.begin()
    try:
        with splitting(capture), torch.no_grad():
            output = fn()
    finally:
        last = segmenter.end()
    capture.pieces.append(last)
    return PiecewiseGraph(
        capture.pieces, breaks=capture.breaks, output=output, input_ptrs=input_addresses(static_inputs)
    )
