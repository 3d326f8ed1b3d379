"""`{{ request_path|redact_path }}`: the error pages show the address asked for, but never
the extender token a path may carry (`/extender/key/<token>/...`)."""

from django import template

from hamiadmin.logging import redact_path_secrets

register = template.Library()


@register.filter
def redact_path(path: str) -> str:
    return redact_path_secrets(str(path))
