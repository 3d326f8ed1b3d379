"""The scheduling app: engine (pure), models, pipeline, API, pages."""
