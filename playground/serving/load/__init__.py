"""`bench serving`: an OpenAI-compatible server under Poisson load, through HTTP, beside the
lecture's queueing models (bench.py is the entry)."""
