"""capture(): aten-level op graphs of PyTorch modules, and capture_phase() for transformers models."""
from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pytest_charz.errors import UsageError  # noqa: E402
from pytest_charz.workloads.capture import capture  # noqa: E402
from pytest_charz.workloads.capture_phases import capture_phase  # noqa: E402
from pytest_charz.workloads.graph import Graph  # noqa: E402


def tiny_llama_config(**overrides: int) -> object:
    sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256)
    sizes.update(overrides)
    return transformers.LlamaConfig(**sizes)


def tiny_llama(device: str = "meta", **overrides: int) -> object:
    torch.manual_seed(0)
    with torch.device(device):
        return transformers.LlamaForCausalLM(tiny_llama_config(**overrides))


def linear_params(config: object) -> int:
    """Weights in the linear layers of a Llama (per token, each is one multiply-add)."""
    h, i, layers, vocab = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    head_dim = h // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * i  # q, k, v, o, gate, up, down
    return layers * per_layer + h * vocab  # + lm_head


def gemm_flops(graph: Graph) -> float:
    return sum(op.work.total_flops for op in graph.ops if op.op_class == "gemm")


def attention_flops(graph: Graph) -> float:
    return sum(op.work.total_flops for op in graph.ops if op.op_class == "attention")


def test_a_linear_counts_2mnk_and_its_bytes() -> None:
    graph = capture(torch.nn.Linear(16, 32), torch.randn(4, 16))
    (op,) = graph.ops
    assert op.op_class == "gemm" and op.source == "aten.addmm.default"
    assert op.work.flops == {"fp32": pytest.approx(2 * 4 * 16 * 32)}
    # the Linear's call before it, issued by the root's (the Linear's) own forward
    # nn.Linear keeps W as (n, k): addmm takes its transposed view, a linear layer's product, with
    # a bias (one value per output column, broadcast over the rows)
    shape = dict(op.work.shape)
    assert shape.pop("python_calls") > 0       # nn.Module.__call__'s and the forward's own
    assert shape == {"m": 4, "n": 32, "k": 16, "linear": 1, "bias": 1, "module_calls": 1, "root_op": 1}
    # bias, input, weight read; output written
    assert op.work.bytes["dram"] == pytest.approx(4 * (32 + 4 * 16 + 16 * 32 + 4 * 32))
    assert op.work.launches == 1


def test_an_mlp_counts_by_hand_and_deps_follow_the_data() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    graph = capture(mlp, torch.randn(5, 16))
    assert [op.name for op in graph.ops] == ["0.addmm#0", "1.gelu#0", "2.addmm#0"]
    assert graph.total_flops == pytest.approx(2 * 5 * 16 * 32 + 5 * 32 + 2 * 5 * 32 * 8)
    # the gelu's Work says it is bound by its math and names its function: the one core prices
    # it by the function's own calibration wherever the graph goes (predict_graph, the simulator,
    # validate)
    from pytest_charz.calibration.class_keys import class_key
    from pytest_charz.models.opclass_costs import op_class_of
    from pytest_charz.validation.workloads import op_work

    gelu = graph.op("1.gelu#0")
    assert gelu.work.shape["transcendental"] == 1 and gelu.work.shape["function"] == "gelu"
    assert op_class_of(gelu.work) == "transcendental" and class_key(gelu.work) == "transcendental.gelu:fp32"
    assert op_work(gelu.work, gelu.source, module_code=False) is gelu.work
    assert graph.op("1.gelu#0").deps == ("0.addmm#0",)
    assert graph.op("2.addmm#0").deps == ("1.gelu#0",)


def test_conv_flops_by_hand() -> None:
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, groups=1)
    (op,) = capture(conv, torch.randn(2, 3, 10, 10)).ops
    assert op.op_class == "conv"
    assert op.work.total_flops == pytest.approx(2 * (2 * 8 * 10 * 10) * 3 * 9)
    grouped = torch.nn.Conv2d(4, 8, 3, groups=2)
    (op,) = capture(grouped, torch.randn(1, 4, 6, 6)).ops
    assert op.work.total_flops == pytest.approx(2 * (8 * 4 * 4) * (4 // 2) * 9)


class Viewer(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.view(4, 6).t().unsqueeze(0).expand(2, 6, 4)[:, 1:].squeeze(0).transpose(1, 2)
        return y.detach().permute(0, 2, 1)


def test_views_make_no_ops_and_copies_of_a_permutation_are_transposes() -> None:
    x = torch.randn(24)
    assert len(capture(Viewer(), x)) == 0

    class Copier(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x.t().contiguous() * 2).clone()

    graph = capture(Copier(), torch.randn(8, 4))
    assert [op.op_class for op in graph.ops] == ["transpose", "elementwise", "copy"]
    assert graph.ops[1].deps == (graph.ops[0].name,)
    assert graph.ops[2].deps == (graph.ops[1].name,)


def test_deps_reach_through_views_to_the_writer() -> None:
    class Branches(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = torch.exp(x)
            b = torch.sin(x)
            return a.view(-1)[:3] + b.t().reshape(-1)[:3]

    graph = capture(Branches(), torch.randn(3, 3))
    assert [op.source for op in graph.ops][:2] == ["aten.exp.default", "aten.sin.default"]
    # reshaping the transposed view materializes it: a transpose copy that reads sin's output
    clone = graph.op("clone#0")
    assert clone.op_class == "transpose" and clone.deps == ("sin#0",)
    assert set(graph.ops[-1].deps) == {"exp#0", "clone#0"}


def test_tiny_llama_prefill_gemms_are_2_tokens_params_plus_attention() -> None:
    model = tiny_llama()
    config = model.config
    batch, seq = 2, 8
    graph = capture_phase(model, "prefill", batch, seq=seq, name="tiny-llama")
    assert gemm_flops(graph) == pytest.approx(2 * batch * seq * linear_params(config))
    head_dim = config.hidden_size // config.num_attention_heads
    full = 4 * batch * config.num_attention_heads * seq * seq * head_dim * config.num_hidden_layers
    assert attention_flops(graph) == pytest.approx(full)
    attention = [op for op in graph.ops if op.op_class == "attention"]
    assert all(op.attrs["causal"] for op in attention)
    # the causal triangle of an 8x8 score matrix: 36 of 64 pairs
    assert sum(op.attrs["causal_flops"] for op in attention) == pytest.approx(full * 36 / 64)
    assert graph.name == "tiny-llama" and graph.phase == "prefill"
    assert graph.params == {"phase": "prefill", "batch": 2, "seq": 8, "context": None, "dtype": "fp32"}
    assert "model.layers.0.self_attn.q_proj.mm#0" in {op.name for op in graph.ops}


def test_decode_is_one_token_plus_attention_over_the_context() -> None:
    model = tiny_llama()
    config = model.config
    batch, context = 3, 40
    graph = capture_phase(model, "decode", batch, context=context)
    assert gemm_flops(graph) == pytest.approx(2 * batch * 1 * linear_params(config))
    head_dim = config.hidden_size // config.num_attention_heads
    expected = 4 * batch * config.num_attention_heads * 1 * (context + 1) * head_dim * config.num_hidden_layers
    assert attention_flops(graph) == pytest.approx(expected)
    for op in graph.ops:
        if op.op_class == "attention":
            assert op.work.shape["seq_q"] == 1 and op.work.shape["seq_kv"] == context + 1
    assert graph.params["context"] == context and graph.params["seq"] == 1


def test_train_is_about_three_forwards_of_gemm_plus_an_optimizer_step() -> None:
    model = tiny_llama()
    forward = capture_phase(model, "prefill", 2, seq=8)
    train = capture_phase(model, "train", 2, seq=8)
    assert gemm_flops(train) == pytest.approx(3 * gemm_flops(forward), rel=0.01)
    optimizer_ops = [op for op in train.ops if op.attrs.get("optimizer")]
    assert optimizer_ops and all(op.op_class == "elementwise" for op in optimizer_ops)
    assert all(op.name.startswith("optimizer.") for op in optimizer_ops)
    assert any(op.attrs.get("backward") for op in train.ops if op.op_class == "attention")
    # backward ops carry the module whose backward made them
    assert any(op.name.startswith("model.layers.0.mlp.down_proj.mm") and op.attrs.get("backward")
               for op in train.ops)


@pytest.mark.parametrize("phase, sizes", [("prefill", {"seq": 8}), ("decode", {"context": 12}),
                                          ("train", {"seq": 8})])
def test_a_real_device_and_meta_capture_the_same_ops_and_flops(phase: str, sizes: dict) -> None:
    graphs = [capture_phase(tiny_llama(device), phase, 2, **sizes) for device in ("cpu", "meta")]
    real, meta = graphs
    assert [(op.name, op.op_class) for op in real.ops] == [(op.name, op.op_class) for op in meta.ops]
    assert real.flops_by_dtype() == pytest.approx(meta.flops_by_dtype())
    assert real.total_bytes == pytest.approx(meta.total_bytes)


def test_a_real_module_capture_matches_its_meta_twin_on_random_inputs() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.SiLU(), torch.nn.Linear(24, 12))
    real = capture(mlp, torch.randn(3, 12))
    meta = capture(mlp.to("meta"), torch.randn(3, 12, device="meta"))
    assert [op.name for op in real.ops] == [op.name for op in meta.ops]
    assert real.total_flops == pytest.approx(meta.total_flops)


def test_a_1b_config_captures_on_meta_in_seconds() -> None:
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
            num_key_value_heads=8, vocab_size=128256))
    start = time.perf_counter()
    graph = capture_phase(model, "prefill", 1, seq=512, dtype="bf16")
    assert time.perf_counter() - start < 5
    assert graph.params["dtype"] == "bf16" and "bf16" in graph.flops_by_dtype()
    assert gemm_flops(graph) == pytest.approx(2 * 512 * linear_params(model.config))


class DataDependent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.pick = Picker()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pick(self.proj(x))


class Picker(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0]  # a boolean mask: the output's length is data


def test_an_uncapturable_op_names_the_aten_op_and_the_module() -> None:
    with torch.device("meta"):
        module = DataDependent()
    with pytest.raises(UsageError, match=r"aten op aten\.index\.Tensor in module 'pick'.*nonzero"):
        capture(module, torch.randn(2, 4, device="meta"))


def test_a_data_dependent_op_on_a_real_device_is_noted() -> None:
    graph = capture(DataDependent(), torch.randn(2, 4))
    assert any("data-dependent" in note for note in graph.notes)


def test_mixtral_routing_on_meta_is_deterministic_and_says_so() -> None:
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, num_local_experts=4, num_experts_per_tok=2))
    before = model.config._experts_implementation
    first = capture_phase(model, "prefill", 2, seq=8)
    second = capture_phase(model, "prefill", 2, seq=8)
    assert first.to_json() == second.to_json()
    experts = [op for op in first.ops if op.attrs.get("grouped")]
    assert len(experts) == 2 * 2 and all("routing" in op.attrs for op in experts)
    # in each of 2 layers, each of the 16 tokens runs top_k=2 experts: gate_up (64 -> 256), down (128 -> 64)
    assert sum(op.work.total_flops for op in experts) == pytest.approx(2 * 16 * 2 * 2 * (64 * 256 + 128 * 64))
    assert model.config._experts_implementation == before  # the switch is undone
    assert first.params["experts"] == 4 and first.params["top_k"] == 2
    assert any("routing" in note for note in first.notes)


def test_encoders_capture_their_forward() -> None:
    with torch.device("meta"):
        bert = transformers.BertModel(transformers.BertConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=300))
        vit = transformers.ViTModel(transformers.ViTConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=32,
            patch_size=8))
    graph = capture_phase(bert, "forward", 2, seq=16)
    assert {"gemm", "attention", "norm", "embedding"} <= {op.op_class for op in graph.ops}
    graph = capture_phase(vit, "forward", 2)
    conv = [op for op in graph.ops if op.op_class == "conv"]
    assert len(conv) == 1 and conv[0].work.total_flops == pytest.approx(2 * (2 * 64 * 4 * 4) * 3 * 64)
    with pytest.raises(UsageError, match="causal language model"):
        capture_phase(bert, "decode", 1, context=4)


def test_bad_arguments_are_usage_errors() -> None:
    model = tiny_llama()
    with pytest.raises(UsageError, match="phase must be one of"):
        capture_phase(model, "serve", 1, seq=4)
    with pytest.raises(UsageError, match="seq must be a positive int"):
        capture_phase(model, "prefill", 1, seq=0)
    with pytest.raises(UsageError, match="dtype must be one of"):
        capture_phase(model, "prefill", 1, seq=4, dtype="int4")


def test_graph_json_round_trip() -> None:
    graph = capture_phase(tiny_llama(), "train", 1, seq=4)
    again = Graph.from_json(json.loads(json.dumps(graph.to_json())))
    assert again == graph


def test_inference_mode_captures_the_same_gemms_and_norms_as_no_grad() -> None:
    # Under torch.inference_mode (the workload suite's) the capture sees composite ops whole
    # (aten.linear, layer_norm, dropout): they once came out as elementwise ops of one FLOP per
    # output, so every GEMM of a measured model was predicted as a tiny elementwise op.
    model = tiny_llama("cpu")
    bert = transformers.BertModel(transformers.BertConfig(hidden_size=64, intermediate_size=128,
                                                          num_hidden_layers=1, num_attention_heads=4,
                                                          vocab_size=256)).eval()
    ids = torch.randint(0, 256, (1, 8))
    for module in (model, bert):
        plain = capture(module, input_ids=ids)
        with torch.inference_mode():
            inferred = capture(module, input_ids=ids.clone())
        assert gemm_flops(plain) > 0 and gemm_flops(inferred) == pytest.approx(gemm_flops(plain))
        assert inferred.total_flops == pytest.approx(plain.total_flops)
        classes = {op.op_class for op in inferred.ops}
        assert "gemm" in classes and not any(op.source.startswith(("aten.linear", "aten.dropout"))
                                             and op.op_class == "elementwise" for op in inferred.ops)
    assert any(op.op_class == "norm" for op in capture(bert, input_ids=ids).ops)


def test_matmul_seen_whole_is_a_gemm_or_a_batched_product() -> None:
    from pytest_charz.workloads.aten_costs import _composite_product

    gemm = _composite_product("matmul", [(2, 8, 16), (16, 4)], [(2, 8, 4)])
    assert (gemm.op_class, gemm.flops) == ("gemm", 2.0 * 16 * 4 * 16)
    batched = _composite_product("matmul", [(3, 8, 16), (3, 16, 4)], [(3, 8, 4)])
    assert (batched.op_class, batched.flops, batched.shape["batch"]) == ("bmm", 2.0 * 3 * 8 * 4 * 16, 3)
    linear = _composite_product("linear", [(1, 5, 32), (64, 32)], [(1, 5, 64)])
    assert (linear.op_class, linear.flops, linear.shape["m"]) == ("gemm", 2.0 * 5 * 64 * 32, 5)


def test_inference_mode_captures_a_convolution_as_one() -> None:
    # under torch.inference_mode conv2d reaches the capture whole: a ViT's patch embedding came
    # out as an elementwise op of one FLOP per output, 23x faster than it ran
    from pytest_charz.models.opclass import gemm_dims

    conv = torch.nn.Conv2d(3, 16, kernel_size=4, stride=4).eval()
    x = torch.randn(1, 3, 32, 32)
    plain = capture(conv, x)
    with torch.inference_mode():
        inferred = capture(conv, x.clone())
    (op,) = [o for o in inferred.ops if o.op_class == "conv"]
    assert op.work.total_flops == pytest.approx(2.0 * 16 * 8 * 8 * 3 * 16)
    assert op.work.total_flops == pytest.approx(sum(o.work.total_flops for o in plain.ops if o.op_class == "conv"))
    # the implicit GEMM: m = output pixels, n = out channels, k = in channels x kernel elements
    assert gemm_dims(op.work, "conv") == pytest.approx((64.0, 16.0, 48.0, 1.0))


def test_an_op_writing_into_a_given_tensor_is_marked_in_place() -> None:
    # it allocates nothing: the op-class model charges fresh pages only to ops that allocate
    class Step(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            z = x * y
            z.add_(1.0)
            return z

    graph = capture(Step(), torch.randn(4, 8), torch.randn(4, 8))
    marks = {op.source.split(".")[1]: bool(op.work.shape.get("inplace")) for op in graph.ops}
    assert marks == {"mul": False, "add_": True}


def test_an_elementwise_op_with_a_scalar_operand_is_marked() -> None:
    # x * 0.5 wraps 0.5 into a tensor on every call: 2.6 us against 1.1 us for x * y here
    class Step(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return (x * 0.5) + y

    graph = capture(Step(), torch.randn(4, 8), torch.randn(4, 8))
    marks = {op.source.split(".")[1]: bool(op.work.shape.get("scalar_operand")) for op in graph.ops}
    assert marks == {"mul": True, "add": False}


def test_a_python_number_of_the_ops_own_dtype_is_marked_uncast() -> None:
    # PyTorch wraps an int as an int64 and a float as a double: beside an int64 position the int
    # is not cast (1.03 us on a Xeon core), beside an fp32 tensor the float and the int are (1.67)
    from pytest_charz.models.opclass_costs import framework_of

    class Positions(torch.nn.Module):
        def forward(self, position: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return position + 1, position // 2, x * 0.5, x * 2, x.double() + 0.5, position + 0.5

    graph = capture(Positions(), torch.arange(3), torch.randn(4, 8))
    found = [(op.source.split(".")[1], framework_of(op.work)) for op in graph.ops if op.op_class == "elementwise"]
    assert found == [("add", "torch-scalar-uncast"), ("floor_divide", "torch-scalar-uncast"),
                     ("mul", "torch-scalar"), ("mul", "torch-scalar"), ("add", "torch-scalar-uncast"),
                     ("add", "torch-scalar")]


def test_an_elementwise_op_on_a_strided_view_is_marked_and_calibrated_apart() -> None:
    # failure kind: a rotary embedding's mul and add on a query transposed to heads were priced as
    # contiguous adds: replayed 1.7-2.0 us on a Xeon core against 1.0 for the same ops on
    # contiguous tensors, +85-100% under their prediction
    from pytest_charz.calibration.class_keys import class_key, fallback_keys, fitted_keys

    class Rotary(torch.nn.Module):
        def forward(self, x: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
            q = x.transpose(1, 2)                  # (batch, heads, tokens, dim) view of x
            # the mul walks the view beside cos; the add is contiguous; the neg of a half sliced
            # from x's rows follows the view's rows alone (0.85 us on a Xeon core, 0.73 on a
            # contiguous half, where a strided add's curve priced it at 0.95-1.17)
            return q * cos, x + x, -x[..., 8:]

    graph = capture(Rotary(), torch.randn(1, 8, 4, 16), torch.randn(1, 1, 8, 16))
    marks = {op.source.split(".")[1]: bool(op.work.shape.get("strided")) for op in graph.ops
             if op.op_class == "elementwise"}
    assert marks == {"mul": True, "add": False, "neg": False}
    neg = next(op.work for op in graph.ops if op.source.split(".")[1] == "neg")
    assert neg.shape.get("view") == 1 and class_key(neg) == "elementwise.view:fp32"
    # its own cases only; a calibration without them prices it as the contiguous class
    assert fitted_keys(neg) == ("elementwise.view:fp32",)
    assert fallback_keys(neg) == ("elementwise.view:fp32", "elementwise:fp32", "elementwise")
    strided = next(op.work for op in graph.ops if op.work.shape.get("strided"))
    plain = next(op.work for op in graph.ops if op.source.split(".")[1] == "add")
    assert class_key(strided) == "elementwise.strided:fp32" and class_key(plain) == "elementwise:fp32"
    # a calibration without strided cases prices it as the contiguous class
    assert fallback_keys(strided) == ("elementwise.strided:fp32", "elementwise:fp32", "elementwise")


def test_a_cat_of_strided_halves_is_marked_and_keyed_apart_from_a_kv_append() -> None:
    # failure kind: a rotary embedding's cat of two halves sliced from the query (views by strides,
    # which PyTorch's serial cat kernel does not take) and a KV cache's append (contiguous) were
    # priced on one curve: the rotary cats read +32% (a decode step's) to +74% (a prefill's) replayed
    # on a Xeon core, the appends -19%
    from pytest_charz.calibration.class_keys import class_key, fallback_keys, fitted_keys

    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor, past: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            half = q.shape[-1] // 2
            rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
            return rotated, torch.cat([past, q], dim=-2)

    graph = capture(Attention(), torch.randn(1, 4, 1, 32), torch.randn(1, 4, 8, 32))
    cats = [op.work for op in graph.ops if op.work.shape.get("function") == "cat"]
    assert [bool(w.shape.get("strided")) for w in cats] == [True, False]
    halves, append = cats
    assert class_key(halves) == "copy.cat.strided:fp32" and class_key(append) == "copy.cat:fp32"
    # fitted under its own key only; a calibration from before the split prices it as a cat
    assert fitted_keys(halves) == ("copy.cat.strided:fp32",)
    assert fallback_keys(halves) == ("copy.cat.strided:fp32", "copy.cat:fp32", "copy:fp32", "copy")
    # a contiguous cat of two whole tensors (the rotary frequencies joined) is not strided
    class Frequencies(torch.nn.Module):
        def forward(self, f: torch.Tensor) -> torch.Tensor:
            return torch.cat((f, f), dim=-1)

    (only,) = [op.work for op in capture(Frequencies(), torch.randn(1, 1, 16)).ops]
    assert not only.shape.get("strided") and class_key(only) == "copy.cat:fp32"


def test_a_factory_is_marked_a_fill_and_calibrated_apart() -> None:
    # failure kind: a decode step's position arange was priced as an add's dispatch, 0.71 us,
    # where replayed it took 1.3-1.4 us on a Xeon core (+90%): a factory parses a size and options
    from pytest_charz.calibration.class_keys import class_key, fitted_keys

    class Positions(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.arange(x.shape[-1]) + torch.zeros(x.shape[-1])

    graph = capture(Positions(), torch.randn(1, 1, 32))
    works = {op.source.split(".")[1]: op.work for op in graph.ops}
    assert works["arange"].shape["fill"] == 1 and works["zeros"].shape["fill"] == 1
    assert "fill" not in works["add"].shape
    # int64 positions have no FLOP dtype (their key says "*"), a zeros of floats its dtype
    assert class_key(works["arange"]) == "elementwise.fill:*" and class_key(works["zeros"]) == "elementwise.fill:fp32"
    # a fill case calibrates its own key only, never the contiguous elementwise curve
    assert fitted_keys(works["zeros"]) == ("elementwise.fill:fp32",)


def test_a_number_the_op_takes_as_a_number_is_not_a_wrapped_scalar() -> None:
    # failure kind: x.pow(2) (pow.Tensor_Scalar, its exponent a number in the schema) was charged
    # the wrapped scalar's dispatch: 8-10 us priced for an RMSNorm's square, 3.4-4.5 us replayed
    class Norm(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.pow(2) * 0.5

    graph = capture(Norm(), torch.randn(4, 8))
    marks = {op.source.split(".")[1]: bool(op.work.shape.get("scalar_operand")) for op in graph.ops}
    assert marks == {"pow": False, "mul": True}



def test_a_patch_embedding_is_its_own_convolution_class() -> None:
    # failure kind: a ViT's 16 x 16 patch embedding (stride = kernel, 3 channels) priced on the
    # 3 x 3 convolutions' curve read +208% replayed: PyTorch's CPU convolution pays ~35 us of
    # fixed cost there (80 us on a Xeon core where its GEMM took 15)
    from pytest_charz.calibration.class_keys import class_key, fitted_keys

    patch = capture(torch.nn.Conv2d(3, 32, 8, stride=8), torch.randn(1, 3, 32, 32)).ops[0].work
    assert patch.shape["patch"] == 1 and class_key(patch) == "conv.patch:fp32"
    assert fitted_keys(patch) == ("conv.patch:fp32",)       # never pooled into the 3 x 3 curve
    for conv, x in ((torch.nn.Conv2d(3, 8, 3, padding=1), torch.randn(1, 3, 8, 8)),
                    (torch.nn.Conv2d(3, 8, 4, stride=2), torch.randn(1, 3, 16, 16)),
                    (torch.nn.Conv2d(8, 8, 1), torch.randn(1, 8, 4, 4))):
        work = capture(conv, x).ops[0].work
        assert "patch" not in work.shape and class_key(work) == "conv:fp32"


def test_a_phase_counts_its_forwards_python_calls_as_capture_does() -> None:
    # failure kind: capture_phase recorded no python_calls, so the model code of a graph it captured
    # was priced without its per-call figure, short of the same forward captured by capture()
    model = tiny_llama()
    capture_phase(model, "prefill", 1, seq=8)            # first call's lazy set-up out of the counts
    prefill = capture_phase(model, "prefill", 1, seq=8)
    ids = torch.randint(1, 256, (1, 8), device="meta")
    with torch.no_grad():
        same = capture(model, input_ids=ids, use_cache=True)
    counts = [op.work.shape.get("python_calls") for op in prefill.ops]
    assert None not in counts and sum(counts) > len(counts)
    assert sum(counts) == sum(op.work.shape["python_calls"] for op in same.ops)
    decode = capture_phase(model, "decode", 1, context=8)
    assert all("python_calls" in op.work.shape for op in decode.ops)
    # a training step: the forward's ops counted, the backward's and the optimizer's not (no
    # model code of the forward runs there)
    train = capture_phase(model, "train", 1, seq=8)
    counted = [op for op in train.ops if "python_calls" in op.work.shape]
    assert counted and not any(op.attrs.get("backward") or op.attrs.get("optimizer") for op in counted)
    assert any(op.attrs.get("optimizer") for op in train.ops)
