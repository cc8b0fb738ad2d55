"""`inference-backend bench`: load-test any OpenAI-compatible endpoint with guidellm (see docs/bench.md).

config.py validates the options and builds guidellm's scenario, report.py turns guidellm's report into our
schema (pure, typed, no guidellm import), plot.py draws the PNG, run.py runs guidellm and writes the results.
"""
