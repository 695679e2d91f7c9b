"""GPU status: the NVML -> GpuInfo mapping (with a stand-in NVML, as this machine has no NVIDIA GPU)
and the real no-GPU path."""
import os
import subprocess
import sys
from types import SimpleNamespace

from mmcore.base import gpu
from mmcore.base.paths import ROOT

GIB = 1024 ** 3


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """Stands in for the pynvml module: two GPUs, the second without utilisation support."""
    NVMLError = FakeNVMLError

    def __init__(self, init_error=None, names=(b"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")):
        self.init_error = init_error
        self.names = names
        self.init_calls = 0

    def nvmlInit(self):
        self.init_calls += 1
        if self.init_error:
            raise self.init_error

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("handle", index)

    def nvmlDeviceGetName(self, handle):
        return self.names[handle[1]]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=(handle[1] + 1) * GIB, total=80 * GIB, free=(79 - handle[1]) * GIB)

    def nvmlDeviceGetUtilizationRates(self, handle):
        if handle[1] == 1:
            raise FakeNVMLError("Not Supported")
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        if handle[1] == 1:
            return []
        return [SimpleNamespace(pid=4242, usedGpuMemory=3 * GIB), SimpleNamespace(pid=4343, usedGpuMemory=None)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        # The same pid may show up in both lists; it must be listed once.
        return [SimpleNamespace(pid=4343, usedGpuMemory=GIB)] if handle[1] == 0 else []


def test_mapping():
    nvml = FakeNVML()
    gpus = gpu.list_gpus(nvml)
    assert [g.index for g in gpus] == [0, 1]
    first, second = gpus
    assert first.name == "NVIDIA H100 80GB HBM3"  # bytes from older bindings are decoded
    assert second.name == "NVIDIA A100-SXM4-40GB"
    assert (first.memory_used, first.memory_total) == (GIB, 80 * GIB)
    assert first.memory_fraction == 1 / 80
    assert first.utilization == 87 and second.utilization is None
    assert first.processes == (gpu.GpuProcess(4242, 3 * GIB), gpu.GpuProcess(4343, GIB))
    assert second.processes == ()
    assert gpu.gpu_count(nvml) == 2
    assert nvml.init_calls == 1  # initialised once, not on every call


def test_init_failure_is_empty_and_remembered():
    nvml = FakeNVML(init_error=FakeNVMLError("Driver Not Loaded"))
    assert gpu.list_gpus(nvml) == []
    assert gpu.list_gpus(nvml) == []
    assert nvml.init_calls == 1


def test_broken_library_is_empty():
    assert gpu.list_gpus(FakeNVML(init_error=OSError("libnvidia-ml.so.1: cannot open shared object file"))) == []


def test_error_while_listing_is_empty():
    nvml = FakeNVML()

    def lost(index):
        raise FakeNVMLError("GPU is lost")
    nvml.nvmlDeviceGetHandleByIndex = lost
    assert gpu.list_gpus(nvml) == []


def test_real_nvml():
    """The real pynvml: without an NVIDIA driver (the CI machine) an empty list, no exception;
    with one, every GPU with sane figures."""
    gpus = gpu.list_gpus()
    if not os.path.exists("/proc/driver/nvidia"):
        assert gpus == []
        assert gpu.gpu_count() == 0
    else:
        assert [g.index for g in gpus] == list(range(len(gpus)))
        for g in gpus:
            assert g.name and 0 <= g.memory_used <= g.memory_total
            assert g.utilization is None or 0 <= g.utilization <= 100


def test_without_pynvml_installed():
    code = ("import sys; sys.modules['pynvml'] = None; from mmcore.base import gpu; "
            "assert gpu.list_gpus() == [] and gpu.gpu_count() == 0")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
