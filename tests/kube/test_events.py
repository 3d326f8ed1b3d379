"""FailedScheduling / Scheduled events: one Event per pod and reason, patched, not repeated."""

from __future__ import annotations

from kube.events import EventRecorder, PodRef

POD = PodRef("ml", "train", "uid-1")
WAITING = "0/2 nodes are available: 4 CardInsufficientMemory"


class Clock:
    def __init__(self):
        self.now = 1_700_000_000.0

    def __call__(self):
        return self.now


def events(apiserver):
    return apiserver.all("events")


def test_the_same_text_every_cycle_is_one_event_written_once(kube, apiserver):
    clock = Clock()
    recorder = EventRecorder(kube, "hami-scheduler", "agent-0", refresh_seconds=300, clock=clock)
    for _ in range(50):
        recorder.failed_scheduling(POD, WAITING)
        clock.now += 5
    assert len(apiserver.calls("POST", "/events")) == 1
    assert apiserver.calls("PATCH", "/events/") == []
    (event,) = events(apiserver)
    assert event["type"] == "Warning" and event["reason"] == "FailedScheduling"
    assert event["message"] == WAITING
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "train",
        "uid": "uid-1",
    }
    assert event["source"] == {"component": "hami-scheduler"}
    assert event["count"] == 1


def test_a_new_text_patches_the_event_and_counts(kube, apiserver):
    clock = Clock()
    recorder = EventRecorder(kube, "hami-scheduler", refresh_seconds=300, clock=clock)
    recorder.failed_scheduling(POD, WAITING)
    clock.now += 5
    assert recorder.failed_scheduling(POD, "0/3 nodes are available: 3 NodeNotReady")
    (event,) = events(apiserver)
    assert event["count"] == 2
    assert event["message"] == "0/3 nodes are available: 3 NodeNotReady"
    assert event["lastTimestamp"] > event["firstTimestamp"]


def test_an_unchanged_text_is_refreshed_after_the_interval(kube, apiserver):
    clock = Clock()
    recorder = EventRecorder(kube, "hami-scheduler", refresh_seconds=300, clock=clock)
    recorder.failed_scheduling(POD, WAITING)
    clock.now += 299
    assert not recorder.failed_scheduling(POD, WAITING)
    clock.now += 2
    assert recorder.failed_scheduling(POD, WAITING)
    assert len(apiserver.calls("PATCH", "/events/")) == 1
    assert events(apiserver)[0]["count"] == 2


def test_an_event_the_server_dropped_is_created_again(kube, apiserver):
    clock = Clock()
    recorder = EventRecorder(kube, "hami-scheduler", refresh_seconds=1, clock=clock)
    recorder.failed_scheduling(POD, WAITING)
    apiserver.objects["events"].clear()  # the API server's event TTL passed
    clock.now += 2
    assert recorder.failed_scheduling(POD, WAITING)
    assert len(apiserver.calls("POST", "/events")) == 2
    assert len(events(apiserver)) == 1


def test_scheduled_names_node_and_cards(kube, apiserver):
    EventRecorder(kube, "hami-scheduler").scheduled(POD, "node-a", ["GPU-1", "GPU-2"])
    (event,) = events(apiserver)
    assert (event["type"], event["reason"]) == ("Normal", "Scheduled")
    assert event["message"] == "Successfully assigned ml/train to node-a with cards GPU-1, GPU-2"


def test_api_trouble_is_logged_not_raised(kube, apiserver, caplog):
    recorder = EventRecorder(kube, "hami-scheduler")
    apiserver.stop()
    assert not recorder.failed_scheduling(POD, WAITING)
    assert "could not write event" in caplog.text
    apiserver.start()
    assert recorder.failed_scheduling(POD, WAITING)
