"""The facade: ``connect`` / ``Connection`` / ``Table`` / ``Query`` -- the notebook API.

Thin: each method validates its arguments, builds a table reference and calls the pipeline.
"""
