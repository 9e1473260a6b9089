"""The ptxas report parser (clmagic/opencl/ptxas.py) on real ptxas-format lines: NVIDIA's OpenCL
driver with -cl-nv-verbose, nvcc -Xptxas -v (with and without barriers, smem, several functions,
a helper function's block), and logs with no report at all."""

from __future__ import annotations

from clmagic.opencl.ptxas import PtxasUsage, parse_ptxas, ptxas_lines

# NVIDIA's OpenCL driver, -cl-nv-verbose (the continuation line starts "ptxas         .")
NV_OPENCL = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'saxpy' for 'sm_90'
ptxas info    : Function properties for saxpy
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 372 bytes cmem[0]
ptxas info    : Compiling entry function 'matmul' for 'sm_90'
ptxas info    : Function properties for matmul
ptxas         .     16 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8192 bytes smem, 384 bytes cmem[0]
"""

# nvcc --ptxas-options=-v (the continuation line is indented only), mangled names, a helper
NVCC = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z12sgemm_naivePfS_S_iii' for 'sm_80'
ptxas info    : Function properties for _Z12sgemm_naivePfS_S_iii
                    0 bytes stack frame, 16 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 72 registers, 8192 bytes smem, 360 bytes cmem[0]
ptxas info    : Function properties for helper
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 22 registers, used 0 barriers, 24 bytes cmem[2]
ptxas info    : Compile time = 4.332 ms
"""


def test_nvidia_opencl_verbose_log():
    got = parse_ptxas(NV_OPENCL)
    assert got == {
        "saxpy": PtxasUsage(registers=8, shared_mem=0, stack_frame=0, spill_stores=0,
                            spill_loads=0),
        "matmul": PtxasUsage(registers=255, shared_mem=8192, stack_frame=16, spill_stores=24,
                             spill_loads=20),
    }
    assert got["saxpy"].spills == 0 and got["matmul"].spills == 44


def test_nvcc_verbose_log_with_a_helper_function():
    got = parse_ptxas(NVCC)
    k = got["_Z12sgemm_naivePfS_S_iii"]
    assert (k.registers, k.shared_mem, k.spill_stores, k.spill_loads, k.spills) == (
        72, 8192, 16, 16, 32)
    assert got["helper"] == PtxasUsage(registers=22, shared_mem=0, stack_frame=0,
                                       spill_stores=0, spill_loads=0)


def test_no_report_means_nothing_is_said():
    """A log without ptxas lines (another driver, a build without -cl-nv-verbose, warnings):
    no function, no figure; figures never come from lines outside a function's block."""
    assert parse_ptxas("") == {}
    assert parse_ptxas("<source>:3:5: warning: unused variable 'x'\nUsed 12 registers") == {}
    only_entry = parse_ptxas("ptxas info    : Compiling entry function 'k' for 'sm_90'\n")
    assert only_entry == {"k": PtxasUsage()} and only_entry["k"].spills is None


def test_the_report_lines_are_picked_out_of_a_log():
    log = "<source>:1:1: warning: x\n" + NV_OPENCL
    lines = ptxas_lines(log)
    assert lines[0] == "ptxas info    : 0 bytes gmem" and len(lines) == 9
    assert all("warning" not in ln for ln in lines)
