"""clproj's settings table: every ``CLPROJ_*`` setting's name, type, default, scope and
meaning, one :class:`clproj.settings_schema.Setting` each; route mode's and the cluster's
rows are in :mod:`clproj.settings_cluster`.

Why a module of its own: the rows are data (about sixty of them) and change far more often
than the rules that read them (:mod:`clproj.settings`) or render them into docs/settings.md
and native/clproj_settings.h (:mod:`clproj.settings_render`). After editing a row, run
``make settings``.
"""

from __future__ import annotations

from clproj.settings_cluster import CLUSTER
from clproj.settings_schema import Setting

TABLE: tuple[Setting, ...] = (
    # --- the user's settings: clproj's commands and the intercepted app ---
    Setting(
        "CLPROJ_CACHE",
        "path",
        "~/.cache/clproj",
        "both",
        "Folder of the per-user caches: device profiles measured on this machine (`profiles/`) "
        "and launch projections (`projections/`).",
    ),
    Setting(
        "CLPROJ_CONFIG",
        "path",
        "~/.config/clproj/config.toml",
        "both",
        "The user config file. Its keys are setting names without `CLPROJ_`, in lower "
        'case (`cold_profile = "tiny"`); the environment overrides it.',
    ),
    Setting(
        "CLPROJ_FOREIGN_MACHINE",
        "bool",
        False,
        "both",
        "Act as on a machine nobody profiled: the committed measured profiles never match a local "
        "device, so every local device takes the cold-start path (cached, measured now, or "
        "generic). `--devices measured` still lists the committed profiles. Tests use it with an "
        "empty `CLPROJ_CACHE` to run as a new user's machine would.",
    ),
    Setting(
        "CLPROJ_COLD_PROFILE",
        "choice",
        "quick",
        "cli",
        "How a local device with no committed or cached profile gets one: `quick` microbenchmarks "
        "(under a minute on a 2-core CPU), `tiny` (seconds, rough: tests), or `off` (no "
        "measuring: a spec-sheet or generic profile marked low-confidence).",
        ("quick", "tiny", "off"),
    ),
    Setting(
        "CLPROJ_EMULATION_NICE",
        "int",
        10,
        "both",
        "Scheduling priority (nice 0-19) of the Oclgrind emulator processes, so that an emulation "
        "beside an application never takes its cores (project mode's emulations while the app "
        "runs use 19).",
        bounds=(0, 19),
    ),
    Setting(
        "CLPROJ_EMULATION_MODE",
        "choice",
        "bounded",
        "both",
        "How project and route mode emulate a launch in Oclgrind (docs/miniemu.md): `bounded` (a "
        "budget per launch, heavy work-groups included), `single` (one work-group), `quick` (a "
        "few work-groups) or `full` (every work-item). The app and the post-run completion read "
        "the same value, so both sides emulate alike.",
        ("bounded", "single", "quick", "full"),
    ),
    Setting(
        "CLPROJ_DEVICES",
        "str",
        "local",
        "both",
        "The devices projections are made for (`--devices`): `local`, `measured`, `all`, or a "
        "comma list of profile keys and profile files. `clproj run` pins it for the app to the "
        "resolved profile files (or `cluster` in route mode); unset in route mode, it means "
        "`cluster`.",
    ),
    Setting(
        "CLPROJ_MODE",
        "choice",
        "observe",
        "app",
        "What the shim does in the app (`--mode`, set by `clproj run`): `observe` (count and time "
        "launches), `project` (also record and emulate them) or `route` (a virtual platform whose "
        "kernels run on the cluster).",
        ("observe", "project", "route"),
    ),
    Setting(
        "CLPROJ_DISABLE",
        "bool",
        False,
        "app",
        "Load the shim but pass every OpenCL call straight to the real driver (no counting, "
        "timing or recording).",
    ),
    Setting(
        "CLPROJ_TIMING",
        "choice",
        "1",
        "app",
        "Launch timing in the app: `1` times a sample of the launches (see `CLPROJ_TIMING_FIRST` "
        "/ `CLPROJ_TIMING_EVERY`), `all` times every launch (`clproj run --time-all`), `0` times "
        "none (no profiling queues).",
        ("1", "all", "0"),
    ),
    Setting(
        "CLPROJ_TIMING_FIRST",
        "int",
        100,
        "app",
        "Sampled timing: the first N launches of each kernel are all timed.",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_TIMING_EVERY",
        "int",
        128,
        "app",
        "Sampled timing: after the first ones, about 1 launch in K of each kernel is timed "
        "(chosen by a hash of its ticket; 0 or 1 times every launch).",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_SUMMARY",
        "bool",
        True,
        "app",
        "Print the per-kernel table to the app's stderr at exit (when no `CLPROJ_SUMMARY_FILE` is "
        "given); `0` keeps the app's stderr clean.",
    ),
    Setting(
        "CLPROJ_RECORD_DIR",
        "path",
        "",
        "app",
        "Record launches (kernel source, arguments, buffer snapshots) into this folder (`clproj "
        "run --record`); empty: no recording outside project and route mode, which then record "
        "into a temporary folder removed when the app exits.",
    ),
    Setting(
        "CLPROJ_RECORD_WHICH",
        "choice",
        "first",
        "app",
        "Which launches are recorded (`--which`): `first` of each signature, `all`, or `none` "
        "(recording off).",
        ("first", "all", "none"),
    ),
    Setting(
        "CLPROJ_RECORD_KERNELS",
        "list",
        "",
        "app",
        "Record only the kernels with these names (comma list, `--kernels`); empty: all.",
    ),
    Setting(
        "CLPROJ_RECORD_MAX_BYTES",
        "int",
        4 << 30,
        "app",
        "Stop recording once this process's records would store more than this many bytes of "
        "buffer snapshots (`--verify` counts the outputs too; a snapshot identical to one stored "
        "is stored once and counts once); later launches still run, are counted and timed. "
        "Recording also stops while the record folder's file system has less than 1 GiB free. "
        "`0`: no byte limit.",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_VERIFY",
        "bool",
        False,
        "app",
        "Check each recorded launch by replaying it and comparing its outputs (`clproj run "
        "--verify`).",
    ),
    Setting(
        "CLPROJ_HOOKS",
        "list",
        "",
        "app",
        "Python functions called with each launch record, as `module:function` (comma list). "
        "`clproj run --mode project` adds its own.",
    ),
    Setting(
        "CLPROJ_LIVE_EMULATION",
        "choice",
        "1",
        "cli",
        "Project mode: `clproj run` emulates and projects each recorded launch while the app "
        "runs, its emulator runs at nice 19 so the app takes its cores back: `1` as soon as it is "
        "recorded, `auto` only while a whole core is idle, `0` never (every emulation after the "
        "app exits).",
        ("auto", "1", "0"),
    ),
    Setting(
        "CLPROJ_EMULATOR_SERVER",
        "choice",
        "run",
        "both",
        "Where bounded emulations fork their emulator runs from: `run`, one server for the whole "
        "`clproj run` (project mode) or app (route mode); `emulation`, a server of each "
        "emulation's own, which imports Python, numpy and pyopencl again for every kernel "
        "(0.4-0.5 s on a 2-core machine; kept to measure the difference).",
        ("run", "emulation"),
    ),
    Setting(
        "CLPROJ_EMULATOR_TEMPLATES",
        "choice",
        "1",
        "both",
        "Whether the runs of one bounded emulation (attempt, scout, loop probes) fork from a "
        "template that prepared the launch once (`1`: record, Oclgrind context, program, "
        "kernel and buffers) or each whole from the emulator server (`0`: 8-11 ms more per "
        "run on a 2-core machine; kept to measure the difference).",
        ("1", "0"),
    ),
    Setting(
        "CLPROJ_SNAPSHOT_HASH",
        "choice",
        "streamed",
        "app",
        "When a changed buffer snapshot of 1 MiB or more is hashed: `streamed`, on a thread of "
        "its own while the app's thread copies it, chunk by chunk (intercept.snapshot_hash); "
        "`writer`, after the copy, on the record writer's thread (the record is whole later; kept "
        "to measure the difference).",
        ("streamed", "writer"),
    ),
    Setting(
        "CLPROJ_SNAPSHOT_VIEW",
        "choice",
        "release",
        "app",
        "Project mode, a launch whose large buffers are still to be copied into their snapshots "
        "on a device whose memory is the host's: `live` publishes it first (`records/<id>.live`), "
        "so the emulator reads the pages it touches from the app while the app copies "
        "(intercept.live_view); `release` does the same and stops the copies once `clproj run` "
        "has projected the launch (its record then keeps no snapshot of those buffers; with "
        "`--record` the copies are whole, as with `live`, unless `release` is set explicitly); "
        "`off` waits for the copies.",
        ("release", "live", "off"),
    ),
    Setting(
        "CLPROJ_PYTHON_PRESTART",
        "bool",
        True,
        "app",
        "Project mode, an app without an interpreter of its own (C, C++): its first OpenCL call "
        "starts the shim's Python side on a thread of its own while the app goes on, instead of "
        "its first recorded launch waiting for it (native/shim/python_start.c).",
    ),
    Setting(
        "CLPROJ_SNAPSHOT_READS",
        "choice",
        "fewest",
        "app",
        "Which buffers a recorded launch reads, and how: `fewest`, none that no command has "
        "written yet (their content is undefined: recorded as zeros), and on a device whose "
        "memory is the host's the others mapped rather than read into a staging buffer "
        "(intercept.shim_runtime); `all`, every buffer read into the staging buffer (kept to "
        "measure the difference).",
        ("fewest", "all"),
    ),
    # --- route mode and the cluster (clproj.settings_cluster) ---
    *CLUSTER,
    # --- benchmark host programs (benchmarks/apps/c_hosts) ---
    Setting(
        "CLPROJ_DEVICE",
        "int",
        0,
        "bench",
        "The benchmark C hosts' device, an index in clproj's order (platforms as the loader "
        "returns them, devices within each).",
        bounds=(0, 2**31 - 1),
    ),
    Setting(
        "CLPROJ_KERNEL_DIR",
        "path",
        "",
        "bench",
        "Where the benchmark C hosts find their `.cl` sources; empty: next to the executable "
        "(`<exe dir>/..`).",
    ),
    # --- internal: set by clproj for its own processes, not by users ---
    Setting(
        "CLPROJ_RUN_DIR",
        "path",
        "",
        "internal",
        "`clproj run`'s temporary folder for this run; the app's helper processes put their "
        "sockets and files in it, and clproj's parts in the app their scratch folders (emulation, "
        "bounded probes, split checks): removed with the run however the app ends.",
    ),
    Setting(
        "CLPROJ_PYTHON",
        "path",
        "",
        "internal",
        "The interpreter clproj's helper processes started inside an app run on (the emulator "
        "server, the route cluster): `clproj run`'s own. Inside a C app the embedded "
        "interpreter's sys.executable is whatever python3 comes first on PATH (a pyenv shim: "
        "a shell script, slow to start, and another interpreter).",
    ),
    Setting(
        "CLPROJ_PYTHON_PATH",
        "path",
        "",
        "internal",
        "Folders the shim adds at the end of an app's interpreter path (clproj's own and its "
        "dependencies', os.pathsep-separated): clproj never sets PYTHONPATH for an app, so the "
        "app's modules and its child processes' imports stay its own.",
    ),
    Setting(
        "CLPROJ_SUMMARY_FILE",
        "path",
        "",
        "internal",
        "`clproj run`: the app writes its per-kernel summary here (TSV) instead of stderr.",
    ),
    Setting(
        "CLPROJ_DEFERRED_FILE",
        "path",
        "",
        "internal",
        "`clproj run --mode project`: the app appends here the launches left for the post-run "
        "completion.",
    ),
    Setting(
        "CLPROJ_ENERGY_LOG",
        "path",
        "",
        "internal",
        "Energy windows of an unmodified app (the energy-window preload library): the library "
        "appends one JSON line per window here; unset, it does nothing.",
    ),
    Setting(
        "CLPROJ_ENERGY_WINDOW_S",
        "float",
        2.5,
        "internal",
        "Energy-window preload: seconds each measured launch shape is repeated for.",
        bounds=(2.0, 60.0),
    ),
    Setting(
        "CLPROJ_ENERGY_QUIET_S",
        "float",
        1.5,
        "internal",
        "Energy-window preload: seconds the device is left quiet before the idle samples (the "
        "driver's power reading is a 1 s average).",
        bounds=(0.0, 10.0),
    ),
    Setting(
        "CLPROJ_ENERGY_IDLE_S",
        "float",
        1.0,
        "internal",
        "Energy-window preload: seconds of idle power samples before each window.",
        bounds=(0.0, 10.0),
    ),
    Setting(
        "CLPROJ_ENERGY_SHAPES",
        "int",
        2,
        "internal",
        "Energy-window preload: how many distinct launch shapes (global and local size) of each "
        "kernel are measured; later shapes run as the app issues them.",
        bounds=(1, 1000),
    ),
    Setting(
        "CLPROJ_SPLIT_DEVICES",
        "list",
        "",
        "internal",
        "`clproj run --split`: the device profile files the splitter uses (comma list).",
    ),
    Setting(
        "CLPROJ_STATS_OUT",
        "path",
        "",
        "internal",
        "The Oclgrind plugin appends its statistics (JSON lines) to this file.",
    ),
    Setting(
        "CLPROJ_STATS_STOP_AFTER_GROUPS",
        "int",
        0,
        "internal",
        "The Oclgrind plugin ends the emulation after writing this many work-groups (0: never).",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_STATS_MAX_WORK_ITEMS",
        "int",
        0,
        "internal",
        "Bounded emulation: the plugin's budget of work-items (0: none).",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_STATS_MAX_INSTRUCTIONS",
        "int",
        0,
        "internal",
        "Bounded emulation: the plugin's budget of instructions (0: none).",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_STATS_BUDGET_S",
        "float",
        0.0,
        "internal",
        "Bounded emulation: the plugin's wall-time budget in seconds (0: none).",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_STORE_RANGES",
        "bool",
        False,
        "internal",
        "The Oclgrind plugin also reports each work-group's stored address ranges (the partition "
        "safety check).",
    ),
    Setting(
        "CLPROJ_FAULT",
        "choice",
        "",
        "test",
        "Fault injection for tests: `start` makes the app side's start-up fail, `launch` makes "
        "every recorded launch raise, `live-pages` makes every live region of the emulator "
        "report a page it could not have (its emulation falls back to the record), `copy-wait` "
        "makes a launch with a live record start its copies only once `clproj run` released "
        "them (`CLPROJ_SNAPSHOT_VIEW=release`: the copies are then dropped, not raced).",
        ("", "start", "launch", "live-pages", "copy-wait"),
    ),
    Setting(
        "CLPROJ_NODE_WEDGE_AFTER",
        "int",
        -1,
        "test",
        "A node that stops serving after this many commands (`0`: from the start; `-1`: never): "
        "it takes no more messages off its sockets, answers no probe and goes on heartbeating, as "
        "a node whose serving loop hangs while its process lives. Its fast-launch link is not "
        "stopped: tests run such a node with `CLPROJ_NODE_NATIVE=0`.",
        bounds=(-1, float("inf")),
    ),
)
