"""The config's YAML and JSON-schema I/O: read a file, validate it, fill its defaults."""

from __future__ import annotations

import copy
import functools
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

# The schemas ship inside the package (config, study and table schemas).
SCHEMA_DIR = Path(str(resources.files("kernelbook") / "schemas"))
CANDIDATE_SEP = "__"


class ConfigError(ValueError):
    """A config or study file that cannot be used; the message names file and key."""


# libyaml's parser where PyYAML was built with it: the same documents, several times faster
# (the config is loaded by every snakemake invocation and by many of its jobs).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _schema_text(path: Path) -> str:
    return path.read_text()


def schema(name: str) -> dict:
    path = SCHEMA_DIR / f"{name}.schema.yaml"
    if not path.is_file():
        raise ConfigError(f"schema {path} is missing from the installed package")
    return yaml.load(_schema_text(path), Loader=_Loader)


def read_yaml(path: Path, shown: str | None = None) -> Any:
    """The YAML document at ``path``; errors name it as ``shown`` (a repo-relative path)."""
    shown = shown or str(path)
    if not path.is_file():
        raise ConfigError(f"{shown}: file not found")
    try:
        return yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{shown}: not valid YAML{where}: {problem}") from None


def _where(path_items, data: Any = None) -> str:
    """``variants[1] (02_coalescing).bogus``: a path into the file, a variant named by its id."""
    items = list(path_items)
    out = ""
    for i, item in enumerate(items):
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else str(item))
        if i == 1 and items[0] == "variants" and items[2:] != ["id"]:
            try:
                vid = data["variants"][item]["id"]
            except (KeyError, IndexError, TypeError):
                vid = None
            if isinstance(vid, str):
                out += f" ({vid})"
    return out or "(top level)"


def validate(data: Any, schema_name: str, source: str) -> dict:
    """Validate against a schema in src/kernelbook/schemas and fill its defaults; return a copy."""
    sch = schema(schema_name)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping at the top level, got {type(data).__name__}"
        )
    validator = jsonschema.Draft202012Validator(sch)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        raise ConfigError(f"{source}: {_where(err.absolute_path, data)}: {_message(err)}")
    data = copy.deepcopy(data)
    _fill_defaults(sch, data)
    return data


# A nested key given with `snakemake --config 'timeouts={sanitizer_s: 45}'` arrives as a
# string; a file passed with --configfile keeps its types.
NESTED_HINT = (
    " (a nested key set with snakemake --config arrives as a string: put it in a YAML file, "
    "e.g. `timeouts: {sanitizer_s: 45}`, and pass it with --configfile FILE)"
)


def _message(err: jsonschema.ValidationError) -> str:
    if err.validator == "type" and isinstance(err.instance, str) and _is_number(err.instance):
        return err.message + NESTED_HINT
    if err.validator == "minimum" and err.validator_value == 0 and "sizes" in err.absolute_path:
        return f"{err.instance!r} is negative: a size is a positive integer"
    if err.validator == "required":
        return err.message.replace("is a required property", "is required")
    if err.validator == "additionalProperties":
        return err.message.replace("Additional properties are not allowed", "unknown key")
    if err.validator in ("oneOf", "anyOf"):
        hint = err.schema.get("description", "")
        return f"{err.instance!r} is not a valid value here" + (f" ({hint})" if hint else "")
    return err.message


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _fill_defaults(sch: dict, data: dict) -> None:
    for key, sub in sch.get("properties", {}).items():
        if key not in data and "default" in sub:
            data[key] = copy.deepcopy(sub["default"])
        if isinstance(data.get(key), dict) and "properties" in sub:
            _fill_defaults(sub, data[key])


def tool_limit(settings: dict, key: str) -> float:
    """The wall-clock limit ``timeouts.<key>`` of an external tool, in seconds: the config's
    value, else the schema's default (settings built by hand may leave it out)."""
    given = (settings.get("timeouts") or {}).get(key)
    if given is None:
        given = schema("config")["properties"]["timeouts"]["properties"][key]["default"]
    return float(given)
