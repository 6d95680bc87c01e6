from slug import slugify


def test_lower_cases():
    assert slugify("Hello") == "hello"


def test_collapses_separators():
    assert slugify("a  --  b") == "a-b"


def test_strips_edges():
    assert slugify("  !Hi there!  ") == "hi-there"
