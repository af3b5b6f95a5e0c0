"""The public prompt corpus: build.py writes corpus.jsonl from sources/ (see README.md)."""
