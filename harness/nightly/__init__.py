"""The nightly GPU job: real SGLang servers on real hybrid-SWA models, graphs on and off, stress arms and a
fault demo, lm-eval per arm, the paired comparison and the HTML report (docs/NIGHTLY.md).

``plan`` decides everything (``python -m harness.nightly --dry-run`` prints it), ``runner`` runs it,
``patched_server`` launches an SGLang server with a catalog fault in every process, ``sglang_args``
parses arm flags with SGLang's own parser, ``overview`` renders the one-column-per-arm summary page.
"""
