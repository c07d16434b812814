"""Jobs: an accuracy run as a plan (arms, tasks, comparisons) and the one runner that executes any plan.

* ``plan``: the data and its one builder (``build_plan``), YAML plans (``plan_from_file``), ``render``;
* ``cpu``: ``swa-harness eval``'s plan (graphs on vs off, prefix cache off vs on); ``nightly``: the GPU nightly's
  models, arms and tasks;
* ``runner``: launch (through ``harness.servers``) -> lm-eval -> judge -> history -> render;
* ``cache``, ``progress``, ``provenance``: the resume cache, the live progress, what each report records;
* ``eval_cli``, ``nightly_cli``, ``report_cli``, ``options``, ``saved``: the command lines.

Imports run downwards only: jobs -> engines, evals, report; never the other way.
"""
