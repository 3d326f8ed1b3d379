"""Pages."""
from django.shortcuts import render


def home(request):
    return render(request, "scheduling/home.html")
