"""`hamiadmin`: a remote command line over the REST API (`/api/v1/`), pure Python, no Django.

Every request goes through `client.Client`, whose `PATHS` lists the path templates the
commands call; a test checks each against the OpenAPI schema."""
