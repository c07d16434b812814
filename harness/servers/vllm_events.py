"""What a vLLM server's prefix cache evicted, read from its own KV-cache events.

vLLM counts prefix-cache lookups and hits at ``/metrics`` but no eviction. Its KV-cache events do say: with
``--kv-events-config`` the engine publishes every block it caches (``BlockStored``) and every cached block it hands
out again (``BlockRemoved``: the cached KV is gone), per KV-cache group, over ZeroMQ, and keeps the last batches for
replay. ``evictions`` asks the replay endpoint for everything since the start and counts, in tokens:

- ``evicted``: blocks removed from a full-attention group;
- ``swa_evicted``: blocks removed from a sliding-window group;
- ``tombstoned``: of those, blocks whose full-attention KV (the same block hash in a full group) stayed cached: the
  window's KV gone, the full KV kept, as an SWA tombstone in SGLang's tree.

Which group is which comes from the checkpoint's ``layer_types``, grouped as vLLM groups hybrid layers (by type, in
the order the types first appear, each type split into groups of the smallest type's size); ``group_kinds``.
A flush (``/reset_prefix_cache``) publishes ``AllBlocksCleared``, which is no eviction.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

GroupKind = Literal["full", "sliding"]
END_SEQ = (-1).to_bytes(8, "big", signed=True)  # the replay's end marker (vLLM's ZmqEventPublisher.END_SEQ)


@dataclass(frozen=True)
class Evictions:
    """Tokens whose cached KV a vLLM server handed out again, per kind (module docstring)."""

    evicted: int
    swa_evicted: int
    tombstoned: int


def group_kinds(checkpoint: Path) -> list[GroupKind]:
    """The kind of each KV-cache group vLLM builds for the checkpoint's layers (one group when no layer slides)."""
    config = json.loads((checkpoint / "config.json").read_text())
    config = config.get("text_config", config)
    types = config.get("layer_types") or ["full_attention"] * config["num_hidden_layers"]
    buckets: dict[GroupKind, int] = {}
    for t in types:
        kind: GroupKind = "sliding" if t == "sliding_attention" else "full"
        buckets[kind] = buckets.get(kind, 0) + 1
    size = min(buckets.values())
    if max(buckets.values()) < 1.5 * size:
        size = max(buckets.values())
    return [kind for kind, n in buckets.items() for _ in range(math.ceil(n / size))]


Record = tuple[Literal["stored", "removed", "cleared"], int, list[object]]  # (what, group, block hashes)


def evictions(replay_endpoint: str, kinds: list[GroupKind], block_size: int, *, timeout_s: float = 10.0) -> Evictions:
    """Replay every event batch the server kept and count its evictions (``block_size`` tokens a block);
    TimeoutError when it does not answer."""
    return tally(_replay(replay_endpoint, timeout_s), kinds, block_size)


def tally(records: Iterable[Record], kinds: list[GroupKind], block_size: int) -> Evictions:
    """Count the evictions in a stream of store / remove / clear records, in order (module docstring)."""
    # group -> block hash -> how many blocks hold it now: vLLM does not de-duplicate, so two requests that computed
    # the same block each cache one, and a hash is gone only when its last block is.
    stored: dict[int, Counter[object]] = defaultdict(Counter)
    fulls = [g for g, kind in enumerate(kinds) if kind == "full"]
    evicted = swa_evicted = tombstoned = 0
    for what, group, hashes in records:
        if what == "cleared":
            stored.clear()
        elif what == "stored":
            stored[group].update(hashes)
        else:
            for h in hashes:
                stored[group][h] -= 1
                if stored[group][h] <= 0:
                    del stored[group][h]
                if kinds[group] == "full":
                    evicted += block_size
                else:
                    swa_evicted += block_size
                    tombstoned += block_size if any(stored[g][h] > 0 for g in fulls) else 0
    return Evictions(evicted, swa_evicted, tombstoned)


def _replay(replay_endpoint: str, timeout_s: float) -> Iterator[Record]:
    """vLLM's replay protocol (its ZmqEventPublisher): a DEALER asks from sequence 0 and reads batches until the
    end marker."""
    import msgspec
    import zmq
    from vllm.distributed.kv_events import AllBlocksCleared, BlockStored, KVEventBatch

    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(replay_endpoint)
    try:
        socket.send_multipart((b"", (0).to_bytes(8, "big")))
        while True:
            if not socket.poll(int(timeout_s * 1000)):
                raise TimeoutError(f"vLLM's KV-event replay at {replay_endpoint} sent nothing for {timeout_s:g} s")
            _, _topic, seq, payload = socket.recv_multipart()
            if seq == END_SEQ:
                return
            for event in decoder.decode(payload).events:
                if isinstance(event, AllBlocksCleared):
                    yield "cleared", 0, []
                else:
                    what = "stored" if isinstance(event, BlockStored) else "removed"
                    yield what, event.group_idx or 0, list(event.block_hashes)
    finally:
        socket.close()
