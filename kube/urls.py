"""kube-scheduler extender endpoints, included under /extender/ by hamiadmin/urls.py.

kube-scheduler calls `urlPrefix + "/" + verb`. It cannot send headers, so besides
`Authorization: Bearer` the shared token may also ride in the prefix: `/extender/key/<token>`.
"""

from django.urls import path

from . import views

urlpatterns = [
    path("filter", views.filter_view, name="extender-filter"),
    path("bind", views.bind_view, name="extender-bind"),
    path("key/<str:token>/filter", views.filter_view, name="extender-filter-keyed"),
    path("key/<str:token>/bind", views.bind_view, name="extender-bind-keyed"),
]
