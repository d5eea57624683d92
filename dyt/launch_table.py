"""The launch table as typed records: dyt/tables/<arch>.json parsed and checked once, when it is loaded.

A table holds launch choices only. Per direction ("fwd", "bwd") and element-size bucket ("16bit", "fp32")
it lists entries by max_width (None: any wider width), each the tile and knobs of one kernel launch; a
forward entry may carry variant tiles that replace its own where they apply (fp32_params, folded,
channels_first), a backward entry channels_first ones. dyt.planner reads these records by attribute;
`python -m dyt tune` writes them (LaunchTable.to_dict), and what it measured goes to its report, not here.

Every record is a frozen dataclass, hashable and equal by value, checked when it is made: an unknown key,
a wrong type or a value out of range is refused (LaunchTableError), and a table read from a file names the
file and the entry. A modified table for a test or the tuner is a new record: dataclasses.replace,
LaunchTable.map_entries / with_entries, or LaunchTable.from_dict of an edited to_dict().
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

MODES = ("fwd", "bwd")
BUCKETS = ("16bit", "fp32")  # x's element size: 2 bytes, or 4 (dyt.planner.dtype_bucket)
# tanh's polynomial near 0 (dyt.kernels._tanh, _tanh_sech2): the terms an entry or variant may name. An
# entry runs the first unless it names another; a variant without one runs its entry's.
POLY_TERMS = (5, 3)
SIGNS = ("select", "bitwise")  # how the forward's tanh takes its sign (dyt.kernels._tanh)
# The backward's persistent loop: the order its programs take row tiles in (dyt.kernels.dyt_bwd_kernel).
ROW_ORDERS = ("chunked", "strided")
# A forward entry's "fp32_params": the tile that replaces the entry's own where 16-bit x meets float32 gamma
# or beta on a problem of at least its min_elements (Triton moves float32 parameters into the x tile's
# layout through shared memory; smaller programs wait less at its barriers).
FP32_PARAMS = "fp32_params"
# A forward entry's "folded": likewise, the tile of rows folded from a narrower width (gamma indexed modulo
# that width, dyt.planner.fold_factor) from min_elements on. fp32_params comes first where both apply.
FOLDED = "folded"
# A forward or backward entry's "channels_first": the tiles (backward: with programs_per_sm, row_order,
# num_stages) of channels-first rows (a plan's channel_span), ahead of the other variants; a list of
# choices, each serving spatial sizes up to its max_span (None: any larger).
CHANNELS_FIRST = "channels_first"
VARIANTS = (FP32_PARAMS, FOLDED, CHANNELS_FIRST)


class LaunchTableError(ValueError):
    """A launch table or record that breaks a rule; read from a file, the message names it and the entry."""


def _int(what: str, name: str, value: Any, *, minimum: int = 1, pow2: bool = False, optional: bool = False):
    if value is None and optional:
        return
    if type(value) is not int:
        kind = "an integer or null" if optional else "an integer"
        raise LaunchTableError(f"{what}'s {name} must be {kind}, got {value!r}")
    if value < minimum:
        raise LaunchTableError(f"{what}'s {name} must be at least {minimum}, got {value}")
    if pow2 and value & (value - 1):
        raise LaunchTableError(f"{what}'s {name} must be a power of two, got {value}")


def _choice(what: str, name: str, value: Any, choices: tuple, optional: bool = False):
    if value is None and optional:
        return
    if type(value) is not type(choices[0]) or value not in choices:
        raise LaunchTableError(f"{what}'s {name} must be one of {choices}, got {value!r}")


def _channels_first(record, what: str, tile_type: type) -> None:
    """Checks (and makes a tuple of) a record's channels_first choices: tiles of tile_type, max_span rising,
    None only last."""
    choices = record.channels_first
    if not isinstance(choices, (tuple, list)):
        raise LaunchTableError(f"{what}'s channels_first must be a list of tiles, got {choices!r}")
    object.__setattr__(record, CHANNELS_FIRST, tuple(choices))
    spans = []
    for choice in choices:
        if type(choice) is not tile_type:
            raise LaunchTableError(
                f"{what}'s channels_first holds a {type(choice).__name__}, not a {tile_type.__name__}"
            )
        spans.append(choice.max_span)
    bounded = spans[:-1]
    if (
        None in bounded
        or bounded != sorted(set(bounded))
        or (bounded and spans[-1] is not None and spans[-1] <= bounded[-1])
    ):
        raise LaunchTableError(
            f"{what}'s channels_first choices need rising max_span values (null only last), got {spans}"
        )


def _tile_dict(tile, keep_span: bool = False) -> dict:
    """A variant tile's fields as the table file holds them: max_span first where it is a channels_first
    choice, then the fields it names (None and a zero min_elements left out)."""
    out = {"max_span": tile.max_span} if keep_span else {}
    for field in dataclasses.fields(tile):
        value = getattr(tile, field.name)
        if (
            field.name != "max_span"
            and value is not None
            and not (field.name == "min_elements" and value == 0)
        ):
            out[field.name] = value
    return out


def _entry_dict(entry) -> dict:
    """An entry's fields as the table file holds them: every choice of its own, then the variants it has."""
    out = {}
    for field in dataclasses.fields(entry):
        value = getattr(entry, field.name)
        if field.name == CHANNELS_FIRST:
            if value:
                out[field.name] = [_tile_dict(choice, keep_span=True) for choice in value]
        elif field.name in VARIANTS:
            if value is not None:
                out[field.name] = _tile_dict(value)
        else:
            out[field.name] = value
    return out


def _fields_of(cls: type, data: Any, what: str) -> dict:
    """data's fields for cls, refusing anything but a mapping of its field names with the required ones."""
    if not isinstance(data, Mapping):
        raise LaunchTableError(f"{what} must be an object, got {data!r}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise LaunchTableError(
            f"{what} has unknown key(s) {', '.join(map(repr, unknown))} (known: {', '.join(names)})"
        )
    missing = [
        f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in data
    ]
    if missing:
        raise LaunchTableError(f"{what} lacks {', '.join(missing)}")
    return dict(data)


def _make(cls: type, fields: dict, what: str):
    """cls(**fields), a refusal naming `what`."""
    try:
        return cls(**fields)
    except LaunchTableError as exc:
        raise LaunchTableError(f"{what}: {exc}") from None


def _entry_from(cls: type, tile_type: type, data: Any, what: str):
    fields = _fields_of(cls, data, what)
    for name in (FP32_PARAMS, FOLDED):
        if name in fields:
            fields[name] = tile_type.from_dict(fields[name], f"{what}'s {name}")
    if CHANNELS_FIRST in fields:
        choices = fields[CHANNELS_FIRST]
        if not isinstance(choices, list):
            raise LaunchTableError(
                f"{what}'s channels_first must be a list of tiles by max_span, got {choices!r}"
            )
        fields[CHANNELS_FIRST] = tuple(
            tile_type.from_dict(c, f"{what}'s channels_first choice {i}") for i, c in enumerate(choices)
        )
    return _make(cls, fields, what)


# Records are hashable: a plan asks for the same resolved entry again and again, and gets one record.
@functools.lru_cache(maxsize=4096)
def _with_tile(entry, tile):
    """entry running the fields tile names (max_span, min_elements aside), without variants of its own."""
    changes = {}
    for field in dataclasses.fields(tile):
        value = getattr(tile, field.name)
        if value is not None and field.name not in ("max_span", "min_elements"):
            changes[field.name] = value
    cleared = {name: None for name in (FP32_PARAMS, FOLDED) if hasattr(entry, name)}
    return dataclasses.replace(entry, **changes, **cleared, channels_first=())


@functools.lru_cache(maxsize=4096)
def _choice_for(choices: tuple, span: int):
    """The channels_first choice serving rows of spatial size span (max_span cleared), or None."""
    if not span:
        return None
    for choice in choices:
        if choice.max_span is None or span <= choice.max_span:
            return dataclasses.replace(choice, max_span=None)
    return None


@dataclasses.dataclass(frozen=True)
class ForwardTile:
    """A forward entry's variant tile: the fields that replace the entry's own where it applies (None: the
    entry's), from min_elements elements on; as a channels_first choice, for spatial sizes up to max_span
    (None: any). A tile naming no field runs the entry's own, and leaves the next variant free to apply."""

    BLOCK_M: int | None = None
    BLOCK_N: int | None = None
    num_warps: int | None = None
    poly: int | None = None
    min_elements: int = 0
    max_span: int | None = None

    def __post_init__(self):
        what = "a forward variant"
        for name in ("BLOCK_M", "BLOCK_N", "num_warps"):
            _int(what, name, getattr(self, name), pow2=True, optional=True)
        _choice(what, "poly", self.poly, POLY_TERMS, optional=True)
        _int(what, "min_elements", self.min_elements, minimum=0)
        _int(what, "max_span", self.max_span, optional=True)

    @property
    def empty(self) -> bool:
        """Whether it names no field (min_elements and max_span aside): the entry's own tile."""
        return (self.BLOCK_M, self.BLOCK_N, self.num_warps, self.poly) == (None,) * 4

    @classmethod
    def from_dict(cls, data: Mapping, what: str = "a forward variant") -> ForwardTile:
        return _make(cls, _fields_of(cls, data, what), what)


@dataclasses.dataclass(frozen=True)
class BackwardTile:
    """A backward entry's channels_first choice: the fields that replace the entry's own for channels-first
    rows of spatial size up to max_span (None: any); None keeps the entry's."""

    BLOCK_M: int | None = None
    BLOCK_N: int | None = None
    num_warps: int | None = None
    programs_per_sm: int | None = None
    num_stages: int | None = None
    row_order: str | None = None
    poly: int | None = None
    max_span: int | None = None

    def __post_init__(self):
        what = "a backward variant"
        for name in ("BLOCK_M", "BLOCK_N", "num_warps"):
            _int(what, name, getattr(self, name), pow2=True, optional=True)
        for name in ("programs_per_sm", "num_stages", "max_span"):
            _int(what, name, getattr(self, name), optional=True)
        _choice(what, "row_order", self.row_order, ROW_ORDERS, optional=True)
        _choice(what, "poly", self.poly, POLY_TERMS, optional=True)

    @property
    def empty(self) -> bool:
        """Whether it names no field (max_span aside): the entry's own tile."""
        return all(getattr(self, f.name) is None for f in dataclasses.fields(self) if f.name != "max_span")

    @classmethod
    def from_dict(cls, data: Mapping, what: str = "a backward variant") -> BackwardTile:
        return _make(cls, _fields_of(cls, data, what), what)


@dataclasses.dataclass(frozen=True)
class ForwardEntry:
    """The forward launch (dyt.kernels.dyt_fwd_kernel) for widths up to max_width (None: any): the tile
    BLOCK_M x BLOCK_N on num_warps warps, how tanh takes its sign, its polynomial, and the variant tiles
    (FP32_PARAMS, FOLDED, CHANNELS_FIRST)."""

    max_width: int | None
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    sign: str = SIGNS[0]
    poly: int = POLY_TERMS[0]
    fp32_params: ForwardTile | None = None
    folded: ForwardTile | None = None
    channels_first: tuple[ForwardTile, ...] = ()

    def __post_init__(self):
        what = "a forward entry"
        _int(what, "max_width", self.max_width, optional=True)
        for name in ("BLOCK_M", "BLOCK_N", "num_warps"):
            _int(what, name, getattr(self, name), pow2=True)
        _choice(what, "sign", self.sign, SIGNS)
        _choice(what, "poly", self.poly, POLY_TERMS)
        for name in (FP32_PARAMS, FOLDED):
            tile = getattr(self, name)
            if tile is not None and type(tile) is not ForwardTile:
                raise LaunchTableError(f"{what}'s {name} must be a ForwardTile, got {tile!r}")
            if tile is not None and tile.max_span is not None:
                raise LaunchTableError(f"{what}'s {name} takes no max_span (channels_first choices do)")
        _channels_first(self, what, ForwardTile)

    def with_tile(self, tile: ForwardTile) -> ForwardEntry:
        """This entry running the tile's fields where it names them, without variants."""
        return _with_tile(self, tile)

    def channels_first_choice(self, span: int) -> ForwardTile | None:
        """The channels_first tile for rows of spatial size span (> 0; its max_span cleared), or None."""
        return _choice_for(self.channels_first, span)

    def to_dict(self) -> dict:
        return _entry_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping, what: str = "a forward entry") -> ForwardEntry:
        return _entry_from(cls, ForwardTile, data, what)


@dataclasses.dataclass(frozen=True)
class BackwardEntry:
    """The backward's main launch (dyt.kernels.dyt_bwd_kernel) for widths up to max_width (None: any): the
    tile, programs per SM of its persistent grid, the order it takes row tiles in, its loop's pipelining
    depth, how many whole copies of a folded row's true width a column block writes as partial rows
    (dyt.planner.fold_copies_in_block), tanh's polynomial, and its channels_first choices."""

    max_width: int | None
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    programs_per_sm: int
    num_stages: int
    row_order: str = ROW_ORDERS[0]
    copies_as_rows: int = 0
    poly: int = POLY_TERMS[0]
    channels_first: tuple[BackwardTile, ...] = ()

    def __post_init__(self):
        what = "a backward entry"
        _int(what, "max_width", self.max_width, optional=True)
        for name in ("BLOCK_M", "BLOCK_N", "num_warps"):
            _int(what, name, getattr(self, name), pow2=True)
        _int(what, "programs_per_sm", self.programs_per_sm)
        _int(what, "num_stages", self.num_stages)
        _choice(what, "row_order", self.row_order, ROW_ORDERS)
        _int(what, "copies_as_rows", self.copies_as_rows, minimum=0)
        _choice(what, "poly", self.poly, POLY_TERMS)
        _channels_first(self, what, BackwardTile)

    def with_tile(self, tile: BackwardTile) -> BackwardEntry:
        """This entry running the tile's fields where it names them, without channels_first choices."""
        return _with_tile(self, tile)

    def channels_first_choice(self, span: int) -> BackwardTile | None:
        """The channels_first tile for rows of spatial size span (> 0; its max_span cleared), or None."""
        return _choice_for(self.channels_first, span)

    def to_dict(self) -> dict:
        return _entry_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping, what: str = "a backward entry") -> BackwardEntry:
        return _entry_from(cls, BackwardTile, data, what)


ENTRY_TYPES = {"fwd": ForwardEntry, "bwd": BackwardEntry}


class Buckets(Mapping):
    """One direction's entries by element-size bucket (BUCKETS): read-only, hashable, equal by value."""

    def __init__(self, by: Mapping[str, tuple]):
        self._by = dict(by)

    def __getitem__(self, bucket: str) -> tuple:
        return self._by[bucket]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by)

    def __len__(self) -> int:
        return len(self._by)

    def __hash__(self) -> int:
        return hash(tuple(self._by.items()))

    def __repr__(self) -> str:
        return f"Buckets({self._by!r})"


@dataclasses.dataclass(frozen=True)
class LaunchTable:
    """An architecture's launch choices: fwd and bwd, each a mapping of BUCKETS to entries by rising
    max_width, the last None (every width has one)."""

    arch: str
    fwd: Mapping[str, tuple[ForwardEntry, ...]]
    bwd: Mapping[str, tuple[BackwardEntry, ...]]

    def __post_init__(self):
        if not isinstance(self.arch, str) or not self.arch:
            raise LaunchTableError(f"a launch table's arch must be a name, got {self.arch!r}")
        for mode, kind in ENTRY_TYPES.items():
            by = getattr(self, mode)
            if not isinstance(by, Mapping) or sorted(by) != sorted(BUCKETS):
                got = sorted(by) if isinstance(by, Mapping) else by
                raise LaunchTableError(
                    f"a launch table's {mode} must hold the buckets {BUCKETS}, got {got!r}"
                )
            buckets = Buckets({bucket: tuple(by[bucket]) for bucket in BUCKETS})
            for bucket, entries in buckets.items():
                where = f"a launch table's {mode} {bucket}"
                if not entries:
                    raise LaunchTableError(f"{where} holds no entry")
                for entry in entries:
                    if type(entry) is not kind:
                        raise LaunchTableError(
                            f"{where} holds a {type(entry).__name__}, not a {kind.__name__}"
                        )
                widths = [e.max_width for e in entries]
                bounded = widths[:-1]
                if widths[-1] is not None or None in bounded or bounded != sorted(set(bounded)):
                    raise LaunchTableError(f"{where}: max_width must rise, null only last, got {widths}")
            object.__setattr__(self, mode, buckets)

    def entry(self, mode: str, bucket: str, width: int):
        """The first entry of the mode's bucket whose max_width holds this width."""
        return next(e for e in getattr(self, mode)[bucket] if e.max_width is None or width <= e.max_width)

    def with_entries(self, mode: str, bucket: str, entries) -> LaunchTable:
        """This table with the mode's bucket holding these entries."""
        return dataclasses.replace(self, **{mode: {**getattr(self, mode), bucket: tuple(entries)}})

    def map_entries(self, change: Callable, modes=MODES, buckets=BUCKETS) -> LaunchTable:
        """This table with change(entry) in place of each entry of these modes and buckets."""
        table = self
        for mode in modes:
            for bucket in buckets:
                table = table.with_entries(mode, bucket, [change(e) for e in getattr(table, mode)[bucket]])
        return table

    @classmethod
    def single(cls, fwd: ForwardEntry, bwd: BackwardEntry, arch: str = "single") -> LaunchTable:
        """A table of one forward and one backward entry, each for every bucket and width."""
        fwd, bwd = (dataclasses.replace(e, max_width=None) for e in (fwd, bwd))
        return cls(arch, {b: (fwd,) for b in BUCKETS}, {b: (bwd,) for b in BUCKETS})

    def to_dict(self) -> dict:
        """The table as its file holds it (json.dumps of this)."""
        out: dict = {"arch": self.arch}
        for mode in MODES:
            out[mode] = {b: [e.to_dict() for e in entries] for b, entries in getattr(self, mode).items()}
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "the launch table") -> LaunchTable:
        """The table a file's JSON holds, checked; a LaunchTableError names `where` and the entry."""
        try:
            fields = _fields_of(cls, data, "the table")
            modes = {}
            for mode, kind in ENTRY_TYPES.items():
                by = fields[mode]
                if not isinstance(by, Mapping) or sorted(by) != sorted(BUCKETS):
                    raise LaunchTableError(f"{mode} must hold the buckets {BUCKETS}, got {by!r}"[:300])
                modes[mode] = {}
                for bucket in BUCKETS:
                    raw = by[bucket]
                    if not isinstance(raw, list):
                        raise LaunchTableError(
                            f"{mode} {bucket} must be a list of entries, got {raw!r}"[:300]
                        )
                    modes[mode][bucket] = tuple(
                        kind.from_dict(e, _entry_name(mode, bucket, i, e)) for i, e in enumerate(raw)
                    )
            return cls(fields["arch"], modes["fwd"], modes["bwd"])
        except LaunchTableError as exc:
            raise LaunchTableError(f"{where}: {exc}") from None


def _entry_name(mode: str, bucket: str, index: int, data: Any) -> str:
    width = data.get("max_width", "?") if isinstance(data, Mapping) else "?"
    return f"{mode} {bucket} entry {index} (max_width {'null' if width is None else width})"
