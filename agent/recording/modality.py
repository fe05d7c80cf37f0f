"""A mapping file for datasets whose feature names do not say what the numbers are.

A LeRobot dataset stores one ``observation.state`` vector and one ``action`` vector per frame; the
names of their entries are optional (many datasets write ``null`` or ``{"motors": [...]}``) and
``robot_type`` may be missing, so the body rebuilt from the features can be anonymous (``state_0``,
``action_3``, ``unknown``). GR00T's answer is ``meta/modality.json``: it slices the vectors into named
fields and names the cameras. We read the same file (its ``state``, ``action`` and ``video`` parts;
``annotation`` is ignored: tasks come from ``meta/tasks.parquet``) plus two keys of our own::

    {
      "embodiment": "planar_pusher",
      "state":  {"pusher": {"start": 0, "end": 4}, "puck": {"start": 4, "end": 8},
                 "goal": {"start": 8, "end": 10, "names": ["goal_x", "goal_y"]}},
      "action": {"velocity": {"start": 0, "end": 2}},
      "video":  {"top": {"original_key": "observation.images.cam_high"}},
      "action_kind": "velocity"
    }

A field of width 1 becomes a channel of that name, a wider one ``<field>.<i>`` unless ``names`` gives
them; entries no field covers keep their names from the features. With a ``video`` part the body has
exactly the cameras listed, under the listed names. `LocalDataset` reads ``meta/modality.json`` when
the dataset has one, or the file given to it (``embodia train --modality FILE``).

>>> from embodia.devices.embodiment import Channel, Embodiment
>>> body = Embodiment("unknown", "lerobot dataset", actions=(Channel("action_0"), Channel("action_1")))
>>> mapped, cams = apply_modality(body, {"embodiment": "cart", "action": {"wheels": {"start": 0, "end": 2}}}, {})
>>> mapped.name, [c.name for c in mapped.actions], cams
('cart', ['wheels.0', 'wheels.1'], {})
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from embodia.agent.recording.dataset_checks import DatasetError, parse_json
from embodia.devices.embodiment import Camera, Channel, Embodiment
from embodia.devices.observation import ACTION, IMAGES, STATE

MODALITY_PATH = "meta/modality.json"
_KNOWN = {"embodiment", "state", "action", "video", "annotation", "action_kind"}
_VECTOR = {"state": STATE, "action": ACTION}


class ModalityError(ValueError):
    """A mapping file that is malformed or does not fit the dataset; the message names the file."""


def load_modality(path) -> dict:
    """The mapping file as a dict, checked for shape (not yet against a dataset)."""
    path = Path(path)
    try:
        spec = parse_json(path.read_text(encoding="utf-8"), str(path))    # bounded: no RecursionError
    except FileNotFoundError:
        raise ModalityError(f"{path}: no such mapping file") from None
    except (OSError, UnicodeDecodeError, DatasetError) as e:
        raise ModalityError(f"{path}: not a readable JSON mapping ({e})") from None
    if not isinstance(spec, dict):
        raise ModalityError(f"{path}: a mapping file holds a JSON object, got {type(spec).__name__}")
    unknown = sorted(set(spec) - _KNOWN)
    if unknown:
        raise ModalityError(f"{path}: unknown keys {unknown}; known: {sorted(_KNOWN)}")
    for part in ("state", "action", "video"):
        if part in spec and not isinstance(spec[part], dict):
            raise ModalityError(f"{path}: '{part}' must be an object of named fields")
    for key in ("embodiment", "action_kind"):
        if key in spec and not (isinstance(spec[key], str) and spec[key].strip()):
            raise ModalityError(f"{path}: '{key}' must be a non-empty string")
    return spec


def apply_modality(body: Embodiment, spec: dict, features: dict, *, source: str = "modality") -> \
        tuple[Embodiment, dict[str, str]]:
    """``body`` renamed by ``spec``; also {camera name: feature key} for the cameras it renames."""
    try:
        actions = _channels(body.actions, spec.get("action"), "action")
        state = _channels(body.state, spec.get("state"), "state")
        cameras, keys = _cameras(body.cameras, spec.get("video"), features)
        changes = {"actions": actions, "state": state, "cameras": cameras}
        if "embodiment" in spec:
            changes["name"] = spec["embodiment"].strip()
        if "action_kind" in spec:
            changes["action_kind"] = spec["action_kind"].strip()
        return dataclasses.replace(body, **changes), keys
    except ModalityError as e:
        raise ModalityError(f"{source}: {e}") from None
    except ValueError as e:          # the Embodiment's own checks (duplicate names...)
        raise ModalityError(f"{source}: {e}") from None


def _channels(channels: tuple[Channel, ...], fields: dict | None, part: str) -> tuple[Channel, ...]:
    if not fields:
        return channels
    width, names = len(channels), [c.name for c in channels]
    taken: dict[int, str] = {}
    for field, sl in fields.items():
        if not isinstance(sl, dict):
            raise ModalityError(f"{part}.{field}: expected {{'start': int, 'end': int}}")
        key = sl.get("original_key", _VECTOR[part])
        if key != _VECTOR[part]:
            raise ModalityError(f"{part}.{field}: original_key {key!r}: only {_VECTOR[part]!r} is read for {part}")
        start, end = sl.get("start"), sl.get("end")
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= width):
            raise ModalityError(f"{part}.{field}: start/end {start!r}/{end!r} must satisfy "
                                f"0 <= start < end <= {width} (the width of {_VECTOR[part]})")
        given = sl.get("names")
        if given is not None and (not isinstance(given, list) or len(given) != end - start
                                  or not all(isinstance(n, str) and n for n in given)):
            raise ModalityError(f"{part}.{field}: 'names' must list {end - start} non-empty strings")
        for k, i in enumerate(range(start, end)):
            if i in taken:
                raise ModalityError(f"{part}: fields {taken[i]!r} and {field!r} both cover entry {i}")
            taken[i] = field
            names[i] = given[k] if given else (field if end - start == 1 else f"{field}.{k}")
    return tuple(dataclasses.replace(c, name=n) for c, n in zip(channels, names))


def _cameras(cameras: tuple[Camera, ...], video: dict | None, features: dict) -> tuple[tuple[Camera, ...], dict]:
    if not video:
        return cameras, {}
    by_key = {f"{IMAGES}.{c.name}": c for c in cameras}
    out, keys = [], {}
    for name, entry in video.items():
        key = entry.get("original_key") if isinstance(entry, dict) else None
        key = key or f"{IMAGES}.{name}"
        if key not in by_key:
            raise ModalityError(f"video.{name}: no image feature {key!r}; the dataset has {sorted(by_key)}")
        out.append(dataclasses.replace(by_key[key], name=name))
        keys[name] = key
    return tuple(out), keys
