"""Measured tables from the aiconfigurator-core wheel (A100 SXM's, and the Blackwell systems'
collectives), for the fitting scripts.

The shared calibration data (``../shared/calibration-data/moe-serving``) converted
AIConfigurator's H100, H200 and B200 tables; its A100 SXM tables are read from the released
wheel itself (``pip download aiconfigurator-core==0.12.0 --no-deps``; Apache-2.0, (c) 2025-2026
NVIDIA CORPORATION & AFFILIATES), version-checked, under
``aiconfigurator_core/systems/data/a100_sxm/<op>/<framework>/<version>/*.parquet``. Reading the
parquet files needs pyarrow (the ``parquet`` extra); the product never reads the wheel.
"""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

AIC_VERSION = "0.12.0"
SYSTEMS_DATA = "aiconfigurator_core/systems/data/"
# the framework versions whose A100 tables the 0.12.0 wheel holds (comm and moe alike)
A100_FRAMEWORKS = ("vllm/0.14.0", "sglang/0.5.10", "trtllm/1.0.0")


def a100_tables(wheel: Path) -> contextlib.AbstractContextManager[Callable[[str], object]]:
    """A reader of the wheel's A100 SXM tables (:func:`system_tables`)."""
    return system_tables(wheel, "a100_sxm")


@contextmanager
def system_tables(wheel: Path, system: str) -> Iterator[Callable[[str], object]]:
    """A reader of the wheel's tables of one ``system`` (its folder under systems/data:
    a100_sxm, b300_sxm, gb200, ...) by path under it (a pandas DataFrame each); exits naming
    the wheel when it is not aiconfigurator-core 0.12.0."""
    import pandas as pd  # parquet through pyarrow: only the --aic-core options need them

    try:
        z = zipfile.ZipFile(wheel)
        meta = z.read(f"aiconfigurator_core-{AIC_VERSION}.dist-info/METADATA").decode()
    except (OSError, zipfile.BadZipFile, KeyError) as exc:  # one line, not a traceback (QA)
        raise SystemExit(
            f"{wheel}: not the aiconfigurator-core {AIC_VERSION} wheel ({exc})"
        ) from None
    with z:
        if f"\nVersion: {AIC_VERSION}\n" not in meta:
            raise SystemExit(f"{wheel}: not aiconfigurator-core {AIC_VERSION}")

        def table(path: str) -> pd.DataFrame:
            return pd.read_parquet(io.BytesIO(z.read(f"{SYSTEMS_DATA}{system}/{path}")))

        yield table
