"""The extender token may travel in the URL path; it must never reach a log line."""

import logging

from hamiadmin.logging import JsonFormatter, RedactPathSecrets


def test_an_extender_key_in_a_path_is_redacted_before_formatting():
    record = logging.LogRecord(
        "django.request",
        logging.WARNING,
        __file__,
        1,
        "Not Found: %s",
        ("/extender/key/s3cr3t-t0ken/filter",),
        None,
    )
    assert RedactPathSecrets().filter(record) is True
    line = JsonFormatter().format(record)
    assert "s3cr3t-t0ken" not in line
    assert "/extender/key/[redacted]/filter" in line


def test_the_console_handler_carries_the_redaction(settings):
    handler = settings.LOGGING["handlers"]["console"]
    assert "redact_paths" in handler["filters"]
    assert settings.LOGGING["filters"]["redact_paths"]["()"] == "hamiadmin.logging.RedactPathSecrets"
