"""NVIDIA GPU status through NVML (the `pynvml` module of nvidia-ml-py).

Without NVIDIA hardware, driver or bindings, `list_gpus()` returns an empty list instead of
failing, so the dashboard runs the same on a CPU-only machine. NVML is initialised once per
process; a failed initialisation is remembered, so pages that poll GPU status stay cheap.
"""
import threading
from dataclasses import dataclass

_lock = threading.Lock()
_init_ok = {}  # nvml module -> whether nvmlInit succeeded (keyed by the module itself: an id could be reused)


@dataclass(frozen=True)
class GpuProcess:
    """A process using a GPU. `used_memory` is in bytes, None where the driver does not tell."""
    pid: int
    used_memory: int | None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: memory in bytes, utilisation in percent (None where the driver does not tell)."""
    index: int
    name: str
    memory_used: int
    memory_total: int
    utilization: int | None
    processes: tuple = ()

    @property
    def memory_fraction(self):
        """Used share of the GPU's memory, 0..1."""
        return self.memory_used / self.memory_total if self.memory_total else 0.0


def _import_pynvml():
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _initialised(nvml):
    """Call nvmlInit once per module; remember failure (no driver, no library) instead of retrying."""
    with _lock:
        if nvml not in _init_ok:
            try:
                nvml.nvmlInit()
                _init_ok[nvml] = True
            except Exception:  # NVMLError, or OSError from a broken library: both mean "no GPUs"
                _init_ok[nvml] = False
        return _init_ok[nvml]


def _as_str(value):
    # Older bindings return bytes.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _processes(nvml, handle):
    """Compute and graphics processes of one GPU, one entry per pid."""
    found = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            running = getattr(nvml, getter)(handle)
        except (nvml.NVMLError, AttributeError):
            continue
        for proc in running:
            used = getattr(proc, "usedGpuMemory", None)
            if proc.pid not in found or (found[proc.pid].used_memory is None and used is not None):
                found[proc.pid] = GpuProcess(pid=int(proc.pid), used_memory=None if used is None else int(used))
    return tuple(found.values())


def _gpu(nvml, index):
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    try:
        utilization = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except nvml.NVMLError:  # not supported on some boards (and under MIG)
        utilization = None
    return GpuInfo(index=index, name=_as_str(nvml.nvmlDeviceGetName(handle)), memory_used=int(memory.used),
                   memory_total=int(memory.total), utilization=utilization, processes=_processes(nvml, handle))


def list_gpus(nvml=None):
    """Every NVIDIA GPU with its memory, utilisation and processes; [] when there are none.

    `nvml` is the NVML module to use (default: `pynvml`); tests pass a stand-in.
    """
    if nvml is None:
        nvml = _import_pynvml()
        if nvml is None:
            return []
    if not _initialised(nvml):
        return []
    try:
        return [_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
    except nvml.NVMLError:  # e.g. a GPU fell off the bus: show nothing rather than break the page
        return []


def gpu_count(nvml=None):
    """Number of NVIDIA GPUs (0 without NVIDIA hardware)."""
    return len(list_gpus(nvml))
