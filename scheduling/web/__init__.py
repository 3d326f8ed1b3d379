"""The dashboard pages: page queries (queries.py), views and URLs."""
