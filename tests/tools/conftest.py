"""Fixtures of the train_dflash tests: one torch thread, a tiny chat target, its generated
data, and a draft overfit on it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
    collect_ignore_glob = ["test_*.py"]  # the tool trains with torch; nothing to test without


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: two OpenMP threads on a loaded 2-core machine cost 50x in barrier waits."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    """A 4-layer Llama (hidden 64) with tests/tiny_chat's tokenizer and chat template."""
    from tests.tiny_chat import save_checkpoint

    # weights N(0, 0.3): larger than HF's init, so greedy answers are not near-ties
    return save_checkpoint(tmp_path_factory.mktemp("tiny-target"), layers=4, tied=True,
                           scale=0.3)


COMMON = ["--device", "cpu", "--per-category", "40"]
DRAFT = ["--layers", "2", "--intermediate-size", "96", "--block-size", "5", "--taps", "0,2",
         "--mask-token-id", "300", "--batch", "4", "--anchors-per-seq", "6", "--save-every",
         "1000"]


@pytest.fixture(scope="session")
def generated(tiny_target, tmp_path_factory) -> Path:
    """12 training prompts answered greedily and once sampled, 10 new tokens at most."""
    from tools.dflash_train.cli import run

    out = tmp_path_factory.mktemp("run")
    run(["generate", "--target", str(tiny_target), "--out", str(out), *COMMON, "--limit", "12",
         "--samples", "1", "--max-new-tokens", "10", "--gen-batch", "8"])
    return out


def train(out: Path, generated: Path, target: Path, *extra: str) -> tuple[dict, dict]:
    """`train` on the generated data into out/ckpt -> (its meta, its tensors)."""
    from tools.dflash_train import checkpoint as ckpt_io
    from tools.dflash_train.cli import run

    run(["train", "--target", str(target), "--out", str(out), "--data",
         str(generated / "data.npz"), *COMMON, *DRAFT, *extra])
    return ckpt_io.load_checkpoint(out / "ckpt")


@pytest.fixture(scope="session")
def overfit(generated, tiny_target):
    """A draft trained 60 steps on 8 of the generated sequences, and its losses."""
    import torch

    from tools.dflash_train import data as data_io
    from tools.dflash_train.cli import make_parser
    from tools.dflash_train.commands import draft_config
    from tools.dflash_train.session import make_trainer
    from tools.dflash_train.target import load_target_checkpoint
    from tools.dflash_train.train import TrainConfig, TrainState

    args = make_parser().parse_args(["train", "--out", "unused", *DRAFT])
    ckpt = load_target_checkpoint(tiny_target)
    trainer = make_trainer(ckpt, draft_config(args, ckpt),
                           TrainConfig(lr=3e-3, warmup_steps=5, batch=8, anchors=6, gamma=4.0),
                           torch.device("cpu"), amp=False)
    data = data_io.load(generated / "data.npz")
    state = TrainState(seed=0, total_steps=60)
    losses = [trainer.step(data, np.arange(8), state)["loss"] for _ in range(60)]
    return trainer.draft.eval(), losses


