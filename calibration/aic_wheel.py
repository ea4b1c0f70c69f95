"""A100 SXM's measured tables from the aiconfigurator-core wheel, for the fitting scripts.

The shared calibration data (``../shared/calibration-data/moe-serving``) converted
AIConfigurator's H100, H200 and B200 tables; its A100 SXM tables are read from the released
wheel itself (``pip download aiconfigurator-core==0.12.0 --no-deps``; Apache-2.0, (c) 2025-2026
NVIDIA CORPORATION & AFFILIATES), version-checked, under
``aiconfigurator_core/systems/data/a100_sxm/<op>/<framework>/<version>/*.parquet``. Reading the
parquet files needs pyarrow (the ``parquet`` extra); the product never reads the wheel.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

AIC_VERSION = "0.12.0"
A100_DATA = "aiconfigurator_core/systems/data/a100_sxm/"
# the framework versions whose A100 tables the 0.12.0 wheel holds (comm and moe alike)
A100_FRAMEWORKS = ("vllm/0.14.0", "sglang/0.5.10", "trtllm/1.0.0")


@contextmanager
def a100_tables(wheel: Path) -> Iterator[Callable[[str], object]]:
    """A reader of the wheel's A100 SXM tables by path under ``a100_sxm/`` (a pandas
    DataFrame each); exits naming the wheel when it is not aiconfigurator-core 0.12.0."""
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
            return pd.read_parquet(io.BytesIO(z.read(A100_DATA + path)))

        yield table
