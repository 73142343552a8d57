"""tools/draft_trees.py's strategies on given draft rows (the recording itself runs the model)."""

import numpy as np

from tools.draft_trees import accepted, as_rectangle, chain, one_change_paths, tree

TOP = np.array([[10, 11, 12, 13], [20, 21, 22, 23]])
PROBS = np.array([[0.5, 0.3, 0.1, 0.1], [0.9, 0.05, 0.03, 0.02]])


def test_accepted_is_the_longest_prefix_of_the_text_among_the_paths():
    paths = {(1,), (1, 2), (3,)}
    assert [accepted(paths, text) for text in ([1, 2, 5], [3, 4], [4], [])] == [2, 1, 0, 0]


def test_chain_is_the_argmax_path():
    assert chain(TOP, 2) == {(10,), (10, 20)}


def test_tree_grows_best_first_by_the_product_of_the_rows():
    # (10) 0.5, then (10, 20) 0.45, then (11) 0.3; (11, 20) 0.27 is the fourth
    assert tree(TOP, PROBS, 3, 2) == {(10,), (10, 20), (11,)}
    assert tree(TOP, PROBS, 4, 2) == {(10,), (10, 20), (11,), (11, 20)}
    assert tree(TOP, PROBS, 3, 1) == {(10,), (11,), (12,)}  # depth 1: the first row's top 3


def test_a_tree_as_paths_of_the_step_takes_a_row_per_leaf_and_depth():
    assert as_rectangle({(10,), (10, 20), (11,)}) == 2 * 3


def test_one_change_paths_add_the_change_with_the_most_expected_length():
    # changing row 0 to 11 adds (11) and (11, 20): 0.3 + 0.27; row 1 to 21 adds 0.025
    assert one_change_paths(TOP, PROBS, 2, 2) == {(10,), (10, 20), (11,), (11, 20)}
