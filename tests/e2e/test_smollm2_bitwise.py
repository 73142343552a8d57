"""The bundled SmolLM2 on ort-cpu, float32 and int4: every session's logits are bitwise the same
alone and in a batch of sessions of very different lengths (prompts of 1 to 140 tokens, then
decode steps). Two shape rules make this hold (ShapePolicy): steps attend over a multiple of 64
cells, and with 4-bit weights no row is alone in a tile of 128 rows where this CPU's kernel
rounds such a row apart (probed at load). A third, the scheduler's:
a prompt's prefill chunks are cut on a grid from its start, not where a batch's budget ends."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cellspec.artifact import Manifest
from cellspec.export import ExportConfig, export
from cellspec.llm import LLM, SamplingParams
from cellspec.runtime.executor import Executor
from cellspec.runtime.ort_cpu import OrtCpuBackend, lone_rows_round_apart, nbits_configs
from tools.dflash_train.prompts import held_out_texts

LENGTHS = [5, 140, 57, 1, 64]
STEPS = 12


@pytest.fixture(scope="module")
def smollm2_int4(smollm2_gguf, tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2-int4") / "artifact"
    export(smollm2_gguf, out, ExportConfig(quantize="int4", max_context=1024, max_cells=2048),
           progress=False)
    return out


def session_logits(executor, prompts, continuations, group):
    """Logits of every step of the sessions in `group`, run together: the prompts' last rows,
    then STEPS one-token steps with the given continuation tokens."""
    target = executor.target
    sids = [executor.open_session() for _ in group]
    seqs = np.concatenate([np.full(len(prompts[g]), s) for g, s in zip(group, sids)])
    tokens = np.concatenate([prompts[g] for g in group])
    ends = np.cumsum([len(prompts[g]) for g in group]) - 1
    logits = {g: [row] for g, row in zip(group, target.forward(seqs, tokens, ends).logits)}
    for step in range(STEPS):
        fed = np.array([continuations[g, step] for g in group])
        rows = target.forward(np.array(sids), fed, np.arange(len(group))).logits
        for g, row in zip(group, rows):
            logits[g].append(row)
    for sid in sids:
        executor.close_session(sid)
    return logits


@pytest.mark.parametrize("dtype", ["float32", "int4"])
def test_logits_bitwise_alone_and_batched(dtype, smollm2_artifact, smollm2_int4):
    artifact = smollm2_artifact if dtype == "float32" else smollm2_int4
    executor = Executor.load(artifact, max_sessions=len(LENGTHS), threads=2)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(100, 40000, n) for n in LENGTHS]
    continuations = rng.integers(100, 40000, (len(LENGTHS), STEPS))
    batched = session_logits(executor, prompts, continuations, range(len(LENGTHS)))
    for g in range(len(LENGTHS)):
        alone = session_logits(executor, prompts, continuations, [g])[g]
        for step, (a, b) in enumerate(zip(alone, batched[g])):
            assert np.array_equal(a, b), f"prompt {g} ({LENGTHS[g]} tokens), step {step}"
    assert executor.cache.num_used == 0


def test_generate_in_a_batch_equals_each_prompt_alone(smollm2_int4):
    """Eight chat prompts of 37-48 tokens under the default 256-token prefill budget: the
    seventh does not fit the first step whole. Cut where the budget ended (1 token, then 44),
    its greedy text differed from its text alone from token 36 on."""
    llm = LLM(smollm2_int4, max_sessions=8)
    prompts = held_out_texts(8)
    params = SamplingParams(max_tokens=48)
    batched = llm.generate(prompts, params)
    assert sum(len(llm.tokenizer.encode(p, True)) for p in prompts[:7]) > 256
    for prompt, out in zip(prompts, batched):
        assert llm.generate(prompt, params)[0].token_ids == out.token_ids, prompt


def test_the_4bit_kernel_rounds_a_lone_row_differently():
    """The premise of ShapePolicy.lone_row_tile, on ONNX Runtime's CPU MatMulNBits (4-bit,
    accuracy level 4): a row's result depends on whether it is alone in its tile of 128 rows
    (M = 1, 129, 257) and on nothing else. Which kernel the CPU provider picks depends on the
    CPU: on the AMD EPYC with AVX2 and no AVX-512 of the earlier sittings the lone rows
    differed; on an AMD EPYC with AVX-512 VNNI (2026-12-02) no row count did, and the policy's
    padding is then only a cost."""
    k, n, block = 576, 960, 32
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.integers(0, 256, (n, k // block, 16), np.uint8), "w"),
               numpy_helper.from_array(rng.random(n * k // block, np.float32) * 0.01, "s"),
               numpy_helper.from_array(rng.integers(0, 256, n * k // block // 2, np.uint8), "z")]
    node = helper.make_node("MatMulNBits", ["x", "w", "s", "z"], ["y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block, accuracy_level=4)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, ["M", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    x = rng.standard_normal((300, k)).astype(np.float32)
    full = session.run(None, {"x": x})[0]
    differing = [m for m in range(1, 300)
                 if not np.array_equal(session.run(None, {"x": x[:m]})[0], full[:m])]
    assert set(differing) <= {1, 129, 257} and differing in ([], [1, 129, 257])
    # what ort-cpu's shape policy probes at load (lone_rows_round_apart) finds the same
    assert lone_rows_round_apart(frozenset({(k, n, 4, block, 4, 1)}), 2) == bool(differing)


def test_ort_cpu_pads_lone_rows_only_where_this_cpu_rounds_them_apart(smollm2_int4):
    """The int4 artifact's policy: a padding row for every lone row where the CPU's kernels for
    its MatMulNBits configs (4-bit projections, 8-bit head) round it apart, none elsewhere (the
    bitwise tests above then hold either way); float32 artifacts never pad."""
    manifest = Manifest.load(smollm2_int4)
    configs = nbits_configs(manifest, smollm2_int4)
    assert {(c[2], c[3], c[4]) for c in configs} == {(4, 32, 4), (8, 32, 4)}
    assert (576, 49152, 8, 32, 4, 0) in configs
    policy = OrtCpuBackend(threads=2).shape_policy(manifest, smollm2_int4)
    assert policy.lone_row_tile == (128 if lone_rows_round_apart(configs, 2) else 0)
    assert policy.cell_multiple == 64
