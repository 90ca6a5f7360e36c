"""Published model configurations as data: one TOML file per model under ``configs/``.

``load_config(name)`` finds a model by id or alias (any case: ``llama2-7b``,
``meta-llama/Llama-2-7b-hf``); ``load_config_file(path)`` reads a user's own file;
``instantiate(config)`` builds the real transformers model class from it, without weights and
without the hub. Every file is validated on load: an error names the file, the field and the bad
value, and an unknown name suggests the nearest known one.

File schema::

    [identity]  id, name, family, config_class, model_class, default_dtype?, aliases?, notes?
    [sources]   key = "full citation"
    [config]    field = { value = <number | string | bool>, source = "<key of [sources]>" }

Config fields use the transformers names of the Llama family (``hidden_size``,
``num_hidden_layers``, ...) for every family; :func:`instantiate` translates them where a config
class spells them otherwise (GPT-2's ``n_embd``, ``n_layer``...).
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..datafile import TableReader, load_named_files, nearest_hint
from ..formats import read_toml
from ..errors import UsageError, require_extra

if TYPE_CHECKING:
    import torch


CONFIG_DIR = Path(__file__).with_name("configs")
#: The model dtypes a config may name as its default and the builders accept.
MODEL_DTYPES = ("fp32", "bf16", "fp16", "fp8")
#: Every config field the files may hold, with its type (ints and floats must be positive).
FIELD_TYPES: dict[str, type] = {
    "hidden_size": int, "intermediate_size": int, "num_hidden_layers": int, "num_attention_heads": int,
    "num_key_value_heads": int, "head_dim": int, "vocab_size": int, "max_position_embeddings": int,
    "type_vocab_size": int, "num_local_experts": int, "num_experts_per_tok": int, "sliding_window": int,
    "image_size": int, "patch_size": int, "num_channels": int,
    "rope_theta": float, "rms_norm_eps": float, "layer_norm_eps": float,
    "hidden_act": str, "tie_word_embeddings": bool, "qkv_bias": bool,
}
_CORE = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_ROPE_DECODER = (*_CORE, "num_key_value_heads", "vocab_size", "max_position_embeddings", "rope_theta",
                 "rms_norm_eps")
#: Per family: (required fields, optional fields).
FAMILY_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "llama": (_ROPE_DECODER, ("head_dim", "hidden_act", "tie_word_embeddings")),
    "mistral": (_ROPE_DECODER, ("head_dim", "hidden_act", "tie_word_embeddings", "sliding_window")),
    "mixtral": ((*_ROPE_DECODER, "num_local_experts", "num_experts_per_tok"),
                ("head_dim", "hidden_act", "tie_word_embeddings", "sliding_window")),
    "gpt2": ((*_CORE, "vocab_size", "max_position_embeddings"),
             ("layer_norm_eps", "hidden_act", "tie_word_embeddings")),
    "bert": ((*_CORE, "vocab_size", "max_position_embeddings", "type_vocab_size"),
             ("layer_norm_eps", "hidden_act")),
    "vit": ((*_CORE, "image_size", "patch_size", "num_channels"), ("layer_norm_eps", "hidden_act", "qkv_bias")),
}
FAMILIES = tuple(FAMILY_FIELDS)
#: Decoder LLMs (prefill, decode, train) and encoders (forward).
DECODER_FAMILIES = ("llama", "mistral", "mixtral", "gpt2")
#: The transformers class names each family's file must name: (config class, model class).
FAMILY_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"), "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "bert": ("BertConfig", "BertModel"), "vit": ("ViTConfig", "ViTModel"),
}
# Where a config class spells a field otherwise (GPT-2 predates the common names).
_HF_NAMES = {"gpt2": {"hidden_size": "n_embd", "intermediate_size": "n_inner", "num_hidden_layers": "n_layer",
                      "num_attention_heads": "n_head", "max_position_embeddings": "n_positions",
                      "layer_norm_eps": "layer_norm_epsilon", "hidden_act": "activation_function"}}
_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class ModelConfig:
    """A published model configuration: identity, config fields and the source of each figure.

    ``fields`` holds the config values by field name; ``field_sources`` the ``[sources]`` key each
    one cites; ``sources`` the citations. ``origin`` is the file it was read from.
    """

    id: str
    name: str
    family: str
    config_class: str
    model_class: str
    fields: Mapping[str, Any]
    default_dtype: str = "bf16"
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    field_sources: Mapping[str, str] = field(default_factory=dict)
    origin: str = ""
    notes: tuple[str, ...] = ()

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def source_of(self, name: str) -> str:
        """The full citation of field ``name``."""
        return self.sources[self.field_sources[name]]

    # The figures the builders use, with the family's defaults filled in.
    @property
    def is_decoder(self) -> bool:
        return self.family in DECODER_FAMILIES

    @property
    def hidden_size(self) -> int:
        return int(self.fields["hidden_size"])

    @property
    def intermediate_size(self) -> int:
        return int(self.fields["intermediate_size"])

    @property
    def num_layers(self) -> int:
        return int(self.fields["num_hidden_layers"])

    @property
    def num_heads(self) -> int:
        return int(self.fields["num_attention_heads"])

    @property
    def num_kv_heads(self) -> int:
        return int(self.fields.get("num_key_value_heads", self.num_heads))

    @property
    def head_dim(self) -> int:
        return int(self.fields.get("head_dim", self.hidden_size // self.num_heads))

    @property
    def vocab_size(self) -> int:
        return int(self.fields.get("vocab_size", 0))

    @property
    def num_experts(self) -> int:
        """Experts per MoE layer (1 for a dense MLP)."""
        return int(self.fields.get("num_local_experts", 1))

    @property
    def experts_per_token(self) -> int:
        return int(self.fields.get("num_experts_per_tok", 1))

    @property
    def tied_embeddings(self) -> bool:
        return bool(self.fields.get("tie_word_embeddings", False))

    def replace_fields(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (``num_hidden_layers=1`` for a small real run)."""
        from dataclasses import replace

        unknown = [name for name in changes if name not in FIELD_TYPES]
        if unknown:
            raise UsageError(f"{self.id}: unknown config field {unknown[0]!r}{nearest_hint(unknown[0], FIELD_TYPES)}")
        return replace(self, fields={**self.fields, **changes})


class _Reader(TableReader):
    """Validates one parsed model file; every error names the file, the field and the value."""

    def value(self, name: str, raw: Any) -> Any:
        wanted = FIELD_TYPES[name]
        where = f"config.{name}.value"
        if wanted is bool:
            if not isinstance(raw, bool):
                raise self.fail(where, "must be true or false", raw)
            return raw
        if wanted is str:
            if not isinstance(raw, str) or not raw.strip():
                raise self.fail(where, "must be a non-empty string", raw)
            return raw
        if wanted is int and not (isinstance(raw, int) and not isinstance(raw, bool)):
            raise self.fail(where, "must be an integer", raw)
        if wanted is float and not (isinstance(raw, (int, float)) and not isinstance(raw, bool)):
            raise self.fail(where, "must be a number", raw)
        if not math.isfinite(raw) or raw <= 0:
            raise self.fail(where, "must be positive", raw)
        return wanted(raw)

    def config(self, data: dict[str, Any]) -> ModelConfig:
        raw = self.table(data, "", ("identity", "sources", "config"))
        identity = self.table(raw["identity"], "identity", ("id", "name", "family", "config_class", "model_class"),
                              ("default_dtype", "aliases", "notes"))
        family = self.text(identity, "family", "identity")
        if family not in FAMILY_FIELDS:
            raise self.fail("identity.family", f"must be one of {', '.join(FAMILIES)}{nearest_hint(family, FAMILIES)}",
                            family)
        for key, expected in zip(("config_class", "model_class"), FAMILY_CLASSES[family]):
            if self.text(identity, key, "identity") != expected:
                raise self.fail(f"identity.{key}", f"must be {expected!r} for the {family} family", identity[key])
        dtype = identity.get("default_dtype", "bf16")
        if dtype not in MODEL_DTYPES:
            raise self.fail("identity.default_dtype", f"must be one of {', '.join(MODEL_DTYPES)}", dtype)
        sources = raw["sources"]
        if not isinstance(sources, dict) or not sources:
            raise self.fail("sources", "must be a non-empty table of citations", sources)
        for key, citation in sources.items():
            if not isinstance(citation, str) or not citation.strip():
                raise self.fail(f"sources.{key}", "must be a non-empty citation string", citation)
        required, optional = FAMILY_FIELDS[family]
        table = self.table(raw["config"], "config", required, optional)
        fields: dict[str, Any] = {}
        cited: dict[str, str] = {}
        for name, figure in table.items():
            figure = self.table(figure, f"config.{name}", ("value", "source"))
            source = figure["source"]
            if not isinstance(source, str) or source not in sources:
                raise self.fail(f"config.{name}.source", f"must be a key of [sources] ({', '.join(sorted(sources))})",
                                source)
            fields[name] = self.value(name, figure["value"])
            cited[name] = source
        heads = fields["num_attention_heads"]
        if fields["hidden_size"] % heads and "head_dim" not in fields:
            raise self.fail("config.hidden_size.value", f"must be a multiple of num_attention_heads ({heads})",
                            fields["hidden_size"])
        if heads % fields.get("num_key_value_heads", heads):
            raise self.fail("config.num_key_value_heads.value", f"must divide num_attention_heads ({heads})",
                            fields["num_key_value_heads"])
        if fields.get("num_experts_per_tok", 1) > fields.get("num_local_experts", 1):
            raise self.fail("config.num_experts_per_tok.value", "must not exceed num_local_experts",
                            fields["num_experts_per_tok"])
        if family == "vit" and fields["image_size"] % fields["patch_size"]:
            raise self.fail("config.image_size.value", f"must be a multiple of patch_size ({fields['patch_size']})",
                            fields["image_size"])
        return ModelConfig(id=self.text(identity, "id", "identity"), name=self.text(identity, "name", "identity"),
                           family=family, config_class=identity["config_class"], model_class=identity["model_class"],
                           fields=fields, default_dtype=dtype, aliases=self.texts(identity, "aliases", "identity"),
                           sources=dict(sources), field_sources=cited, origin=str(self.path),
                           notes=self.texts(identity, "notes", "identity"))


def load_config_file(path: str | Path) -> ModelConfig:
    """Parse and validate one model file; :class:`SpecError` names the file, field and value."""
    path = Path(path)
    data = read_toml(path)
    return _Reader(path).config(data)


def load_config_dir(directory: str | Path) -> dict[str, ModelConfig]:
    """Every ``*.toml`` of ``directory`` by id; ids and aliases must be unique (any case)."""
    return load_named_files(directory, load_config_file, lambda config: (config.id, *config.aliases),
                            fold=str.lower)


@functools.lru_cache(maxsize=1)
def _packaged() -> dict[str, ModelConfig]:
    return load_config_dir(CONFIG_DIR)


def known_models() -> list[str]:
    """The ids of the packaged model configurations, sorted."""
    return sorted(_packaged())


def load_config(name: str | ModelConfig) -> ModelConfig:
    """The packaged configuration named ``name`` (id or alias, any case); a ModelConfig passes
    through. An unknown name raises :class:`UsageError` listing the known ids and the nearest."""
    if isinstance(name, ModelConfig):
        return name
    configs = _packaged()
    wanted = str(name).strip().lower()
    by_name = {alias.lower(): config.id for config in configs.values() for alias in (config.id, *config.aliases)}
    if wanted in by_name:
        return configs[by_name[wanted]]
    nearest = difflib.get_close_matches(wanted, list(by_name), n=1, cutoff=0.5)
    if nearest:
        hint = f"; did you mean {by_name[nearest[0]]!r}?"
    else:
        closest = max(by_name, key=lambda c: (difflib.SequenceMatcher(None, wanted, c).ratio(), c))
        hint = f"; nearest match: {by_name[closest]!r}"
    raise UsageError(f"unknown model {name!r}; known models: {', '.join(sorted(configs))}{hint}")


def transformers_kwargs(config: ModelConfig, num_layers: int | None = None,
                        overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``config``'s transformers config class (names translated)."""
    names = _HF_NAMES.get(config.family, {})
    fields = dict(config.fields)
    if num_layers is not None:
        if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
            raise UsageError(f"num_layers must be a positive integer, got {num_layers!r}")
        fields["num_hidden_layers"] = num_layers
    kwargs = {names.get(key, key): value for key, value in fields.items()}
    kwargs.update(overrides or {})
    return kwargs


@contextlib.contextmanager
def _default_dtype(torch: Any, dtype: torch.dtype) -> Iterator[None]:
    # Parameters are created in the default dtype: set it while building so no fp32 copy is made.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def instantiate(config: str | ModelConfig, dtype: str = "bf16", device: str = "meta", num_layers: int | None = None,
                overrides: Mapping[str, Any] | None = None, attn_implementation: str = "sdpa") -> torch.nn.Module:
    """The real transformers model of ``config`` with random (or, on ``meta``, no) weights.

    Builds ``model_class(config_class(**fields))`` under ``torch.device(device)`` with parameters
    in ``dtype`` (``fp32``, ``bf16`` or ``fp16``); nothing is downloaded. ``num_layers`` replaces
    the layer count for small real runs; ``overrides`` are passed to the config class as they are
    (its own field names). The model is returned in eval mode.
    """
    config = load_config(config)
    if dtype not in _TORCH_DTYPES:
        raise UsageError(f"instantiate dtype must be one of {', '.join(_TORCH_DTYPES)}; got {dtype!r} "
                         "(fp8 models are built analytically only)")
    torch = require_extra("torch", "workloads")
    transformers = require_extra("transformers", "workloads")
    config_cls = getattr(transformers, config.config_class)
    model_cls = getattr(transformers, config.model_class)
    kwargs = transformers_kwargs(config, num_layers, overrides)
    kwargs.setdefault("attn_implementation", attn_implementation)
    hf_config = config_cls(**kwargs)
    with torch.device(device), _default_dtype(torch, getattr(torch, _TORCH_DTYPES[dtype])):
        model = model_cls(hf_config)
    return model.eval()
