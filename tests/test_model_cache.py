"""LLM(checkpoint): exported once into the cache; an interrupted export leaves nothing trusted."""

import os

import pytest

import cellspec.export
from cellspec.errors import InvalidArgument, InvalidArtifact, InvalidCheckpoint
from cellspec.export import ExportConfig
from cellspec.llm import LLM, SamplingParams
from cellspec.model_cache import cache_folder, resolve_model
from cellspec.runtime.dflash import DFlashExecutor
from tests.tiny_chat import save_checkpoint, tiny_chat_artifact

SMALL = ExportConfig(static_widths=(1, 2, 4), dynamic_width=8, max_context=64, max_cells=256)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_checkpoint(tmp_path_factory.mktemp("checkpoint") / "tiny")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CELLSPEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def exports(monkeypatch):
    """Counts calls of the exporter."""
    calls, export = [], cellspec.export.export

    def counted(*args, **kwargs):
        calls.append(args)
        return export(*args, **kwargs)

    monkeypatch.setattr(cellspec.export, "export", counted)
    return calls


def test_a_checkpoint_is_exported_once(checkpoint, cache, exports):
    first = LLM(checkpoint, export_config=SMALL, max_sessions=2)
    second = LLM(checkpoint, export_config=SMALL, max_sessions=2)
    assert len(exports) == 1 and first.folder == second.folder
    assert first.folder.parent == cache and first.folder.name.startswith("tiny-")
    assert [p.name for p in cache.iterdir()] == [first.folder.name]  # no temporary left
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    assert first.generate("hi", params)[0].token_ids == second.generate("hi", params)[0].token_ids
    other = resolve_model(checkpoint, ExportConfig(static_widths=(1, 2), dynamic_width=8,
                                                   max_context=64, max_cells=256), progress=False)
    assert other != first.folder and len(exports) == 2


def test_an_edited_checkpoint_is_exported_again(tmp_path, cache):
    folder = save_checkpoint(tmp_path / "edited")
    before = cache_folder(folder, SMALL)
    stat = (folder / "model.safetensors").stat()
    os.utime(folder / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert cache_folder(folder, SMALL) != before


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, InvalidCheckpoint])
def test_an_interrupted_export_leaves_nothing(checkpoint, cache, monkeypatch, interrupt):
    def fail_midway(out, vocab_size):
        (out / "sample.onnx").write_bytes(b"half a graph")
        raise interrupt("stopped")

    with monkeypatch.context() as patch:
        patch.setattr(cellspec.export, "write_sampler_graphs", fail_midway)
        with pytest.raises(interrupt):
            LLM(checkpoint, export_config=SMALL)
    assert list(cache.iterdir()) == []
    assert LLM(checkpoint, export_config=SMALL, max_sessions=2).folder.is_dir()


def test_unknown_models_are_refused(tmp_path, tmp_path_factory):
    with pytest.raises(InvalidArgument, match="missing: no such file or folder"):
        LLM(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgument, match="neither an artifact folder"):
        LLM(tmp_path / "empty")
    with pytest.raises(InvalidArgument, match="takes no export_config"):
        LLM(tiny_chat_artifact(tmp_path_factory), export_config=SMALL)
    with pytest.raises(InvalidArgument, match="chat 'yes'"):
        LLM(tiny_chat_artifact(tmp_path_factory), chat="yes")


@pytest.mark.slow
def test_the_bundled_model_answers(tmp_path, monkeypatch):
    """The README's first command: the default model, exported on first use."""
    from cellspec.export.gguf import find_bundled_gguf

    try:
        find_bundled_gguf()
    except InvalidCheckpoint as error:
        pytest.skip(str(error))
    if not os.environ.get("CELLSPEC_CACHE"):
        monkeypatch.setenv("CELLSPEC_CACHE", str(tmp_path))
    llm = LLM(max_sessions=2)
    params = SamplingParams(max_tokens=24)
    # (the bare question's first token is a coin toss between "The" and "L": 0.08 logits apart in
    # transformers' float32 model, tipped to "L'Étoile" by int8 activations on some CPUs)
    question = "What is the capital of France? Answer in one sentence."
    [out] = llm.generate(question, params)
    assert "Paris" in out.text
    assert isinstance(llm.executor, DFlashExecutor)  # speculating, with the shipped draft
    plain = LLM(max_sessions=2, speculation=False)  # the same export, no second one
    assert plain.folder == llm.folder and not isinstance(plain.executor, DFlashExecutor)
    [same] = plain.generate(question, params)
    assert same.token_ids == out.token_ids


def test_an_export_another_process_finished_first_is_used(checkpoint, cache, monkeypatch,
                                                           tmp_path_factory):
    import shutil

    folder = cache_folder(checkpoint, SMALL)
    write_sampler_graphs = cellspec.export.write_sampler_graphs

    def finished_elsewhere(out, vocab_size):
        shutil.copytree(tiny_chat_artifact(tmp_path_factory), folder)
        return write_sampler_graphs(out, vocab_size)

    monkeypatch.setattr(cellspec.export, "write_sampler_graphs", finished_elsewhere)
    assert resolve_model(checkpoint, SMALL, progress=False) == folder
    assert [p.name for p in cache.iterdir()] == [folder.name]


def test_a_broken_cache_entry_is_named(checkpoint, cache):
    folder = cache_folder(checkpoint, SMALL)
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"")
    with pytest.raises(InvalidArtifact, match=f"cellspec cache clear {folder.name}"):
        resolve_model(checkpoint, SMALL, progress=False)


def test_bundled_model_exports_int4_with_its_draft():
    """One export for plain and speculative runs (int4 with the shipped draft), so that turning
    speculation off cannot change the text (the draft's target rounds its own way on ort-cpu)."""
    from cellspec.drafts import bundled_draft
    from cellspec.model_cache import bundled_export

    config, draft = bundled_export()
    assert (config.quantize, config.dtype, draft) == ("int4", "float32", bundled_draft())
    assert draft is not None and (draft / "model.safetensors").is_file()
    assert (config.max_context, config.max_cells) == (2048, 8192)
