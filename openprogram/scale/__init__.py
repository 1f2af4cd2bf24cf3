"""Beyond one machine: ``openprogram.map`` runs an agentic function over many items on any
executor (threads, a process pool, a Dask cluster) and records every call in the session."""

from openprogram.scale.run import MapRun, map, stop_all

__all__ = ["MapRun", "map", "stop_all"]
