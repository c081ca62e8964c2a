"""Build hook: compiles the optional C speedups, the module orbitmq._native._speedups.

One extension module from the C sources of three rooms (``sources()``: the module,
src/orbitmq/_native/_speedups.c, and every .c of src/orbitmq/{protocol,store,broker}/_native/,
each room's C beside the Python it twins), compiled and linked in one command, so that the
store's and the broker's C call the protocol's encoder directly. Headers include one another
from src/orbitmq (``-I``).

Runs for wheels and for editable installs (``pip install -e .``, which ``make install`` uses).
The module is built with the C compiler Python itself was built with, next to its source, so an
editable install imports it from ``src/`` and a wheel carries it. Without a compiler, or when
compiling fails, the install goes on with a warning and OrbitMQ uses its Python code only
(each room's ``orbitmq.<room>.native.NATIVE`` is None). ORBITMQ_NO_NATIVE_BUILD=1 skips the
build, and so does a compiler that cannot run: ``CC=false make install`` builds OrbitMQ without
the extension (the compiler is ``$CC`` when set, else the one Python was built with).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = Path("src/orbitmq")
MODULE = PACKAGE / "_native" / "_speedups.c"  # the module; each room adds its entry_points.c
ROOMS = ("protocol", "store", "broker")  # their C in <room>/_native/


def sources(root: Path) -> list[Path]:
    """The module's C sources under ``root`` (the checkout): the module, then each room's."""
    rooms = [sorted((root / PACKAGE / room / "_native").glob("*.c")) for room in ROOMS]
    return [root / MODULE, *(c for room in rooms for c in room)]


class SpeedupsBuildHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("ORBITMQ_NO_NATIVE_BUILD") == "1":
            return
        root = Path(self.root)
        target = (root / MODULE).with_name("_speedups" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not compile_extension(sources(root), root / PACKAGE, target):
            return
        if version != "editable":  # an editable install imports it from src/ directly
            build_data["force_include"][str(target)] = str(target.relative_to(root / "src"))
            build_data["pure_python"] = False
            build_data["infer_tag"] = True


def compile_extension(sources: list[Path], include: Path, target: Path) -> bool:
    """``cc -O2 -shared`` of the C files into one module against this Python, headers found from
    ``include``; False (with a warning) on failure. Only the module's init is exported."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if shutil.which(cc[0]) is None:
        print(f"orbitmq: no C compiler ({cc[0]}); using the pure-Python code", file=sys.stderr)
        return False
    cmd = [
        *cc, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wno-unused-parameter",
        f"-I{sysconfig.get_paths()['include']}", f"-I{include}", *map(str, sources),
        "-o", str(target),
    ]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        print(f"orbitmq: building {target.name} failed, using the pure-Python code:\n{detail}",
              file=sys.stderr)
        return False
    return True
