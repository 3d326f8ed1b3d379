"""Pods bound to a node by someone else (kube-scheduler, HAMi before the switch): what they hold
on their node counts for every placement hamiadmin makes (SPEC 10 `running`)."""

from __future__ import annotations

from django.db import models

from .fields import JSONField


class BoundPod(models.Model):
    """A pod another scheduler bound, as the Kubernetes watcher last saw it, in the API's own
    forms: its containers' requests and host ports hold the node's cpu, memory, pod count and
    ports; its labels and `affinity` count for pod (anti-)affinity and topology spread; and
    `allocated` (HAMi's `hami.io/vgpu-devices-allocated`, when HAMi placed it) holds those
    cards' slots, MiB and cores until the pod ends. Written only by
    `services.upsert_bound_pods` and `services.forget_bound_pods`."""

    #: Phases in which a pod no longer holds anything on its node.
    ENDED = ("Succeeded", "Failed")

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True, default="")
    node_name = models.CharField(max_length=253, db_index=True)
    labels = JSONField(default=dict, blank=True)
    affinity = JSONField(null=True, blank=True)
    containers = JSONField(default=list, blank=True)
    init_containers = JSONField(default=list, blank=True)
    allocated = models.TextField(blank=True, default="", help_text="hami.io/vgpu-devices-allocated")
    mig_allocations = models.TextField(blank=True, default="", help_text="hami.io/vgpu-mig-allocations")
    phase = models.CharField(max_length=16, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="bound_pod_unique_name")]

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
