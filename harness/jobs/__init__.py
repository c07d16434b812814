"""Jobs: an accuracy run as a plan (arms, tasks, comparisons) and the one runner that executes any plan.

* ``plan``: the data and its one builder (``build_plan``); ``plan_file``: YAML plans (``plan_from_file``);
  ``plan_text``: a plan as text (``render``, ``--dry-run``);
* ``cpu``: ``swa-harness eval``'s plan (graphs on vs off, prefix cache off vs on); ``nightly``: the GPU nightly's
  models, arms and tasks;
* ``runner``: check a plan and run it: launch (through ``harness.servers``) -> lm-eval -> judge -> history -> render,
  in rooms of one job each: ``session`` (one arm's server and its lm-eval steps), ``judging`` (pair and judge),
  ``recording`` (the provenance, the history line and the report), ``summary`` (the front page, ``summary.json``,
  the exit code); ``runner`` itself holds what stops a plan before it starts (do two arms serve the same model);
* ``cache``, ``progress``: the resume cache, the live progress;
* ``eval_cli``, ``nightly_cli``, ``report_cli``, ``options`` (with ``RunOptions``), ``saved``: the command lines.

Imports run downwards only: jobs -> engines, evals, report; never the other way.
"""
