"""Suites that drive SGLang-only code (its decode buffer registry and KV-loc plan); they skip on other targets."""
