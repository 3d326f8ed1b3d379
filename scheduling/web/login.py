"""The dashboard's sign-in page: Django's LoginView under the `login` rate limit
(scheduling/api/throttles.py), so no address sends sign-in forms faster than that."""

from __future__ import annotations

from django.contrib.auth.views import LoginView
from django.http import HttpResponse

from scheduling.api.throttles import LoginThrottle, retry_after


class ThrottledLoginView(LoginView):
    def post(self, request, *args, **kwargs):
        throttle = LoginThrottle()
        if not throttle.allow_request(request, self):
            refused = HttpResponse(
                "Too many sign-in attempts from this address; try again later.\n",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
            refused["Retry-After"] = retry_after(throttle)
            return refused
        return super().post(request, *args, **kwargs)
