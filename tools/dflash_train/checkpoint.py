"""Training checkpoints (resumable, size-bounded) and the exported z-lab draft.

A checkpoint folder holds checkpoint.json (draft config, train config, step, data position,
RNG state) and safetensors shards of at most `shard_bytes` each, holding the fp32 weights
(`model.<name>`) and AdamW's moments (`exp_avg.<name>`, `exp_avg_sq.<name>`). The moments are
stored in bfloat16 by default: 8 bytes a parameter instead of 12, so a ~6M-parameter draft
stays under ~48 MB (what one GPU run can bring back next to its data). Rounding the moments to
bf16 (8 bits of mantissa) perturbs the update direction by < 0.4% once per resume; Adam
tolerates far more (8-bit optimizers quantize harder). `moments_dtype="float32"` makes resume
bit-exact (the tests use it).

The export is config.json + model.safetensors (float16, sharded with an index past
`shard_bytes`), z-lab's names without the embedding or LM head, as cellspec loads drafts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tools.dflash_train.config import DraftConfig

META_NAME = "checkpoint.json"
DEFAULT_SHARD_BYTES = 15_000_000  # each file under 15 MB; the GPU machine returns <= 16 MB
MOMENTS = ("exp_avg", "exp_avg_sq")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def checkpoint_bytes(cfg: DraftConfig, moments_dtype: str) -> int:
    """Bytes of a checkpoint of this draft: fp32 weights and two moments."""
    moment = torch.tensor([], dtype=DTYPES[moments_dtype]).element_size()
    return cfg.num_params() * (4 + 2 * moment)


def save_checkpoint(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    meta: dict[str, Any], moments_dtype: str = "bfloat16",
                    shard_bytes: int = DEFAULT_SHARD_BYTES) -> int:
    """Write the checkpoint to folder (replaced atomically); returns its total bytes."""
    tensors = {f"model.{name}": p.detach().float().cpu() for name, p in model.named_parameters()}
    names = {id(p): name for name, p in model.named_parameters()}
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for key in MOMENTS:
                if key in state:
                    tensors[f"{key}.{names[id(param)]}"] = state[key].detach().to(
                        DTYPES[moments_dtype]).cpu()
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shards = write_shards(tmp, "shard", tensors, shard_bytes)
    (tmp / META_NAME).write_text(json.dumps({**meta, "shards": shards,
                                             "moments_dtype": moments_dtype}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return sum(f.stat().st_size for f in folder.iterdir())


def write_shards(folder: Path, stem: str, tensors: dict[str, torch.Tensor],
                 shard_bytes: int) -> list[str]:
    """Tensors in order, a new shard whenever the next would overflow `shard_bytes`."""
    groups: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        assert nbytes + 1024 < shard_bytes, f"{name}: {nbytes} bytes, over one shard"
        if groups[-1] and size + nbytes + 8192 > shard_bytes:  # 8 KB: the safetensors header
            groups.append({})
            size = 0
        groups[-1][name] = tensor.contiguous()
        size += nbytes
    files = [f"{stem}-{i:02d}.safetensors" for i in range(len(groups))]
    for file, group in zip(files, groups):
        save_file(group, str(folder / file))
    return files


def load_checkpoint(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(meta, tensors by name: `model.*` float32, moments in their stored dtype)."""
    meta = json.loads((folder / META_NAME).read_text())
    tensors: dict[str, torch.Tensor] = {}
    for shard in meta["shards"]:
        tensors.update(load_file(str(folder / shard)))
    return meta, tensors


def model_state(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name[len("model."):]: t for name, t in tensors.items() if name.startswith("model.")}


def restore_optimizer(optimizer: torch.optim.Optimizer, model: torch.nn.Module,
                      tensors: dict[str, torch.Tensor], step: int) -> None:
    """AdamW state of every parameter from the checkpoint's moments and step, through
    load_state_dict (which places `step` where fused or foreach AdamW wants it)."""
    index = {id(p): i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
    state = {}
    for name, param in model.named_parameters():
        if f"exp_avg.{name}" in tensors:
            state[index[id(param)]] = {
                "step": torch.tensor(float(step)),
                **{key: tensors[f"{key}.{name}"].to(param.device, torch.float32)
                   for key in MOMENTS}}
    optimizer.load_state_dict({"state": state,
                               "param_groups": optimizer.state_dict()["param_groups"]})


def export_draft(folder: Path, cfg: DraftConfig, state: dict[str, torch.Tensor],
                 dtype: str = "float16", shard_bytes: int = DEFAULT_SHARD_BYTES) -> list[Path]:
    """Write the draft in z-lab's layout; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to(DTYPES[dtype]).cpu() for name, t in state.items()}
    (folder / "config.json").write_text(json.dumps(cfg.zlab_config(dtype), indent=1))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    if total + 65536 < shard_bytes:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return [folder / "config.json", folder / "model.safetensors"]
    files = write_shards(folder, "model", tensors, shard_bytes)
    weight_map = {name: file for file in files for name in load_file(str(folder / file))}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    return [folder / "config.json", folder / "model.safetensors.index.json",
            *(folder / f for f in files)]
