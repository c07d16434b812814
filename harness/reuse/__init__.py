"""What reuses a result on its way to a verdict, keyed by what produced it: the resume cache's key
(``response_key``) and the report's tokenizer memo (``tokenizer_memo``); the history's series is
``harness.evals.history``. Each module's docstring holds its key table; ``suites/reuse`` holds them field by field."""
