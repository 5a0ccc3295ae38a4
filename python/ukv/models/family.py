"""A family's config reader as data: field tables, a layer-pattern decoder, one reader.

Each geometry a family reads (its attention, its mixer, its window) is a table of our field
<- :class:`Field`: the config keys to try, in the config's own spelling, and transformers'
default when the config leaves them all out. :func:`read_tables` applies tables to a config
and, on refusal, names every key it could not map in one :class:`ukv.PoolConfigError`.
A :class:`Family` holds one family's tables with the parts that differ in kind between
families (the layer-pattern decoder, a consistency check), which stay small functions;
calling it reads a config into a :class:`ModelShape`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ukv.errors import PoolConfigError
from ukv.models import layers
from ukv.models.config_fields import ConfigFields, MissingKeys, assemble
from ukv.models.layers import LayerKind
from ukv.models.shape import ModelShape
from ukv.models.state import Mixer

__all__ = [
    "HEAD_DIM",
    "HEAD_DIM_FROM_HIDDEN",
    "Check",
    "Derive",
    "Family",
    "Field",
    "KeyDefault",
    "LayerPattern",
    "Table",
    "derived",
    "every_layer",
    "expanded",
    "gqa",
    "key",
    "listed_layers",
    "per_head",
    "periodic",
    "read_tables",
    "same_as",
]

Derive = Callable[[ConfigFields, Mapping[str, int]], int]
"""A default computed from the config and the fields of the table read before it."""


@dataclass(frozen=True)
class Field:
    """Where one of our fields comes from.

    Args:
        keys: Config keys tried in order; the first present (not null) is read. Empty: the
            field is always ``default``.
        default: transformers' default when no key is present: an int, or a
            :data:`Derive` of the config and the fields read before; None: required.
        minimum: Smallest accepted value of a key.
        auto: The value ``"auto"`` stands for the default (Mamba2 head sizes).
    """

    keys: tuple[str, ...]
    default: int | Derive | None = None
    minimum: int = 1
    auto: bool = False


Table = Mapping[str, Field]
"""Our field name -> where it comes from, in reading order."""


def key(
    *keys: str, default: int | Derive | None = None, minimum: int = 1, auto: bool = False
) -> Field:
    """A field read from ``keys`` (see :class:`Field`)."""
    return Field(keys, default, minimum, auto)


def derived(rule: int | Derive) -> Field:
    """A field no key names: always ``rule`` (a constant, or computed)."""
    return Field((), rule)


def same_as(name: str) -> Derive:
    """The value of another field of the table (KV heads default to the query heads)."""
    return lambda cfg, got: got[name]


def per_head(total: str, heads: str) -> Derive:
    """``got[total] // got[heads]`` (a head size from an inner size and a head count)."""
    return lambda cfg, got: got[total] // got[heads]


def expanded(expand_key: str, *fallbacks: str) -> Derive:
    """``expand_key * hidden_size`` (else the first of ``fallbacks`` present), the expand
    factor defaulting to 2 (Mamba inner size)."""
    return lambda cfg, got: (
        cfg.integer(expand_key, *fallbacks, default=2) * cfg.integer("hidden_size")
    )


def _hidden_per_head(cfg: ConfigFields, got: Mapping[str, int]) -> int:
    """``hidden_size // num_attention_heads`` (transformers' default head size)."""
    return cfg.head_dim_from_hidden()


HEAD_DIM_FROM_HIDDEN = derived(_hidden_per_head)
"""The head size of families that have no ``head_dim`` key."""

HEAD_DIM = key("head_dim", default=_hidden_per_head)
"""``head_dim``, by default ``hidden_size // num_attention_heads`` as in transformers."""


def gqa(head_dim: Field, *, kv_heads: int | None = None, q_heads: int | None = None) -> Table:
    """The attention table of grouped-query attention.

    Args:
        head_dim: Where ``head_dim`` comes from.
        kv_heads: Default of ``num_key_value_heads``; None: the query heads, as
            transformers does.
        q_heads: Default of ``num_attention_heads``; None: required.

    Returns:
        ``num_q_heads``, ``num_kv_heads`` and ``head_dim`` fields.
    """
    return {
        "num_q_heads": key("num_attention_heads", default=q_heads),
        "num_kv_heads": key(
            "num_key_value_heads", default=same_as("num_q_heads") if kv_heads is None else kv_heads
        ),
        "head_dim": head_dim,
    }


class _ReadSoFar(dict[str, int]):
    """Fields read so far; asking for one that failed stops the field that asked."""

    def __missing__(self, name: str) -> int:
        raise _NeedsFailed(name)


class _NeedsFailed(Exception):
    """A default needs a field that failed to read (that failure is named already)."""


def _read_field(cfg: ConfigFields, spec: Field, got: Mapping[str, int]) -> int:
    """The value of one field (its first key present, else its default)."""
    present = [k for k in spec.keys if cfg.has(k)]
    if present and not (spec.auto and cfg.values[present[0]] == "auto"):
        return cfg.integer(present[0], minimum=spec.minimum)
    if spec.default is None:
        raise cfg.missing(spec.keys[0])
    return spec.default if isinstance(spec.default, int) else int(spec.default(cfg, got))


def read_tables(*tables: tuple[ConfigFields, Table]) -> list[dict[str, int]]:
    """Read every field of every table, naming all that could not be mapped.

    Args:
        tables: ``(config section, table)`` pairs, read in order.

    Returns:
        One ``{field: value}`` per table.

    Raises:
        PoolConfigError: Some keys are missing (without a default) or malformed; one
            message names every such key (a single one exactly as
            :class:`ConfigFields` words it).
    """
    results: list[dict[str, int]] = []
    missing: list[str] = []
    malformed: list[str] = []
    for cfg, table in tables:
        got = _ReadSoFar()
        for name, spec in table.items():
            try:
                got[name] = _read_field(cfg, spec, got)
            except _NeedsFailed:
                continue
            except MissingKeys as err:
                missing += [k for k in err.keys if k not in missing]
            except PoolConfigError as err:
                if str(err) not in malformed:
                    malformed.append(str(err))
        results.append(dict(got))
    if missing and not malformed:
        raise MissingKeys(tables[0][0].model_type, missing)
    if malformed:
        named = [str(MissingKeys(tables[0][0].model_type, missing))] if missing else []
        raise PoolConfigError("; ".join(named + malformed))
    return results


LayerPattern = Callable[[ConfigFields], Sequence[LayerKind]]
"""Decodes a (text) config's layer pattern: one kind per decoder layer."""

KeyDefault = int | Callable[[ConfigFields], int | None]
"""transformers' default of a key a family reads itself: a constant, or computed from the
(text) config (None: no default can be computed, the key stays missing)."""

Check = Callable[[ConfigFields, Mapping[str, int]], None]
"""Refuses fields of a table that disagree with each other (the message names them)."""


def every_layer(kind: LayerKind | Callable[[ConfigFields], LayerKind]) -> LayerPattern:
    """``num_hidden_layers`` layers of one kind (or of the kind the config decides)."""
    return lambda cfg: (kind(cfg) if callable(kind) else kind,) * cfg.integer("num_hidden_layers")


def listed_layers(
    mapping: Mapping[str, LayerKind],
    otherwise: LayerPattern | None = None,
    list_key: str = "layer_types",
) -> LayerPattern:
    """The per-layer list at ``list_key`` decoded with ``mapping``; when the config has no
    such list, ``otherwise`` (None: the list is required)."""

    def pattern(cfg: ConfigFields) -> Sequence[LayerKind]:
        if otherwise is not None and not cfg.has(list_key):
            return otherwise(cfg)
        return layers.from_layer_types(cfg.sequence(list_key), mapping, cfg.key(list_key))

    return pattern


def periodic(
    period: Field, hit: LayerKind, other: LayerKind, offset: Field | None = None
) -> LayerPattern:
    """``hit`` at the layers ``i % period == offset``, ``other`` elsewhere; without an
    offset every ``period``-th layer (offset ``period - 1``) is ``hit``."""

    def pattern(cfg: ConfigFields) -> Sequence[LayerKind]:
        every = _read_field(cfg, period, {})
        at = every - 1 if offset is None else _read_field(cfg, offset, {})
        return layers.every_nth(cfg.integer("num_hidden_layers"), every, at, hit, other)

    return pattern


@dataclass(frozen=True)
class Family:
    """One family's config reader, as data; calling it reads a config.

    A table is read only when a layer uses it: the window when a layer slides, the mixer
    when a layer holds state, the attention when a layer attends.

    Args:
        layers: The layer-pattern decoder.
        attention: Fields of the :class:`~ukv.models.attention.AttentionShape` of the full
            and sliding layers (``num_q_heads``, ``num_kv_heads``, ``head_dim``, optional
            ``kv_lora_rank``).
        mixer: The state layers' mixer class.
        mixer_fields: The mixer's fields; a field the class does not take (an inner size)
            only feeds the other fields' defaults and ``check``.
        mixer_section: Nested object holding the mixer's keys (Kimi-Linear); None: the
            (text) config itself.
        check: Refuses mixer fields that disagree with each other.
        window: The sliding window, or the chunk when ``chunked``.
        chunked: The window is an attention chunk (Llama 4).
        max_positions: Where the longest request comes from when not
            ``max_position_embeddings`` (0: unknown).
        defaults: transformers' defaults of keys the layer pattern and the shape read
            themselves (``num_hidden_layers``, ...), filled in where the config omits them
            (a :data:`KeyDefault`: constant, or computed from the config).
        text_config: Where the text model's keys are: ``"top"`` the config itself,
            ``"nested"`` its ``text_config`` (required), ``"either"`` ``text_config``
            when present.
    """

    layers: LayerPattern
    attention: Table | None = None
    mixer: type[Mixer] | None = None
    mixer_fields: Table = field(default_factory=dict)
    mixer_section: str | None = None
    check: Check | None = None
    window: Field | None = None
    chunked: bool = False
    max_positions: Field | None = None
    defaults: Mapping[str, KeyDefault] = field(default_factory=dict)
    text_config: Literal["top", "nested", "either"] = "top"

    def __call__(self, cfg: ConfigFields, name: str) -> ModelShape:
        """Read a config into its cache shape.

        Args:
            cfg: The whole config (its ``text_config`` is found here).
            name: The shape's name.

        Returns:
            The unsharded shape, as :func:`~ukv.models.config_fields.assemble` builds it.

        Raises:
            PoolConfigError: A key is missing or malformed (every such key of the tables
                read is named), or the layer pattern is invalid.
        """
        text = self._text(cfg)
        kinds = tuple(self.layers(text))
        slides = "swa" in kinds
        holds_state = layers.cache_layers(kinds, "mamba") > 0
        attends = slides or layers.cache_layers(kinds, "full") > 0
        use_mixer = holds_state and self.mixer is not None
        mixer_cfg = text.mapping(self.mixer_section) if use_mixer and self.mixer_section else text
        window, mixer, attention, positions = read_tables(
            (text, {"window": self.window} if slides and self.window else {}),
            (mixer_cfg, self.mixer_fields if use_mixer else {}),
            (text, self.attention if attends and self.attention else {}),
            (text, {"max": self.max_positions} if self.max_positions else {}),
        )
        return assemble(
            text,
            name,
            kinds,
            attention=attention or None,
            mixer=self._mixer(mixer_cfg, mixer) if use_mixer else None,
            window=window.get("window"),
            chunked=self.chunked,
            outer=None if text is cfg else cfg,
            max_positions=positions.get("max") or None,
        )

    def _text(self, cfg: ConfigFields) -> ConfigFields:
        """The section holding the text model, with :attr:`defaults` filled in."""
        nested = self.text_config == "nested" or (
            self.text_config == "either" and cfg.has("text_config")
        )
        text = cfg.mapping("text_config") if nested else cfg
        omitted = {}
        for k, default in self.defaults.items():
            value = None if text.has(k) else default(text) if callable(default) else default
            if value is not None:
                omitted[k] = value
        if not omitted:
            return text
        return ConfigFields({**text.values, **omitted}, text.model_type, text.prefix)

    def _mixer(self, cfg: ConfigFields, values: Mapping[str, int]) -> Mixer:
        assert self.mixer is not None
        if self.check is not None:
            self.check(cfg, values)
        names = {f.name for f in dataclasses.fields(self.mixer)}
        return self.mixer(**{k: v for k, v in values.items() if k in names})
