"""The package's YAML parses the same under its loader (libyaml where PyYAML has it,
tables.PACKAGED_LOADER) as under PyYAML's own parser: the faster loader changes no value."""

from __future__ import annotations

from importlib import resources

import yaml

from simspec.catalog.tables import packaged_yaml


def _yaml_files() -> list[tuple[str, ...]]:
    """Every YAML file under simspec/data and its folders, as packaged_yaml's parts."""
    data = resources.files("simspec").joinpath("data")
    top = [(f.name,) for f in data.iterdir() if f.name.endswith(".yaml")]
    nested = [
        (d.name, f.name)
        for d in data.iterdir()
        if d.is_dir()
        for f in d.iterdir()
        if f.name.endswith(".yaml")
    ]
    return top + nested


def test_every_packaged_yaml_parses_the_same_under_both_parsers():
    files = _yaml_files()
    assert len(files) > 20  # simspec/data, its profiles and workload traces
    for parts in files:
        text = resources.files("simspec").joinpath("data", *parts).read_text(encoding="utf-8")
        assert packaged_yaml(*parts) == yaml.safe_load(text), parts
