"""Kubernetes integration: the watcher agent (`python -m kube`) and the extender.

- `api`: every Kubernetes API call, in one class, with the RBAC rules they need.
- `pods`, `nodes`: reading pods and HAMi node annotations (pure; what of their text the
  database can hold is `scheduling.storable`).
- `informer`, `sync`: list/watch with resume, relist and back-off; into `scheduling.services`.
- `groups`, `quotas`: Volcano's and scheduler-plugins' PodGroup objects (when served) into pod
  groups, their status back; ResourceQuotas on HAMi's resources into namespace quotas.
- `binder`: SPEC 8 annotations and the Binding, and repairing binds left half-done, inside
  HAMi's node lock (`nodelock`, `hami.io/mutex.lock`); `events`: deduplicated Events.
- `leader`: Lease-based leader election; `agent`: the loop that ties them together.
- `extender`, `views`, `urls`: kube-scheduler's extender protocol (filter, bind).
- `webhook`: the admission webhook (validating with the engine, mutating as HAMi's), served
  over TLS by the web image. HAMi's scheduler configuration keys are read by the settings
  (`hamiadmin.hamiconfig`).
"""
