"""What ``reproduce`` computes: the selected experiments, their configs and runs, the
manifest, and the checks of the output folder made before anything is computed."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError
from nqf.store.results import FileTooLarge, NotRegularFile, ResultsStore, read_regular
from nqf_paper._base import Experiment, RunSpec
from nqf_paper._config import build_config, config_to_dict, load_config_file, parse_overrides

MANIFEST_NAME = "manifest.json"
REPORT_NAME = "report.html"  # written by nqf_paper.report_page
MANIFEST_FORMAT = "nqf-manifest"
FIGURE_DIR = "figures"


def registry_or_default(experiments: Mapping[str, Experiment] | None) -> Mapping[str, Experiment]:
    if experiments is not None:
        return experiments
    from nqf_paper.registry import EXPERIMENTS

    return EXPERIMENTS


def lookup(registry: Mapping[str, Experiment], name: str) -> str:
    for known in registry:
        if known.lower() == name.strip().lower():
            return known
    raise NqfError(f"unknown experiment {name.strip()!r}; choose from {', '.join(registry) or '(none registered)'}")


def select_experiments(registry: Mapping[str, Experiment], only: str | Iterable[str] | None) -> tuple[Experiment, ...]:
    """The experiments named in ``only`` ("E1,E4" or a list; case-insensitive), or all, in registry order."""
    if not registry:
        raise NqfError("no experiments are registered")
    if only is None:
        return tuple(registry.values())
    names = only.split(",") if isinstance(only, str) else list(only)
    names = [n for n in names if n.strip()]
    if not names:
        raise NqfError("--only names no experiment")
    chosen = {lookup(registry, name) for name in names}
    return tuple(exp for name, exp in registry.items() if name in chosen)


def configs_for(
    registry: Mapping[str, Experiment],
    selected: Sequence[Experiment],
    mode: str,
    config_file: str | os.PathLike | None,
    overrides: Iterable[str],
) -> dict[str, Any]:
    file_tables = load_config_file(config_file) if config_file is not None else {}
    file_tables = {lookup(registry, name): table for name, table in file_tables.items()}
    sets = {lookup(registry, name): values for name, values in parse_overrides(overrides).items()}
    return {exp.name: build_config(exp, mode, file_tables.get(exp.name), sets.get(exp.name)) for exp in selected}


def error_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


class Plan:
    """Runs of the selected experiments, with what the store already holds."""

    def __init__(self, experiments: Sequence[Experiment], configs: Mapping[str, Any], store: ResultsStore, force: bool):
        self.experiments = tuple(experiments)
        self.configs = dict(configs)
        self.specs = {exp.name: exp.run_specs(configs[exp.name]) for exp in experiments}
        self.keys = {
            (exp.name, spec.name): store.key(exp.name, spec.name, spec.config)
            for exp in experiments
            for spec in self.specs[exp.name]
        }
        self.records: dict[tuple[str, str], dict] = {}
        self.states: dict[tuple[str, str], tuple[str, str]] = {}
        for exp in experiments:
            for spec in self.specs[exp.name]:
                record = None if force else store.get(exp.name, spec.name, spec.config)
                if record is not None:
                    self.records[(exp.name, spec.name)] = record
                    self.states[(exp.name, spec.name)] = ("stored", "")
                    store.clear_stale_claim(exp.name, self.keys[(exp.name, spec.name)])
                else:
                    self.states[(exp.name, spec.name)] = ("missing", "")

    def todo(self) -> list[tuple[str, RunSpec]]:
        return [
            (exp.name, spec)
            for exp in self.experiments
            for spec in self.specs[exp.name]
            if self.states[(exp.name, spec.name)][0] == "missing"
        ]

    def count(self, experiment: str, *states: str) -> int:
        return sum(1 for spec in self.specs[experiment] if self.states[(experiment, spec.name)][0] in states)

    def manifest(self, mode: str, version: str) -> dict:
        return {
            "format": MANIFEST_FORMAT,
            "format_version": 1,
            "mode": mode,
            "nqf_version": version,
            "experiments": [
                {
                    "name": exp.name,
                    "config": config_to_dict(self.configs[exp.name]),
                    "runs": [
                        {"name": spec.name, "key": self.keys[(exp.name, spec.name)]} for spec in self.specs[exp.name]
                    ],
                }
                for exp in self.experiments
            ],
        }


def check_output_folder(out: Path, create: bool) -> None:
    """NqfError unless ``out`` is a folder this process can write in (made here if ``create``).

    Checked before anything is computed or drawn, by writing and removing a probe file in
    ``out`` and in its ``runs`` and ``figures`` folders where they exist: permission bits
    alone do not tell (root, read-only mounts, /proc). On failure, folders made here are
    removed again, so a refused ``out`` leaves nothing behind.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise NqfError(f"output folder {out} is a file, not a folder")
    made: list[Path] = []
    try:
        if not out.exists():
            if not create:
                raise NqfError(f"output folder {out} does not exist")
            for folder in reversed([out, *out.parents]):
                if not folder.exists():
                    try:
                        folder.mkdir()
                    except FileExistsError:  # a concurrent run on the same --out made it first
                        continue
                    made.append(folder)
        for folder in (out, out / "runs", out / FIGURE_DIR):
            if folder.exists() and not folder.is_dir():
                raise NqfError(f"{folder} is a file; the output folder needs a folder there")
            if folder.is_dir():
                fd, probe = tempfile.mkstemp(dir=folder, prefix=".nqf-probe-")
                os.close(fd)
                os.unlink(probe)
        # the files written at the end: a folder in their place would fail only after the runs
        for name in (MANIFEST_NAME, REPORT_NAME):
            if (out / name).is_dir():
                raise NqfError(f"{out / name} is a folder; the output folder needs the file {name} there")
    except (OSError, NqfError) as err:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass
        if isinstance(err, NqfError):
            raise
        reason = err.strerror or type(err).__name__
        raise NqfError(f"output folder {out} cannot be written ({reason}: {err.filename or out})") from None


def read_manifest(out_dir: str | os.PathLike) -> dict:
    """``out_dir/manifest.json`` checked; NqfError when missing or not a manifest."""
    path = Path(out_dir) / MANIFEST_NAME
    try:
        # a FIFO is refused, not waited on (read_regular opens it without blocking)
        manifest = json.loads(read_regular(path).decode("utf-8"))
    except FileNotFoundError:
        raise NqfError(f"{path} does not exist; run `nqf reproduce --out {out_dir}` first") from None
    except NotRegularFile as err:
        raise NqfError(f"{path} is {err.strerror}; nqf does not read it") from None
    except FileTooLarge as err:
        raise NqfError(f"{path} holds {err.strerror}; it is not an nqf manifest") from None
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: JSON nested too deeply
        raise NqfError(f"{path} is unreadable: {error_line(err)}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise NqfError(f"{path} is not an nqf manifest")
    if manifest.get("mode") not in ("quick", "full") or not isinstance(manifest.get("experiments"), list):
        raise NqfError(f"{path} is damaged (mode or experiments missing)")
    return manifest
