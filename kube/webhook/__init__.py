"""The admission webhook: Kubernetes asks it about every pod created (docs/kubernetes.md).

- `review`: reading an AdmissionReview and writing its answer (pure: dicts in, dicts out).
  Validation is the engine's own (`kube.pods.submission`, then `engine.pod.parse_pod`): a
  pod refused here is the pod the scheduler would refuse, with the same field and message.
- `mutate`: what the mutating webhook changes, as HAMi's does, as an RFC 6902 JSON Patch.
- `families`: which device family a resource is, which ones hamiadmin schedules, and the
  routing of the others to HAMi's scheduler.
- `quota`: the namespace quotas checked at admission, as HAMi's webhook checks them.
- `views`, `urls`: the two endpoints, served by the web image's TLS server (the `webhook`
  container of the web pod, `HAMIADMIN_URLCONF=kube.webhook.urls`).

It lives in `kube/` beside the extender because, like the extender, it speaks a Kubernetes
protocol about Kubernetes objects and reads them with `kube.pods`; `scheduling/` stays free
of Kubernetes wire formats.

The API server calls it without a user token. It needs none: it only answers the review it
is sent, about the object in that review, and writes nothing (no row, no API call), so the
rule "every API write is authenticated" has nothing to apply to. What it can disclose is
what the engine would say about the caller's own pod. TLS (the API server checks the
certificate against the `caBundle`) keeps anyone from posing as the webhook; to also keep
anyone but the API server from calling it, give gunicorn a client CA (docs/kubernetes.md).
"""
