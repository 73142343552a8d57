"""staged_folder: a folder under its final name is whole, or the one that was there before."""

import pytest

from cellspec.staging import partial_folders, staged_folder


def test_a_completed_block_takes_the_final_name(tmp_path):
    final = tmp_path / "sub" / "out"
    with staged_folder(final) as temp:
        assert temp.parent == final.parent and temp.name.startswith(".partial-out-")
        (temp / "a").write_text("new")
    assert (final / "a").read_text() == "new"
    assert [p.name for p in final.parent.iterdir()] == ["out"]


def test_an_empty_final_folder_is_taken(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    with staged_folder(final) as temp:
        (temp / "a").write_text("new")
    assert (final / "a").read_text() == "new"


@pytest.mark.parametrize("replace", [False, True])
def test_a_failed_block_leaves_the_final_folder_as_it_was(tmp_path, replace):
    final = tmp_path / "out"
    final.mkdir()
    (final / "a").write_text("old")
    with pytest.raises(KeyboardInterrupt), staged_folder(final, replace=replace) as temp:
        (temp / "a").write_text("new")
        raise KeyboardInterrupt
    assert (final / "a").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_existing_folder_is_replaced_only_when_asked(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "a").write_text("old")
    with pytest.raises(FileExistsError), staged_folder(final) as temp:
        (temp / "b").write_text("new")
    assert [p.name for p in final.iterdir()] == ["a"]
    with staged_folder(final, replace=True) as temp:
        (temp / "b").write_text("new")
    assert [p.name for p in final.iterdir()] == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_partial_folders_lists_what_killed_writers_left(tmp_path):
    (tmp_path / ".partial-a-x1").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / ".partial-file").write_text("")
    assert partial_folders(tmp_path) == [tmp_path / ".partial-a-x1"]
    assert partial_folders(tmp_path / "missing") == []
