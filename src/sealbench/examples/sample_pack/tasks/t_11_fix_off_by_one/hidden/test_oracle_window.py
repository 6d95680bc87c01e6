from window import last_n


def test_returns_exactly_n_items():
    assert last_n([1, 2, 3, 4, 5], 2) == [4, 5]


def test_whole_list_when_n_is_large():
    assert last_n([1, 2], 5) == [1, 2]


def test_zero_gives_nothing():
    assert last_n([1, 2, 3], 0) == []
