"""``tvm.autotvm.task.space``: configuration entities of AutoTVM schedule templates.

A template's configuration is a set of named knobs; each knob's chosen value is an entity
(:class:`SplitEntity` for a loop split, :class:`ReorderEntity`, :class:`AnnotateEntity`,
:class:`OtherOptionEntity`). :class:`ConfigEntity` maps knob names to entities;
:class:`FallbackConfigEntity` is the configuration used when no tuning record matches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["AnnotateEntity", "ConfigEntity", "FallbackConfigEntity", "OtherOptionEntity",
           "ReorderEntity", "SplitEntity"]


class SplitEntity:
    """A loop split: the factor of each part (``-1`` means "what is left")."""

    def __init__(self, size: Sequence[int]) -> None:
        self.size = [int(s) for s in size]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SplitEntity) and self.size == other.size

    def __repr__(self) -> str:
        return f"sp{self.size}"


class ReorderEntity:
    """A loop order: a permutation of the loop indices."""

    def __init__(self, perm: Sequence[int]) -> None:
        self.perm = [int(p) for p in perm]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReorderEntity) and self.perm == other.perm

    def __repr__(self) -> str:
        return f"re{self.perm}"


class AnnotateEntity:
    """Per-loop annotations (``"unroll"``, ``"vec"``, ``"none"``, ...)."""

    def __init__(self, anns: Sequence[str]) -> None:
        self.anns = list(anns)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnnotateEntity) and self.anns == other.anns

    def __repr__(self) -> str:
        return f"an{self.anns}"


class OtherOptionEntity:
    """Any other knob value (an unroll step, a flag)."""

    def __init__(self, val: Any) -> None:
        self.val = val

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OtherOptionEntity) and self.val == other.val

    def __repr__(self) -> str:
        return f"ot({self.val!r})"


_KINDS: dict[str, Any] = {"sp": SplitEntity, "re": ReorderEntity, "an": AnnotateEntity,
                          "ot": OtherOptionEntity}


class ConfigEntity:
    """One point of a template's configuration space: knob name -> entity.

    Parameters
    ----------
    index : int
        The point's index in the space (``-1`` when unknown).
    code_hash : str or None
        The template's code hash, as recorded.
    entity_map : dict, optional
        Knob name -> entity.
    """

    def __init__(self, index: int = -1, code_hash: str | None = None,
                 entity_map: dict[str, Any] | None = None) -> None:
        self.index = index
        self.code_hash = code_hash
        self._entity_map: dict[str, Any] = dict(entity_map or {})
        self.is_fallback = False
        self.cost: float | None = None

    def __getitem__(self, name: str) -> Any:
        return self._entity_map[name]

    def __setitem__(self, name: str, entity: Any) -> None:
        self._entity_map[name] = entity

    def __contains__(self, name: object) -> bool:
        return name in self._entity_map

    def __iter__(self) -> Iterator[str]:
        return iter(self._entity_map)

    def get_other_option(self) -> dict[str, Any]:
        """The :class:`OtherOptionEntity` knobs as ``name -> value``."""
        return {k: v.val for k, v in self._entity_map.items() if isinstance(v, OtherOptionEntity)}

    def to_json_dict(self) -> dict[str, Any]:
        """The record form: ``{"index": ..., "code_hash": ..., "entity": [[name, kind, value]]}``."""
        entity = []
        for name, ent in self._entity_map.items():
            for kind, cls in _KINDS.items():
                if isinstance(ent, cls):
                    value = {"sp": "size", "re": "perm", "an": "anns", "ot": "val"}[kind]
                    entity.append([name, kind, getattr(ent, value)])
        return {"index": self.index, "code_hash": self.code_hash, "entity": entity}

    @staticmethod
    def from_json_dict(json_dict: dict[str, Any]) -> ConfigEntity:
        """A config from a record (new ``index/code_hash/entity`` or old ``i/c/e`` keys)."""
        index = json_dict.get("index", json_dict.get("i", -1))
        code_hash = json_dict.get("code_hash", json_dict.get("c"))
        cfg = ConfigEntity(int(index), code_hash)
        for name, kind, value in json_dict.get("entity", json_dict.get("e", [])):
            if kind not in _KINDS:
                raise ValueError(f"autotvm config knob {name!r} has unknown kind {kind!r}")
            cfg[name] = _KINDS[kind](value)
        return cfg

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigEntity) and self._entity_map == other._entity_map

    def __repr__(self) -> str:
        knobs = ",".join(f"{k}={v!r}" for k, v in self._entity_map.items())
        return f"[{knobs}],{self.code_hash},{self.index}"


class FallbackConfigEntity(ConfigEntity):
    """The configuration used when no record matches (``is_fallback`` is True until a knob is set)."""

    def __init__(self) -> None:
        super().__init__()
        self.is_fallback = True
