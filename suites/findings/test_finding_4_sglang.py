"""FINDINGS #4: SGLang's torch_native attention backend reads a sliding-window layer's K/V at full-pool slot ids. The
scene (``docs/repro/finding_4_sglang_swa_reads_full_slot_ids.py``) drives SGLang's own backend over its own hybrid pool
and allocator on tiny handcrafted batches, no model and no server, until the SWA allocator reuses slots the window
freed; then a sliding layer's output must still equal attention over the request's own keys.

The server-level reproducer stays where it was (``suites/servers/test_sglang_server.py::
test_a_pool_that_reuses_swa_slots_changes_no_answer``, ``nox -s sglang_server``): it shows the effect on answers.

The control test applies the candidate fix (``suites/plans/patches/finding-4-swa-reads.yaml``'s two lines: translate
the gathered ids of sliding layers) as a monkeypatch and holds the reproducer to passing: a reproducer that could not
pass would say nothing when SGLang fixes the bug."""

from __future__ import annotations

import pytest

from suites.findings.conftest import load_script, reproduce, require_pinned


@pytest.mark.finding(4)
def test_a_sliding_layer_reads_the_keys_it_wrote():
    verdict = reproduce(4)
    assert not verdict.bug_present, verdict.message


def test_the_reproducer_passes_once_sliding_layers_read_their_swa_slots(monkeypatch):
    found = require_pinned(4)
    from harness.targets.sglang.imports import import_sglang

    import_sglang(any_version=True)
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    for name in ("_run_sdpa_forward_extend", "_run_sdpa_forward_decode"):
        original = getattr(TorchNativeAttnBackend, name)

        def translated(self, *args, _original=original, **kwargs):
            if kwargs.get("sliding_window_size") is not None and self.use_sliding_window_kv_pool:
                args = list(args)
                args[4] = self.token_to_kv_pool.translate_loc_from_full_to_swa(args[4].long())  # req_to_token
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(TorchNativeAttnBackend, name, translated)
    verdict = load_script(found).reproduce()
    assert not verdict.bug_present, f"with sliding layers reading their SWA slots: {verdict.message}"
