"""Builds the native C module (_playground_native) with the machine's compiler.

Without a working C compiler (or without Python's headers) the build stops with one line that
says what is missing and how to get it, instead of a page of distutils output.
"""

import os
import shutil
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

HOW_TO_FIX = "install one (Debian/Ubuntu: apt-get install gcc python3-dev; Fedora: dnf install gcc python3-devel; macOS: xcode-select --install)"


class BuildNativeExt(build_ext):
    """build_ext that turns a missing compiler or missing Python.h into one clear error."""

    def run(self):
        cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
        if shutil.which(cc) is None:
            raise SystemExit(
                f"error: building _playground_native needs a C compiler; '{cc}' was not found: {HOW_TO_FIX}"
            )
        try:
            super().run()
        except (CCompilerError, CompileError, ExecError, LinkError, PlatformError) as e:
            raise SystemExit(
                f"error: could not compile native/*.c into _playground_native ({e}); "
                f"it needs a C compiler and Python's headers: {HOW_TO_FIX}"
            ) from None


setup(
    cmdclass={"build_ext": BuildNativeExt},
    ext_modules=[
        Extension(
            "_playground_native",
            sources=[
                "native/native.c",
                "native/mailbox.c",
                "native/mailbox_type.c",
                "native/stream.c",
                "native/swap.c",
                "native/attention.c",
                "native/reduce.c",
                "native/span.c",
                "native/sim_events.c",
                "native/sim_network.c",
                "native/sim_engine.c",
                "native/sim_cpu.c",
                "native/sim_transport.c",
                "native/comm_core.c",
                "native/oprecord.c",
                "native/transformer.c",
                "native/gemm.c",
                "native/cma.c",
            ],
            extra_compile_args=["-O2", "-std=gnu11", "-fno-math-errno"],
            libraries=["dl"] if sys.platform.startswith("linux") else [],  # gemm.c opens a BLAS at run time
        )
    ],
)
