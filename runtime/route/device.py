"""What route mode's virtual device is (clGetDeviceInfo): the cluster's real devices,
combined so that every answer holds for each of them.

Why: a faithful virtual platform reports what kernels built for it will actually see.
The nodes send each real device's capabilities (``profile["cl"]``, runtime.cluster.introspect).
The virtual device stands for every device of the cluster, so its limits are the ones all
of them accept (minimum of sizes, maximum of alignments, AND of feature bits) and its
extensions are those all devices have *and* the virtual platform implements (no images,
SVM, pipes, IL, sub-groups, command buffers). A feature the virtual device does not report
is also hidden from the compiler: programs are built with a source prefix that undefines
its macros (``__IMAGE_SUPPORT__``, the extensions' names), so a kernel's ``#ifdef`` sees
the same device the application queried. PoCL rejects ``-U`` in build options, hence the
prefix (with ``#line 1``, so build logs keep their line numbers).
"""

from __future__ import annotations

from typing import Any

from clproj import cl_names as C
from clproj.runtime.route.encode import cstr, ptrs, size_t, u32, u64

# The virtual platform's own clGetDeviceInfo query (not an OpenCL name): the cluster's
# devices, "id name, ...". Its value is checked against every name of cl.h and cl_ext.h
# (tests/intercept/test_route_conformance.py): it was 0x4001, which is also NVIDIA's
# CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV.
CLPROJ_DEVICE_CLUSTER_DEVICES = 0x7C1A0001


# Extensions the virtual platform implements whenever every device has them: compiler
# features only (no host API, no image/SVM/IL/sub-group entry points behind them).
COMPILER_EXTENSIONS = (
    "cl_khr_byte_addressable_store",
    "cl_khr_global_int32_base_atomics",
    "cl_khr_global_int32_extended_atomics",
    "cl_khr_local_int32_base_atomics",
    "cl_khr_local_int32_extended_atomics",
    "cl_khr_int64_base_atomics",
    "cl_khr_int64_extended_atomics",
    "cl_khr_fp64",
    "cl_khr_fp16",
    "cl_khr_select_fprounding_mode",
    "cl_khr_extended_bit_ops",
    "cl_khr_expect_assume",
)
# OpenCL C macros of features the virtual device never has (the prefix undefines them)
HIDDEN_MACROS = (
    "__IMAGE_SUPPORT__",
    "__opencl_c_images",
    "__opencl_c_3d_image_writes",
    "__opencl_c_read_write_images",
    "__opencl_c_pipes",
    "__opencl_c_device_enqueue",
    "__opencl_c_subgroups",
)

# (param, cap name, how the devices' values combine, encoding)
_COMBINED: tuple[tuple[int, str, str, str], ...] = (
    (C.CL_DEVICE_VENDOR_ID, "vendor_id", "first", "u32"),
    (C.CL_DEVICE_MAX_COMPUTE_UNITS, "max_compute_units", "max", "u32"),
    (C.CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, "max_work_item_dimensions", "min", "u32"),
    (C.CL_DEVICE_MAX_WORK_ITEM_SIZES, "max_work_item_sizes", "min", "sizes"),
    (C.CL_DEVICE_MAX_WORK_GROUP_SIZE, "max_work_group_size", "min", "size"),
    (C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_CHAR, "preferred_vector_width_char", "min", "u32"),
    (C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_SHORT, "preferred_vector_width_short", "min", "u32"),
    (C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_INT, "preferred_vector_width_int", "min", "u32"),
    (C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_LONG, "preferred_vector_width_long", "min", "u32"),
    (C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, "preferred_vector_width_float", "min", "u32"),
    (C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE, "preferred_vector_width_double", "min", "u32"),
    (C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF, "preferred_vector_width_half", "min", "u32"),
    (C.CL_DEVICE_NATIVE_VECTOR_WIDTH_CHAR, "native_vector_width_char", "min", "u32"),
    (C.CL_DEVICE_NATIVE_VECTOR_WIDTH_SHORT, "native_vector_width_short", "min", "u32"),
    (C.CL_DEVICE_NATIVE_VECTOR_WIDTH_INT, "native_vector_width_int", "min", "u32"),
    (C.CL_DEVICE_NATIVE_VECTOR_WIDTH_LONG, "native_vector_width_long", "min", "u32"),
    (C.CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, "native_vector_width_float", "min", "u32"),
    (C.CL_DEVICE_NATIVE_VECTOR_WIDTH_DOUBLE, "native_vector_width_double", "min", "u32"),
    (C.CL_DEVICE_NATIVE_VECTOR_WIDTH_HALF, "native_vector_width_half", "min", "u32"),
    (C.CL_DEVICE_MAX_CLOCK_FREQUENCY, "max_clock_frequency", "max", "u32"),
    (C.CL_DEVICE_ADDRESS_BITS, "address_bits", "min", "u32"),
    (C.CL_DEVICE_MAX_MEM_ALLOC_SIZE, "max_mem_alloc_size", "min", "u64"),
    (C.CL_DEVICE_MAX_PARAMETER_SIZE, "max_parameter_size", "min", "size"),
    (C.CL_DEVICE_MEM_BASE_ADDR_ALIGN, "mem_base_addr_align", "max", "u32"),
    (C.CL_DEVICE_MIN_DATA_TYPE_ALIGN_SIZE, "min_data_type_align_size", "max", "u32"),
    (C.CL_DEVICE_SINGLE_FP_CONFIG, "single_fp_config", "and", "u64"),
    (C.CL_DEVICE_DOUBLE_FP_CONFIG, "double_fp_config", "and", "u64"),
    (C.CL_DEVICE_GLOBAL_MEM_CACHE_TYPE, "global_mem_cache_type", "min", "u32"),
    (C.CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE, "global_mem_cacheline_size", "min", "u32"),
    (C.CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, "global_mem_cache_size", "min", "u64"),
    (C.CL_DEVICE_GLOBAL_MEM_SIZE, "global_mem_size", "min", "u64"),
    (C.CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, "max_constant_buffer_size", "min", "u64"),
    (C.CL_DEVICE_MAX_CONSTANT_ARGS, "max_constant_args", "min", "u32"),
    (C.CL_DEVICE_LOCAL_MEM_TYPE, "local_mem_type", "min", "u32"),
    (C.CL_DEVICE_LOCAL_MEM_SIZE, "local_mem_size", "min", "u64"),
    (C.CL_DEVICE_ERROR_CORRECTION_SUPPORT, "error_correction_support", "and", "u32"),
    (C.CL_DEVICE_HOST_UNIFIED_MEMORY, "host_unified_memory", "and", "u32"),
    (C.CL_DEVICE_PROFILING_TIMER_RESOLUTION, "profiling_timer_resolution", "max", "size"),
    (C.CL_DEVICE_ENDIAN_LITTLE, "endian_little", "and", "u32"),
    (C.CL_DEVICE_AVAILABLE, "available", "and", "u32"),
    (C.CL_DEVICE_COMPILER_AVAILABLE, "compiler_available", "and", "u32"),
    (C.CL_DEVICE_LINKER_AVAILABLE, "linker_available", "and", "u32"),
    (C.CL_DEVICE_PRINTF_BUFFER_SIZE, "printf_buffer_size", "min", "size"),
    (C.CL_DEVICE_PREFERRED_INTEROP_USER_SYNC, "preferred_interop_user_sync", "and", "u32"),
)
# what an old node (no profile["cl"]) leaves unknown
_DEFAULTS: dict[str, Any] = {
    "vendor_id": 0,
    "max_compute_units": 1,
    "max_work_item_dimensions": 3,
    "max_work_group_size": 256,
    "max_clock_frequency": 1000,
    "address_bits": 64,
    "max_parameter_size": 1024,
    "mem_base_addr_align": 1024,
    "min_data_type_align_size": 128,
    "single_fp_config": C.CL_FP_DENORM | C.CL_FP_INF_NAN | C.CL_FP_ROUND_TO_NEAREST | C.CL_FP_FMA,
    "double_fp_config": 0,
    "global_mem_cache_type": C.CL_NONE,
    "global_mem_cacheline_size": 64,
    "global_mem_cache_size": 0,
    "global_mem_size": 1 << 30,
    "max_constant_buffer_size": 65536,
    "max_constant_args": 8,
    "local_mem_type": C.CL_LOCAL,
    "local_mem_size": 32768,
    "error_correction_support": 0,
    "host_unified_memory": 0,
    "profiling_timer_resolution": 1,
    "endian_little": 1,
    "available": 1,
    "compiler_available": 1,
    "linker_available": 1,
    "printf_buffer_size": 1 << 20,
    "preferred_interop_user_sync": 1,
    "extensions": "cl_khr_byte_addressable_store cl_khr_global_int32_base_atomics",
}
_DEVICE_TYPES = C.CL_DEVICE_TYPE_CPU | C.CL_DEVICE_TYPE_GPU | C.CL_DEVICE_TYPE_ACCELERATOR


def _encode(v: Any, enc: str) -> bytes:
    if enc == "sizes":
        return size_t(*v)
    if enc == "size":
        return size_t(v)
    if enc == "u64":
        return u64(v)
    return u32(int(v))


def _combine(vals: list[Any], rule: str) -> Any:
    if rule == "first":
        return vals[0]
    if isinstance(vals[0], list):  # element-wise (work-item sizes)
        n = min(len(v) for v in vals)
        return [
            min(v[i] for v in vals) if rule == "min" else max(v[i] for v in vals) for i in range(n)
        ]
    if rule == "min":
        return min(int(v) for v in vals)
    if rule == "max":
        return max(int(v) for v in vals)
    out = -1
    for v in vals:
        out &= int(v)
    return out


class VirtualDevice:
    """The virtual device's answers, made once from the cluster's devices (their
    ``profile["cl"]`` capabilities and ``profile["limits"]``)."""

    def __init__(self, devices: list[Any], platform: int) -> None:
        caps = []
        for d in devices:
            prof = d.profile or {}
            cap = dict(_DEFAULTS)
            lim = prof.get("limits") or {}
            for k in (
                "max_work_group_size",
                "local_mem_size",
                "global_mem_size",
                "max_mem_alloc_size",
            ):
                if isinstance(lim.get(k), int) and lim[k] > 0:
                    cap[k] = lim[k]
            cap.update(prof.get("cl") or {})
            cap.setdefault("max_mem_alloc_size", max(cap["global_mem_size"] // 4, 1 << 27))
            cap.setdefault("max_work_item_sizes", [cap["max_work_group_size"]] * 3)
            caps.append(cap)
        if not caps:
            caps = [dict(_DEFAULTS, max_mem_alloc_size=1 << 28, max_work_item_sizes=[256] * 3)]
        self.caps = caps
        exts = [set(str(c.get("extensions", "")).split()) for c in caps]
        common = set.intersection(*exts)
        self.extensions = [e for e in COMPILER_EXTENSIONS if e in common]
        every = set.union(*exts)
        # macros kernels must not see: features some device has but the virtual one lacks
        self.hidden = list(HIDDEN_MACROS) + sorted(
            e for e in every - set(self.extensions) if e.isidentifier()
        )
        self.limits: dict[str, Any] = {}
        table: dict[int, bytes] = {}
        for param, name, rule, enc in _COMBINED:
            vals = [c[name] for c in caps if name in c]
            if not vals:
                continue
            v = _combine(vals, rule)
            self.limits[name] = v
            table[param] = _encode(v, enc)
        fp64 = "cl_khr_fp64" in self.extensions
        fp16 = "cl_khr_fp16" in self.extensions
        if not fp64:
            table[C.CL_DEVICE_DOUBLE_FP_CONFIG] = u64(0)
            table[C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE] = u32(0)
            table[C.CL_DEVICE_NATIVE_VECTOR_WIDTH_DOUBLE] = u32(0)
        if not fp16:
            table[C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF] = u32(0)
            table[C.CL_DEVICE_NATIVE_VECTOR_WIDTH_HALF] = u32(0)
        else:
            table[C.CL_DEVICE_HALF_FP_CONFIG] = u64(
                _combine([c.get("half_fp_config", 0) for c in caps], "and")
            )
        kinds = 0
        for c in caps:
            kinds |= int(c.get("type", C.CL_DEVICE_TYPE_CPU)) & _DEVICE_TYPES
        names = ", ".join(f"{d.id} {d.name}" for d in devices)
        ext = " ".join(self.extensions)
        table.update(
            {
                C.CL_DEVICE_TYPE: u64(kinds or C.CL_DEVICE_TYPE_CPU),
                C.CL_DEVICE_IMAGE_SUPPORT: u32(C.CL_FALSE),
                C.CL_DEVICE_MAX_READ_IMAGE_ARGS: u32(0),
                C.CL_DEVICE_MAX_WRITE_IMAGE_ARGS: u32(0),
                C.CL_DEVICE_IMAGE2D_MAX_WIDTH: size_t(0),
                C.CL_DEVICE_IMAGE2D_MAX_HEIGHT: size_t(0),
                C.CL_DEVICE_IMAGE3D_MAX_WIDTH: size_t(0),
                C.CL_DEVICE_IMAGE3D_MAX_HEIGHT: size_t(0),
                C.CL_DEVICE_IMAGE3D_MAX_DEPTH: size_t(0),
                C.CL_DEVICE_IMAGE_MAX_BUFFER_SIZE: size_t(0),
                C.CL_DEVICE_IMAGE_MAX_ARRAY_SIZE: size_t(0),
                C.CL_DEVICE_MAX_SAMPLERS: u32(0),
                C.CL_DEVICE_EXECUTION_CAPABILITIES: u64(C.CL_EXEC_KERNEL),
                # in-order execution is a valid schedule of an out-of-order queue
                C.CL_DEVICE_QUEUE_PROPERTIES: u64(
                    C.CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | C.CL_QUEUE_PROFILING_ENABLE
                ),
                C.CL_DEVICE_NAME: cstr("clproj virtual device"),
                C.CL_DEVICE_VENDOR: cstr("clproj"),
                C.CL_DRIVER_VERSION: cstr("clproj-route 1"),
                C.CL_DEVICE_PROFILE: cstr("FULL_PROFILE"),
                C.CL_DEVICE_VERSION: cstr("OpenCL 1.2 clproj"),
                C.CL_DEVICE_OPENCL_C_VERSION: cstr("OpenCL C 1.2 clproj"),
                C.CL_DEVICE_EXTENSIONS: cstr(ext),
                C.CL_DEVICE_PLATFORM: ptrs(platform),
                C.CL_DEVICE_BUILT_IN_KERNELS: cstr(""),
                C.CL_DEVICE_PARENT_DEVICE: ptrs(0),
                C.CL_DEVICE_PARTITION_MAX_SUB_DEVICES: u32(0),
                C.CL_DEVICE_PARTITION_PROPERTIES: size_t(0),
                C.CL_DEVICE_PARTITION_AFFINITY_DOMAIN: u64(0),
                C.CL_DEVICE_PARTITION_TYPE: b"",
                C.CL_DEVICE_REFERENCE_COUNT: u32(1),
                CLPROJ_DEVICE_CLUSTER_DEVICES: cstr(names),
            }
        )
        self.table = table
        self.platform_extensions = ext

    def info(self, param: int) -> bytes:
        """The value of clGetDeviceInfo ``param`` (KeyError: not answered)."""
        return self.table[param]

    def limit(self, name: str) -> int:
        """A combined limit by its capability name (a default where none is known)."""
        return int(self.limits.get(name) or _DEFAULTS.get(name) or 0)

    def source_prefix(self) -> str:
        """Prepended to every program's source on the nodes (see the module docstring)."""
        if not self.hidden:
            return ""
        return "".join(f"#undef {m}\n" for m in self.hidden) + "#line 1\n"
