"""The layers between a run and its verdict that reuse results: each key holds what produced the value (issue 41)."""
