"""NVML node agent: reads a node's NVIDIA cards and reports them to the hamiadmin API.

The scheduler only knows what agents tell it, so this package turns what the
driver says (cards, memory, NUMA, health, NVLink/PCIe topology) into the report
body of ``POST /api/v1/agents/report/``. NVML is reached only through an
injected library object (``inventory``), the report is a pure function of what
was read (``report``), and HTTP lives apart (``reporter``) so each part can be
tested without a GPU.
"""
