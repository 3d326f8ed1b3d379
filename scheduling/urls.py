"""URLs of the scheduling app: pages for people."""
from django.urls import path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
]
