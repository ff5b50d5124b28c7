"""The settings table's rows for route mode and the cluster (broker, nodes, client, wire).

Why a module of its own: the table (:mod:`clproj.settings_table`) is one tuple made of
these rows and its own; route mode's are a third of it and change with the cluster code.
"""

from __future__ import annotations

from clproj.settings_schema import Setting

CLUSTER: tuple[Setting, ...] = (
    Setting(
        "CLPROJ_BROKER",
        "str",
        "",
        "app",
        "Route mode: the cluster's broker address (`clproj run --broker`); empty: an embedded "
        "broker and a local node start with the app.",
    ),
    Setting(
        "CLPROJ_KEYS",
        "path",
        "~/.config/clproj/keys",
        "both",
        "Folder of the cluster's CURVE keys (`clproj keys`, `--keys`).",
    ),
    Setting(
        "CLPROJ_DIRECT",
        "choice",
        "1",
        "both",
        "How a client reaches a node: `1` directly (a Unix socket on the same host, else zmq), "
        "`zmq` directly but always over zmq, `0` everything through the broker.",
        ("1", "zmq", "0"),
    ),
    Setting(
        "CLPROJ_FAST_LAUNCH",
        "bool",
        True,
        "both",
        "A client sends a repeated launch as a 24-byte frame to the node's native link; `0` keeps "
        "every launch on the command socket (benchmarks compare both).",
    ),
    Setting(
        "CLPROJ_SHM",
        "bool",
        True,
        "both",
        "Move buffer data between a client and a node on the same host through shared memory "
        "(`/dev/shm`); `0` sends every byte through the sockets.",
    ),
    Setting(
        "CLPROJ_SHM_MIN",
        "int",
        1 << 20,
        "both",
        "Smallest transfer (bytes) that goes through shared memory instead of the socket.",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_NODE_NATIVE",
        "bool",
        True,
        "both",
        "A node offers its native fast link (C thread) when it is built; `0` offers none "
        "(benchmarks compare both).",
    ),
    Setting(
        "CLPROJ_NODE_SETTLE_US",
        "float",
        150.0,
        "both",
        "A node polls a lone command on its serving thread for up to this many microseconds "
        "before its waiter thread takes it over; `0` turns that off.",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_ROUTE_WAIT",
        "float",
        60.0,
        "app",
        "Route mode: seconds the app waits for the cluster's devices to be announced.",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_ROUTE_LIFETIME",
        "float",
        86400.0,
        "app",
        "Route mode: seconds the embedded broker and local node live at most (they stop with the "
        "app in any case).",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_ROUTE_PRESTART",
        "bool",
        True,
        "app",
        "Route mode: start the embedded cluster at the app's first `clGetPlatformIDs` instead of "
        "at its first context.",
    ),
    Setting(
        "CLPROJ_ROUTE_VERBOSE",
        "bool",
        False,
        "app",
        "Route mode: let the embedded broker's and node's logs reach the app's stderr.",
    ),
    Setting(
        "CLPROJ_ROUTE_REPROJECT_S",
        "float",
        0.05,
        "app",
        "Route mode: at most one fresh projection per this many seconds for a family of launches "
        "the reuse cache answers.",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_OBJECTIVE",
        "choice",
        "time",
        "both",
        "What a device is chosen by in project and route modes (`clproj run --objective`): "
        "projected time, energy (J) or energy x delay (docs/projection.md).",
        choices=("time", "energy", "edp"),
    ),
    Setting(
        "CLPROJ_DEADLINE_S",
        "float",
        0.0,
        "both",
        "Project and route modes (`clproj run --deadline`): only devices whose projected launch "
        "time is within this many seconds are chosen (none: the fastest); 0: none.",
        bounds=(0.0, 1e6),
    ),
    Setting(
        "CLPROJ_MAX_SLOWDOWN",
        "float",
        0.0,
        "both",
        "Project and route modes (`clproj run --max-slowdown`): only devices at most this "
        "fraction slower than the fastest are chosen (0.1: 10%); 0: no bound.",
        bounds=(0.0, 1000.0),
    ),
    Setting(
        "CLPROJ_SPLIT",
        "bool",
        False,
        "app",
        "Route mode: split qualifying launches across devices (`clproj run --split`).",
    ),
    Setting(
        "CLPROJ_SPLIT_WAIT_S",
        "float",
        0.0,
        "app",
        "Route mode with `--split`: seconds a kernel's first launches wait for the split decision "
        "instead of running unsplit meanwhile.",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_SPLIT_CHECK",
        "bool",
        True,
        "app",
        "Route mode with `--split`: check a split against the measured times; `0` trusts the "
        "projection alone (tests of the split's mechanics).",
    ),
    Setting(
        "CLPROJ_SPLIT_FILE",
        "path",
        "",
        "app",
        "Route mode with `--split`: append each split decision to this file (JSON lines).",
    ),
)
